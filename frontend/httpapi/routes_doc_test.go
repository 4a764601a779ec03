package httpapi_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
)

// routeDoc is the page whose route table lists every route of openapi.json.
const routeDoc = "../../docs/http-api.md"

// maxRouteFileBytes bounds what the route tests read of one file.
const maxRouteFileBytes = 4 << 20

// routeTableHeader is the header row of routeDoc's route table.
const routeTableHeader = "| route | scope | what |"

// route is an operation of the API: a method and a path as openapi.json
// writes it ({name}, never Go's {name...}).
type route struct{ method, path string }

func (r route) String() string { return r.method + " " + r.path }

// routeRow is a row of the route table.
type routeRow struct {
	line  int // 1-based, in the page
	route route
	scope string // the scope the route takes, or "none"
}

// routeCellRE is a route table's first cell: one code span holding a
// method and a path, which a query (an example of its use) may follow.
var routeCellRE = regexp.MustCompile("^`([A-Z]+) (/[^`?\\s]*)(?:\\?[^`]*)?`$")

// scopeCellRE is its second cell: a scope in a code span, or none.
var scopeCellRE = regexp.MustCompile("^(?:`([a-z]+:[a-z]+)`|(none))$")

// readRouteFile reads a file, at most maxRouteFileBytes of it.
func readRouteFile(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRouteFileBytes+1))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxRouteFileBytes {
		t.Fatalf("%s: over %d bytes", path, maxRouteFileBytes)
	}
	return string(b)
}

// tableCells splits a markdown table row into its trimmed cells: on every
// "|" but an escaped one ("\|", which stays in the cell as "|").
func tableCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// parseRouteTable returns the rows of the one table of md whose header is
// routeTableHeader (outside code blocks), or an error naming the line of
// a row it cannot read.
func parseRouteTable(md string) ([]routeRow, error) {
	lines := strings.Split(md, "\n")
	header := -1
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || strings.Join(tableCells(l), "|") != strings.Join(tableCells(routeTableHeader), "|") {
			continue
		}
		if header >= 0 {
			return nil, fmt.Errorf("line %d: a second route table (the first is on line %d): keep one", i+1, header+1)
		}
		header = i
	}
	if header < 0 {
		return nil, fmt.Errorf("no route table: want a table whose header is %q", routeTableHeader)
	}
	if header+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[header+1]), "|---") {
		return nil, fmt.Errorf("line %d: want the route table's |---|---|---| below its header", header+2)
	}
	var rows []routeRow
	for i := header + 2; i < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i]), "|"); i++ {
		cells := tableCells(lines[i])
		if len(cells) != 3 {
			return nil, fmt.Errorf("line %d: %d cells, want 3 (route, scope, what)", i+1, len(cells))
		}
		m := routeCellRE.FindStringSubmatch(cells[0])
		if m == nil {
			return nil, fmt.Errorf("line %d: route %q: want one `METHOD /path` (a query after ? may follow)", i+1, cells[0])
		}
		s := scopeCellRE.FindStringSubmatch(cells[1])
		if s == nil {
			return nil, fmt.Errorf("line %d: scope %q: want a scope in backquotes (`runs:read`) or none", i+1, cells[1])
		}
		rows = append(rows, routeRow{line: i + 1, route: route{m[1], m[2]}, scope: s[1] + s[2]})
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("line %d: the route table has no rows", header+1)
	}
	return rows, nil
}

// openAPIRoutes returns every operation of openapi.json with the scope it
// takes (its x-required-scope, or none).
func openAPIRoutes(t *testing.T) map[route]string {
	t.Helper()
	doc, err := httpapitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	out := map[route]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			scope, _ := op.Extensions["x-required-scope"].(string)
			if scope == "" {
				scope = "none"
			}
			out[route{method, path}] = scope
		}
	}
	if len(out) == 0 {
		t.Fatal("openapi.json has no operations")
	}
	return out
}

// handlerRoute is a route the handler registers, where, and its scope.
type handlerRoute struct {
	where string // file:line of the handle call
	scope string // the scope h.auth checks, or "none"
}

// scopeNames are the package's Scope constants, by name.
var scopeNames = map[string]httpapi.Scope{
	"ScopeRunsWrite": httpapi.ScopeRunsWrite, "ScopeRunsRead": httpapi.ScopeRunsRead,
	"ScopeApprovalsRead": httpapi.ScopeApprovalsRead, "ScopeApprovalsWrite": httpapi.ScopeApprovalsWrite,
}

// handlerRoutes returns the routes the handler registers: every
// handle("METHOD /path", f) call in the package's source (routes in
// httpapi.go), with {name...} written {name} as in openapi.json, and the
// scope of f when it is h.auth(Scope..., ...).
func handlerRoutes(t *testing.T) map[route]handlerRoute {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[route]handlerRoute{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, "frontend/httpapi/"+name, readRouteFile(t, name), 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			if fn, ok := call.Fun.(*ast.Ident); !ok || fn.Name != "handle" {
				return true
			}
			where := fset.Position(call.Pos()).String()
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: handle's pattern is not a string literal: the test cannot read it", where)
				return true
			}
			pattern, _ := strconv.Unquote(lit.Value)
			method, path, ok := strings.Cut(pattern, " ")
			if !ok {
				t.Errorf("%s: handle(%q): want \"METHOD /path\"", where, pattern)
				return true
			}
			path = strings.ReplaceAll(path, "...}", "}")
			scope := "none"
			if auth, ok := call.Args[1].(*ast.CallExpr); ok {
				if sel, ok := auth.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "auth" && len(auth.Args) > 0 {
					id, _ := auth.Args[0].(*ast.Ident)
					if id == nil || scopeNames[id.Name] == "" {
						t.Errorf("%s: handle(%q): h.auth's scope is not one of the Scope constants the test knows", where, pattern)
						return true
					}
					scope = string(scopeNames[id.Name])
				}
			}
			out[route{method, path}] = handlerRoute{where: where, scope: scope}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatal(`no handle("METHOD /path", f) call in the package's source: if routes() registers routes another way, teach handlerRoutes to read them`)
	}
	return out
}

// sortedErrors reports msgs sorted, so that a failure reads the same
// every run (the routes come from maps).
func sortedErrors(t *testing.T, msgs []string) {
	t.Helper()
	sort.Strings(msgs)
	for _, m := range msgs {
		t.Error(m)
	}
}

// TestRouteTable checks docs/http-api.md's route table against
// openapi.json both ways: every operation of the document has a row with
// its scope, and every row is an operation of the document.
func TestRouteTable(t *testing.T) {
	rows, err := parseRouteTable(readRouteFile(t, routeDoc))
	if err != nil {
		t.Fatalf("docs/http-api.md: %v", err)
	}
	ops := openAPIRoutes(t)
	inTable := map[route]bool{}
	var msgs []string
	for _, r := range rows {
		inTable[r.route] = true
		scope, ok := ops[r.route]
		switch {
		case !ok:
			msgs = append(msgs, fmt.Sprintf("docs/http-api.md:%d: %s is not in frontend/httpapi/openapi.json: add it there (and to the handler's routes in httpapi.go), or take the row out", r.line, r.route))
		case r.scope != scope:
			msgs = append(msgs, fmt.Sprintf("docs/http-api.md:%d: %s: scope %s, but openapi.json's x-required-scope says %s", r.line, r.route, r.scope, scope))
		}
	}
	for op, scope := range ops {
		if !inTable[op] {
			cell := scope
			if scope != "none" {
				cell = "`" + scope + "`"
			}
			msgs = append(msgs, fmt.Sprintf("docs/http-api.md: the route table (%q) has no row for %s, which openapi.json has: add | `%s` | %s | what it does |", routeTableHeader, op, op, cell))
		}
	}
	sortedErrors(t, msgs)
}

// TestHandlerRoutesInOpenAPI checks the routes the handler registers
// (routes in httpapi.go) against openapi.json both ways, with their
// scopes.
func TestHandlerRoutesInOpenAPI(t *testing.T) {
	ops := openAPIRoutes(t)
	registered := handlerRoutes(t)
	var msgs []string
	for r, h := range registered {
		scope, ok := ops[r]
		switch {
		case !ok:
			msgs = append(msgs, fmt.Sprintf("%s registers %s, which frontend/httpapi/openapi.json lacks: add it to the document's paths, and a row to docs/http-api.md's route table", h.where, r))
		case h.scope != scope:
			msgs = append(msgs, fmt.Sprintf("%s: %s takes scope %s, but openapi.json's x-required-scope says %s", h.where, r, h.scope, scope))
		}
	}
	for op := range ops {
		if _, ok := registered[op]; !ok {
			msgs = append(msgs, fmt.Sprintf("frontend/httpapi/openapi.json has %s, which no handle call in httpapi.go's routes registers: register it, or take it out of the document and of docs/http-api.md's route table", op))
		}
	}
	sortedErrors(t, msgs)
}

// TestRouteTableParser checks the parser on a page of its own: a code
// block's table and a query are no routes, an escaped "|" stays in its
// cell, and a row it cannot read is an error naming its line.
func TestRouteTableParser(t *testing.T) {
	page := "# API\n\n```\n" + routeTableHeader + "\n```\n\n" + routeTableHeader + "\n|---|---|---|\n" +
		"| `GET /v1/runs/{task_id}?wait=30s&until=done\\|final` | `runs:read` | long poll \\| wait |\n" +
		"| `GET /healthz` | none | a PING |\n\nAfter the table.\n"
	rows, err := parseRouteTable(page)
	if err != nil {
		t.Fatal(err)
	}
	want := []routeRow{
		{line: 9, route: route{"GET", "/v1/runs/{task_id}"}, scope: "runs:read"},
		{line: 10, route: route{"GET", "/healthz"}, scope: "none"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("rows %v, want %v", rows, want)
	}
	for bad, wantErr := range map[string]string{
		"| `GET /a`, `/b` | none | two |":  "line 3: route",
		"| GET /a | none | no code span |": "line 3: route",
		"| `GET /a` | runs:read | bare |":  "line 3: scope",
		"| `GET /a` | none |":              "line 3: 2 cells",
		"| `get /a` | none | lower case |": "line 3: route",
	} {
		_, err := parseRouteTable(routeTableHeader + "\n|---|---|---|\n" + bad + "\n")
		if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want one starting %q", bad, err, wantErr)
		}
	}
	if _, err := parseRouteTable("no table\n"); err == nil {
		t.Error("a page without the table: no error")
	}
}
