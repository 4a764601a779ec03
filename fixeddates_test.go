package airlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fixedInstants are the calls that make an absolute instant from values
// written in the code.
var fixedInstants = map[string]bool{
	"Date": true, "Unix": true, "UnixMilli": true, "UnixMicro": true, "Parse": true, "ParseInLocation": true,
}

// instantText matches an instant spelled in a string: a date and a time
// of day.
var instantText = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}`)

// TestFixedDates keeps dates written by hand out of tests and test
// helpers: a fixture dated by hand passes until the real clock reaches its
// expiry, then fails on every machine (issue 30: an approval parked at
// 2026-12-02 15:00 with a 72 h expiry, accepted by the real approve
// binary). Tests take their instants from testclock.Epoch, which .ci/run
// shifts a year behind and a year ahead of its default to find, today, a
// fixture that meets the real clock: neither time.Date and its kin on
// values written in the code, nor a string that spells an instant (a
// payload's timestamp, an expected message). An instant that is a fixed
// vector (a specification's test case, compared with nothing but the
// code's own arithmetic) says so on its line or the one above: "// fixed
// date: WHY".
func TestFixedDates(t *testing.T) {
	never := func(string) bool { return false }
	testCode := func(path string) bool {
		dir := filepath.Base(filepath.Dir(path))
		return dir != "testclock" && (strings.HasSuffix(path, "_test.go") || strings.HasSuffix(dir, "test"))
	}
	eachGoFile(t, 100, parser.ParseComments, never, testCode, func(fset *token.FileSet, _ string, f *ast.File) {
		excused := map[int]bool{}
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if strings.HasPrefix(c.Text, "// fixed date: ") && len(strings.TrimPrefix(c.Text, "// fixed date: ")) > 10 {
					l := fset.Position(c.Slash).Line
					excused[l], excused[l+1] = true, true // on the call's line or the one above
				}
			}
		}
		report := func(n ast.Node, what string) {
			if pos := fset.Position(n.Pos()); !excused[pos.Line] {
				t.Errorf("%s: %s: take testclock.Epoch() (or say why this one is a fixed vector: // fixed date: WHY)", pos, what)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				// Go's reference time (2006-01-02 15:04) is a layout, not a date.
				if n.Kind == token.STRING && instantText.MatchString(n.Value) && !strings.Contains(n.Value, "2006-01-02") {
					report(n, "a string spells an instant")
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "time" && fixedInstants[sel.Sel.Name] && allWritten(n.Args) {
					report(n, "time."+sel.Sel.Name+" makes a fixed instant")
				}
			}
			return true
		})
	})
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
