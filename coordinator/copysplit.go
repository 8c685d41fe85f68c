package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgfleet/pgfleet/coordinator/shards"
	"github.com/pgfleet/pgfleet/internal/pgerr"
	"github.com/pgfleet/pgfleet/metadata"
	"github.com/pgfleet/pgfleet/planner"
)

// copySplit runs COPY FROM STDIN into a distributed or reference table: the
// client's rows are split by shard and loaded on every node in one
// distributed transaction, so that either all rows are stored or none.
func (ss *session) copySplit(p *planner.Plan, x *planner.CopyIn, lits []literal) error {
	inTxn := ss.inTxn()
	if inTxn && (!ss.canTakeInAll() || len(x.Copy.Fill) > 0) {
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY into %s is not supported in this transaction block (pinned, after SET, or drawing sequence values)", p.Tables[0]).
			WithHint("Run the COPY outside BEGIN ... COMMIT (it commits on every worker at once, all or nothing), or before SET in the block."))
	}
	f, options, err := copyFormat(x.Copy, lits)
	if err != nil {
		return ss.queryError(err)
	}
	if t := ss.srv.catalog.Load().Table(p.Tables[0]); t != nil && t.Kind == metadata.Distributed && x.Copy.Encoding != "" &&
		!utf8Name(x.Copy.Encoding) && textLike(t.DistType) {
		// The splitter hashes the distribution column's bytes as the
		// client sent them, which is only right in the server's encoding.
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY into %s with ENCODING %s is not supported: its distribution column is text", p.Tables[0], x.Copy.Encoding).
			WithHint("Send the data in UTF8."))
	}
	if t := ss.srv.catalog.Load().Table(p.Tables[0]); t != nil && t.Kind == metadata.Distributed &&
		(encodingEmbedsASCII(x.Copy.Encoding) || x.Copy.Encoding == "" && ss.embedsASCII) {
		// PostgreSQL converts such data to the server's encoding before
		// it finds lines and fields; the splitter reads the client's
		// bytes, where a character's second byte can be a backslash.
		return ss.queryError(pgerr.New(pgerr.FeatureNotSupported,
			"COPY into %s in an encoding whose characters can contain ASCII bytes (SJIS, BIG5, GBK, UHC, GB18030, JOHAB) is not supported", p.Tables[0]).
			WithHint("Send the data in UTF8."))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 24*time.Hour)
	defer cancel()
	if t := ss.srv.catalog.Load().Table(p.Tables[0]); t != nil && t.Kind == metadata.Reference {
		if err := ss.sameOnEveryCopy(ctx, p, lits, nil, nil, nil); err != nil {
			return ss.queryError(err)
		}
	}
	var conns map[int32]*pgx.Conn
	var giveBack func() error
	if inTxn {
		// Inside the client's transaction block, on its connections:
		// its COMMIT keeps the rows on every worker, ROLLBACK none.
		var err error
		conns, giveBack, err = ss.borrowAll(ctx, ss.srv.catalog.Load())
		if giveBack == nil {
			return ss.queryError(err)
		}
		if err != nil {
			return giveBack()
		}
	} else {
		var done func()
		var err error
		conns, done, err = ss.nodeConns(ctx)
		defer done()
		if err != nil {
			return ss.queryError(err)
		}
		giveBack = func() error { return nil }
	}
	// fail answers an error of the COPY: in a block, the transaction fails.
	fail := func(err error) error {
		if lost := giveBack(); lost != nil {
			return lost
		}
		if inTxn {
			ss.txFailed = true
		}
		return ss.queryError(err)
	}
	l, err := shards.NewLoader(ctx, ss.srv.store, ss.srv.catalog.Load(), conns, ss.srv.defaultNode.Load(),
		p.Tables[0], x.Copy.Columns, f, options)
	if err != nil {
		return fail(err)
	}
	if inTxn {
		l.InClientTxn()
	}
	l.ForeignEncoding = ss.foreignEnc
	if fill := x.Copy.Fill; len(fill) > 0 && f.Binary {
		l.Abort()
		return fail(pgerr.New(pgerr.FeatureNotSupported, "COPY into %s in binary format leaving out its sequence columns is not supported", p.Tables[0]).
			WithHint("Send the sequence columns' values, or use FORMAT text or csv."))
	}
	if fill := x.Copy.Fill; len(fill) > 0 {
		// Sequence columns the COPY leaves out: drawn for each message's
		// rows at once, as for an INSERT (sequences.go).
		if err := ss.seqReady(p.Tables[0], nil); err != nil {
			l.Abort()
			return fail(err)
		}
		var cols []string
		for _, f := range fill {
			cols = append(cols, f.Column)
		}
		err := l.Fill(cols, func(n int) ([][]string, error) {
			need := slices.Clone(fill)
			for k := range need {
				need[k].Rows = make([]int, n)
			}
			return ss.drawSequences(p.Tables[0], need)
		})
		if err != nil {
			l.Abort()
			return fail(err)
		}
	}
	if err := readOnlyCopy(ctx, conns); err != nil {
		l.Abort()
		return fail(err)
	}
	resp := pgproto3.CopyInResponse{OverallFormat: 0}
	if f.Binary {
		resp.OverallFormat = 1
		for range l.Columns() {
			resp.ColumnFormatCodes = append(resp.ColumnFormatCodes, 1)
		}
	}
	ss.out, _ = resp.Encode(ss.out)
	if err := ss.flush(); err != nil {
		l.Abort()
		_ = giveBack()
		return errQuietClose
	}
	var loadErr error
	for done := false; !done; {
		fr, err := ss.r.Next()
		if ss.terminated.Load() {
			// pg_terminate_backend (signal.go): nothing of the COPY stays.
			l.Abort()
			_ = giveBack()
			return adminShutdown()
		}
		if err != nil {
			l.Abort()
			_ = giveBack()
			return clientReadError(err)
		}
		switch fr.Type {
		case 'd':
			if loadErr == nil {
				loadErr = l.Write(ctx, fr.Body)
			}
		case 'c':
			done = true
		case 'f':
			var cf pgproto3.CopyFail
			_ = cf.Decode(fr.Body)
			if loadErr == nil {
				loadErr = pgerr.New(pgerr.QueryCanceled, "COPY from stdin failed: %s", cf.Message)
			}
			done = true
		case 'H', 'S':
		default:
			if loadErr == nil {
				loadErr = pgerr.New(pgerr.ProtocolViolation, "unexpected message type 0x%02X during COPY from stdin", fr.Type)
			}
			done = true
		}
	}
	var rows int64
	if loadErr == nil {
		rows, loadErr = l.Finish(ctx)
	}
	if loadErr != nil {
		l.Abort()
		var pe *pgerr.Error
		if !errors.As(loadErr, &pe) {
			loadErr = pgerr.New(pgerr.ConnectionFailure, "COPY into %s: %v", p.Tables[0], loadErr)
		}
		return fail(loadErr)
	}
	if lost := giveBack(); lost != nil {
		return lost
	}
	cc := pgproto3.CommandComplete{CommandTag: []byte("COPY " + strconv.FormatInt(rows, 10))}
	ss.out, _ = cc.Encode(ss.out)
	ss.out = readyForQuery(ss.out, ss.txStatus())
	return nil
}

// copyFormat turns the COPY's options into the splitter's format and the
// WITH and WHERE clauses the shards' COPY statements use (HEADER is the
// coordinator's business: it skips the header line).
func copyFormat(o *planner.CopyOptions, lits []literal) (shards.CopyFormat, string, error) {
	f := shards.DefaultCopyFormat(o.CSV)
	var opts []string
	if o.CSV {
		opts = append(opts, "FORMAT csv")
	}
	if o.Binary {
		if o.CSV || o.Delimiter != "" || o.Quote != "" || o.Escape != "" || o.Null != nil || o.Header {
			return f, "", pgerr.New(pgerr.FeatureNotSupported, "COPY in binary format with text or CSV options is not supported").
				WithHint("PostgreSQL refuses them in binary mode too: leave them out.")
		}
		f = shards.CopyFormat{Binary: true}
		opts = append(opts, "FORMAT binary")
	}
	one := func(name, v string, dst *byte) error {
		if len(v) != 1 {
			return pgerr.New(pgerr.FeatureNotSupported, "COPY %s must be a single one-byte character", name).
				WithHint("Use a single ASCII character.")
		}
		*dst = v[0]
		opts = append(opts, name+" "+quoteLiteral(v))
		return nil
	}
	if o.Delimiter != "" {
		if err := one("DELIMITER", o.Delimiter, &f.Delimiter); err != nil {
			return f, "", err
		}
	}
	if o.Quote != "" {
		if err := one("QUOTE", o.Quote, &f.Quote); err != nil {
			return f, "", err
		}
	}
	if o.Escape != "" {
		if err := one("ESCAPE", o.Escape, &f.Escape); err != nil {
			return f, "", err
		}
	} else if o.Quote != "" {
		f.Escape = f.Quote
	}
	if o.Null != nil {
		f.Null = *o.Null
		opts = append(opts, "NULL "+quoteLiteral(*o.Null))
	}
	if o.Encoding != "" {
		opts = append(opts, "ENCODING "+quoteLiteral(o.Encoding))
	}
	f.Header = o.Header
	var with string
	if len(opts) > 0 {
		with = fmt.Sprintf(" WITH (%s)", strings.Join(opts, ", "))
	}
	if o.Where != "" {
		// The shards filter the rows as PostgreSQL would; the command tag
		// counts the rows they stored.
		where := o.Where
		if lits != nil {
			where, _ = spliceLiterals(where, lits)
		}
		with += " WHERE " + where
	}
	return f, with, nil
}

// utf8Name reports whether an encoding name is UTF8 as PostgreSQL spells
// it (case, '-' and '_' ignored).
func utf8Name(enc string) bool {
	e := strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(enc))
	return e == "utf8" || e == "unicode"
}

// textLike reports whether values of a distribution type are strings whose
// bytes the hash reads.
func textLike(typ string) bool {
	return typ == "text" || typ == "varchar" || typ == "bpchar"
}

// readOnlyCopy answers 25006 as PostgreSQL does for COPY FROM in a
// read-only transaction (default_transaction_read_only, a standby): before
// it reads any data, so whatever the data (none, bad rows, rows no shard
// would take) the client gets that error. The node connections have the
// session's settings; one of them is asked, one round trip per COPY.
func readOnlyCopy(ctx context.Context, conns map[int32]*pgx.Conn) error {
	for _, c := range conns {
		var ro string
		if err := c.QueryRow(ctx, "SELECT pg_catalog.current_setting('transaction_read_only')", pgx.QueryExecModeExec).Scan(&ro); err != nil {
			return pgerr.New(pgerr.ConnectionFailure, "checking transaction_read_only for COPY: %v", err)
		}
		if ro == "on" {
			return pgerr.New(pgerr.ReadOnlySQLTransaction, "cannot execute COPY FROM in a read-only transaction")
		}
		return nil
	}
	return nil
}
