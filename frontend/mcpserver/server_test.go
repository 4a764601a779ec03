package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/xeipuuv/gojsonschema"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/internal/testkit/mcptest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// fakeClient stands for *airlock.Client: Enqueue prepares the spec as the
// client does (default policy) and records it; the reads answer from
// runs.
type fakeClient struct {
	mu       sync.Mutex
	enqueued []*tasks.Spec
	runs     map[string]*record.Run // by task id
	block    bool                   // Wait and WaitFinal block until ctx is done
	catalog  []actions.Info         // what Actions returns
}

func (f *fakeClient) Actions(context.Context, string) ([]actions.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.catalog), nil
}

func (f *fakeClient) Enqueue(_ context.Context, s *tasks.Spec) (airlock.Enqueued, error) {
	if err := s.Prepare(limits.DefaultPolicy()); err != nil {
		return airlock.Enqueued{}, err
	}
	if _, err := s.Encode(0); err != nil {
		return airlock.Enqueued{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enqueued = append(f.enqueued, s)
	id := fmt.Sprintf("task-%d", len(f.enqueued))
	if f.runs == nil {
		f.runs = map[string]*record.Run{}
	}
	rec := &record.Run{TaskID: id, RunID: s.RunID, Queue: s.Queue, Action: s.Action, Principal: s.Principal, State: record.StateCompleted, Verdict: record.VerdictOK}
	if len(s.Steps) > 0 {
		rec.Steps = []record.Step{{Name: s.Steps[0].Name, Argv: s.Steps[0].Run, Stdout: "out\n"}}
	}
	f.runs[id] = rec
	return airlock.Enqueued{TaskID: id, Queue: s.Queue, RunID: s.RunID}, nil
}

func (f *fakeClient) Status(_ context.Context, queue, id string) (*record.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.runs[id]
	if !ok || r.Queue != queue {
		return nil, &airlock.NotFoundError{Queue: queue, TaskID: id, Err: asynq.ErrTaskNotFound}
	}
	c := *r
	return &c, nil
}

func (f *fakeClient) Wait(ctx context.Context, queue, id string) (*record.Run, error) {
	if f.block {
		<-ctx.Done()
		return nil, fmt.Errorf("airlock: waiting for task %s: %w", id, ctx.Err())
	}
	return f.Status(ctx, queue, id)
}

func (f *fakeClient) WaitFinal(ctx context.Context, queue, id string) (*record.Run, error) {
	return f.Wait(ctx, queue, id)
}

func (f *fakeClient) Cancel(context.Context, string, string) (*record.Run, error) {
	return nil, errors.New("fakeClient does not cancel (cancel_test.go uses a real client)")
}

func (f *fakeClient) OpenSession(context.Context, *tasks.Spec) (*airlock.Session, error) {
	return nil, errors.New("fakeClient has no sessions (sessions_test.go uses a real client and worker)")
}

func (f *fakeClient) Session(context.Context, string) (*airlock.Session, *session.Info, error) {
	return nil, nil, errors.New("fakeClient has no sessions")
}

func (f *fakeClient) ResultIn(_ context.Context, queue, id string) (*airlock.Published, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	if r == nil || r.State != record.StatePromoted {
		return nil, &airlock.NotPromotedError{TaskID: id, State: record.StateParked}
	}
	return &airlock.Published{Where: "/store/" + id, Result: json.RawMessage(`{"n":1}`)}, nil
}

// connect serves New(c, o) to an SDK client over in-memory transports.
func connect(t *testing.T, c Client, o Options, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	srv, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		cancel()
	})
	return cs
}

// callTool calls a tool and returns its result and structured content,
// which it checks against the tool's output schema.
func callTool(t *testing.T, cs *mcp.ClientSession, name, args string) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	var a map[string]any
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: a})
	if err != nil {
		t.Fatalf("%s %s: protocol error %v", name, args, err)
	}
	mcptest.CheckOutput(t, cs, name, res)
	var m map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &m)
	return res, m
}

func TestToolsAreTheElevenAndNoneApproves(t *testing.T) {
	cs := connect(t, &fakeClient{}, Options{}, nil)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		raw, _ := json.Marshal(tool.InputSchema)
		sl := gojsonschema.NewSchemaLoader()
		sl.Draft = gojsonschema.Draft7
		sl.Validate = true
		if _, err := sl.Compile(gojsonschema.NewBytesLoader(raw)); err != nil {
			t.Errorf("%s: input schema: %v", tool.Name, err)
		}
		if strings.Contains(tool.Name, "approv") || strings.Contains(tool.Name, "accept") || strings.Contains(tool.Name, "reject") {
			t.Errorf("tool %s", tool.Name)
		}
	}
	if !slices.Equal(names, []string{"cancel_run", "close_session", "get_result", "get_run", "open_session", "pause_session", "read_file", "run_action", "run_in_session", "wait_run", "write_file"}) { // listed by name
		t.Errorf("tools %v", names)
	}
	want := slices.Sorted(slices.Values(Tools))
	if !slices.Equal(names, want) {
		t.Errorf("tools %v, Tools %v", names, want)
	}
}

// run_action's and open_session's spec refer to the spec's schema, the
// resource SpecSchemaURI: tasks.SpecSchema but principal, which the
// server stamps; their inline parts are the spec's names (its top-level
// fields, limits'), so that a field the spec lacks is refused there too.
func TestSchemasReferToTheSpecSchema(t *testing.T) {
	sc, err := buildSchemas()
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(tasks.SpecSchema, &spec); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, &fakeClient{}, Options{}, nil)
	res, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: SpecSchemaURI})
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("read %s: %v %v", SpecSchemaURI, res, err)
	}
	var served map[string]any
	if err := json.Unmarshal([]byte(res.Contents[0].Text), &served); err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(spec)
	props := maps.Clone(spec["properties"].(map[string]any))
	delete(props, "principal")
	want["properties"] = props
	if diff := cmp.Diff(want, served); diff != "" {
		t.Errorf("%s is not tasks.SpecSchema but principal (-want +served):\n%s", SpecSchemaURI, diff)
	}
	names := func(m map[string]any) []any { return toAny(slices.Sorted(maps.Keys(m))) }
	for tool, in := range map[string]object{ToolRunAction: sc.runAction, ToolOpenSession: sc.openSession} {
		b, _ := json.Marshal(in)
		var schema map[string]any
		_ = json.Unmarshal(b, &schema)
		sp := schema["properties"].(map[string]any)["spec"].(map[string]any)
		if got := sp["propertyNames"].(map[string]any)["enum"]; !reflect.DeepEqual(got, names(props)) {
			t.Errorf("%s: spec's field names %v, want %v", tool, got, names(props))
		}
		if !strings.Contains(sp["description"].(string), SpecSchemaURI) {
			t.Errorf("%s: spec's description does not name %s", tool, SpecSchemaURI)
		}
		if schema["$schema"] != draft07 || schema["type"] != "object" || schema["definitions"] != nil {
			t.Errorf("%s: root $schema %v, type %v, definitions %v", tool, schema["$schema"], schema["type"], schema["definitions"] != nil)
		}
	}
	limits := spec["definitions"].(map[string]any)["limits"].(map[string]any)["properties"].(map[string]any)
	if got := sc.runAction["properties"].(object)["limits"].(object)["propertyNames"].(object)["enum"]; !reflect.DeepEqual(got, names(limits)) {
		t.Errorf("run_action's limits names %v, want %v", got, names(limits))
	}
	path := maps.Clone(spec["definitions"].(map[string]any)["path"].(map[string]any))
	delete(path, "description")
	if got := sc.runAction["properties"].(object)["files"].(object)["propertyNames"]; !reflect.DeepEqual(got, path) {
		t.Errorf("run_action's files names %v, want the spec's paths %v", got, path)
	}
}

func TestRunActionSimpleForm(t *testing.T) {
	fc := &fakeClient{}
	cs := connect(t, fc, Options{Queues: []string{"agents", "other"}}, nil)
	res, out := callTool(t, cs, ToolRunAction, `{"command": "wc -l in/a", "files": {"in/a": "1\n2\n"}, "stdin": "x", "env": {"A": "b"},
		"timeout": "20s", "limits": {"memory": "64MiB"}, "output_result": "out/r.json", "output_schema": {"type": "object"},
		"artifacts": ["out/*.csv"], "run_id": "r-1", "idempotency_key": "k", "approval": "always"}`)
	if res.IsError {
		t.Fatalf("error: %v", out)
	}
	if out["task_id"] != "task-1" || out["queue"] != "agents" || out["run_id"] != "r-1" || out["record"] != nil {
		t.Errorf("answer %v", out)
	}
	s := fc.enqueued[0]
	if s.Queue != "agents" || len(s.Steps) != 1 || s.Steps[0].Name != "command" ||
		!slices.Equal(s.Steps[0].Run, []string{"sh", "-c", "wc -l in/a"}) || s.Steps[0].Stdin != "x" || s.Steps[0].Env["A"] != "b" ||
		time.Duration(s.Timeout) != 20*time.Second || s.Limits.Memory != 64<<20 ||
		s.Output == nil || s.Output.Result != "out/r.json" || !slices.Equal(s.Output.Artifacts, []string{"out/*.csv"}) ||
		s.IdempotencyKey != "k" || s.Action != "" || s.Approval != "always" || string(s.Files["in/a"]) != "1\n2\n" {
		b, _ := json.Marshal(s)
		t.Errorf("spec %s", b)
	}
	// An argv, and wait: the record comes with the answer.
	res, out = callTool(t, cs, ToolRunAction, `{"command": ["python3", "-c", "print(1)"], "wait": true}`)
	if res.IsError || out["record"] == nil || !strings.HasPrefix(out["note"].(string), "completed") {
		t.Fatalf("answer %v", out)
	}
	if !slices.Equal(fc.enqueued[1].Steps[0].Run, []string{"python3", "-c", "print(1)"}) {
		t.Errorf("run %v", fc.enqueued[1].Steps[0].Run)
	}
	// A spec may name a served queue, not another.
	if res, out = callTool(t, cs, ToolRunAction, `{"spec": {"version": 1, "queue": "other", "steps": [{"run": ["true"]}]}}`); res.IsError || out["queue"] != "other" {
		t.Errorf("spec in queue other: %v", out)
	}
}

func TestToolErrorsNameTheField(t *testing.T) {
	cs := connect(t, &fakeClient{}, Options{}, nil)
	for _, tc := range []struct{ tool, args, field, msg string }{
		{ToolRunAction, `{"spec": {"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}}`, "spec.steps[0].tiemout",
			"spec rejected: spec.steps[0].tiemout: unknown field (known fields: name, run, stdin, timeout, env, cwd)"},
		{ToolRunAction, `{"spec": {"steps": [{"run": ["true"]}]}}`, "spec.version", "spec rejected: spec.version: got 0, want 1"},
		{ToolRunAction, `{"spec": "{}"}`, "spec", "spec rejected: spec: want a JSON object"},
		{ToolRunAction, `{"spec": {"version": 1, "queue": "q2", "steps": [{"run": ["true"]}]}}`, "spec.queue", `spec rejected: spec.queue: queue "q2" is not one this MCP server serves`},
		{ToolRunAction, `{"command": ["true"], "files": {"/etc/x": "y"}}`, `files["/etc/x"]`, `spec rejected: files["/etc/x"]: `},
		{ToolRunAction, `{"command": []}`, "command", "spec rejected: command"},
		{ToolRunAction, `{"command": ["a", 1]}`, "command[1]", "spec rejected: command[1]"},
		{ToolRunAction, `{"command": "x", "env": {"HOME": "/"}}`, `env["HOME"]`, "spec rejected: env"},
		{ToolRunAction, `{"command": "x", "limits": {"memory": "64GiB"}}`, "limits.memory", "spec rejected: limits.memory: "},
		{ToolRunAction, `{"command": "x", "artifacts": ["out/**"]}`, "artifacts[0]", "spec rejected: artifacts[0]"},
		{ToolRunAction, `{"command": "x", "wait_timeout": "-1s"}`, "wait_timeout", `wait_timeout: "-1s": must be positive`},
		{ToolRunAction, `{"command": "x", "files": {"a": "b"}, "spec": {"version": 1, "steps": [{"run": ["true"]}]}}`, "command", "command: not with spec"},
		{ToolRunAction, `{}`, "command", "command: missing"},
		{ToolGetRun, `{}`, "task_id", "task_id: missing"},
		{ToolGetRun, `{"task_id": 5}`, "task_id", "task_id: want a string"},
		{ToolGetRun, `{"task_id": "x", "queue": "nope"}`, "queue", `queue: queue "nope" is not one this MCP server serves`},
		{ToolGetResult, `{"task_id": "x", "approval_id": "ap-1"}`, "approval_id", "approval_id: unknown field (known fields: task_id, queue)"},
		{ToolWaitRun, `{"task_id": "x", "until": "accepted"}`, "until", `until: "accepted" is not done or final`},
		{ToolWaitRun, `{"task_id": "x", "timeout": "1 minute"}`, "timeout", `timeout: "1 minute" is not a Go duration`},
	} {
		res, out := callTool(t, cs, tc.tool, tc.args)
		if !res.IsError {
			t.Errorf("%s %s: not an error: %v", tc.tool, tc.args, out)
			continue
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if out["field"] != tc.field || !strings.HasPrefix(text, tc.msg) || out["error"] != text {
			t.Errorf("%s %s: field %v, text %q; want field %q and %q", tc.tool, tc.args, out["field"], text, tc.field, tc.msg)
		}
	}
	res, out := callTool(t, cs, ToolGetRun, `{"task_id": "nope"}`)
	if !res.IsError || !strings.Contains(out["error"].(string), `task "nope" not found in queue "default"`) {
		t.Errorf("unknown task: %v", out)
	}
}

func TestParkedRunCannotBeApproved(t *testing.T) {
	fc := &fakeClient{runs: map[string]*record.Run{"t1": {TaskID: "t1", Queue: "default", Principal: DefaultPrincipal, State: record.StateParked,
		ApprovalID: "ap-1", Decision: &record.Decision{Action: "park", Reasons: []string{"rule big"}}}}}
	cs := connect(t, fc, Options{}, nil)
	for _, tool := range []string{ToolGetRun, ToolWaitRun} {
		res, out := callTool(t, cs, tool, `{"task_id": "t1"}`)
		if res.IsError || !strings.Contains(out["note"].(string), CannotApprove) || !strings.Contains(out["note"].(string), "ap-1") ||
			!strings.Contains(out["note"].(string), "rule big") {
			t.Errorf("%s: %v", tool, out)
		}
	}
	res, out := callTool(t, cs, ToolGetResult, `{"task_id": "t1"}`)
	if !res.IsError || out["state"] != "parked" || !strings.Contains(out["error"].(string), CannotApprove) {
		t.Errorf("get_result: %v", out)
	}
	fc.runs["t1"].State = record.StatePromoted
	res, out = callTool(t, cs, ToolGetResult, `{"task_id": "t1"}`)
	if res.IsError || out["where"] != "/store/t1" || !reflect.DeepEqual(out["result"], map[string]any{"n": 1.0}) {
		t.Errorf("get_result of a promoted run: %v", out)
	}
	for state, want := range map[record.State]string{
		record.StateRejected: "rejected", record.StateExpired: "expired", record.StateFailed: "failed", record.StateAccepted: "promotion is queued",
		airlock.StatePending: "not started yet",
	} {
		fc.runs["t1"].State = state
		res, out = callTool(t, cs, ToolGetResult, `{"task_id": "t1"}`)
		if !res.IsError || out["state"] != string(state) || !strings.Contains(out["error"].(string), want) {
			t.Errorf("get_result of a %s run: %v", state, out)
		}
	}
}

// A wait that times out answers with the run as it is, and a client that
// gave a progress token hears from the server meanwhile.
func TestWaitTimesOutWithProgress(t *testing.T) {
	fc := &fakeClient{block: true, runs: map[string]*record.Run{"t1": {TaskID: "t1", Queue: "default", Principal: DefaultPrincipal, State: airlock.StateActive}}}
	var mu sync.Mutex
	var progress []string
	copts := &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, r.Params.Message)
	}}
	cs := connect(t, fc, Options{MaxWait: 400 * time.Millisecond, Progress: 50 * time.Millisecond}, copts)
	params := &mcp.CallToolParams{Name: ToolWaitRun, Arguments: map[string]any{"task_id": "t1", "timeout": "1h"}}
	params.SetProgressToken("p1")
	start := time.Now()
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 5*time.Second {
		t.Errorf("waited %v, want the -max-wait of 400ms", d)
	}
	var out struct {
		Record   *record.Run `json:"record"`
		TimedOut bool        `json:"timed_out"`
		Note     string      `json:"note"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	if res.IsError || !out.TimedOut || out.Record.State != airlock.StateActive || !strings.HasPrefix(out.Note, "still active after 400ms") {
		t.Errorf("answer %s", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) == 0 || !strings.Contains(progress[0], "waiting for task t1") {
		t.Errorf("progress notifications %q", progress)
	}
}

// TestCommandForms: run_action's command and run_in_session's run take a
// command line (run with sh -c) or an argv, as their input schemas say;
// anything else is refused naming the argument.
func TestCommandForms(t *testing.T) {
	sc, err := buildSchemas()
	if err != nil {
		t.Fatal(err)
	}
	compile := func(in object) *gojsonschema.Schema {
		s, err := gojsonschema.NewSchemaLoader().Compile(gojsonschema.NewGoLoader(in))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tools := []struct {
		name, field string
		schema      *gojsonschema.Schema
		args        func(command string) string
	}{
		{ToolRunAction, "command", compile(sc.runAction), func(c string) string { return `{"command": ` + c + `}` }},
		{ToolRunInSession, "run", compile(sc.runInSession), func(c string) string { return `{"session_id": "s", "run": ` + c + `}` }},
	}
	for _, tc := range []struct {
		command string
		argv    []string // nil: refused
		err     string
	}{
		{`"wc -l in/a | sort"`, []string{"sh", "-c", "wc -l in/a | sort"}, ""},
		{`["wc", "-l", "in/a"]`, []string{"wc", "-l", "in/a"}, ""},
		{`""`, nil, `empty (e.g. "wc -l in/data.csv" or ["python3", "main.py"])`},
		{`5`, nil, "want a string (run with sh -c) or an array of strings (argv)"},
		{`{"run": "x"}`, nil, "want a string (run with sh -c) or an array of strings (argv)"},
	} {
		for _, tool := range tools {
			res, err := tool.schema.Validate(gojsonschema.NewStringLoader(tool.args(tc.command)))
			if err != nil || res.Valid() != (tc.argv != nil) {
				t.Errorf("%s %s: valid by its input schema %v (%v), want %v", tool.name, tc.command, res.Valid(), err, tc.argv != nil)
			}
			got, err := argv(tool.field, json.RawMessage(tc.command))
			var run []string
			_ = json.Unmarshal(got, &run)
			var fe *tasks.FieldError
			switch {
			case tc.argv != nil && (err != nil || !slices.Equal(run, tc.argv)):
				t.Errorf("argv(%s, %s) = %s, %v; want %q", tool.field, tc.command, got, err, tc.argv)
			case tc.argv == nil && (!errors.As(err, &fe) || fe.Field != tool.field || fe.Error() != tool.field+": "+tc.err):
				t.Errorf("argv(%s, %s): %v, want %s: %s", tool.field, tc.command, err, tool.field, tc.err)
			}
		}
	}
}

func TestSimpleField(t *testing.T) {
	for in, want := range map[string]string{
		"steps[0].run":         "command",
		"steps[0].run[2]":      "command[2]",
		"steps[0].runner":      "command", // not a prefix match of run: the step itself
		"steps[0].stdin":       "stdin",
		`steps[0].env["X"]`:    `env["X"]`,
		"output.result":        "output_result",
		"output.schema":        "output_schema",
		"output.artifacts[1]":  "artifacts[1]",
		"output":               "output_result",
		`files["a"]`:           `files["a"]`,
		"limits.memory":        "limits.memory",
		"spec":                 "arguments",
		"timeout":              "timeout",
		"steps":                "command",
		"steps[0].timeout":     "command",
		"idempotency_key":      "idempotency_key",
		"output.schema.x.y[0]": "output_schema.x.y[0]",
	} {
		if got := simpleField(in, false); got != want {
			t.Errorf("simpleField(%q) = %q, want %q", in, got, want)
		}
	}
	if got := simpleField("steps[0].run[0]", true); got != "command" {
		t.Errorf("a string command: %q", got)
	}
}
