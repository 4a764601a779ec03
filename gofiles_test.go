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

// eachGoFile parses the repository's Go files that keep accepts (by path;
// directories that skip accepts are not entered, nor testdata,
// node_modules and hidden ones) and calls visit with each; it fails the
// test when fewer than least were parsed, a walk that missed the tree.
func eachGoFile(t *testing.T, least int, mode parser.Mode, skip func(dir string) bool, keep func(path string) bool, visit func(fset *token.FileSet, path string, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	parsed := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || skip(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || !keep(path) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, mode)
		if err != nil {
			return err
		}
		parsed++
		visit(fset, path, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if parsed < least {
		t.Fatalf("parsed %d Go files, fewer than %d: the walk missed the tree", parsed, least)
	}
}
