package twophase

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// fakeConn is a worker connection that logs what it is sent and answers
// from a script: sql prefix -> error (nil: the statement's own tag).
type fakeConn struct {
	log     *[]string
	name    string
	fail    map[string]error
	tag     map[string]string
	lost    bool
	redials int
}

func (c *fakeConn) Exec(_ context.Context, sql string) (string, error) {
	*c.log = append(*c.log, c.name+": "+sql)
	for prefix, err := range c.fail {
		if strings.HasPrefix(sql, prefix) {
			delete(c.fail, prefix) // once
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				c.lost = true
			}
			return "", err
		}
	}
	for prefix, tag := range c.tag {
		if strings.HasPrefix(sql, prefix) {
			return tag, nil
		}
	}
	word, _, _ := strings.Cut(sql, " '")
	return word, nil
}

func (c *fakeConn) Lost() bool { return c.lost }

func (c *fakeConn) Redial(context.Context) error {
	*c.log = append(*c.log, c.name+": redial")
	c.redials++
	c.lost = false
	return nil
}

// fakeStore decides as scripted: decideErr from Decide, then abort's answer.
type fakeStore struct {
	decideErr error
	stands    byte
	abortErr  error
}

func (s *fakeStore) Decide(context.Context, string) error { return s.decideErr }
func (s *fakeStore) Abort(context.Context, string) (byte, error) {
	return s.stands, s.abortErr
}

func TestGroup(t *testing.T) {
	lostErr := errors.New("connection reset")
	deferred := &pgconn.PgError{Code: "23505", Message: "duplicate key value violates unique constraint \"t_pkey\""}
	for _, tc := range []struct {
		name      string
		fail      map[string]map[string]error // per conn: prefix -> error
		tag       map[string]map[string]string
		store     fakeStore
		wantErr   string // substring of the error, "" for a commit
		lost      bool   // the PrepareError says lost
		decided   bool
		inDoubt   bool
		failures  int
		wantLog   []string
		wantRedia int
	}{
		{name: "commit", decided: true, wantLog: []string{
			"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: COMMIT PREPARED", "b: COMMIT PREPARED"}},
		{name: "worker error at PREPARE", fail: map[string]map[string]error{"b": {"PREPARE": deferred}}, wantErr: "duplicate key",
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: ROLLBACK PREPARED"}},
		{name: "first worker fails", fail: map[string]map[string]error{"a": {"PREPARE": deferred}}, wantErr: "duplicate key",
			wantLog: []string{"a: PREPARE TRANSACTION", "b: ROLLBACK"}},
		{name: "lost at PREPARE", fail: map[string]map[string]error{"b": {"PREPARE": lostErr}}, wantErr: "lost connection to b", lost: true,
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: ROLLBACK PREPARED"}},
		{name: "failed transaction", tag: map[string]map[string]string{"a": {"PREPARE": "ROLLBACK"}}, wantErr: "had failed",
			wantLog: []string{"a: PREPARE TRANSACTION", "b: ROLLBACK"}},
		{name: "recovery aborted first", store: fakeStore{decideErr: metadata.ErrAborted}, wantErr: "abort",
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "b: ROLLBACK PREPARED", "a: ROLLBACK PREPARED"}},
		{name: "decision answer lost, commit stands", store: fakeStore{decideErr: lostErr, stands: metadata.CommitDecision}, decided: true,
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: COMMIT PREPARED", "b: COMMIT PREPARED"}},
		{name: "decision answer lost, abort stands", store: fakeStore{decideErr: lostErr, stands: 'a'}, wantErr: "cannot record the commit decision",
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "b: ROLLBACK PREPARED", "a: ROLLBACK PREPARED"}},
		{name: "lost COMMIT PREPARED redials", fail: map[string]map[string]error{"b": {"COMMIT": lostErr}}, decided: true, wantRedia: 1,
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: COMMIT PREPARED", "b: COMMIT PREPARED", "b: redial", "b: COMMIT PREPARED"}},
		{name: "prepared transaction gone", fail: map[string]map[string]error{"a": {"COMMIT": &pgconn.PgError{Code: pgerr.UndefinedObject}}}, decided: true,
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: COMMIT PREPARED", "b: COMMIT PREPARED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log []string
			store := tc.store
			g := New("test", &store)
			conns := map[string]*fakeConn{}
			for i, name := range []string{"a", "b"} {
				c := &fakeConn{log: &log, name: name, fail: tc.fail[name], tag: tc.tag[name]}
				if c.fail == nil {
					c.fail = map[string]error{}
				}
				conns[name] = c
				g.Join(int32(i+1), name, c)
			}
			ctx := context.Background()
			err := g.Prepare(ctx)
			var failures []CommitFailure
			if err == nil {
				failures, err = g.Commit(ctx)
			}
			if err != nil {
				var pe *PrepareError
				if errors.As(err, &pe) && pe.Lost != tc.lost {
					t.Errorf("lost %v, want %v", pe.Lost, tc.lost)
				}
				g.Rollback(ctx)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want a commit", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
			for i := range log {
				log[i], _, _ = strings.Cut(log[i], " '")
			}
			if !reflect.DeepEqual(log, tc.wantLog) {
				t.Errorf("sent\n%q\nwant\n%q", log, tc.wantLog)
			}
			if g.Decided != tc.decided || g.InDoubt != tc.inDoubt || len(failures) != tc.failures {
				t.Errorf("decided %v in doubt %v failures %d, want %v %v %d", g.Decided, g.InDoubt, len(failures), tc.decided, tc.inDoubt, tc.failures)
			}
			if conns["b"].redials != tc.wantRedia {
				t.Errorf("%d redials, want %d", conns["b"].redials, tc.wantRedia)
			}
			for _, p := range g.Parts {
				if !p.Done {
					t.Errorf("part %s not done after the group ended", p.Where)
				}
			}
		})
	}
}
