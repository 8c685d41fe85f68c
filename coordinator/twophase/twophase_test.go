package twophase

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// fakeConn is a worker connection that logs what it is sent and answers
// from a script: sql prefix -> error (nil: the statement's own tag).
type fakeConn struct {
	log     *fakeLog
	name    string
	fail    map[string]error
	tag     map[string]string
	lost    bool
	redials int
	gate    func(sql string) // called before answering, when set
}

// fakeLog is what every connection of a group was sent: the group sends
// to its connections concurrently.
type fakeLog struct {
	mu   sync.Mutex
	sent []string
}

func (l *fakeLog) add(s string) {
	l.mu.Lock()
	l.sent = append(l.sent, s)
	l.mu.Unlock()
}

// of is what connection name was sent, in order.
func of(log []string, name string) []string {
	var out []string
	for _, s := range log {
		if strings.HasPrefix(s, name+": ") {
			out = append(out, s)
		}
	}
	return out
}

func (c *fakeConn) Exec(_ context.Context, sql string) (string, error) {
	if c.gate != nil {
		c.gate(sql)
	}
	c.log.add(c.name + ": " + sql)
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
	c.log.add(c.name + ": redial")
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
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "b: ROLLBACK PREPARED"}},
		{name: "lost at PREPARE", fail: map[string]map[string]error{"b": {"PREPARE": lostErr}}, wantErr: "lost connection to b", lost: true,
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "a: ROLLBACK PREPARED"}},
		{name: "failed transaction", tag: map[string]map[string]string{"a": {"PREPARE": "ROLLBACK"}}, wantErr: "had failed",
			wantLog: []string{"a: PREPARE TRANSACTION", "b: PREPARE TRANSACTION", "b: ROLLBACK PREPARED"}},
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
			var flog fakeLog
			store := tc.store
			g := New("test", &store)
			conns := map[string]*fakeConn{}
			for i, name := range []string{"a", "b"} {
				c := &fakeConn{log: &flog, name: name, fail: tc.fail[name], tag: tc.tag[name]}
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
			log := flog.sent
			for i := range log {
				log[i], _, _ = strings.Cut(log[i], " '")
			}
			// Each connection's statements in order (the group sends a
			// phase to all of them at once).
			for _, name := range []string{"a", "b"} {
				if got, want := of(log, name), of(tc.wantLog, name); !reflect.DeepEqual(got, want) {
					t.Errorf("sent to %s\n%q\nwant\n%q", name, got, want)
				}
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

// TestPhasesAllAtOnce: PREPARE TRANSACTION and COMMIT PREPARED go to every
// worker before any answers: each fake connection answers only once the
// other has been sent the same statement (a group that sent them in turn
// would wait for its first answer forever; the test gives up after 5 s).
func TestPhasesAllAtOnce(t *testing.T) {
	var flog fakeLog
	store := fakeStore{}
	g := New("test", &store)
	arrived := map[string]chan struct{}{}
	for _, kind := range []string{"PREPARE", "COMMIT"} {
		arrived["a "+kind], arrived["b "+kind] = make(chan struct{}), make(chan struct{})
	}
	for i, name := range []string{"a", "b"} {
		other := map[string]string{"a": "b", "b": "a"}[name]
		c := &fakeConn{log: &flog, name: name, fail: map[string]error{}, gate: func(sql string) {
			kind, _, _ := strings.Cut(sql, " ")
			close(arrived[name+" "+kind])
			select {
			case <-arrived[other+" "+kind]:
			case <-time.After(5 * time.Second):
				t.Errorf("%s: %s answered only after the other worker's", name, kind)
			}
		}}
		g.Join(int32(i+1), name, c)
	}
	ctx := context.Background()
	if err := g.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if failures, err := g.Commit(ctx); err != nil || len(failures) != 0 {
		t.Fatalf("commit: %v %v", failures, err)
	}
}

// CommitFirst's part is committed before the others are sent theirs (a
// shard move's target before its source).
func TestCommitFirst(t *testing.T) {
	var flog fakeLog
	g := New("test", &fakeStore{})
	for i, name := range []string{"source", "target", "other"} {
		c := &fakeConn{log: &flog, name: name, fail: map[string]error{}}
		if name == "target" {
			// (Slow to commit: sent at once with the others, it would be
			// logged last.)
			c.gate = func(sql string) {
				if strings.HasPrefix(sql, "COMMIT PREPARED") {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
		g.Join(int32(i+1), name, c)
	}
	g.CommitFirst = 2
	ctx := context.Background()
	if err := g.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if failures, err := g.Commit(ctx); err != nil || len(failures) != 0 {
		t.Fatalf("commit: %v %v", failures, err)
	}
	var commits []string
	for _, s := range flog.sent {
		if name, sql, _ := strings.Cut(s, ": "); strings.HasPrefix(sql, "COMMIT PREPARED") {
			commits = append(commits, name)
		}
	}
	if len(commits) != 3 || commits[0] != "target" {
		t.Fatalf("COMMIT PREPARED sent to %v, want target first and then the other two", commits)
	}
}
