package twophase

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
)

// A group may keep its commit decision on one of its own workers instead
// of the metadata database: that part (the group's Last) is not prepared;
// once every other part is, it writes a commit record into a table of its
// own database (RecordsTable) and commits, in one round trip. Its commit is
// the group's commit point; the other parts are then committed with COMMIT
// PREPARED. The group saves the last part's PREPARE and COMMIT PREPARED and
// the separate decision transaction, and the last part's locks go one
// round trip earlier.
//
// The record's key is a hash of a secret only the coordinator knows, and
// the prepared transactions' global ids carry the hash
// ("pgfleet_lx<node>_<hash>_<node>"). The record is written in the
// client's own transaction, as the client's role, through a function that
// stores it under the hash of the secret it is given: a role that reads
// the hash from pg_prepared_xacts can neither forge that record nor hold
// its key locked, and the secret travels as a parameter, in no statement
// text. Recovery finds the record on the node the id names; a record whose
// secret does not match, or an abort record (secret NULL), is an abort,
// and so is no record at all once recovery has inserted an abort record
// for the hash, which a commit record inserted first beats by the primary
// key, as in the metadata database's decisions table.

// RecordsTable is the table commit records are kept in, in each database
// of a worker that decides groups.
const RecordsTable = "pgfleet_txn.commits"

// RecordsDDL makes RecordsTable and RecordFunction; it is run by a
// superuser, once per database, before the database's first record. Only
// the function, which runs as its owner, writes commit records for other
// roles, and only under the hash of the secret it is given: a role can
// neither write a record for another transaction's hash nor lock one.
// The schema is made by this DDL or not at all (a role that made it first
// would own what the superuser then creates in it), and the table keeps no
// privilege that default privileges (ALTER DEFAULT PRIVILEGES) gave
// another role: with one, a role could read the secrets, or add a trigger
// that the SECURITY DEFINER insert would run as the superuser.
//
// The function is PL/pgSQL, which keeps its INSERT's plan for the
// connection's life: a LANGUAGE sql function (what older versions made)
// parses and plans its body at every call, which cost a commit across
// workers 6% of its TPS in pgbench's tpcb-like. RecordsCurrentSQL tells
// an older function, which the coordinator replaces.
const RecordsDDL = `CREATE SCHEMA pgfleet_txn;
CREATE TABLE pgfleet_txn.commits (
	h text PRIMARY KEY,
	secret text,
	recorded_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp());
DO $$DECLARE g oid; BEGIN
	FOR g IN SELECT DISTINCT a.grantee FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
		WHERE c.oid OPERATOR(pg_catalog.=) 'pgfleet_txn.commits'::pg_catalog.regclass AND a.grantee OPERATOR(pg_catalog.<>) c.relowner LOOP
		IF g OPERATOR(pg_catalog.=) 0 THEN
			EXECUTE 'REVOKE ALL ON pgfleet_txn.commits FROM PUBLIC';
		ELSE
			EXECUTE 'REVOKE ALL ON pgfleet_txn.commits FROM ' OPERATOR(pg_catalog.||) g::pg_catalog.regrole::pg_catalog.text;
		END IF;
	END LOOP;
END$$;
` + RecordFunctionDDL + `;
GRANT USAGE ON SCHEMA pgfleet_txn TO PUBLIC`

// RecordFunctionDDL makes RecordFunction (RecordsDDL), or replaces an
// older version's in a schema found trusted.
const RecordFunctionDDL = `CREATE OR REPLACE FUNCTION pgfleet_txn.record(secret text) RETURNS void
	LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
	AS $$BEGIN
		INSERT INTO pgfleet_txn.commits (h, secret)
		VALUES (pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to($1, 'UTF8')), 'hex'), 32), $1);
	END$$;
REVOKE ALL ON FUNCTION pgfleet_txn.record(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION pgfleet_txn.record(text) TO PUBLIC`

// RecordsCurrentSQL is whether RecordFunction is the one RecordsDDL makes
// now (PL/pgSQL), on a database where recordsTrusted found it.
const RecordsCurrentSQL = `SELECT EXISTS (SELECT FROM pg_catalog.pg_proc f
	JOIN pg_catalog.pg_language l ON l.oid OPERATOR(pg_catalog.=) f.prolang
	WHERE f.oid OPERATOR(pg_catalog.=) 'pgfleet_txn.record(text)'::pg_catalog.regprocedure AND l.lanname OPERATOR(pg_catalog.=) 'plpgsql')`

// RecordFunction writes a commit record (see RecordsDDL).
const RecordFunction = "pgfleet_txn.record(text)"

// RecordAbortSQL records an abort for hash $1 unless a record is stored,
// and returns the secret of the record that stands (NULL for an abort): a
// no-op DO UPDATE, so that it waits for a concurrent insert of the same
// hash and returns the row that won (metadata's decisionSQL does the
// same).
const RecordAbortSQL = `INSERT INTO pgfleet_txn.commits AS c (h, secret) VALUES ($1, NULL)
	ON CONFLICT (h) DO UPDATE SET secret = c.secret RETURNING secret`

// RecordsLookupSQL returns the records of the hashes $1.
const RecordsLookupSQL = `SELECT h, secret FROM pgfleet_txn.commits WHERE h = ANY ($1::pg_catalog.text[])`

// RecordsForgetSQL deletes the commit records older than $1 seconds and
// the others older than $2, except those of the hashes $3 (see
// metadata.Store.ForgetDecisions for why those ages).
const RecordsForgetSQL = `DELETE FROM pgfleet_txn.commits
	WHERE recorded_at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => CASE WHEN secret IS NULL THEN $2::pg_catalog.float8 ELSE $1::pg_catalog.float8 END)
	AND h <> ALL ($3::pg_catalog.text[])`

// SyncCommitSQL makes the transaction it runs in (local), or the session,
// commit synchronously when synchronous_commit is off (a stricter setting
// stays): a decision must be durable before any part commits by it
// (PREPARE TRANSACTION and COMMIT PREPARED are always flushed; a commit
// under synchronous_commit off is not). It runs in the client's
// transaction, under its search_path: its operator is pg_catalog's, not
// one a role defined (adversary: a role's "=" that answered false kept
// the commit record's commit asynchronous).
func SyncCommitSQL(local bool) string {
	return "SELECT pg_catalog.set_config('synchronous_commit', 'on', " + strconv.FormatBool(local) +
		") WHERE pg_catalog.current_setting('synchronous_commit') OPERATOR(pg_catalog.=) 'off'"
}

// Stmt is a statement with text parameters.
type Stmt struct {
	SQL  string
	Args []string
}

// ParamsConn is a Conn that can also run statements with parameters, in
// one round trip: the last part's, whose record's secret must appear in no
// statement text (pg_stat_activity shows statements to their role).
type ParamsConn interface {
	Conn
	// ExecParams runs stmts in one round trip and returns the command
	// tag of the last one that ran; after an error the rest are skipped.
	ExecParams(ctx context.Context, stmts []Stmt) (string, error)
}

// commitStmts write the record and commit the last part, in one round
// trip; the secret is a parameter.
func (r Record) commitStmts() []Stmt {
	return []Stmt{{SQL: SyncCommitSQL(true)}, {SQL: "SELECT pgfleet_txn.record($1)", Args: []string{r.Secret}}, {SQL: "COMMIT"}}
}

// recordOp starts the operation word of a group decided by a record.
const recordOp = "lx"

// Record is a commit record's key and secret.
type Record struct {
	Node   int32 // the worker it is kept on
	Hash   string
	Secret string
}

// NewRecord makes a record kept on node.
func NewRecord(node int32) Record {
	var b [16]byte
	_, _ = rand.Read(b[:])
	secret := hex.EncodeToString(b[:])
	return Record{Node: node, Hash: recordHash(secret), Secret: secret}
}

func recordHash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:16])
}

// Base is the distributed transaction's id in its parts' global ids.
func (r Record) Base() string {
	return GIDPrefix + recordOp + strconv.Itoa(int(r.Node)) + "_" + r.Hash
}

// RecordOf returns the node and hash a group's base names when the group
// is decided by a record (ok false otherwise: the metadata database keeps
// its decision).
func RecordOf(base string) (node int32, hash string, ok bool) {
	rest, found := strings.CutPrefix(base, GIDPrefix+recordOp)
	if !found {
		return 0, "", false
	}
	num, hash, found := strings.Cut(rest, "_")
	n, err := strconv.ParseInt(num, 10, 32)
	if !found || err != nil || n <= 0 || len(hash) != 32 || strings.Trim(hash, "0123456789abcdef") != "" {
		return 0, "", false
	}
	return int32(n), hash, true
}

// RecordDecision is the decision a stored record of hash stands for: a
// commit when its secret matches the hash, an abort otherwise (NULL, or
// a record someone else wrote).
func RecordDecision(hash string, secret *string) byte {
	if secret != nil && subtle.ConstantTimeCompare([]byte(recordHash(*secret)), []byte(hash)) == 1 {
		return metadata.CommitDecision
	}
	return metadata.AbortDecision
}

// NewRecorded starts a group decided by a record kept on rec.Node; store
// settles the decision when the last part's answer is lost (its Abort
// records an abort unless the record is there). The caller joins the
// parts, then names the one on rec.Node with SetLast.
func NewRecorded(rec Record, store Decider) *Group {
	return &Group{Base: rec.Base(), Store: store, record: rec}
}

// SetLast makes p, whose connection must be a ParamsConn, the part that
// commits last, in one phase, with the group's record.
func (g *Group) SetLast(p *Part) {
	if _, ok := p.Conn.(ParamsConn); !ok {
		panic("twophase: the last part's connection cannot run statements with parameters")
	}
	g.Last = p
}

// commitLast writes the record in the last part's transaction and commits
// it: the commit decision. On error nothing is committed, or the outcome
// is unknown (InDoubt), as Decide.
func (g *Group) commitLast(ctx context.Context) error {
	p := g.Last
	if err := g.startDecision(); err != nil {
		return err
	}
	tag, err := p.Conn.(ParamsConn).ExecParams(ctx, g.record.commitStmts())
	if err == nil && tag != "COMMIT" {
		err = &pgconn.PgError{Severity: "ERROR", Code: pgerr.InFailedSQLTransaction,
			Message: fmt.Sprintf("the transaction on %s had failed and was rolled back", p.Where)}
	}
	if g.AfterDecide != nil {
		err = g.AfterDecide(ctx, g.Base, err)
	}
	var pe *pgconn.PgError
	switch {
	case err == nil:
		p.Done = true
		g.Decided = true
		return nil
	case errors.As(err, &pe) && pe.Severity == "ERROR" && !p.Conn.Lost():
		// The worker refused the record or the commit: its transaction
		// did not commit (Rollback ends it, if the error left it open).
		if pe.Code == pgerr.UniqueViolation && pe.TableName == "commits" && pe.SchemaName == "pgfleet_txn" {
			return metadata.ErrAborted
		}
		if pe.Code == pgerr.ReadOnlySQLTransaction && strings.Contains(pe.Where, "record") {
			// User code (a column default, a constraint's function) made
			// the transaction read only after its writes, which the
			// coordinator did not see; PostgreSQL would commit it.
			return pgerr.New(pgerr.ReadOnlySQLTransaction,
				"a function made the transaction read only after its writes on %s, so its commit over several workers could not be recorded; it was rolled back on every worker", p.Where).
				WithHint("Do not set transaction_read_only from functions in transactions that write on several workers, or use SET TRANSACTION READ ONLY, which pgfleet sees.")
		}
		return err
	}
	// The answer is lost, or came with a FATAL after a commit that may
	// have happened: the record says (Settle waits for the transaction
	// to end if it is still open).
	err = g.Settle(ctx, err)
	if g.Decided {
		p.Done = true
	}
	return err
}
