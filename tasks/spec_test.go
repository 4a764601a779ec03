package tasks_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// fieldErr asserts that err is a spec validation error and returns it.
func fieldErr(t *testing.T, err error) *tasks.FieldError {
	t.Helper()
	if err == nil {
		t.Fatal("got no error, want a *tasks.FieldError")
	}
	if !errors.Is(err, tasks.ErrInvalidSpec) {
		t.Errorf("errors.Is(%v, ErrInvalidSpec) = false, want true", err)
	}
	if !tasks.IsInvalid(err) {
		t.Errorf("IsInvalid(%v) = false, want true", err)
	}
	var fe *tasks.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *tasks.FieldError", err, err)
	}
	if fe.Msg == "" {
		t.Errorf("error for %q has an empty Msg", fe.Field)
	}
	if !strings.HasPrefix(err.Error(), fe.Field+": ") {
		t.Errorf("Error() = %q, want it to start with the field %q", err.Error(), fe.Field)
	}
	return fe
}

func ptr[T any](v T) *T { return &v }

// testPolicy differs from limits.DefaultPolicy in every default, so that a
// test can tell a value taken from the policy from a hard-coded one.
func testPolicy() limits.Policy {
	p := limits.DefaultPolicy()
	p.Default = limits.Set{
		CPUTime:     limits.Duration(7 * time.Second),
		Memory:      100 << 20,
		Processes:   17,
		FileSize:    3 << 20,
		OpenFiles:   99,
		Output:      5 << 10,
		Workspace:   11 << 20,
		OutputTotal: 13 << 20,
	}
	p.DefaultTimeout = limits.Duration(42 * time.Second)
	p.MaxTimeout = limits.Duration(5 * time.Minute)
	return p
}

// minimal returns the smallest valid spec.
func minimal() *tasks.Spec {
	return &tasks.Spec{Version: 1, Steps: []tasks.Step{{Run: []string{"true"}}}}
}

// clone deep-copies a spec through JSON.
func clone(t *testing.T, s *tasks.Spec) *tasks.Spec {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var c tasks.Spec
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestPolicyFixturesAreValid(t *testing.T) {
	for name, p := range map[string]limits.Policy{"DefaultPolicy": limits.DefaultPolicy(), "testPolicy": testPolicy()} {
		if err := p.Check(); err != nil {
			t.Errorf("%s.Check() = %v, want nil", name, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantField string
		wantMsg   string // substring of Msg; empty: not checked
		wantHint  string // substring of Hint; empty: not checked
	}{
		// Unknown fields, at every depth.
		{"unknown top-level", `{"version":1,"verison":1}`, "verison", "unknown field", "version"},
		{"wrong case is unknown", `{"Version":1}`, "Version", "unknown field", "version"},
		{"unknown in second step", `{"version":1,"steps":[{"run":["a"]},{"run":["b"],"tiemout":"1s"}]}`, "steps[1].tiemout", "unknown field", "timeout"},
		{"unknown in output", `{"version":1,"output":{"result":"r.json","artifact":["x"]}}`, "output.artifact", "unknown field", "artifacts"},
		{"unknown in limits", `{"version":1,"limits":{"memroy":"1MiB"}}`, "limits.memroy", "unknown field", "memory"},

		// Wrong types.
		{"timeout is a number", `{"version":1,"timeout":5}`, "timeout", "duration", ""},
		{"timeout is not a duration", `{"version":1,"timeout":"soon"}`, "timeout", `"soon"`, ""},
		{"timeout negative", `{"version":1,"timeout":"-1s"}`, "timeout", "negative", ""},
		{"steps is an object", `{"version":1,"steps":{}}`, "steps", "array", ""},
		{"limits.memory is a bool", `{"version":1,"limits":{"memory":true}}`, "limits.memory", "", ""},
		{"limits.memory negative", `{"version":1,"limits":{"memory":-1}}`, "limits.memory", "negative", ""},
		{"limits.memory bad unit", `{"version":1,"limits":{"memory":"64 potatoes"}}`, "limits.memory", "", ""},
		{"limits.cpu_time is a number", `{"version":1,"limits":{"cpu_time":10}}`, "limits.cpu_time", "", ""},
		{"limits.processes is a string", `{"version":1,"limits":{"processes":"64"}}`, "limits.processes", "integer", ""},
		{"limits is an array", `{"version":1,"limits":[]}`, "limits", "object", ""},
		{"version is a string", `{"version":"1"}`, "version", "integer", ""},
		{"version is a float", `{"version":1.5}`, "version", "", ""},
		{"max_retry is a string", `{"version":1,"max_retry":"3"}`, "max_retry", "integer", ""},
		{"network is a string", `{"version":1,"network":"yes"}`, "network", "true or false", ""},
		{"files is an array", `{"version":1,"files":[]}`, "files", "object", ""},
		{"file content is a number", `{"version":1,"files":{"a.txt":1}}`, `files["a.txt"]`, "string", ""},
		{"run is a string", `{"version":1,"steps":[{"run":"sh"}]}`, "steps[0].run", "array", ""},
		{"run arg is a number", `{"version":1,"steps":[{"run":["sh",1]}]}`, "steps[0].run[1]", "string", ""},
		{"step is a string", `{"version":1,"steps":["sh"]}`, "steps[0]", "object", ""},
		{"step timeout is a number", `{"version":1,"steps":[{"run":["a"]},{"run":["b"],"timeout":3}]}`, "steps[1].timeout", "", ""},
		{"env value is a number", `{"version":1,"steps":[{"run":["a"],"env":{"A":1}}]}`, `steps[0].env["A"]`, "string", ""},
		{"output is an array", `{"version":1,"output":[]}`, "output", "object", ""},
		{"artifacts is a string", `{"version":1,"output":{"artifacts":"out/*"}}`, "output.artifacts", "array", ""},

		// Not a single JSON object.
		{"empty input", ``, "spec", "", ""},
		{"blank input", " \n\t", "spec", "", ""},
		{"array", `[]`, "spec", "object", ""},
		{"string", `"spec"`, "spec", "object", ""},
		// Syntax errors say where, as an editor counts (characters).
		{"syntax error", `{"version":1,}`, "spec", "line 1, column 14: invalid character '}'", ""},
		{"syntax error on line 3", "{\n  \"version\": 1,\n  \"steps\": [{\"run\": [\"true\"]},]\n}", "spec", "line 3, column 31: invalid character ']'", ""},
		{"columns in characters", "{\"é\": \"ü\" x}", "spec", "line 1, column 11: invalid character 'x'", ""},
		{"truncated", "{\"version\":1,\n\"steps\": [", "spec", "line 2, column 11: unexpected end", "not closed"},
		{"trailing object", `{"version":1} {"version":1}`, "spec", "line 1, column 15: trailing data", ""},
		{"trailing brace", `{"version":1}}`, "spec", "line 1, column 14: trailing data", ""},
		{"trailing bracket", `{"version":1}]`, "spec", "trailing data", ""},
		{"trailing word", "{\"version\":1}\nx", "spec", "line 2, column 1: trailing data", ""},
		{"trailing number", `{"version":1} 1`, "spec", "trailing data", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := tasks.Decode([]byte(tt.in))
			if s != nil {
				t.Errorf("Decode returned a spec with error %v", err)
			}
			fe := fieldErr(t, err)
			if diff := cmp.Diff(tt.wantField, fe.Field); diff != "" {
				t.Errorf("Field mismatch (-want +got):\n%s\n(error: %v)", diff, err)
			}
			if !strings.Contains(fe.Msg, tt.wantMsg) {
				t.Errorf("Msg = %q, want it to contain %q", fe.Msg, tt.wantMsg)
			}
			if !strings.Contains(fe.Hint, tt.wantHint) {
				t.Errorf("Hint = %q, want it to contain %q", fe.Hint, tt.wantHint)
			}
		})
	}
}

// The hint of an unknown field lists exactly the JSON names of the struct.
func TestDecodeUnknownFieldHintListsKnownFields(t *testing.T) {
	jsonNames := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			if name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); name != "-" {
				out = append(out, name)
			}
		}
		return out
	}
	tests := []struct {
		in   string
		want []string
	}{
		{`{"nope":1}`, jsonNames(tasks.Spec{})},
		{`{"steps":[{"nope":1}]}`, jsonNames(tasks.Step{})},
		{`{"output":{"nope":1}}`, jsonNames(tasks.Output{})},
		{`{"limits":{"nope":1}}`, jsonNames(limits.Set{})},
	}
	for _, tt := range tests {
		_, err := tasks.Decode([]byte(tt.in))
		fe := fieldErr(t, err)
		got, ok := strings.CutPrefix(fe.Hint, "known fields: ")
		if !ok {
			t.Errorf("%s: Hint = %q, want a list of known fields", tt.in, fe.Hint)
			continue
		}
		if diff := cmp.Diff(tt.want, strings.Split(got, ", ")); diff != "" {
			t.Errorf("%s: known fields mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

// null means "absent" for every field, as in encoding/json.
func TestDecodeNull(t *testing.T) {
	tests := []struct {
		in   string
		want *tasks.Spec
	}{
		{`{"version":1,"timeout":null,"max_retry":null,"files":null,"output":null,"limits":null}`, &tasks.Spec{Version: 1}},
		{`{"version":1,"limits":{"cpu_time":null,"memory":null,"processes":null}}`, &tasks.Spec{Version: 1}},
		{`{"version":1,"steps":[{"run":["a"],"timeout":null,"env":null}]}`, &tasks.Spec{Version: 1, Steps: []tasks.Step{{Run: []string{"a"}}}}},
	}
	for _, tt := range tests {
		got, err := tasks.Decode([]byte(tt.in))
		if err != nil {
			t.Errorf("Decode(%s) = %v, want nil", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Decode(%s) mismatch (-want +got):\n%s", tt.in, diff)
		}
	}
}

const fullSpec = `{
	"version": 1,
	"run_id": "run-42",
	"idempotency_key": "order-7",
	"queue": "reports",
	"timeout": "2m",
	"max_retry": 0,
	"files": {"main.py": "print(1)\n", "data/in.csv": "a,b\n1,2\n"},
	"steps": [
		{"name": "prep", "run": ["python3", "main.py"], "stdin": "hello", "timeout": "30s", "env": {"MODE": "fast", "_X1": ""}},
		{"run": ["sh", "-c", "ls out"]}
	],
	"limits": {"cpu_time": "10s", "memory": "256MiB", "processes": 32, "file_size": 1048576, "open_files": 128, "output": "64KiB", "workspace": "1GB", "output_total": "32MiB"},
	"network": true,
	"output": {"result": "out/result.json", "schema": {"type": "object"}, "artifacts": ["out/*.csv", "report.pdf"]},
	"approval": "always",
	"max_record_bytes": "64KiB"
}`

func fullSpecWant() *tasks.Spec {
	return &tasks.Spec{
		Version:        1,
		RunID:          "run-42",
		IdempotencyKey: "order-7",
		Queue:          "reports",
		Timeout:        limits.Duration(2 * time.Minute),
		MaxRetry:       ptr(0),
		Files:          map[string]tasks.File{"main.py": "print(1)\n", "data/in.csv": "a,b\n1,2\n"},
		Steps: []tasks.Step{
			{Name: "prep", Run: []string{"python3", "main.py"}, Stdin: "hello", Timeout: limits.Duration(30 * time.Second), Env: map[string]string{"MODE": "fast", "_X1": ""}},
			{Run: []string{"sh", "-c", "ls out"}},
		},
		Limits: limits.Set{
			CPUTime: limits.Duration(10 * time.Second), Memory: 256 << 20, Processes: 32,
			FileSize: 1 << 20, OpenFiles: 128, Output: 64 << 10, Workspace: 1e9,
			OutputTotal: 32 << 20,
		},
		Network:        true,
		Output:         &tasks.Output{Result: "out/result.json", Schema: json.RawMessage(`{"type": "object"}`), Artifacts: []string{"out/*.csv", "report.pdf"}},
		Approval:       tasks.ApprovalAlways,
		MaxRecordBytes: 64 << 10,
	}
}

func TestDecodeFullRoundTrip(t *testing.T) {
	got, err := tasks.Decode([]byte(fullSpec))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := cmp.Diff(fullSpecWant(), got); diff != "" {
		t.Fatalf("Decode mismatch (-want +got):\n%s", diff)
	}

	b, err := got.Encode(0)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	again, err := tasks.Decode(b)
	if err != nil {
		t.Fatalf("Decode(Encode(spec)): %v\n%s", err, b)
	}
	// Encoding compacts the raw schema; compare it as JSON.
	if diff := cmp.Diff(got, again, cmp.Comparer(jsonEqual)); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}

	p := limits.DefaultPolicy()
	p.AllowNetwork = true
	if err := again.Prepare(p); err != nil {
		t.Fatalf("Prepare(full spec): %v", err)
	}
	want := fullSpecWant()
	want.Steps[1].Name = "step-2"
	if diff := cmp.Diff(want, again, cmp.Comparer(jsonEqual)); diff != "" {
		t.Errorf("Prepare changed given values (-want +got):\n%s", diff)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

func TestPrepareFillsDefaults(t *testing.T) {
	p := testPolicy()
	s := &tasks.Spec{Version: 1, Steps: []tasks.Step{
		{Run: []string{"a"}},
		{Name: "named", Run: []string{"b"}},
		{Run: []string{"c"}},
	}}
	if err := s.Prepare(p); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	id, err := uuid.Parse(s.RunID)
	if err != nil {
		t.Errorf("run_id %q is not a UUID: %v", s.RunID, err)
	} else if id.String() != s.RunID {
		t.Errorf("run_id %q is not in canonical UUID form %q", s.RunID, id)
	}
	want := &tasks.Spec{
		Version:  1,
		RunID:    s.RunID,
		Queue:    "default",
		Timeout:  p.DefaultTimeout,
		MaxRetry: ptr(tasks.DefaultMaxRetry),
		Steps: []tasks.Step{
			{Name: "step-1", Run: []string{"a"}},
			{Name: "named", Run: []string{"b"}},
			{Name: "step-3", Run: []string{"c"}},
		},
		Limits:         p.Default,
		MaxRecordBytes: limits.DefaultMaxRecordBytes,
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("Prepare mismatch (-want +got):\n%s", diff)
	}
	if tasks.DefaultMaxRetry != 3 {
		t.Errorf("DefaultMaxRetry = %d, want 3", tasks.DefaultMaxRetry)
	}
	if got, want := s.StepTimeout(0), time.Duration(p.DefaultTimeout); got != want {
		t.Errorf("StepTimeout(0) = %v, want the task timeout %v", got, want)
	}

	other := minimal()
	if err := other.Prepare(p); err != nil {
		t.Fatal(err)
	}
	if other.RunID == s.RunID {
		t.Errorf("two specs got the same run_id %q", s.RunID)
	}
}

func TestPrepareKeepsGivenValues(t *testing.T) {
	p := testPolicy()
	s := &tasks.Spec{
		Version:  1,
		RunID:    "a.b_c:d-1",
		Queue:    "Q_1-x",
		Timeout:  p.MaxTimeout,
		MaxRetry: ptr(0),
		Steps:    []tasks.Step{{Name: "x", Run: []string{"a"}, Timeout: p.MaxTimeout}},
		Limits:   limits.Set{Memory: p.Max.Memory, Processes: 1},
		Approval: tasks.ApprovalAuto,
		// At the worker's maximum: kept as given.
		MaxRecordBytes: limits.DefaultMaxRecordBytes,
	}
	want := clone(t, s)
	want.Limits = limits.Set{Memory: p.Max.Memory, Processes: 1}.Merge(p.Default)
	if err := s.Prepare(p); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	if diff := cmp.Diff(want, s); diff != "" {
		t.Errorf("Prepare mismatch (-want +got):\n%s", diff)
	}
	if got := s.StepTimeout(0); got != time.Duration(p.MaxTimeout) {
		t.Errorf("StepTimeout(0) = %v, want the step's own %v", got, time.Duration(p.MaxTimeout))
	}
}

func TestPrepareIdempotent(t *testing.T) {
	p := limits.DefaultPolicy()
	p.AllowNetwork = true
	for name, in := range map[string]string{
		"minimal": `{"version":1,"steps":[{"run":["true"]},{"run":["false"]}]}`,
		"full":    fullSpec,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := tasks.Decode([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Prepare(p); err != nil {
				t.Fatalf("first Prepare: %v", err)
			}
			first := clone(t, s)
			if err := s.Prepare(p); err != nil {
				t.Fatalf("second Prepare: %v", err)
			}
			if diff := cmp.Diff(first, s, cmp.Comparer(jsonEqual)); diff != "" {
				t.Errorf("second Prepare changed the spec (-want +got):\n%s", diff)
			}
			// A worker decodes what the enqueuer encoded and prepares again.
			b, err := s.Encode(0)
			if err != nil {
				t.Fatal(err)
			}
			w, err := tasks.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Prepare(p); err != nil {
				t.Fatalf("Prepare after round trip: %v", err)
			}
			if diff := cmp.Diff(first, w, cmp.Comparer(jsonEqual)); diff != "" {
				t.Errorf("Prepare after round trip changed the spec (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPrepareRejects(t *testing.T) {
	long := strings.Repeat("x", 256)
	tests := []struct {
		name      string
		mod       func(s *tasks.Spec, p limits.Policy)
		wantField string
	}{
		{"version missing", func(s *tasks.Spec, _ limits.Policy) { s.Version = 0 }, "version"},
		{"version 2", func(s *tasks.Spec, _ limits.Policy) { s.Version = 2 }, "version"},
		{"run_id with a space", func(s *tasks.Spec, _ limits.Policy) { s.RunID = "run 1" }, "run_id"},
		{"run_id with a slash", func(s *tasks.Spec, _ limits.Policy) { s.RunID = "a/b" }, "run_id"},
		{"run_id starting with a dot", func(s *tasks.Spec, _ limits.Policy) { s.RunID = ".a" }, "run_id"},
		{"run_id too long", func(s *tasks.Spec, _ limits.Policy) { s.RunID = strings.Repeat("a", 129) }, "run_id"},
		{"idempotency_key too long", func(s *tasks.Spec, _ limits.Policy) { s.IdempotencyKey = strings.Repeat("k", 257) }, "idempotency_key"},
		{"idempotency_key with NUL", func(s *tasks.Spec, _ limits.Policy) { s.IdempotencyKey = "a\x00" }, "idempotency_key"},
		{"queue with a slash", func(s *tasks.Spec, _ limits.Policy) { s.Queue = "a/b" }, "queue"},
		{"queue with a dot", func(s *tasks.Spec, _ limits.Policy) { s.Queue = "a.b" }, "queue"},
		{"queue too long", func(s *tasks.Spec, _ limits.Policy) { s.Queue = strings.Repeat("q", 65) }, "queue"},
		{"timeout above max", func(s *tasks.Spec, p limits.Policy) { s.Timeout = p.MaxTimeout + 1 }, "timeout"},
		{"max_retry negative", func(s *tasks.Spec, _ limits.Policy) { s.MaxRetry = ptr(-1) }, "max_retry"},
		{"max_retry above cap", func(s *tasks.Spec, _ limits.Policy) { s.MaxRetry = ptr(26) }, "max_retry"},
		{"max_record_bytes above the worker's", func(s *tasks.Spec, p limits.Policy) { s.MaxRecordBytes = p.RecordMax() + 1 }, "max_record_bytes"},
		{"step timeout above task timeout", func(s *tasks.Spec, _ limits.Policy) {
			s.Timeout = limits.Duration(time.Minute)
			s.Steps[0].Timeout = s.Timeout + 1
		}, "steps[0].timeout"},
		{"step timeout above default task timeout", func(s *tasks.Spec, p limits.Policy) {
			s.Steps = append(s.Steps, tasks.Step{Run: []string{"b"}, Timeout: p.DefaultTimeout + 1})
		}, "steps[1].timeout"},
		{"steps nil", func(s *tasks.Spec, _ limits.Policy) { s.Steps = nil }, "steps"},
		{"steps empty", func(s *tasks.Spec, _ limits.Policy) { s.Steps = []tasks.Step{} }, "steps"},
		{"too many steps", func(s *tasks.Spec, _ limits.Policy) {
			s.Steps = nil
			for i := 0; i < 65; i++ {
				s.Steps = append(s.Steps, tasks.Step{Run: []string{"a"}})
			}
		}, "steps"},
		{"run empty", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Run = nil }, "steps[0].run"},
		{"run empty program", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Run = []string{"", "x"} }, "steps[0].run"},
		{"run too many args", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Run = make([]string, 4097); s.Steps[0].Run[0] = "a" }, "steps[0].run"},
		{"NUL in an arg", func(s *tasks.Spec, _ limits.Policy) {
			s.Steps = append(s.Steps, tasks.Step{Run: []string{"echo", "ok", "a\x00b"}})
		}, "steps[1].run[2]"},
		{"NUL in the program", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Run = []string{"a\x00"} }, "steps[0].run[0]"},
		{"duplicate step names", func(s *tasks.Spec, _ limits.Policy) {
			s.Steps = []tasks.Step{{Name: "build", Run: []string{"a"}}, {Name: "test", Run: []string{"b"}}, {Name: "build", Run: []string{"c"}}}
		}, "steps[2].name"},
		{"given name clashes with a default name", func(s *tasks.Spec, _ limits.Policy) {
			s.Steps = []tasks.Step{{Run: []string{"a"}}, {Name: "step-1", Run: []string{"b"}}}
		}, "steps[1].name"},
		{"step name with a space", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Name = "my step" }, "steps[0].name"},
		{"step name too long", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Name = strings.Repeat("n", 65) }, "steps[0].name"},
		{"env name starts with a digit", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Env = map[string]string{"1A": "x"} }, `steps[0].env["1A"]`},
		{"env name with '='", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Env = map[string]string{"A=B": "x"} }, `steps[0].env["A=B"]`},
		{"env name empty", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Env = map[string]string{"": "x"} }, `steps[0].env[""]`},
		{"env HOME reserved", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Env = map[string]string{"HOME": "/root"} }, `steps[0].env["HOME"]`},
		{"env TMPDIR reserved", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Env = map[string]string{"TMPDIR": "/tmp"} }, `steps[0].env["TMPDIR"]`},
		{"env NUL in value", func(s *tasks.Spec, _ limits.Policy) { s.Steps[0].Env = map[string]string{"A": "x\x00y"} }, `steps[0].env["A"]`},
		{"file absolute", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"/etc/passwd": ""} }, `files["/etc/passwd"]`},
		{"file ../x", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"../x": ""} }, `files["../x"]`},
		{"file a/../b", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"a/../b": ""} }, `files["a/../b"]`},
		{"file a//b", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"a//b": ""} }, `files["a//b"]`},
		{"file ./a", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"./a": ""} }, `files["./a"]`},
		{"file NUL", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"a\x00b": ""} }, fmt.Sprintf("files[%q]", "a\x00b")},
		{"file 256-byte component", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"d/" + long: ""} }, fmt.Sprintf("files[%q]", "d/"+long)},
		{"file empty path", func(s *tasks.Spec, _ limits.Policy) { s.Files = map[string]tasks.File{"": "x"} }, `files[""]`},
		{"too many files", func(s *tasks.Spec, _ limits.Policy) {
			s.Files = map[string]tasks.File{}
			for i := 0; i < 1001; i++ {
				s.Files[strconv.Itoa(i)] = ""
			}
		}, "files"},
		{"output.result absolute", func(s *tasks.Spec, _ limits.Policy) { s.Output = &tasks.Output{Result: "/out.json"} }, "output.result"},
		{"output.result escapes", func(s *tasks.Spec, _ limits.Policy) { s.Output = &tasks.Output{Result: "../out.json"} }, "output.result"},
		{"output.schema an array", func(s *tasks.Spec, _ limits.Policy) {
			s.Output = &tasks.Output{Result: "r.json", Schema: json.RawMessage(`[{"type":"object"}]`)}
		}, "output.schema"},
		{"output.schema a string", func(s *tasks.Spec, _ limits.Policy) {
			s.Output = &tasks.Output{Result: "r.json", Schema: json.RawMessage(`"object"`)}
		}, "output.schema"},
		{"output.schema a number", func(s *tasks.Spec, _ limits.Policy) {
			s.Output = &tasks.Output{Result: "r.json", Schema: json.RawMessage(`1`)}
		}, "output.schema"},
		{"output.schema not JSON", func(s *tasks.Spec, _ limits.Policy) {
			s.Output = &tasks.Output{Result: "r.json", Schema: json.RawMessage(`{`)}
		}, "output.schema"},
		{"output.schema without result", func(s *tasks.Spec, _ limits.Policy) {
			s.Output = &tasks.Output{Schema: json.RawMessage(`{"type":"object"}`)}
		}, "output.schema"},
		{"artifact bad glob", func(s *tasks.Spec, _ limits.Policy) {
			s.Output = &tasks.Output{Artifacts: []string{"out/*.csv", "out/["}}
		}, "output.artifacts[1]"},
		{"artifact absolute", func(s *tasks.Spec, _ limits.Policy) { s.Output = &tasks.Output{Artifacts: []string{"/out/*"}} }, "output.artifacts[0]"},
		{"artifact escapes", func(s *tasks.Spec, _ limits.Policy) { s.Output = &tasks.Output{Artifacts: []string{"../*"}} }, "output.artifacts[0]"},
		{"approval sometimes", func(s *tasks.Spec, _ limits.Policy) { s.Approval = "sometimes" }, "approval"},
		{"approval wrong case", func(s *tasks.Spec, _ limits.Policy) { s.Approval = "Always" }, "approval"},
		{"network not allowed", func(s *tasks.Spec, _ limits.Policy) { s.Network = true }, "network"},
	}
	// Every limit: one unit above the maximum, and negative.
	for _, l := range limitSetters {
		tests = append(tests,
			struct {
				name      string
				mod       func(s *tasks.Spec, p limits.Policy)
				wantField string
			}{"limit " + l.name + " above max", func(s *tasks.Spec, p limits.Policy) { l.set(&s.Limits, l.get(p.Max)+1) }, "limits." + l.name},
			struct {
				name      string
				mod       func(s *tasks.Spec, p limits.Policy)
				wantField string
			}{"limit " + l.name + " negative", func(s *tasks.Spec, _ limits.Policy) { l.set(&s.Limits, -1) }, "limits." + l.name},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := testPolicy()
			s := minimal()
			tt.mod(s, p)
			fe := fieldErr(t, s.Prepare(p))
			if diff := cmp.Diff(tt.wantField, fe.Field); diff != "" {
				t.Errorf("Field mismatch (-want +got):\n%s\n(error: %v)", diff, fe)
			}
		})
	}
}

// limitSetters reaches every member of limits.Set by its JSON name.
var limitSetters = []struct {
	name string
	get  func(limits.Set) int64
	set  func(*limits.Set, int64)
}{
	{"cpu_time", func(s limits.Set) int64 { return int64(s.CPUTime) }, func(s *limits.Set, v int64) { s.CPUTime = limits.Duration(v) }},
	{"memory", func(s limits.Set) int64 { return int64(s.Memory) }, func(s *limits.Set, v int64) { s.Memory = limits.Bytes(v) }},
	{"processes", func(s limits.Set) int64 { return int64(s.Processes) }, func(s *limits.Set, v int64) { s.Processes = int(v) }},
	{"file_size", func(s limits.Set) int64 { return int64(s.FileSize) }, func(s *limits.Set, v int64) { s.FileSize = limits.Bytes(v) }},
	{"open_files", func(s limits.Set) int64 { return int64(s.OpenFiles) }, func(s *limits.Set, v int64) { s.OpenFiles = int(v) }},
	{"output", func(s limits.Set) int64 { return int64(s.Output) }, func(s *limits.Set, v int64) { s.Output = limits.Bytes(v) }},
	{"workspace", func(s limits.Set) int64 { return int64(s.Workspace) }, func(s *limits.Set, v int64) { s.Workspace = limits.Bytes(v) }},
	{"output_total", func(s limits.Set) int64 { return int64(s.OutputTotal) }, func(s *limits.Set, v int64) { s.OutputTotal = limits.Bytes(v) }},
}

func TestLimitSettersCoverSet(t *testing.T) {
	rt := reflect.TypeOf(limits.Set{})
	var want []string
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "profile" { // a name of values, not a limit
			want = append(want, name)
		}
	}
	var got []string
	for _, l := range limitSetters {
		got = append(got, l.name)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("limitSetters does not cover limits.Set (-want +got):\n%s", diff)
	}
}

func TestPrepareLimitAtMaxAccepted(t *testing.T) {
	p := testPolicy()
	s := minimal()
	s.Limits = p.Max
	if err := s.Prepare(p); err != nil {
		t.Fatalf("Prepare with every limit at its maximum: %v", err)
	}
	if diff := cmp.Diff(p.Max, s.Limits); diff != "" {
		t.Errorf("limits mismatch (-want +got):\n%s", diff)
	}
}

func TestPrepareDefaultTimeoutAboveMax(t *testing.T) {
	p := testPolicy()
	p.DefaultTimeout = p.MaxTimeout + 1
	fe := fieldErr(t, minimal().Prepare(p))
	if diff := cmp.Diff("timeout", fe.Field); diff != "" {
		t.Errorf("Field mismatch (-want +got):\n%s", diff)
	}
}

func TestPrepareNetwork(t *testing.T) {
	for _, tt := range []struct {
		allow, ask bool
		wantErr    bool
	}{
		{allow: false, ask: false},
		{allow: false, ask: true, wantErr: true},
		{allow: true, ask: false},
		{allow: true, ask: true},
	} {
		p := testPolicy()
		p.AllowNetwork = tt.allow
		s := minimal()
		s.Network = tt.ask
		err := s.Prepare(p)
		if !tt.wantErr {
			if err != nil {
				t.Errorf("allow=%v network=%v: Prepare = %v, want nil", tt.allow, tt.ask, err)
			} else if s.Network != tt.ask {
				t.Errorf("allow=%v network=%v: Prepare changed Network to %v", tt.allow, tt.ask, s.Network)
			}
			continue
		}
		fe := fieldErr(t, err)
		if fe.Field != "network" || fe.Hint == "" {
			t.Errorf("allow=%v network=%v: error %v, want field network with a hint", tt.allow, tt.ask, fe)
		}
	}
}

func TestPrepareOutputAccepted(t *testing.T) {
	for _, o := range []*tasks.Output{
		nil,
		{},
		{Result: "out/r.json"},
		{Result: "r.json", Schema: json.RawMessage(`{"type":"object","required":["ok"]}`)},
		{Result: "r.json", Schema: json.RawMessage(`true`)},
		{Artifacts: []string{"out/*.csv", "report.pdf", "logs/[a-z]*.log", "x?"}},
	} {
		s := minimal()
		s.Output = o
		if err := s.Prepare(testPolicy()); err != nil {
			t.Errorf("Prepare(output %+v) = %v, want nil", o, err)
		}
	}
}

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path    string
		wantErr bool
	}{
		{"a", false},
		{"a/b/c.txt", false},
		{".hidden", false},
		{"a/.b", false},
		{"..a", false},
		{"a..", false},
		{"a/b..c", false},
		{"out/*.csv", false},
		{strings.Repeat("x", 255), false},
		{"d/" + strings.Repeat("x", 255), false},
		{"", true},
		{"/a", true},
		{"/", true},
		{"..", true},
		{"../x", true},
		{"a/..", true},
		{"a/../b", true},
		{"a//b", true},
		{"./a", true},
		{"a/./b", true},
		{"a/", true},
		{".", true},
		{"a\x00b", true},
		{"\xff", true},
		{strings.Repeat("x", 256), true},
		{"d/" + strings.Repeat("x", 256) + "/e", true},
		{strings.Repeat("abcdefg/", 600), true}, // 4800 bytes
	}
	for _, tt := range tests {
		err := tasks.CheckPath("f", tt.path)
		if !tt.wantErr {
			if err != nil {
				t.Errorf("CheckPath(%q) = %v, want nil", tt.path, err)
			}
			continue
		}
		fe := fieldErr(t, err)
		if fe.Field != "f" {
			t.Errorf("CheckPath(%q): Field = %q, want the given field %q", tt.path, fe.Field, "f")
		}
	}
}

func TestEncodePayloadCap(t *testing.T) {
	s := minimal()
	s.Files = map[string]tasks.File{"in.txt": tasks.File(strings.Repeat("x", 1000))}
	if err := s.Prepare(testPolicy()); err != nil {
		t.Fatal(err)
	}
	full, err := s.Encode(0)
	if err != nil {
		t.Fatalf("Encode(0): %v", err)
	}
	n := len(full)

	got, err := s.Encode(n)
	if err != nil {
		t.Fatalf("Encode(exactly %d) = %v, want nil", n, err)
	}
	if diff := cmp.Diff(string(full), string(got)); diff != "" {
		t.Errorf("Encode(%d) mismatch (-want +got):\n%s", n, diff)
	}

	got, err = s.Encode(n - 1)
	if got != nil {
		t.Errorf("Encode(%d) returned %d bytes with an error", n-1, len(got))
	}
	fe := fieldErr(t, err)
	if diff := cmp.Diff("spec", fe.Field); diff != "" {
		t.Errorf("Field mismatch (-want +got):\n%s", diff)
	}
	for _, want := range []string{strconv.Itoa(n), strconv.Itoa(n - 1)} {
		if !strings.Contains(fe.Msg, want) {
			t.Errorf("Msg = %q, want it to mention %s", fe.Msg, want)
		}
	}

	// maxPayload 0 means DefaultMaxPayload.
	big := minimal()
	big.Files = map[string]tasks.File{"big": tasks.File(strings.Repeat("x", tasks.DefaultMaxPayload))}
	_, err = big.Encode(0)
	if fe := fieldErr(t, err); fe.Field != "spec" || !strings.Contains(fe.Msg, strconv.Itoa(tasks.DefaultMaxPayload)) {
		t.Errorf("Encode(0) of a large spec = %v, want a spec error naming the cap %d", err, tasks.DefaultMaxPayload)
	}
	if _, err := big.Encode(tasks.DefaultMaxPayload * 2); err != nil {
		t.Errorf("Encode with a larger cap = %v, want nil", err)
	}
}

func TestPayloadError(t *testing.T) {
	err := tasks.PayloadError(11, 10)
	fe := fieldErr(t, err)
	if fe.Field != "spec" || fe.Hint == "" {
		t.Errorf("PayloadError = %#v, want field spec with a hint", fe)
	}
}

func TestIsInvalid(t *testing.T) {
	if tasks.IsInvalid(nil) {
		t.Error("IsInvalid(nil) = true")
	}
	if tasks.IsInvalid(errors.New("redis down")) {
		t.Error("IsInvalid(other error) = true")
	}
	wrapped := fmt.Errorf("enqueue: %w", &tasks.FieldError{Field: "queue", Msg: "bad"})
	if !tasks.IsInvalid(wrapped) {
		t.Error("IsInvalid(wrapped FieldError) = false")
	}
}

// TestClone: a clone prepared and changed everywhere leaves the original
// as it was.
func TestClone(t *testing.T) {
	orig, err := tasks.Decode([]byte(`{"version": 1, "max_retry": 2, "secrets": ["A_B"], "files": {"a": "x"},
		"inputs": [{"url": "https://e.com/", "path": "in/x", "headers": {"H": "v"}}],
		"steps": [{"run": ["sh", "-c", "true"], "env": {"E": "1"}}], "output": {"result": "r.json", "artifacts": ["out/*"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(orig)
	c := orig.Clone()
	if err := c.Prepare(limits.DefaultPolicy()); err != nil {
		t.Fatal(err)
	}
	c.Files["b"] = "y"
	c.Secrets[0] = "X"
	*c.MaxRetry = 9
	c.Inputs[0].Headers["H"] = "w"
	c.Steps[0].Run[0] = "bash"
	c.Steps[0].Env["E"] = "2"
	c.Output.Artifacts[0] = "x"
	if got, _ := json.Marshal(orig); string(got) != string(want) {
		t.Errorf("the original changed:\n got %s\nwant %s", got, want)
	}
}

// TestCloneCoversEveryField: a field of Spec that holds a reference
// (map, slice, pointer) must be copied by Clone; add it there, then here.
func TestCloneCoversEveryField(t *testing.T) {
	copied := []string{"Files", "FileModes", "Secrets", "Params", "MaxRetry", "Inputs", "Steps", "Output", "Session"}
	typ := reflect.TypeOf(tasks.Spec{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		switch f.Type.Kind() {
		case reflect.Map, reflect.Slice, reflect.Pointer:
			if !slices.Contains(copied, f.Name) {
				t.Errorf("Spec.%s holds a reference Clone does not copy", f.Name)
			}
		}
	}
}

// TestSessionTimeoutDefault: a session's life is the spec's timeout, else
// the operator's session default, else 30 minutes, never above the
// operator's maximum; a one-shot run keeps the task default.
func TestSessionTimeoutDefault(t *testing.T) {
	minutes := func(d time.Duration) limits.Duration { return limits.Duration(d * time.Minute) }
	for _, c := range []struct {
		name          string
		spec          string
		def, max, got limits.Duration
	}{
		{"session, no timeout", `{"version":1,"session":{}}`, 0, minutes(30), minutes(30)},
		{"session, the operator's default", `{"version":1,"session":{}}`, minutes(10), minutes(30), minutes(10)},
		{"session, a maximum below 30m", `{"version":1,"session":{}}`, 0, minutes(20), minutes(20)},
		{"session, its own timeout", `{"version":1,"timeout":"2m","session":{}}`, 0, minutes(30), minutes(2)},
		{"one-shot run", `{"version":1,"steps":[{"run":["true"]}]}`, 0, minutes(30), limits.Duration(time.Minute)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := limits.DefaultPolicy()
			p.DefaultSessionTimeout, p.MaxTimeout = c.def, c.max
			s, err := tasks.Decode([]byte(c.spec))
			if err == nil {
				err = s.Prepare(p)
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Timeout != c.got {
				t.Errorf("timeout %s, want %s", s.Timeout, c.got)
			}
			if s.Session != nil && s.Session.IdleTimeout != minutes(5) && s.Timeout >= minutes(5) {
				t.Errorf("idle_timeout %s, want 5m", s.Session.IdleTimeout)
			}
		})
	}
}

func TestSessionSpec(t *testing.T) {
	p := limits.DefaultPolicy()
	for _, c := range []struct {
		name, spec, field string
	}{
		{"no steps, a session", `{"version":1,"session":{}}`, ""},
		{"no steps, no session", `{"version":1,"steps":[]}`, "steps"},
		{"idle above timeout", `{"version":1,"timeout":"10s","session":{"idle_timeout":"1m"}}`, "session.idle_timeout"},
		{"retried session", `{"version":1,"max_retry":2,"session":{}}`, "max_retry"},
		{"unknown field", `{"version":1,"session":{"idle":"1m"}}`, "session.idle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := tasks.Decode([]byte(c.spec))
			if err == nil {
				err = s.Prepare(p)
			}
			var fe *tasks.FieldError
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.field == "":
				if s.Session.IdleTimeout != min(tasks.DefaultIdleTimeout, s.Timeout) || *s.MaxRetry != 0 {
					t.Errorf("idle_timeout %s, max_retry %d: want the defaults, never retried", s.Session.IdleTimeout, *s.MaxRetry)
				}
			case !errors.As(err, &fe) || fe.Field != c.field:
				t.Errorf("error %v, want one naming %s", err, c.field)
			}
		})
	}
	s, _ := tasks.Decode([]byte(`{"version":1,"session":{}}`))
	if err := s.Prepare(p); err != nil {
		t.Fatal(err)
	}
	st := tasks.Step{Run: []string{}}
	if s.Timeout != limits.DefaultSessionTimeout || s.Session.IdleTimeout != tasks.DefaultIdleTimeout {
		t.Errorf(`"session": {} lives %s, idle %s: want %s and %s`, s.Timeout, s.Session.IdleTimeout, limits.DefaultSessionTimeout, tasks.DefaultIdleTimeout)
	}
	var fe *tasks.FieldError
	if err := s.CheckStep(&st, 3); !errors.As(err, &fe) || fe.Field != "step.run" {
		t.Errorf("empty argv: %v, want step.run", err)
	}
	st = tasks.Step{Run: []string{"true"}}
	if err := s.CheckStep(&st, 3); err != nil || st.Name != "step-3" {
		t.Errorf("CheckStep: %v, name %q, want step-3", err, st.Name)
	}
}
