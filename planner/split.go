package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v5"

	"github.com/pgfleet/pgfleet/metadata"
)

// TxnKind says what a statement of a query string does to the transaction.
type TxnKind uint8

const (
	NotTxn       TxnKind = iota
	TxnBegin             // BEGIN, START TRANSACTION
	TxnEnd               // COMMIT, END, ROLLBACK, ABORT (Chain says AND CHAIN)
	TxnSavepoint         // SAVEPOINT, RELEASE, ROLLBACK TO
	TxnPrepared          // PREPARE TRANSACTION, COMMIT PREPARED, ROLLBACK PREPARED
)

// Part is one statement of a query string of several.
type Part struct {
	SQL string
	Txn TxnKind
	// Chain: COMMIT AND CHAIN or ROLLBACK AND CHAIN.
	Chain bool
	// Options: a BEGIN with transaction modes.
	Options bool
	// Rollback: ROLLBACK or ABORT (not COMMIT or END).
	Rollback bool
	// Function names the catalog function the statement calls
	// (create_distributed_table, ...), if it is one.
	Function string
	// Command is the statement's name for messages (SAVEPOINT, ...).
	Command string
}

// Split parses a query string and, when it holds several statements of
// which one at least names a distributed or reference table or calls a
// catalog function, returns them in order: the coordinator must then run
// them one at a time, as PostgreSQL does, since no single worker can run
// the string. Otherwise (one statement, none of pgfleet's, or a string that
// does not parse: the worker reports its syntax error before running
// anything, as PostgreSQL would) it returns nil.
//
// With force, it returns the statements of any string of several that
// parses (a session whose transaction failed runs them one at a time, so
// that a leading ROLLBACK ends it as PostgreSQL's does).
func Split(sql string, cat *metadata.Snapshot, force bool) []Part {
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) < 2 {
		return nil
	}
	needed := false
	parts := make([]Part, 0, len(tree.Stmts))
	for _, raw := range tree.Stmts {
		end := len(sql)
		if raw.StmtLen > 0 {
			end = int(raw.StmtLocation + raw.StmtLen)
		}
		if raw.StmtLocation < 0 || end > len(sql) || int(raw.StmtLocation) > end {
			return nil
		}
		pt := Part{SQL: sql[raw.StmtLocation:end]}
		if ts := raw.Stmt.GetTransactionStmt(); ts != nil {
			pt.Chain = ts.Chain
			switch ts.Kind {
			case pg_query.TransactionStmtKind_TRANS_STMT_BEGIN, pg_query.TransactionStmtKind_TRANS_STMT_START:
				pt.Txn, pt.Options = TxnBegin, len(ts.Options) > 0
			case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT:
				pt.Txn, pt.Command = TxnEnd, "COMMIT"
			case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK:
				pt.Txn, pt.Rollback, pt.Command = TxnEnd, true, "ROLLBACK"
			case pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
				pt.Txn, pt.Command = TxnSavepoint, "SAVEPOINT"
			case pg_query.TransactionStmtKind_TRANS_STMT_RELEASE:
				pt.Txn, pt.Command = TxnSavepoint, "RELEASE SAVEPOINT"
			case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
				pt.Txn, pt.Command = TxnSavepoint, "ROLLBACK TO SAVEPOINT"
			default:
				pt.Txn = TxnPrepared
			}
		}
		if fp, ferr := functionCall(raw.Stmt); fp != nil {
			pt.Function, needed = fp.Root.(*Function).Name, true
		} else if ferr != nil {
			pt.Function, needed = "a catalog function", true
		}
		if len(cat.Tables) > 0 && len(catalogTables(raw.Stmt, cat)) > 0 {
			needed = true
		}
		parts = append(parts, pt)
	}
	if !needed && !force {
		return nil
	}
	return parts
}
