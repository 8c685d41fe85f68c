//go:build !linux

package coordinator

import (
	"errors"
	"log/slog"
)

// idler: sessions sleep only on Linux (idler_linux.go); elsewhere every
// session keeps its goroutine, and newIdler fails.
type idler struct{}

func newIdler(func(*session), *slog.Logger) (*idler, error) {
	return nil, errors.New("sleeping sessions need epoll")
}

func (*idler) sleep(*session) error { return errors.New("sleeping sessions need epoll") }
func (*idler) take(*session) bool   { return false }
func (*idler) count() int           { return 0 }
func (*idler) close() []*session    { return nil }
