package compat_test

import (
	"testing"

	"github.com/pgfleet/pgfleet/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
