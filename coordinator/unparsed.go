package coordinator

import (
	"context"
	"strings"
	"time"

	"github.com/pgfleet/pgfleet/executor"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/planner"
	"github.com/pgfleet/pgfleet/pooling"
)

// A statement that may name a distributed or reference table but that
// pgfleet's parser (pg_query) cannot read is never run unplanned: on the
// default node it would read or write the catalog tables' empty shells.
// PostgreSQL's parser may read what pg_query does not (text in a
// client_encoding other than UTF-8, string continuations that pg_query's
// lexer rejects), so the default node is asked to Parse it only, without
// executing anything: its error (a syntax error, with its position) is the
// client's answer; if it parses there, pgfleet refuses it.

// unparsed returns the error for sql, a statement naming a catalog table
// that pgfleet could not parse: PostgreSQL's own error, or 0A000.
func (ss *session) unparsed(sql string) error {
	hint := "Write string constants without continuation lines, or send the values as parameters."
	if ss.foreignEnc {
		hint = "Use client_encoding UTF8 for statements with non-ASCII text on distributed or reference tables, or send such values as parameters."
	}
	refuse := pgerr.New(pgerr.FeatureNotSupported,
		"pgfleet cannot parse this statement, which may use a distributed or reference table").WithHint("%s", hint)
	// The session's own connection when it holds one between round trips
	// (its lexing settings are the session's true ones, set_config()
	// included; a syntax error aborts its transaction as on PostgreSQL),
	// else a pooled one in the session's settings.
	var pool *pooling.Pool
	sc := ss.sc
	if sc == nil || ss.qhead != len(ss.queue) || ss.needSync || ss.node != ss.srv.defaultNode.Load() {
		// (Another worker holds only shards: the statement's tables would
		// not resolve there.)
		if ss.settingsUnknown || ss.txSet || len(ss.pending) > 0 {
			// A pooled connection would lack what the session changed
			// where pgfleet cannot follow, or a SET of this transaction
			// (client_encoding: the text would be read as UTF-8).
			return refuse
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if pool, err = ss.poolFor(ss.srv.defaultNode.Load()); err != nil {
			return err
		}
		if sc, err = ss.sideCheckout(ctx, pool); err != nil {
			return err
		}
	}
	release := func() {
		if pool != nil {
			ss.sideRelease(pool, sc)
		}
	}
	werr, err := parseOnly(sc, sql, nil)
	if err != nil {
		sc.MarkBroken()
		release()
		return executor.LostWorker(sc.Addr, err)
	}
	release()
	if werr == nil {
		return refuse
	}
	pe := werr.PG
	if pe.Code == pgerr.SyntaxError && pe.Position == 0 {
		// "cannot insert multiple commands into a prepared statement": a
		// query string of several statements.
		return refuse
	}
	if pe.Code != pgerr.SyntaxError && !strings.HasPrefix(pe.Code, "22") {
		// Parse analysis (42P01 for a table the default node resolves
		// otherwise, ...): not the lexer's verdict on the text, which is
		// all this check may pass on.
		return refuse
	}
	return werr
}

// unparsedPlan reports whether p is the plan of a statement pg_query could
// not parse that may name a catalog table.
func (ss *session) unparsedPlan(p *planner.Plan, sql string) bool {
	if !p.SyntaxError() {
		return false
	}
	snap := ss.srv.catalog.Load()
	if snap == nil || !planner.MentionsTable(sql, snap) {
		return false
	}
	if ss.foreignEnc && !ss.embedsASCII && !ascii([]byte(sql)) {
		// In an encoding whose non-ASCII bytes are never ASCII characters
		// (LATIN1, EUC_JP, ...), the statement's tokens are where they are
		// with its non-ASCII bytes taken for letters: pg_query can tell
		// whether it names a catalog table.
		b := []byte(sql)
		for i, c := range b {
			if c >= 0x80 {
				b[i] = 'x'
			}
		}
		if q, err := planner.Build(string(b), snap); err == nil && q.Kind() == planner.KindDefault && !q.SyntaxError() {
			return false // names none: the default node runs it as before
		}
	}
	return true
}

// errASCIITrail refuses non-ASCII text in an encoding whose characters may
// end in ASCII bytes: pgfleet reads statements byte by byte.
var errASCIITrail = pgerr.New(pgerr.FeatureNotSupported,
	"statements with non-ASCII text on distributed or reference tables are not supported in this client_encoding").
	WithHint("Use client_encoding UTF8, or send non-ASCII values as parameters.")

// errDecodedEscapes refuses a statement whose escapes (U&'\00C4',
// E'\u00C4') pgfleet's deparser writes out as UTF-8 characters in a
// session whose client_encoding is another: the worker would read their
// bytes in the client's encoding.
var errDecodedEscapes = pgerr.New(pgerr.FeatureNotSupported,
	"Unicode escapes in statements on distributed or reference tables are not supported in this client_encoding").
	WithHint("Use client_encoding UTF8, or send such values as parameters.")

// decodedEscapes reports whether p's statements for the workers have
// non-ASCII text that the ASCII statement sql did not: escapes the
// deparser wrote out as UTF-8.
func (ss *session) decodedEscapes(p *planner.Plan, sql string) bool {
	if !ss.foreignEnc || p.Kind() == planner.KindDefault || !ascii([]byte(sql)) {
		return false
	}
	if len(p.ShardSQL()) > 0 && !ascii([]byte(p.ShardSQL()[0])) { // (all from one tree)
		return true
	}
	var workers []planner.WorkerQuery
	switch x := p.Root.(type) {
	case *planner.Scatter:
		if x.Merge != nil && !ascii([]byte(x.Merge.SQL)) {
			return true
		}
		workers = x.Workers
	case *planner.CopyOut:
		workers = x.Workers
	}
	for _, w := range workers {
		if !ascii([]byte(w.SQL)) {
			return true
		}
	}
	return false
}
