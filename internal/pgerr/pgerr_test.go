package pgerr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestFlattenConnectionErrors: a worker connection that broke or could not
// be made reaches the client as 08006 or 08001, never as XX000 "internal
// error ... a bug"; other unclassified errors stay XX000.
func TestFlattenConnectionErrors(t *testing.T) {
	// Port 1 on loopback refuses: a real connect error.
	_, refused := pgconn.Connect(context.Background(), "host=127.0.0.1 port=1 sslmode=disable connect_timeout=2")
	var ce *pgconn.ConnectError
	if !errors.As(refused, &ce) {
		t.Fatalf("connecting to port 1: %v, want a ConnectError", refused)
	}
	for _, c := range []struct {
		err  error
		code string
	}{
		{io.EOF, ConnectionFailure},
		{fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), ConnectionFailure},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, ConnectionFailure},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, ConnectionFailure},
		{net.ErrClosed, ConnectionFailure},
		{refused, SQLClientUnableToConnect},
		{errors.New("something else"), Internal},
	} {
		if got := Flatten(c.err).Code; got != c.code {
			t.Errorf("Flatten(%v) = %s, want %s", c.err, got, c.code)
		}
	}
}
