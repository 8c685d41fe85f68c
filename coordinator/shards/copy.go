package shards

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
)

// errTargetDone ends the pipe when the target of a copy has stopped reading.
var errTargetDone = errors.New("shards: copy target finished")

// streamCopy runs copyTo (COPY ... TO STDOUT) on src and feeds its output to
// copyFrom (COPY ... FROM STDIN) on dst as it arrives, without holding the
// rows in memory. It returns the rows copied, and the error of each side:
// srcErr from the source, dstErr from the target. When the target fails the
// source's remaining output is read and dropped, so that the source
// connection stays usable (its transaction is rolled back by the caller);
// when the source fails the target gets CopyFail and stays usable too.
func streamCopy(ctx context.Context, src *pgx.Conn, copyTo string, dst *pgx.Conn, copyFrom string) (rows int64, srcErr, dstErr error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	var sent int64
	go func() {
		tag, err := src.PgConn().CopyTo(ctx, &drainWriter{w: pw}, copyTo)
		if err != nil {
			pw.CloseWithError(fmt.Errorf("reading the rows failed: %w", err))
		} else {
			sent = tag.RowsAffected()
			pw.Close()
		}
		done <- err
	}()
	tag, dstErr := dst.PgConn().CopyFrom(ctx, pr, copyFrom)
	pr.CloseWithError(errTargetDone)
	srcErr = <-done
	if srcErr != nil {
		return 0, srcErr, nil
	}
	if dstErr != nil {
		return 0, nil, dstErr
	}
	if tag.RowsAffected() != sent {
		return 0, nil, fmt.Errorf("copied %d rows but the source sent %d", tag.RowsAffected(), sent)
	}
	return sent, nil, nil
}

// drainWriter writes to w until a write fails, then drops the rest.
type drainWriter struct {
	w      io.Writer
	failed bool
}

func (d *drainWriter) Write(p []byte) (int, error) {
	if !d.failed {
		if _, err := d.w.Write(p); err == nil {
			return len(p), nil
		}
		d.failed = true
	}
	return len(p), nil
}
