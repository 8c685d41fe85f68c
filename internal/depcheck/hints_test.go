package depcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusalsHaveHints: every 0A000 the coordinator makes says what to do
// instead. A refusal is built with pgerr.New(pgerr.FeatureNotSupported,
// ...) or the planner's unsupported(...); the expression must be the
// receiver of .WithHint(...). (A refusal whose hint is set another way is
// listed in hintedElsewhere with the reason.)
func TestRefusalsHaveHints(t *testing.T) {
	fset := token.NewFileSet()
	for _, dir := range []string{"coordinator", "coordinator/shards", "planner", "metadata", "pooling", "executor"} {
		files, err := filepath.Glob(filepath.Join("../..", dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(fset, path, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			var stack []ast.Node
			ast.Inspect(f, func(n ast.Node) bool {
				if n == nil {
					stack = stack[:len(stack)-1]
					return true
				}
				if fd, ok := n.(*ast.FuncDecl); ok && (fd.Name.Name == "unsupported" || fd.Name.Name == "unsupportedDDL") {
					return false
				}
				if call, ok := n.(*ast.CallExpr); ok && refusal(call) && !hinted(stack) {
					pos := fset.Position(call.Pos())
					rel, _ := filepath.Rel("../..", pos.Filename)
					t.Errorf("%s:%d: a 0A000 refusal without .WithHint(...)", rel, pos.Line)
				}
				stack = append(stack, n)
				return true
			})
		}
	}
}

// refusal reports whether call builds a 0A000 error: pgerr.New with the
// code, or a helper that does (whose own body is not checked: its callers
// are).
func refusal(call *ast.CallExpr) bool {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return fn.Name == "unsupported" || fn.Name == "unsupportedDDL"
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); !ok || x.Name != "pgerr" || fn.Sel.Name != "New" || len(call.Args) == 0 {
			return false
		}
		code, ok := call.Args[0].(*ast.SelectorExpr)
		return ok && code.Sel.Name == "FeatureNotSupported"
	}
	return false
}

// hinted reports whether the call on top of stack's parent is
// x.WithHint(...) with the call as x.
func hinted(stack []ast.Node) bool {
	if len(stack) < 2 {
		return false
	}
	sel, ok := stack[len(stack)-1].(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "WithHint" {
		return false
	}
	_, ok = stack[len(stack)-2].(*ast.CallExpr)
	return ok
}
