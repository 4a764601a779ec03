package tasks_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
	"github.com/xeipuuv/gojsonschema"
)

// specSchema compiles tasks.SpecSchema with gojsonschema (draft-07).
func specSchema(t *testing.T) *gojsonschema.Schema {
	t.Helper()
	sl := gojsonschema.NewSchemaLoader()
	sl.Draft = gojsonschema.Draft7
	sl.Validate = true // the schema itself against the draft-07 meta-schema
	s, err := sl.Compile(gojsonschema.NewBytesLoader(tasks.SpecSchema))
	if err != nil {
		t.Fatalf("tasks.SpecSchema does not compile: %v", err)
	}
	return s
}

// schemaPolicy is the operator's policy the decoder is compared under: the
// defaults, with network allowed (whether it is, is the operator's call).
func schemaPolicy() limits.Policy {
	p := limits.DefaultPolicy()
	p.AllowNetwork = true
	return p
}

// decoderAccepts is what "the decoder accepts" means here: tasks.Decode
// (types, unknown fields) and Spec.Prepare (values) both pass.
func decoderAccepts(doc string) error {
	s, err := tasks.Decode([]byte(doc))
	if err != nil {
		return err
	}
	return s.Prepare(schemaPolicy())
}

func schemaAccepts(t *testing.T, s *gojsonschema.Schema, doc string) (bool, string) {
	t.Helper()
	res, err := s.Validate(gojsonschema.NewStringLoader(doc))
	if err != nil {
		return false, err.Error()
	}
	var msgs []string
	for _, e := range res.Errors() {
		msgs = append(msgs, e.String())
	}
	return res.Valid(), strings.Join(msgs, "; ")
}

// base is a minimal valid spec; cases patch it.
const base = `{"version": 1, "steps": [{"run": ["true"]}]}`

// with returns base with the top-level fields of patch (a JSON object)
// added or replaced.
func with(t *testing.T, patch string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	var p map[string]json.RawMessage
	if err := json.Unmarshal([]byte(patch), &p); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	for k, v := range p {
		if string(v) == `"<delete>"` {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSpecSchemaAgreesWithDecoder checks that the schema accepts a spec
// iff the decoder (Decode + Prepare) does: every example spec in the repo
// and a table of valid and invalid specs.
func TestSpecSchemaAgreesWithDecoder(t *testing.T) {
	s := specSchema(t)
	var docs []struct{ name, doc string }
	for _, glob := range []string{"../examples/*.json", "../examples/*/*.json"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs = append(docs, struct{ name, doc string }{f, string(b)})
		}
	}
	if len(docs) < 2 {
		t.Fatalf("found %d example specs, want hello.json and csv-report/spec.json at least", len(docs))
	}
	valid := []string{
		`{"run_id": "report-2026-12-02", "idempotency_key": "agent-42/tool-call-7", "queue": "default", "timeout": "60s", "max_retry": 3}`,
		`{"max_retry": 0}`, `{"max_retry": 25}`,
		`{"steps": "<delete>", "action": "csv.transform", "params": {"day": "2026-12-05", "n": 3}, "queue": "q", "run_id": "r1", "idempotency_key": "k"}`,
		`{"steps": "<delete>", "action": "csv.transform"}`,
		`{"steps": "<delete>", "action": "csv.transform", "params": {}, "principal": "alice@example.com"}`,
		`{"principal": "backend-1"}`,
		`{"timeout": "1m30s"}`, `{"timeout": "1.5s"}`, `{"timeout": "0"}`,
		`{"files": {"in/sales.csv": "a,b\n1,2\n", "sum.sh": "echo", ".hidden/..x/...": ""}}`,
		`{"files": {"bin/x": {"base64": "AAEC/w=="}}}`,
		`{"files": {"bin/x": {"base64": ""}}}`,
		`{"files": {"run.sh": {"text": "echo hi\n", "mode": "0755"}, "bin/x": {"base64": "AAEC/w==", "mode": "700"}}}`,
		`{"files": {"a": {"text": ""}, "b": {"text": "x", "mode": "0000"}, "c": {"base64": "", "mode": "0644"}}}`,
		`{"inputs": [{"url": "https://example.com/x.csv?a=b", "path": "in/x.csv", "max_bytes": "16MiB", "sha256": "` + strings.Repeat("ab", 32) + `", "headers": {"Authorization": "Bearer ${secret:TOKEN}"}}], "secrets": ["TOKEN"]}`,
		`{"inputs": [{"url": "HTTP://example.com", "path": "in/x", "max_bytes": 1024}]}`,
		`{"steps": [{"name": "a", "run": ["sh", "-c", "echo hi", ""], "stdin": "x", "timeout": "10s", "env": {"LC_ALL": "C", "_X1": ""}}, {"name": "b.c-d_e", "run": ["cat"]}]}`,
		`{"limits": {"cpu_time": "5s", "memory": "256MiB", "processes": 32, "file_size": "16MiB", "open_files": 128, "output": "64KiB", "workspace": "32MiB"}}`,
		`{"limits": {"memory": 1048576, "output": " 64 KiB "}}`,
		`{"limits": {}}`,
		`{"network": true}`, `{"network": false}`,
		`{"output": {"result": "out/result.json", "schema": {"type": "object", "required": ["total"]}, "artifacts": ["out/*.csv", "out/[a-z]?.txt"]}}`,
		`{"output": {"result": "out/r.json", "schema": true}}`,
		`{"output": {"artifacts": ["out/a.csv"]}}`,
		`{"output": {}}`,
		`{"approval": "auto"}`, `{"approval": "always"}`,
		`{"secrets": ["A", "B_2"]}`,
	}
	invalid := []string{
		`{"version": 2}`, `{"version": "1"}`, `{"version": "<delete>"}`,
		`{"steps": "<delete>"}`, `{"steps": []}`, `{"steps": {}}`,
		`{"steps": [` + strings.Repeat(`{"run": ["true"]},`, 64) + `{"run": ["true"]}]}`,
		`{"unknown": 1}`, `{"Version": 1}`,
		`{"run_id": "has space"}`, `{"run_id": "-lead"}`, `{"run_id": "` + strings.Repeat("a", 129) + `"}`, `{"run_id": 7}`,
		`{"idempotency_key": "` + strings.Repeat("k", 257) + `"}`, `{"idempotency_key": "a\u0000b"}`,
		`{"queue": "a.b"}`, `{"queue": "` + strings.Repeat("q", 65) + `"}`,
		`{"action": "a b"}`,
		`{"action": "csv.transform"}`,
		`{"steps": "<delete>", "action": "csv.transform", "timeout": "1s"}`,
		`{"steps": "<delete>", "action": "csv.transform", "network": true}`,
		`{"steps": "<delete>", "action": "csv.transform", "secrets": ["A"]}`,
		`{"steps": "<delete>", "action": "csv.transform", "params": [1]}`,
		`{"steps": "<delete>", "action": "csv.transform", "params": "x"}`,
		`{"steps": "<delete>", "params": {}}`,
		`{"principal": "has space"}`,
		`{"timeout": "soon"}`, `{"timeout": "-1s"}`, `{"timeout": 30}`,
		`{"max_retry": -1}`, `{"max_retry": 26}`, `{"max_retry": "3"}`,
		`{"files": {"/etc/passwd": "x"}}`, `{"files": {"a/../b": "x"}}`, `{"files": {"..": "x"}}`,
		`{"files": {"a//b": "x"}}`, `{"files": {"./a": "x"}}`, `{"files": {"a/": "x"}}`, `{"files": {".": "x"}}`,
		`{"files": {"a": 1}}`, `{"files": {"a": {"base64": "!!"}}}`, `{"files": {"a": {"hex": "00"}}}`,
		`{"files": {"a": {"base64": "AA==", "x": 1}}}`,
		`{"files": {"a": {"text": "x", "mode": 755}}}`, `{"files": {"a": {"text": "x", "mode": "4755"}}}`,
		`{"files": {"a": {"text": "x", "mode": "0o755"}}}`, `{"files": {"a": {"text": "x", "mode": "rwx"}}}`,
		`{"files": {"a": {"text": "x", "mode": "01777"}}}`, `{"files": {"a": {"text": "x", "base64": "AA=="}}}`,
		`{"files": {"a": {"mode": "0755"}}}`, `{"files": {"a": {"text": 1}}}`, `{"files": {"a": {"Text": "x"}}}`,
		`{"files": {"a": {"text": "${secret:X}", "mode": "0755"}}, "secrets": ["X"]}`,
		`{"files": {"a": "${secret:X}"}, "secrets": ["X"]}`,
		`{"files": {"` + strings.Repeat("c", 256) + `": "x"}}`,
		`{"files": []}`,
		`{"inputs": [{"url": "ftp://example.com/x", "path": "in/x"}]}`,
		`{"inputs": [{"url": "https://", "path": "in/x"}]}`,
		`{"inputs": [{"path": "in/x"}]}`, `{"inputs": [{"url": "https://e.com/"}]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "/in/x"}]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "in/x", "sha256": "ABC"}]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "in/x", "max_bytes": "lots"}]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "in/x", "max_bytes": -1}]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "in/x", "headers": {"Bad Header": "x"}}]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "in/x", "headers": {"X": "a\r\nb"}}]}`,
		`{"inputs": [{"url": "https://e.com/${secret:X}", "path": "in/x"}], "secrets": ["X"]}`,
		`{"inputs": [{"url": "https://e.com/", "path": "in/x", "extra": 1}]}`,
		`{"secrets": ["lower"]}`, `{"secrets": ["A", "A"]}`, `{"secrets": "A"}`,
		`{"steps": [{"run": []}]}`, `{"steps": [{"name": "x"}]}`, `{"steps": [{"run": "true"}]}`,
		`{"steps": [{"run": ["a\u0000"]}]}`, `{"steps": [{"run": ["echo", "${secret:X}"]}], "secrets": ["X"]}`,
		`{"steps": [{"name": "bad name", "run": ["true"]}]}`,
		`{"steps": [{"run": ["true"], "stdin": "${secret:X}"}], "secrets": ["X"]}`,
		`{"steps": [{"run": ["true"], "env": {"HOME": "/"}}]}`, `{"steps": [{"run": ["true"], "env": {"1X": "a"}}]}`,
		`{"steps": [{"run": ["true"], "env": {"X": 1}}]}`, `{"steps": [{"run": ["true"], "env": {"X": "a\u0000"}}]}`,
		`{"steps": [{"run": ["true"], "timeout": "1 s"}]}`, `{"steps": [{"run": ["true"], "cwd": "../x"}]}`,
		`{"limits": {"memory": "lots"}}`, `{"limits": {"memory": -1}}`,
		`{"limits": {"processes": -1}}`, `{"limits": {"processes": "8"}}`,
		`{"limits": {"cpu_time": 5}}`, `{"limits": {"memroy": "1MiB"}}`,
		`{"network": "yes"}`,
		`{"output": {"result": "/abs"}}`, `{"output": {"schema": {"type": "object"}}}`,
		`{"output": {"result": "r.json", "schema": 5}}`, `{"output": {"result": "r.json", "schema": "x"}}`,
		`{"output": {"artifacts": ["out/**/*.csv"]}}`, `{"output": {"artifacts": ["../x"]}}`, `{"output": {"extra": 1}}`,
		`{"approval": "never"}`,
	}
	for _, v := range valid {
		docs = append(docs, struct{ name, doc string }{"valid " + v, with(t, v)})
	}
	for _, v := range invalid {
		docs = append(docs, struct{ name, doc string }{"invalid " + v, with(t, v)})
	}
	for _, d := range docs {
		derr := decoderAccepts(d.doc)
		ok, why := schemaAccepts(t, s, d.doc)
		if ok != (derr == nil) {
			t.Errorf("%s:\n  decoder: %v\n  schema accepts: %v (%s)\n  doc: %s", d.name, derr, ok, why, d.doc)
		}
		switch {
		case strings.HasPrefix(d.name, "valid ") && derr != nil:
			t.Errorf("%s: valid case rejected by the decoder: %v", d.name, derr)
		case strings.HasPrefix(d.name, "invalid ") && derr == nil:
			t.Errorf("%s: invalid case accepted by the decoder", d.name)
		}
	}
}

// TestSpecSchemaKnownDifferences pins down where the schema and the
// decoder disagree, by design: the schema is stricter where the decoder
// reads null or "" as "absent" (write nothing instead), and looser where a
// check depends on other fields or on the operator's policy, which a
// schema cannot express. If one of these starts to agree, move it to
// TestSpecSchemaAgreesWithDecoder.
func TestSpecSchemaKnownDifferences(t *testing.T) {
	s := specSchema(t)
	stricter := []string{ // schema rejects, decoder accepts
		`{"run_id": null}`, `{"run_id": ""}`, `{"queue": ""}`, `{"action": ""}`, `{"approval": ""}`,
		`{"limits": null}`, `{"output": {"result": ""}}`, `{"steps": [{"name": "", "run": ["true"]}]}`,
	}
	looser := []string{ // schema accepts, the decoder's cross-field or policy checks reject
		`{"steps": [{"name": "a", "run": ["true"]}, {"name": "a", "run": ["true"]}]}`,
		`{"steps": [{"run": ["true"], "env": {"T": "${secret:T}"}}]}`,
		`{"steps": [{"run": ["true"], "timeout": "2m"}], "timeout": "1m"}`,
		`{"steps": [{"run": [""]}]}`,
		`{"files": {"in/x": "a"}, "inputs": [{"url": "https://e.com/", "path": "in/x"}]}`,
		`{"output": {"result": "r.json", "schema": {"type": 5}}}`,
		`{"output": {"artifacts": ["out/[a"]}}`,
		// the worker's maximums (these are the defaults'; an operator sets its own)
		`{"limits": {"workspace": "2GiB"}}`, `{"limits": {"memory": "8GiB"}}`, `{"limits": {"processes": 2000}}`,
		`{"timeout": "31m"}`, `{"inputs": [{"url": "https://e.com/", "path": "in/x", "max_bytes": "512MiB"}]}`,
	}
	for _, v := range stricter {
		doc := with(t, v)
		if ok, _ := schemaAccepts(t, s, doc); ok {
			t.Errorf("schema accepts %s, listed as stricter", doc)
		}
		if err := decoderAccepts(doc); err != nil {
			t.Errorf("decoder rejects %s (%v), listed as accepted", doc, err)
		}
	}
	for _, v := range looser {
		doc := with(t, v)
		if ok, why := schemaAccepts(t, s, doc); !ok {
			t.Errorf("schema rejects %s (%s), listed as looser", doc, why)
		}
		if err := decoderAccepts(doc); err == nil {
			t.Errorf("decoder accepts %s, listed as rejected", doc)
		}
	}
}

// TestSpecSchemaCoversSpecFields checks that the properties of every object
// in the schema are exactly the JSON fields of the matching struct of
// tasks.Spec, recursively, so the schema cannot drift from the struct.
func TestSpecSchemaCoversSpecFields(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(tasks.SpecSchema, &root); err != nil {
		t.Fatal(err)
	}
	resolve := func(node map[string]any) map[string]any {
		for {
			ref, ok := node["$ref"].(string)
			if !ok {
				return node
			}
			name, ok := strings.CutPrefix(ref, "#/definitions/")
			if !ok {
				t.Fatalf("unexpected $ref %q", ref)
			}
			node, _ = root["definitions"].(map[string]any)[name].(map[string]any)
			if node == nil {
				t.Fatalf("$ref %q resolves to nothing", ref)
			}
		}
	}
	unmarshaler := reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	rawMessage := reflect.TypeOf(json.RawMessage{})
	structs := 0
	var check func(where string, typ reflect.Type, node map[string]any)
	check = func(where string, typ reflect.Type, node map[string]any) {
		node = resolve(node)
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ == rawMessage || reflect.PointerTo(typ).Implements(unmarshaler) {
			return // a leaf with its own decoding: File, Bytes, Duration, output.schema
		}
		switch typ.Kind() {
		case reflect.Struct:
			structs++
			props, _ := node["properties"].(map[string]any)
			if props == nil {
				t.Errorf("%s (%s): the schema has no properties", where, typ)
				return
			}
			if node["additionalProperties"] != false {
				t.Errorf("%s (%s): additionalProperties is not false, but the decoder rejects unknown fields", where, typ)
			}
			var fields, inSchema []string
			for i := 0; i < typ.NumField(); i++ {
				f := typ.Field(i)
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "" || name == "-" {
					continue
				}
				fields = append(fields, name)
				p, ok := props[name].(map[string]any)
				if !ok {
					continue
				}
				if p["description"] == nil && resolve(p)["description"] == nil {
					t.Errorf("%s.%s has no description", where, name)
				}
				check(where+"."+name, f.Type, p)
			}
			for k := range props {
				inSchema = append(inSchema, k)
			}
			sort.Strings(fields)
			sort.Strings(inSchema)
			if !reflect.DeepEqual(fields, inSchema) {
				t.Errorf("%s (%s): struct fields %v, schema properties %v", where, typ, fields, inSchema)
			}
		case reflect.Slice:
			items, _ := node["items"].(map[string]any)
			if items == nil {
				t.Errorf("%s: the schema has no items", where)
				return
			}
			check(where+"[]", typ.Elem(), items)
		case reflect.Map:
			ap, _ := node["additionalProperties"].(map[string]any)
			if ap == nil {
				t.Errorf("%s: the schema has no additionalProperties schema for the map's values", where)
				return
			}
			check(where+"{}", typ.Elem(), ap)
		}
	}
	check("spec", reflect.TypeOf(tasks.Spec{}), root)
	if structs != 6 { // Spec, Input, Step, limits.Set, Output, Session
		t.Errorf("checked %d structs, want 6: Spec, Input, Step, limits.Set, Output and Session", structs)
	}
	if req, _ := root["required"].([]any); len(req) != 1 || req[0] != "version" {
		t.Errorf("required = %v, want version (steps: in else, for a spec without action)", req)
	}
	if els, _ := root["else"].(map[string]any); fmt.Sprint(els["anyOf"]) != "[map[required:[session]] map[properties:map[steps:map[minItems:1]] required:[steps]]]" {
		t.Errorf("else = %v, want a session, or steps (at least one), of a spec without action", root["else"])
	}
}
