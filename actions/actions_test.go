package actions_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/actions"
	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

const good = `
description: Sum a day's export.
params:
  type: object
  properties:
    day: {type: string}
    n: {type: integer, maximum: 10}
  required: [day]
  additionalProperties: false
spec:
  inputs:
    - url: "https://partner.example/export?day=${param:day}"
      path: in/x.csv
      headers: {X-Day: "${param:day}"}
  steps:
    - run: [sh, -c, "cat in/params.json"]
`

func parse(t *testing.T, def string) (*actions.Definition, error) {
	t.Helper()
	return actions.Parse("sum", []byte(def), "yaml", limits.DefaultPolicy())
}

func call(params string) *tasks.Spec {
	s := &tasks.Spec{Version: 1, Action: "sum", Params: json.RawMessage(params), Queue: "q", IdempotencyKey: "k", Principal: "alice"}
	if err := s.Prepare(limits.DefaultPolicy()); err != nil {
		panic(err)
	}
	return s
}

// TestExpand: a call's params reach the run as in/params.json and, escaped,
// in the input's URL (after the host) and header; the call's identity is
// kept; nothing of the call reaches argv.
func TestExpand(t *testing.T) {
	d, err := parse(t, good)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Digest, "sha256:") || len(d.Digest) != 71 {
		t.Errorf("digest %q", d.Digest)
	}
	s, err := d.Expand(call(`{"day": "2026-12-05&admin=1/../x y#z", "n": 3}`), limits.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Inputs[0].URL, "https://partner.example/export?day=2026-12-05%26admin%3D1%2F..%2Fx%20y%23z"; got != want {
		t.Errorf("url %q, want %q", got, want)
	}
	if got := s.Inputs[0].Headers["X-Day"]; got != "2026-12-05&admin=1/../x y#z" {
		t.Errorf("header %q", got)
	}
	if got := string(s.Files[actions.ParamsFile]); got != `{"day":"2026-12-05\u0026admin=1/../x y#z","n":3}` {
		t.Errorf("params file %q", got)
	}
	if s.Action != "sum" || s.Queue != "q" || s.IdempotencyKey != "k" || s.Principal != "alice" || s.Params != nil {
		t.Errorf("identity: %+v", s)
	}
	if s.Steps[0].Run[2] != "cat in/params.json" {
		t.Errorf("argv changed: %q", s.Steps[0].Run)
	}
}

// TestExpandRefusesBadParams: params are checked against the schema, and a
// value that goes into an input must be a scalar without line breaks or
// a secret reference.
func TestExpandRefusesBadParams(t *testing.T) {
	d, err := parse(t, good)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ params, field string }{
		{`{}`, "params"},
		{`{"day": "d", "n": 11}`, "params.n"},
		{`{"day": "d", "x": 1}`, "params"},
		{`{"day": 5}`, "params.day"},
		{`{"day": "a\nHost: evil"}`, "params.day"},
		{`{"day": "${secret:PARTNER_TOKEN}"}`, "params.day"},
	} {
		_, err := d.Expand(call(c.params), limits.DefaultPolicy())
		var fe *tasks.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: got %v, want an error on %s", c.params, err, c.field)
		}
	}
}

// TestParamsErrorListsEveryViolation: params that violate the schema get
// one error listing every violation, each naming its field, a missing
// required property first, bounded at actions.MaxParamsViolations; the
// worker's check (Definition.CheckParams) and the enqueuer's (Info.CheckParams)
// say the same.
func TestParamsErrorListsEveryViolation(t *testing.T) {
	d, err := parse(t, good)
	if err != nil {
		t.Fatal(err)
	}
	// extras are n properties the schema does not allow: a00, a01...
	extras := func(n int) string {
		props := make([]string, n)
		for i := range props {
			props[i] = fmt.Sprintf(`"a%02d": 0`, i)
		}
		return "{" + strings.Join(props, ", ") + "}"
	}
	// notAllowed lists the first n of them as the error does.
	notAllowed := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "; params: additional property a%02d is not allowed", i)
		}
		return b.String()
	}
	for _, c := range []struct{ name, params, field, err string }{
		{"one", `{"day": "d", "n": 11}`, "params.n", "params.n: must be less than or equal to 10"},
		{"missing", `{}`, "params", "params: day is required"},
		{"missing first", `{"date": "2026-12-05"}`, "params",
			"params: day is required; params: additional property date is not allowed"},
		{"by path", `{"day": 5, "n": 11, "x": 1}`, "params",
			"params: additional property x is not allowed; params.day: invalid type. Expected: string, given: integer; params.n: must be less than or equal to 10"},
		{"bounded", extras(12), "params",
			"params: day is required" + notAllowed(actions.MaxParamsViolations-1) + "; and 3 more"},
		{"bounded by the validator too", extras(30), "params",
			"params: day is required" + notAllowed(actions.MaxParamsViolations-1) + "; and at least 10 more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, worker := d.CheckParams(json.RawMessage(c.params))
			enqueuer := d.Info.CheckParams(json.RawMessage(c.params))
			for _, err := range []error{worker, enqueuer} {
				var fe *tasks.FieldError
				if !errors.As(err, &fe) || fe.Field != c.field || err.Error() != c.err {
					t.Errorf("%s:\n got %v\nwant %s (field %s)", c.params, err, c.err, c.field)
				}
			}
		})
	}
}

// TestParseRefuses: what only the caller gives, params outside the inputs,
// params not required, a host chosen by a param, limits above the
// worker's: refused at load, naming the field.
func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ def, field string }{
		{"spec: {queue: q, steps: [{run: ['true']}]}", "spec.queue"},
		{"spec: {action: x, steps: [{run: ['true']}]}", "spec.action"},
		{"spec: {principal: x, steps: [{run: ['true']}]}", "spec.principal"},
		{"spec: {run_id: x, steps: [{run: ['true']}]}", "spec.run_id"},
		{"params: {type: object, properties: {a: {type: string}}, required: [a]}\nspec: {steps: [{run: [echo, '${param:a}']}]}", "spec.steps[0].run[1]"},
		{"params: {type: object, properties: {a: {type: string}}, required: [a]}\nspec: {steps: [{run: ['true'], env: {A: '${param:a}'}}]}", `spec.steps[0].env["A"]`},
		{"params: {type: object, properties: {a: {type: string}}, required: [a]}\nspec: {files: {x: '${param:a}'}, steps: [{run: ['true']}]}", `spec.files["x"]`},
		{"params: {type: object, properties: {a: {type: string}}}\nspec: {inputs: [{url: 'https://h/${param:a}', path: x}], steps: [{run: ['true']}]}", "spec.inputs[0].url"},
		{"params: {type: object, properties: {a: {type: string}}, required: [a]}\nspec: {inputs: [{url: 'https://${param:a}/x', path: x}], steps: [{run: ['true']}]}", "spec.inputs[0].url"},
		{"spec: {files: {in/params.json: x}, steps: [{run: ['true']}]}", "spec.files"},
		{"spec: {steps: [{run: ['true']}], limits: {memory: 100GiB}}", "spec.limits.memory"},
		{"params: {type: array}\nspec: {steps: [{run: ['true']}]}", "params"},
		{"description: x", "spec"},
		{"spec: {steps: []}", "spec.steps"},
	} {
		_, err := parse(t, c.def)
		var ae *actions.Error
		if !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("%s:\n  got %v, want an error on %s", c.def, err, c.field)
		}
	}
	for _, bad := range []string{"spec: {steps: [{run: ['true']}]}\nspec: {}", "nope: 1\nspec: {steps: [{run: ['true']}]}", "- a"} {
		if _, err := parse(t, bad); err == nil {
			t.Errorf("%q: loaded", bad)
		}
	}
}

// TestLoadDir loads the example's catalog, refuses a directory with a bad
// file, and names the file.
func TestLoadDir(t *testing.T) {
	c, err := actions.LoadDir("../examples/csv-report/actions", limits.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); len(got) != 1 || got[0] != csvreport.Name {
		t.Fatalf("names %v", got)
	}
	info := c.Infos()[0]
	if info.Timeout == 0 || info.MaxRetry != tasks.DefaultMaxRetry || !strings.Contains(info.Description, "refund rate") {
		t.Errorf("info %+v", info)
	}
	if err := info.CheckParams(json.RawMessage(`{"day": "yesterday"}`)); err == nil {
		t.Error("a day that does not match the pattern passed the published schema")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.json"), []byte(`{"spec": {"steps": [{"run": ["true"]}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := actions.LoadDir(dir, limits.DefaultPolicy()); err != nil || c.Len() != 1 {
		t.Fatalf("json definition: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("spec: {steps: [{run: ['true']}], network: maybe}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := actions.LoadDir(dir, limits.DefaultPolicy()); err == nil || !strings.Contains(err.Error(), "bad.yaml") {
		t.Errorf("bad file: %v", err)
	}
}

// TestExpandKeepsStructure: params that would form a secret reference in
// a header with the definition's text or another param, or make a path
// segment empty, "." or "..", are refused (the attacker review's two
// breaks); a "." inside a segment is data.
func TestExpandKeepsStructure(t *testing.T) {
	d, err := parse(t, `
params:
  type: object
  properties: {a: {type: string}, b: {type: string}, id: {type: string}}
  required: [a, b, id]
spec:
  secrets: [TOKEN]
  inputs:
    - url: "https://partner.example/v1/users/${param:id}/delete?x=${param:a}"
      path: in/x
      headers: {Authorization: "Bearer ${secret:TOKEN}", X-Two: "${param:a}${param:b}", X-Lit: "$${param:b}"}
  steps: [{run: ['true']}]
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ params, field string }{
		{`{"a": "$", "b": "{secret:TOKEN}", "id": "1"}`, "params"},
		{`{"a": "x", "b": "{secret:TOKEN}", "id": "1"}`, "params"},
		{`{"a": "x", "b": "y", "id": ".."}`, "params.id"},
		{`{"a": "x", "b": "y", "id": "."}`, "params.id"},
		{`{"a": "x", "b": "y", "id": ""}`, "params.id"},
	} {
		_, err := d.Expand(call(c.params), limits.DefaultPolicy())
		var fe *tasks.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: got %v, want an error on %s", c.params, err, c.field)
		}
	}
	s, err := d.Expand(call(`{"a": "a.b", "b": "c", "id": "..x"}`), limits.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Inputs[0].URL; got != "https://partner.example/v1/users/..x/delete?x=a.b" {
		t.Errorf("url %q", got)
	}
	if got := s.Inputs[0].Headers["X-Two"]; got != "a.bc" {
		t.Errorf("X-Two %q", got)
	}
}
