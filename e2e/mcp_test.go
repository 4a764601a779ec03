//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/xeipuuv/gojsonschema"

	"github.com/airlock-run/airlock/internal/testkit/mcptest"
	"github.com/airlock-run/airlock/record"
)

// The MCP server's binary, built on first use (or copied from
// $AIRLOCK_E2E_BIN), as the API's is.
var mcpBin struct {
	once sync.Once
	path string
	err  error
}

func buildMCP(t *testing.T) string {
	t.Helper()
	mcpBin.once.Do(func() {
		mcpBin.path = filepath.Join(bin.dir, "mcp")
		cmd := exec.Command("go", "build", "-o", mcpBin.path, "../cmd/mcp")
		if prebuilt := os.Getenv("AIRLOCK_E2E_BIN"); prebuilt != "" {
			cmd = exec.Command("cp", filepath.Join(prebuilt, "mcp"), mcpBin.path)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpBin.err = fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
		}
	})
	if mcpBin.err != nil {
		t.Fatal(mcpBin.err)
	}
	return mcpBin.path
}

// cannotApprove is what the server says of every parked run
// (mcpserver.CannotApprove: kept literal here, as an agent reads it).
const cannotApprove = "waiting for a human approver; an agent cannot approve"

// mcpStdio starts the real mcp binary as an agent host does, with the
// SDK's CommandTransport, against the bundle's Redis and queue.
func mcpStdio(t *testing.T, b *bundle, extra ...string) *mcp.ClientSession {
	t.Helper()
	return mcpStdioOpts(t, b, nil, extra...)
}

// mcpStdioOpts is mcpStdio with the client's options.
func mcpStdioOpts(t *testing.T, b *bundle, opts *mcp.ClientOptions, extra ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(buildMCP(t), append([]string{"-redis", b.url, "-queue", b.queue, "-max-wait", "2m"}, extra...)...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "airlock-e2e", Version: "1"}, opts)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect over stdio: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		// Closing stdin ends the server: it must exit 0.
		if err := cs.Close(); err != nil {
			t.Errorf("closing the session: %v", err)
		}
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
			t.Errorf("mcp did not exit 0 once stdin closed: %v", cmd.ProcessState)
		}
		if t.Failed() {
			t.Logf("mcp logs:\n%s", logs.String())
		}
	})
	return cs
}

// callOut is a tool call's answer: the result and its structured
// content, decoded.
type callOut struct {
	res *mcp.CallToolResult
	raw json.RawMessage
}

func (c callOut) text() string {
	var b strings.Builder
	for _, ct := range c.res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// call calls a tool with args (a JSON object) and wants isError as said;
// its structured content must satisfy the tool's output schema.
func call(t *testing.T, cs *mcp.ClientSession, name, args string, wantErr bool) callOut {
	t.Helper()
	var a map[string]any
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: a})
	if err != nil {
		t.Fatalf("%s %s: protocol error %v (tool errors must be results with isError)", name, args, err)
	}
	out := callOut{res: res}
	if res.StructuredContent != nil {
		out.raw, _ = json.Marshal(res.StructuredContent)
	}
	if res.IsError != wantErr {
		t.Fatalf("%s %s: isError %v, want %v: %s", name, args, res.IsError, wantErr, out.text())
	}
	mcptest.CheckOutput(t, cs, name, res)
	// The text is the structured content's JSON, for hosts that show
	// only text (errors: the message).
	if !res.IsError {
		var text, structured any
		if err := json.Unmarshal([]byte(out.text()), &text); err != nil {
			t.Errorf("%s: text is not JSON: %v", name, err)
		}
		_ = json.Unmarshal(out.raw, &structured)
		if !reflect.DeepEqual(text, structured) {
			t.Errorf("%s: text %s is not the structured content %s", name, out.text(), out.raw)
		}
	}
	return out
}

// runAnswer is the structured answer of run_action, get_run and wait_run.
type runAnswer struct {
	TaskID    string      `json:"task_id"`
	Queue     string      `json:"queue"`
	RunID     string      `json:"run_id"`
	Duplicate bool        `json:"duplicate"`
	Record    *record.Run `json:"record"`
	TimedOut  bool        `json:"timed_out"`
	Note      string      `json:"note"`
}

func (c callOut) run(t *testing.T) runAnswer {
	t.Helper()
	var a runAnswer
	if err := json.Unmarshal(c.raw, &a); err != nil {
		t.Fatalf("answer %s: %v", c.raw, err)
	}
	return a
}

// errAnswer is the structured content of a tool error.
type errAnswer struct {
	Error string       `json:"error"`
	Field string       `json:"field"`
	State record.State `json:"state"`
}

func (c callOut) err(t *testing.T) errAnswer {
	t.Helper()
	var a errAnswer
	if err := json.Unmarshal(c.raw, &a); err != nil {
		t.Fatalf("error answer %s: %v", c.raw, err)
	}
	if a.Error != c.text() {
		t.Errorf("error %q is not the text %q", a.Error, c.text())
	}
	return a
}

// TestMCPTools lists the tools of the real binary over stdio: exactly
// its ten (run_action, get_run, wait_run, get_result, cancel_run and the
// five session tools), none of which can decide an approval, each with an
// input and an output schema that are valid draft-07 JSON Schemas
// (checked against the meta-schema), the input one accepting what the
// tool takes; a whole spec's full schema is the resource
// airlock://spec-schema.
func TestMCPTools(t *testing.T) {
	b := setup(t)
	cs := mcpStdio(t, b)
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	schemas := map[string]*gojsonschema.Schema{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		raw, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		sl := gojsonschema.NewSchemaLoader()
		sl.Draft = gojsonschema.Draft7
		sl.Validate = true // against the draft-07 meta-schema
		s, err := sl.Compile(gojsonschema.NewBytesLoader(raw))
		if err != nil {
			t.Errorf("%s: input schema is not a valid JSON Schema: %v\n%s", tool.Name, err, raw)
			continue
		}
		schemas[tool.Name] = s
		if tool.OutputSchema == nil {
			t.Errorf("%s: no output schema", tool.Name)
		} else {
			mcptest.CompileSchema(t, tool.Name, tool.OutputSchema)
		}
		// Nothing that decides an approval, by name or by argument.
		var in struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		_ = json.Unmarshal(raw, &in)
		if in.Type != "object" {
			t.Errorf("%s: input schema type %q, want object", tool.Name, in.Type)
		}
		for _, bad := range []string{"approve", "accept", "reject", "decide", "decision"} {
			if strings.Contains(strings.ToLower(tool.Name), bad) {
				t.Errorf("tool %s can decide an approval", tool.Name)
			}
		}
		for p := range in.Properties {
			if slices.Contains([]string{"approval_id", "decision", "accept", "reject", "comment", "by", "decided_by"}, p) {
				t.Errorf("tool %s takes %q: an agent could decide an approval with it", tool.Name, p)
			}
		}
		writes := []string{"run_action", "cancel_run", "open_session", "run_in_session", "write_file", "close_session", "pause_session"}
		if !slices.Contains(writes, tool.Name) && (tool.Annotations == nil || !tool.Annotations.ReadOnlyHint) {
			t.Errorf("%s is not marked read-only", tool.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"cancel_run", "close_session", "get_result", "get_run", "open_session", "pause_session", "read_file", "run_action", "run_in_session", "wait_run", "write_file"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want exactly %v (and no approve tool)", names, want)
	}
	for _, tc := range []struct {
		tool, doc string
		valid     bool
	}{
		{"run_action", `{"command": "echo hi", "files": {"in/a.txt": "x"}, "timeout": "30s", "output_result": "out/result.json", "wait": true}`, true},
		{"run_action", `{"command": ["python3", "main.py"], "files": {"main.py": {"base64": "cHJpbnQoMSkK"}}}`, true},
		{"run_action", `{"spec": {"version": 1, "steps": [{"run": ["true"]}]}, "wait": false, "wait_timeout": "1m"}`, true},
		{"run_action", `{"spec": {"version": 2, "steps": [{"run": ["true"]}]}}`, false},
		{"run_action", `{"spec": {"version": 1, "stepz": [{"run": ["true"]}]}}`, false},
		{"run_action", `{"spec": {"version": 1, "steps": [{"run": ["true"]}]}, "full": true}`, true},
		{"run_action", `{"command": "true", "files": {"../x": "y"}}`, false},
		{"run_action", `{"command": "true", "timeout": "soon"}`, false},
		{"run_action", `{"command": "true", "approve": true}`, false},
		{"get_run", `{"task_id": "abc"}`, true},
		{"get_run", `{}`, false},
		{"wait_run", `{"task_id": "abc", "until": "final", "timeout": "10s"}`, true},
		{"wait_run", `{"task_id": "abc", "until": "approved"}`, false},
		{"get_result", `{"task_id": "abc", "queue": "default"}`, true},
		{"get_result", `{"task_id": "abc", "accept": true}`, false},
	} {
		s := schemas[tc.tool]
		if s == nil {
			continue
		}
		r, err := s.Validate(gojsonschema.NewStringLoader(tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		if r.Valid() != tc.valid {
			t.Errorf("%s schema on %s: valid %v, want %v: %v", tc.tool, tc.doc, r.Valid(), tc.valid, r.Errors())
		}
	}
	// Deeper than a spec's top-level fields: the spec's schema, by
	// reference.
	spec := specSchema(t, cs)
	for doc, valid := range map[string]bool{
		`{"version": 1, "steps": [{"run": ["true"]}]}`:                    true,
		`{"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}`:   false,
		`{"version": 1, "steps": [{"run": ["true"]}], "principal": "me"}`: false,
	} {
		if r, err := spec.Validate(gojsonschema.NewStringLoader(doc)); err != nil || r.Valid() != valid {
			t.Errorf("airlock://spec-schema on %s: %v, want valid %v (%v)", doc, r, valid, err)
		}
	}
}

// TestMCPRunAction runs actions through the real binary over stdio and a
// real worker: the simple form and a whole spec, waited for or followed
// with wait_run and get_run; a bad spec is a tool error naming the field.
func TestMCPRunAction(t *testing.T) {
	b := setup(t)
	cs := mcpStdio(t, b)

	// The simple form, waited for: the record, with the step's stdout.
	a := call(t, cs, "run_action", `{"command": "cat in/a.txt; echo done", "files": {"in/a.txt": "hello mcp\n"}, "timeout": "30s", "wait": true, "wait_timeout": "2m"}`, false).run(t)
	if a.TaskID == "" || a.Queue != b.queue || a.RunID == "" || a.Duplicate || a.TimedOut {
		t.Errorf("run_action answer %+v", a)
	}
	if a.Record == nil || a.Record.State != record.StateCompleted || len(a.Record.Steps) != 1 ||
		a.Record.Steps[0].Name != "command" || a.Record.Steps[0].Stdout != "hello mcp\ndone\n" {
		t.Fatalf("record %s", mustJSON(t, a.Record))
	}
	if !strings.HasPrefix(a.Note, "completed") {
		t.Errorf("note %q", a.Note)
	}

	// A whole spec, not waited for: the task id, then wait_run and get_run.
	spec := `{"version": 1, "run_id": "mcp-spec-1", "files": {"six.txt": "6"}, "steps": [{"name": "mul", "run": ["sh", "-c", "echo spec-$(( $(cat six.txt) * 7 ))"]}], "limits": {"memory": "128MiB"}}`
	a = call(t, cs, "run_action", `{"spec": `+spec+`}`, false).run(t)
	if a.TaskID == "" || a.RunID != "mcp-spec-1" || a.Queue != b.queue || a.Record != nil {
		t.Fatalf("run_action without wait: %+v", a)
	}
	w := call(t, cs, "wait_run", `{"task_id": "`+a.TaskID+`", "timeout": "2m"}`, false).run(t)
	if w.Record == nil || w.Record.State != record.StateCompleted || w.Record.Steps[0].Stdout != "spec-42\n" || w.TimedOut {
		t.Fatalf("wait_run: %s", mustJSON(t, w))
	}
	g := call(t, cs, "get_run", `{"task_id": "`+a.TaskID+`", "queue": "`+b.queue+`"}`, false).run(t)
	if g.Record == nil || g.Record.TaskID != a.TaskID || g.Record.State != record.StateCompleted {
		t.Fatalf("get_run: %s", mustJSON(t, g))
	}
	// A completed run has nothing published: get_result says so.
	e := call(t, cs, "get_result", `{"task_id": "`+a.TaskID+`"}`, true).err(t)
	if e.State != record.StateCompleted || !strings.Contains(e.Error, "nothing to publish") {
		t.Errorf("get_result of a completed run: %+v", e)
	}

	// Rejected: a tool error (isError) naming the field, as the CLIs do.
	for _, tc := range []struct{ args, field, msg string }{
		{`{"spec": {"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}}`, "spec.steps[0].tiemout",
			"spec rejected: spec.steps[0].tiemout: unknown field (known fields: name, run, stdin, timeout, env, cwd)"},
		{`{"spec": {"version": 1, "steps": [{"run": "true"}]}}`, "spec.steps[0].run", "spec rejected: spec.steps[0].run: want a JSON array"},
		{`{"spec": {"version": 1, "steps": [{"run": ["true"]}], "limits": {"memory": "64GiB"}}}`, "spec.limits.memory", "spec rejected: spec.limits.memory: "},
		{`{"spec": {"version": 1, "queue": "elsewhere", "steps": [{"run": ["true"]}]}}`, "spec.queue", `queue "elsewhere" is not one this MCP server serves`},
		{`{"command": "true", "files": {"../x": "y"}}`, `files["../x"]`, `spec rejected: files["../x"]: "../x" leaves the workspace`},
		{`{"command": 42}`, "command", "command: want a string (run with sh -c) or an array of strings (argv)"},
		{`{"command": ["true"], "timeout": "soon"}`, "timeout", "spec rejected: timeout: "},
		{`{"command": "true", "output_schema": {"type": "object"}}`, "output_schema", "spec rejected: output_schema: a schema needs output_result"},
		{`{"files": {"a": "b"}}`, "command", "command: missing"},
		{`{"spec": {"version": 1, "steps": [{"run": ["true"]}]}, "command": "true"}`, "command", "command: not with spec"},
		{`{"command": "true", "approve": true}`, "approve", "approve: unknown field"},
		{`{"command": "true", "wait": "yes"}`, "wait", "wait: want true or false"},
	} {
		e := call(t, cs, "run_action", tc.args, true).err(t)
		if e.Field != tc.field || !strings.Contains(e.Error, tc.msg) {
			t.Errorf("run_action %s: field %q, error %q; want field %q and %q", tc.args, e.Field, e.Error, tc.field, tc.msg)
		}
	}
	if e := call(t, cs, "get_run", `{"task_id": "no-such-task"}`, true).err(t); !strings.Contains(e.Error, "not found") {
		t.Errorf("get_run of an unknown task: %+v", e)
	}
	if e := call(t, cs, "wait_run", `{"task_id": "x", "until": "approved"}`, true).err(t); e.Field != "until" {
		t.Errorf("wait_run until=approved: %+v", e)
	}
}

// TestMCPParked follows a parked run through the real binary: get_run,
// wait_run and get_result all say it waits for a human approver and that
// an agent cannot approve, and the approval stays pending whatever the
// agent calls; once a human accepts it with the approve CLI, get_result
// returns the result.
func TestMCPParked(t *testing.T) {
	store := t.TempDir()
	b := setup(t, "-store", store) // no -policy: every output is parked
	cs := mcpStdio(t, b)

	a := call(t, cs, "run_action", `{"command": "printf '{\"answer\": 42}' > out/result.json", "output_result": "out/result.json", "run_id": "mcp-parked", "wait": true, "wait_timeout": "2m"}`, false).run(t)
	if a.Record == nil || a.Record.State != record.StateParked || a.Record.ApprovalID == "" {
		t.Fatalf("run_action: %s", mustJSON(t, a))
	}
	if !strings.Contains(a.Note, cannotApprove) {
		t.Errorf("run_action's note %q does not say %q", a.Note, cannotApprove)
	}
	id := a.TaskID
	g := call(t, cs, "get_run", `{"task_id": "`+id+`"}`, false).run(t)
	if g.Record.State != record.StateParked || !strings.Contains(g.Note, cannotApprove) || !strings.Contains(g.Note, a.Record.ApprovalID) {
		t.Errorf("get_run: state %s, note %q", g.Record.State, g.Note)
	}
	w := call(t, cs, "wait_run", `{"task_id": "`+id+`", "until": "done"}`, false).run(t)
	if w.Record.State != record.StateParked || w.TimedOut || !strings.Contains(w.Note, cannotApprove) {
		t.Errorf("wait_run until=done: state %s, timed out %v, note %q", w.Record.State, w.TimedOut, w.Note)
	}
	w = call(t, cs, "wait_run", `{"task_id": "`+id+`", "until": "final", "timeout": "1s"}`, false).run(t)
	if w.Record.State != record.StateParked || !w.TimedOut || !strings.Contains(w.Note, cannotApprove) {
		t.Errorf("wait_run until=final: state %s, timed out %v, note %q", w.Record.State, w.TimedOut, w.Note)
	}
	e := call(t, cs, "get_result", `{"task_id": "`+id+`"}`, true).err(t)
	if e.State != record.StateParked || !strings.Contains(e.Error, cannotApprove) || !strings.Contains(e.Error, a.Record.ApprovalID) {
		t.Errorf("get_result of a parked run: %+v", e)
	}
	// Whatever the agent called, the approval is still pending.
	code, out, stderr := b.approveCLI("-json", "show", a.Record.ApprovalID)
	var shown struct {
		State string `json:"state"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.State != "pending" {
		t.Fatalf("approve show after the agent's calls: exit %d, %s %s", code, out, stderr)
	}

	// A human accepts it.
	if code, out, stderr := b.approveCLI("accept", a.Record.ApprovalID, "-by", "alice", "-comment", "ok"); code != 0 {
		t.Fatalf("approve accept: exit %d: %s %s", code, out, stderr)
	}
	w = call(t, cs, "wait_run", `{"task_id": "`+id+`", "until": "final", "timeout": "1m"}`, false).run(t)
	if w.Record.State != record.StatePromoted || w.Record.DecidedBy != "alice" || w.TimedOut {
		t.Fatalf("wait_run until=final after the accept: %s", mustJSON(t, w))
	}
	var r struct {
		Where    string `json:"where"`
		Manifest struct {
			TaskID     string `json:"task_id"`
			RunID      string `json:"run_id"`
			ApprovalID string `json:"approval_id"`
		} `json:"manifest"`
		Result json.RawMessage `json:"result"`
	}
	res := call(t, cs, "get_result", `{"task_id": "`+id+`"}`, false)
	if err := json.Unmarshal(res.raw, &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Result) != `{"answer":42}` || r.Manifest.TaskID != id || r.Manifest.RunID != "mcp-parked" ||
		r.Manifest.ApprovalID != a.Record.ApprovalID || r.Where != filepath.Join(store, "mcp-parked", id) {
		t.Errorf("get_result after the accept: %s", res.raw)
	}
}

// TestMCPHTTP serves the real binary over streamable HTTP with a bearer
// token, and runs an action through the SDK's streamable client.
func TestMCPHTTP(t *testing.T) {
	b := setup(t)
	const token = "mcp-e2e-token-0123456789"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(buildMCP(t), "-redis", b.url, "-queue", b.queue, "-http", "127.0.0.1:0", "-token-file", tokenFile)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("mcp exited with %v after SIGTERM", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("mcp still running 15s after SIGTERM")
		}
		if t.Failed() {
			t.Logf("mcp logs:\n%s", logs.String())
		}
	})
	var url string
	deadline := time.Now().Add(20 * time.Second)
	for url == "" {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var l struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "mcp started" {
				url = l.URL
			}
		}
		select {
		case err := <-done:
			t.Fatalf("mcp exited at start (%v):\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mcp not started after 20s:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.HasSuffix(url, "/mcp") {
		t.Fatalf("url %q", url)
	}

	// Without the token, or with another: 401. With it, but from a
	// browser page of another site, or under another Host name (DNS
	// rebinding): 403.
	for _, tc := range []struct {
		auth, host, fetchSite string
		status                int
	}{
		{"", "", "", http.StatusUnauthorized},
		{"Bearer not-the-token-0123456789", "", "", http.StatusUnauthorized},
		{"Bearer " + token, "", "cross-site", http.StatusForbidden},
		{"Bearer " + token, "evil.example:80", "", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.fetchSite != "" {
			req.Header.Set("Sec-Fetch-Site", tc.fetchSite)
			req.Header.Set("Origin", "https://evil.example")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("POST with Authorization %q, Host %q, Sec-Fetch-Site %q: %s, want %d", tc.auth, tc.host, tc.fetchSite, resp.Status, tc.status)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "airlock-e2e-http", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: bearer{token: token, rt: http.DefaultTransport}},
	}, nil)
	if err != nil {
		t.Fatalf("connect over streamable HTTP: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 11 {
		t.Errorf("%d tools over HTTP, want 11", len(tools.Tools))
	}
	a := call(t, cs, "run_action", `{"command": ["sh", "-c", "echo over http"], "wait": true, "wait_timeout": "2m"}`, false).run(t)
	if a.Record == nil || a.Record.State != record.StateCompleted || a.Record.Steps[0].Stdout != "over http\n" {
		t.Fatalf("run_action over HTTP: %s", mustJSON(t, a))
	}
	e := call(t, cs, "run_action", `{"spec": {"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}}`, true).err(t)
	if e.Field != "spec.steps[0].tiemout" {
		t.Errorf("bad spec over HTTP: %+v", e)
	}
}

// bearer adds the Authorization header to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}
