package planner

import (
	"sort"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v5"
	"google.golang.org/protobuf/proto"
)

// Mutability is what a write's text says about values that each copy of a
// reference table would compute on its own: the functions and operators it
// calls (their volatility is the worker catalog's to say), constructs that
// are never immutable, and which columns take their DEFAULT (whose
// expressions the worker catalog holds). The coordinator refuses the write
// unless every copy would store the same values.
type Mutability struct {
	// Funcs and Ops name the functions and operators called (unqualified,
	// as the catalog spells them).
	Funcs []string `json:"funcs,omitempty"`
	Ops   []string `json:"ops,omitempty"`
	// Calls are the function calls as name/argument count ("length/1"),
	// so that only the overloads a call could pick are checked.
	Calls []string `json:"calls,omitempty"`
	// Qualified are the names called with a schema other than pg_catalog
	// (evil.gen_random_uuid()): never the built-in's, whatever the name.
	Qualified []string `json:"qualified,omitempty"`
	// Fixed is a construct that is never immutable (CURRENT_TIMESTAMP, a
	// date/time literal such as 'now'), "" when none.
	Fixed string `json:"fixed,omitempty"`
	// Defaults says that some columns may take their DEFAULT; then
	// Listed is the INSERT's (or COPY's) column list (nil: none), Given the
	// number of values each row gives without a list (-1: unknown, every
	// column may take its default), and DefaultCols/DefaultPos the columns
	// set to DEFAULT explicitly, by name or by position (0-based, in an
	// INSERT without a column list).
	Defaults bool   `json:"defaults,omitempty"`
	Table    string `json:"table,omitempty"` // whose defaults

	Listed      []string `json:"listed,omitempty"`
	Given       int      `json:"given,omitempty"`
	DefaultCols []string `json:"default_cols,omitempty"`
	// OnlyDefaultCols: no column but DefaultCols takes its default (an
	// UPDATE's SET col = DEFAULT).
	OnlyDefaultCols bool  `json:"only_default_cols,omitempty"`
	DefaultPos      []int `json:"default_pos,omitempty"`
}

// timeWords are the date/time input strings whose value is the moment they
// are read: each copy would read its own.
var timeWords = []string{"now", "today", "tomorrow", "yesterday"}

// TimeWord reports whether s, as an input to a date/time type, is read as
// the current moment ('now', 'today', ...).
func TimeWord(s string) bool {
	s = strings.TrimSpace(s)
	for _, w := range timeWords {
		if strings.EqualFold(s, w) {
			return true
		}
	}
	return false
}

// mutability collects what n calls; nil when it calls nothing and takes no
// defaults.
func mutability(n *pg_query.Node) *Mutability {
	m := &Mutability{}
	funcs, ops, calls, qualified := map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	Walk(n, func(msg proto.Message) {
		switch x := msg.(type) {
		case *pg_query.FuncCall:
			if l := len(x.Funcname); l > 0 {
				name := x.Funcname[l-1].GetString_().GetSval()
				funcs[name] = true
				calls[name+"/"+strconv.Itoa(len(x.Args))] = true
				if _, builtin := funcName(x); !builtin {
					qualified[name] = true
				}
			}
		case *pg_query.A_Expr:
			if l := len(x.Name); l > 0 {
				ops[x.Name[l-1].GetString_().GetSval()] = true
			}
		case *pg_query.SQLValueFunction:
			if m.Fixed == "" {
				m.Fixed = strings.TrimPrefix(x.Op.String(), "SVFOP_")
			}
		case *pg_query.A_Const:
			if s := x.GetSval(); s != nil && TimeWord(s.Sval) && m.Fixed == "" {
				m.Fixed = "'" + s.Sval + "'"
			}
		case *pg_query.NextValueExpr:
			m.Fixed = "nextval"
		}
	})
	for f := range funcs {
		m.Funcs = append(m.Funcs, f)
	}
	for o := range ops {
		m.Ops = append(m.Ops, o)
	}
	for c := range calls {
		m.Calls = append(m.Calls, c)
	}
	for q := range qualified {
		m.Qualified = append(m.Qualified, q)
	}
	sort.Strings(m.Qualified)
	sort.Strings(m.Calls)
	sort.Strings(m.Funcs)
	sort.Strings(m.Ops)
	switch {
	case n.GetInsertStmt() != nil:
		ins := n.GetInsertStmt()
		m.Defaults = true
		for _, c := range ins.Cols {
			m.Listed = append(m.Listed, c.GetResTarget().GetName())
		}
		if ins.Cols == nil {
			m.Given = -1
		}
		sel := ins.SelectStmt.GetSelectStmt()
		if sel == nil {
			m.Given = 0 // DEFAULT VALUES: every column
			m.Listed = nil
			break
		}
		given := -1
		for _, row := range sel.ValuesLists {
			items := row.GetList().GetItems()
			if given < 0 || len(items) < given {
				given = len(items)
			}
			for i, it := range items {
				if it.GetSetToDefault() == nil {
					continue
				}
				if ins.Cols != nil && i < len(ins.Cols) {
					m.DefaultCols = append(m.DefaultCols, ins.Cols[i].GetResTarget().GetName())
				} else {
					m.DefaultPos = append(m.DefaultPos, i)
				}
			}
		}
		if ins.Cols == nil {
			m.Given = given
		}
		if oc := ins.OnConflictClause; oc != nil {
			m.DefaultCols = append(m.DefaultCols, setDefaults(oc.TargetList)...)
		}
	case n.GetUpdateStmt() != nil:
		if d := setDefaults(n.GetUpdateStmt().TargetList); d != nil {
			m.Defaults = true
			m.OnlyDefaultCols = true
			m.DefaultCols = d
		}
	}
	if len(m.Funcs) == 0 && len(m.Ops) == 0 && m.Fixed == "" && !m.Defaults {
		return nil
	}
	return m
}

// setDefaults names the columns a SET list sets to DEFAULT.
func setDefaults(targets []*pg_query.Node) []string {
	var out []string
	for _, t := range targets {
		if rt := t.GetResTarget(); rt != nil && rt.Val.GetSetToDefault() != nil {
			out = append(out, rt.Name)
		}
	}
	return out
}

// ExprMutability parses an expression (a column's DEFAULT, as
// pg_get_expr prints it) and returns what it calls, or nil.
func ExprMutability(expr string) (*Mutability, error) {
	tree, err := pg_query.Parse("SELECT " + expr)
	if err != nil {
		return nil, err
	}
	if len(tree.Stmts) != 1 {
		return &Mutability{Fixed: expr}, nil
	}
	return mutability(tree.Stmts[0].Stmt), nil
}
