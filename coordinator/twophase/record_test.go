package twophase

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/metadata"
)

// TestRecordedGroup: a group decided by its last part's record (a) never
// prepares that part; it commits it with the record once the other part
// (b) is prepared, and commits or rolls b back by what the record says.
func TestRecordedGroup(t *testing.T) {
	lostErr := errors.New("connection reset")
	const record = "the record and COMMIT"
	deferred := &pgconn.PgError{Severity: "ERROR", Code: "23503", Message: "insert or update on table \"o\" violates foreign key constraint"}
	recordTaken := &pgconn.PgError{Severity: "ERROR", Code: "23505", SchemaName: "pgfleet_txn", TableName: "commits",
		Message: "duplicate key value violates unique constraint \"commits_pkey\""}
	fatal := &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	for _, tc := range []struct {
		name     string
		fail     map[string]map[string]error
		tag      map[string]string // a's answer to the record (default COMMIT)
		store    fakeStore
		wantErr  string
		code     string // the error's SQLSTATE, when it is a worker's or ours
		decided  bool
		wantLog  []string
		aborting bool // the store was asked
	}{
		{name: "commit", decided: true, wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: COMMIT PREPARED"}},
		{name: "other part fails to prepare", fail: map[string]map[string]error{"b": {"PREPARE": deferred}}, wantErr: "foreign key",
			wantLog: []string{"b: PREPARE TRANSACTION", "a: ROLLBACK"}},
		{name: "other part lost at PREPARE", fail: map[string]map[string]error{"b": {"PREPARE": lostErr}}, wantErr: "lost connection to b",
			wantLog: []string{"b: PREPARE TRANSACTION", "a: ROLLBACK"}},
		{name: "last part's commit fails", fail: map[string]map[string]error{"a": {"SELECT": deferred}}, wantErr: "foreign key", code: "23503",
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: ROLLBACK PREPARED", "a: ROLLBACK"}},
		{name: "recovery recorded an abort first", fail: map[string]map[string]error{"a": {"SELECT": recordTaken}}, wantErr: "aborted by recovery", code: "40001",
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: ROLLBACK PREPARED", "a: ROLLBACK"}},
		{name: "user code made the transaction read only", fail: map[string]map[string]error{"a": {"SELECT": &pgconn.PgError{Severity: "ERROR", Code: "25006",
			Message: "cannot execute INSERT in a read-only transaction", Where: `SQL function "record" statement 1`}}},
			wantErr: "read only after its writes", code: "25006",
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: ROLLBACK PREPARED", "a: ROLLBACK"}},
		{name: "last part's transaction had failed", tag: map[string]string{"SELECT": "ROLLBACK"}, wantErr: "had failed",
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: ROLLBACK PREPARED", "a: ROLLBACK"}},
		{name: "answer lost, the record stands", fail: map[string]map[string]error{"a": {"SELECT": lostErr}},
			store: fakeStore{stands: metadata.CommitDecision}, decided: true, aborting: true,
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: COMMIT PREPARED"}},
		{name: "FATAL after the commit, the record stands", fail: map[string]map[string]error{"a": {"SELECT": fatal}},
			store: fakeStore{stands: metadata.CommitDecision}, decided: true, aborting: true,
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: COMMIT PREPARED"}},
		{name: "answer lost, no record", fail: map[string]map[string]error{"a": {"SELECT": lostErr}},
			store: fakeStore{stands: metadata.AbortDecision}, wantErr: "cannot record the commit decision", aborting: true,
			wantLog: []string{"b: PREPARE TRANSACTION", "a: " + record, "b: ROLLBACK PREPARED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var flog fakeLog
			store := &countingStore{fakeStore: tc.store}
			rec := NewRecord(1)
			g := NewRecorded(rec, store)
			tags := map[string]string{"SELECT": "COMMIT"}
			for k, v := range tc.tag {
				tags[k] = v
			}
			a := &fakeConn{log: &flog, name: "a", fail: tc.fail["a"], tag: tags}
			b := &fakeConn{log: &flog, name: "b", fail: tc.fail["b"]}
			for _, c := range []*fakeConn{a, b} {
				if c.fail == nil {
					c.fail = map[string]error{}
				}
			}
			g.SetLast(g.Join(1, "a", a))
			g.Join(2, "b", b)
			if !strings.HasPrefix(g.Parts[1].GID, "pgfleet_lx1_"+rec.Hash+"_") {
				t.Fatalf("GID %s does not name the record", g.Parts[1].GID)
			}
			ctx := context.Background()
			err := g.Prepare(ctx)
			if err == nil {
				_, err = g.Commit(ctx)
			}
			if err != nil {
				g.Rollback(ctx)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v, want a commit", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			case tc.code != "" && ToPgErr(err).Code != tc.code:
				t.Errorf("SQLSTATE %s, want %s", ToPgErr(err).Code, tc.code)
			}
			log := flog.sent
			want := "a: " + SyncCommitSQL(true) + "; SELECT pgfleet_txn.record($1); COMMIT [" + rec.Secret + "]"
			for i := range log {
				if strings.Contains(strings.TrimSuffix(log[i], " ["+rec.Secret+"]"), rec.Secret) {
					t.Errorf("the secret is in a statement's text: %s", log[i])
				}
				if log[i] == want {
					log[i] = "a: " + record
				}
				log[i], _, _ = strings.Cut(log[i], " '")
			}
			for _, name := range []string{"a", "b"} {
				if got, want := of(log, name), of(tc.wantLog, name); !reflect.DeepEqual(got, want) {
					t.Errorf("sent to %s\n%q\nwant\n%q", name, got, want)
				}
			}
			if g.Decided != tc.decided || g.InDoubt {
				t.Errorf("decided %v in doubt %v, want %v and not in doubt", g.Decided, g.InDoubt, tc.decided)
			}
			for _, p := range g.Parts {
				if !p.Done {
					t.Errorf("part %s not done after the group ended", p.Where)
				}
			}
			if store.aborts > 0 != tc.aborting {
				t.Errorf("the store was asked %d times", store.aborts)
			}
		})
	}
}

// countingStore is a fakeStore that counts the questions asked of it (a
// group decided by a record must never ask it to Decide).
type countingStore struct {
	fakeStore
	aborts int
}

func (s *countingStore) Decide(context.Context, string) error {
	return errors.New("Decide called on a group decided by a record")
}

func (s *countingStore) Abort(ctx context.Context, base string) (byte, error) {
	s.aborts++
	return s.fakeStore.Abort(ctx, base)
}

func TestRecordOf(t *testing.T) {
	rec := NewRecord(12)
	node, hash, ok := RecordOf(rec.Base())
	if !ok || node != 12 || hash != rec.Hash {
		t.Errorf("RecordOf(%s) = %d %s %v", rec.Base(), node, hash, ok)
	}
	for _, base := range []string{
		"pgfleet_tx_0123456789abcdef",
		"pgfleet_lx_" + rec.Hash,
		"pgfleet_lx0_" + rec.Hash,
		"pgfleet_lx1_" + rec.Hash[:31],
		"pgfleet_lx1_" + strings.ToUpper(rec.Hash),
		"pgfleet_lxa_" + rec.Hash,
	} {
		if _, _, ok := RecordOf(base); ok {
			t.Errorf("RecordOf(%s) took it for a record", base)
		}
	}
	if d := RecordDecision(rec.Hash, &rec.Secret); d != metadata.CommitDecision {
		t.Errorf("the record's own secret: %q, want commit", d)
	}
	other := NewRecord(12)
	for _, secret := range []*string{nil, &other.Secret, &rec.Hash} {
		if d := RecordDecision(rec.Hash, secret); d != metadata.AbortDecision {
			t.Errorf("secret %v: %q, want abort", secret, d)
		}
	}
}

// ExecParams logs the statements' texts joined, then their arguments.
func (c *fakeConn) ExecParams(ctx context.Context, stmts []Stmt) (string, error) {
	var sqls, args []string
	for _, st := range stmts {
		sqls = append(sqls, st.SQL)
		args = append(args, st.Args...)
	}
	return c.Exec(ctx, strings.Join(sqls, "; ")+" ["+strings.Join(args, " ")+"]")
}
