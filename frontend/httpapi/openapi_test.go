package httpapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
	"github.com/airlock-run/airlock/tasks"
)

var update = flag.Bool("update", false, "rewrite openapi.json's TaskSpec schemas from tasks/spec.schema.json")

// TestOpenAPIDocument checks that openapi.json is a valid OpenAPI 3.1
// document, and that every route the server has is in it and the reverse.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := httpapitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi %q, want 3.1.0", doc.OpenAPI)
	}
	want := map[string][]string{
		"/v1/runs": {"POST"}, "/v1/runs/{task_id}": {"DELETE", "GET"}, "/v1/runs/{task_id}/events": {"GET"},
		"/v1/runs/{task_id}/result": {"GET"}, "/v1/approvals": {"GET"}, "/v1/approvals/{id}": {"GET"},
		"/v1/approvals/{id}/history": {"GET"}, "/v1/approvals/{id}/artifacts/{name}": {"GET"},
		"/v1/approvals/{id}/accept": {"POST"}, "/v1/approvals/{id}/reject": {"POST"},
		"/openapi.json": {"GET"}, "/spec.schema.json": {"GET"}, "/healthz": {"GET"},
		"/v1/actions": {"GET"}, "/v1/actions/{name}/runs": {"POST"},
		"/v1/sessions": {"POST"}, "/v1/sessions/{id}": {"DELETE"}, "/v1/sessions/{id}/steps": {"POST"},
		"/v1/sessions/{id}/files/{path}": {"GET", "PUT"}, "/v1/sessions/{id}/close": {"POST"},
		"/v1/sessions/{id}/pause": {"POST"}, "/v1/sessions/{id}/resume": {"POST"},
	}
	got := map[string][]string{}
	for path, item := range doc.Paths.Map() {
		for m, op := range item.Operations() {
			got[path] = append(got[path], m)
			if strings.HasPrefix(path, "/v1/") {
				scope, _ := op.Extensions["x-required-scope"].(string)
				if op.Security == nil || len(*op.Security) != 1 || scope == "" {
					t.Errorf("%s %s: want one security requirement and x-required-scope", m, path)
				}
			}
		}
	}
	for _, ms := range got {
		slices.Sort(ms) // Operations is a map
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("paths in openapi.json %v, want %v", got, want)
	}
}

// specComponents returns the components openapi.json must hold for the
// spec: TaskSpec, the schema's root, and TaskSpec<Definition> for each of
// its definitions, with the references rewritten.
func specComponents(t *testing.T) map[string]any {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(tasks.SpecSchema, &root); err != nil {
		t.Fatal(err)
	}
	name := func(def string) string {
		var b strings.Builder
		b.WriteString("TaskSpec")
		for _, p := range strings.Split(def, "_") {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
		return b.String()
	}
	var rewrite func(v any) any
	rewrite = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, "#/definitions/") {
					out[k] = "#/components/schemas/" + name(strings.TrimPrefix(s, "#/definitions/"))
					continue
				}
				out[k] = rewrite(e)
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				out[i] = rewrite(e)
			}
			return out
		}
		return v
	}
	out := map[string]any{}
	defs, _ := root["definitions"].(map[string]any)
	for k, v := range defs {
		out[name(k)] = rewrite(v)
	}
	top := map[string]any{}
	for k, v := range root {
		switch k {
		case "$schema", "$id", "definitions":
		default:
			top[k] = v
		}
	}
	out["TaskSpec"] = rewrite(top)
	return out
}

// TestOpenAPITaskSpecInSync checks that openapi.json's TaskSpec schemas
// are tasks.SpecSchema's, so that the request body of POST /v1/runs is
// the spec's schema. With -update it writes them.
func TestOpenAPITaskSpecInSync(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(httpapi.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	want := specComponents(t)
	got := map[string]any{}
	for k, v := range schemas {
		if strings.HasPrefix(k, "TaskSpec") {
			got[k] = v
		}
	}
	if reflect.DeepEqual(want, got) {
		return
	}
	if !*update {
		t.Fatalf("openapi.json's TaskSpec schemas differ from tasks/spec.schema.json: run go test ./frontend/httpapi -run TestOpenAPITaskSpecInSync -update")
	}
	for k := range got {
		delete(schemas, k)
	}
	for k, v := range want {
		schemas[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("openapi.json", buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("openapi.json updated: run the tests again")
}
