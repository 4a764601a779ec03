package airlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// fixedInstants are the calls that make an absolute instant from values
// written in the code.
var fixedInstants = map[string]bool{
	"Date": true, "Unix": true, "UnixMilli": true, "UnixMicro": true, "Parse": true, "ParseInLocation": true,
}

// TestFixedDates keeps dates written in the code out of tests and test
// helpers: a fixture dated by hand passes until the real clock reaches its
// expiry, then fails on every machine (issue 30: an approval parked at
// 2026-12-02 15:00 with a 72 h expiry, accepted by the real approve
// binary). Tests take their instants from testclock.Epoch, which .ci/run
// shifts a year behind and a year ahead of its default to find, today, a
// fixture that meets the real clock. An instant that is a fixed vector (a
// specification's test case, compared with nothing but the code's own
// arithmetic) says so on its line or the one above: "// fixed date: WHY".
func TestFixedDates(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		dir := filepath.Base(filepath.Dir(path))
		helper := strings.HasSuffix(dir, "test") && dir != "testclock"
		if !strings.HasSuffix(path, ".go") || !(strings.HasSuffix(path, "_test.go") || helper) || dir == "testclock" {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		checked++
		excused := map[int]bool{}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "// fixed date: ") && len(strings.TrimPrefix(c.Text, "// fixed date: ")) > 10 {
					l := fset.Position(c.Slash).Line
					excused[l], excused[l+1] = true, true // on the call's line or the one above
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok || pkg.Name != "time" || !fixedInstants[sel.Sel.Name] {
				return true
			}
			pos := fset.Position(call.Pos())
			if !allWritten(call.Args) {
				return true // made from what the test read or computed
			}
			if !excused[pos.Line] {
				t.Errorf("%s: time.%s makes a fixed instant: take testclock.Epoch() (or say why this one is a fixed vector: // fixed date: WHY)", pos, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d test files: the walk missed the repository's tests", checked)
	}
}

// written reports whether e is a value written in the code: a literal, a
// name (a constant, time.UTC), or arithmetic on them.
func written(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.BasicLit, *ast.Ident:
		return true
	case *ast.SelectorExpr:
		return written(e.X)
	case *ast.ParenExpr:
		return written(e.X)
	case *ast.UnaryExpr:
		return written(e.X)
	case *ast.BinaryExpr:
		return written(e.X) && written(e.Y)
	}
	return false
}

// allWritten reports whether every argument is written in the code.
func allWritten(args []ast.Expr) bool {
	for _, a := range args {
		if !written(a) {
			return false
		}
	}
	return true
}
