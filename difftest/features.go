package difftest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Features are the switches of the generator: every statement family is
// one (its name), and so are the spellings, settings and parameter types
// that reach a known, not yet fixed bug (issue 8). Known-bug features are
// off by default so that the bounded CI run passes on today's code; each
// says which class of issue 8 it reaches. Turning them on (-enable, or
// -enable all) is how a fix is checked.
const (
	featLatin1          = "latin1"                  // issue 8 class 5: text hashed in the client encoding
	featSCSOff          = "scs-off"                 // class 5: strings under standard_conforming_strings=off
	featNumericIntLit   = "numeric-int-literal"     // class 5: = 100.0, = 1e2, CAST(99.7 AS int) against integer keys
	featCastChain       = "cast-chain"              // class 5: ' 16'::int::text, 1.5e1::text keys
	featVarcharPad      = "varchar-pad"             // class 5: 'abcd   ' into varchar(4) hashed with its spaces
	featBinaryCrossType = "binary-cross-type"       // class 5: binary parameter of another type than the column's
	featBPCharParam     = "bpchar-param"            // class 5: bpchar parameter against a text/varchar key
	featParamCast       = "param-cast"              // class 5: $1::int::text
	featChain           = "chain"                   // class 1: COMMIT/ROLLBACK AND CHAIN across workers
	featZonelessTZ      = "zoneless-timestamptz"    // classes 3 and 7: timestamptz/ambiguous date literals read under the session's settings
	featCopyWhere       = "copy-where"              // class 4: COPY ... WHERE
	featUpsertKey       = "upsert-key"              // class 6: ON CONFLICT DO UPDATE SET k = ...
	featStartTx         = "start-transaction"       // not in issue 8: START TRANSACTION answered with tag BEGIN
	featSearchPathStart = "search-path-startup"     // class 12: a list-valued search_path startup parameter
	featSavepointRefuse = "savepoint-after-refusal" // not in issue 8: ROLLBACK TO/RELEASE after a refusal failed the transaction
	featErrorOrder      = "multi-error-order"       // not in issue 8: which error a multi-shard write reports
	featReadOnly        = "read-only"               // class 3: default_transaction_read_only=on sessions
	featViews           = "views"                   // class 10: views and SQL functions over distributed tables
	featResetStartup    = "reset-startup"           // class 12: RESET of a setting given as a startup parameter
	featDateStylePart   = "datestyle-partial"       // class 12: SET DateStyle to one part (YMD, SQL) replayed without the other
	featAbortedPlan     = "aborted-tx-planning"     // not in issue 8: planner errors reported in a failed transaction instead of 25P02
	featExprErrors      = "expr-errors"             // not in issue 8: multi-shard queries evaluate expressions on rows PostgreSQL never projects
)

// switches are the features that are not statement families; each is on
// by default unless it is in knownBug.
var switches = []string{
	featLatin1, featSCSOff, featNumericIntLit, featCastChain, featVarcharPad, featBinaryCrossType,
	featBPCharParam, featParamCast, featZonelessTZ, featStartTx, featSearchPathStart,
	featSavepointRefuse, featErrorOrder, featReadOnly, featResetStartup, featDateStylePart,
	featAbortedPlan, featExprErrors,
}

// knownBug lists the features off by default, with the issue-8 class each
// reaches.
var knownBug = map[string]string{}

// features is the set of enabled features.
type features map[string]bool

func (f features) on(name string) bool { return f[name] }

// defaultFeatures enables every family and every feature that is not a
// known bug.
func defaultFeatures() features {
	f := features{}
	for _, fam := range families {
		f[fam.name] = !fam.offByDefault
	}
	for _, name := range switches {
		f[name] = true
	}
	for name := range knownBug {
		f[name] = false
	}
	return f
}

// allFeatures lists every feature name.
func allFeatures() []string {
	var names []string
	for _, fam := range families {
		names = append(names, fam.name)
	}
	names = append(names, switches...)
	for name := range knownBug {
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// apply turns features on or off from comma-separated lists; "all" stands
// for every feature.
func (f features) apply(enable, disable string) error {
	set := func(list string, on bool) error {
		for _, name := range strings.Split(list, ",") {
			name = strings.TrimSpace(name)
			switch {
			case name == "":
			case name == "all":
				for _, n := range allFeatures() {
					f[n] = on
				}
			default:
				if _, ok := f[name]; !ok {
					return fmt.Errorf("unknown feature %q (known: %s)", name, strings.Join(allFeatures(), ", "))
				}
				f[name] = on
			}
		}
		return nil
	}
	if err := set(enable, true); err != nil {
		return err
	}
	return set(disable, false)
}

func (f features) String() string {
	var on []string
	for _, n := range allFeatures() {
		if f[n] {
			on = append(on, n)
		}
	}
	return strings.Join(on, ",")
}
