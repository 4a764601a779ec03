package mcpserver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/xeipuuv/gojsonschema"

	"github.com/airlock-run/airlock/internal/testkit/mcptest"
)

// Every tool declares an output schema, a valid draft-07 schema of an
// object, which refuses what the tool never answers.
func TestOutputSchemas(t *testing.T) {
	cs := connect(t, &fakeClient{}, Options{}, nil)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*gojsonschema.Schema{}
	for _, tool := range list.Tools {
		if tool.OutputSchema == nil {
			t.Errorf("%s: no output schema", tool.Name)
			continue
		}
		if m, _ := tool.OutputSchema.(map[string]any); m["type"] != "object" {
			t.Errorf("%s: output schema's type %v, want object", tool.Name, m["type"])
		}
		schemas[tool.Name] = mcptest.CompileSchema(t, tool.Name, tool.OutputSchema)
	}
	for _, tc := range []struct {
		tool, doc string
		valid     bool
	}{
		{ToolGetRun, `{"record": {"task_id": "t", "queue": "q", "state": "parked", "steps": [{"name": "a", "verdict": "ok", "exit_code": 0}]}, "note": "n"}`, true},
		{ToolGetRun, `{"record": {"task_id": "t", "queue": "q", "state": "approved"}, "note": "n"}`, false},
		{ToolGetRun, `{"record": {"task_id": "t", "queue": "q", "state": "parked", "steps": [{"name": "a", "verdict": "ok", "exit_code": "0"}]}, "note": "n"}`, false},
		{ToolGetRun, `{"record": {"task_id": "t", "state": "parked"}, "note": "n"}`, false},
		{ToolGetRun, `{"note": "n"}`, false},
		{ToolGetRun, `{"error": "task_id: missing", "field": "task_id"}`, true},
		{ToolGetRun, `{"error": 5}`, false},
		{ToolRunAction, `{"task_id": "t", "queue": "q", "run_id": "r", "duplicate": false}`, true},
		{ToolRunAction, `{"task_id": "t", "queue": "q", "run_id": "r", "duplicate": false, "approved": true}`, false},
		{ToolGetResult, `{"where": "/s", "manifest": {}, "result": null}`, true},
		{ToolGetResult, `{"where": "/s", "result": {}}`, false},
		{ToolReadFile, `{"path": "a", "size": 1, "content": "x", "encoding": "utf-16"}`, false},
		{ToolRunInSession, `{"name": "s", "verdict": "ok", "stdout": "x"}`, true},
		{ToolRunInSession, `{"name": "s", "verdict": "ok", "stdout": 1}`, false},
		{ToolOpenSession, `{"session_id": "s", "queue": "q", "steps": null, "expires_at": "x", "idle_until": "y", "note": ""}`, true},
	} {
		r, err := schemas[tc.tool].Validate(gojsonschema.NewStringLoader(tc.doc))
		if err != nil {
			t.Fatal(err)
		}
		if r.Valid() != tc.valid {
			t.Errorf("%s's output schema on %s: valid %v, want %v (%v)", tc.tool, tc.doc, r.Valid(), tc.valid, r.Errors())
		}
	}
	// The answers of the tools the fake client serves, and the errors of
	// the session tools it has none of (callTool checks each).
	callTool(t, cs, ToolRunAction, `{"command": "true", "wait": true}`)
	callTool(t, cs, ToolRunAction, `{"command": "true", "wait": true, "full": true}`)
	callTool(t, cs, ToolGetRun, `{"task_id": "task-1", "full": true}`)
	callTool(t, cs, ToolWaitRun, `{"task_id": "task-1"}`)
	callTool(t, cs, ToolCancelRun, `{"task_id": "task-1"}`)
	for _, tc := range []struct{ tool, args string }{
		{ToolOpenSession, `{"spec": {"version": 1, "session": {}}}`},
		{ToolRunInSession, `{"session_id": "s", "run": ["true"]}`},
		{ToolWriteFile, `{"session_id": "s", "path": "a", "content": "x"}`},
		{ToolReadFile, `{"session_id": "s", "path": "a"}`},
		{ToolCloseSession, `{"session_id": "s"}`},
		{ToolGetResult, `{"task_id": "task-1"}`},
	} {
		if res, out := callTool(t, cs, tc.tool, tc.args); !res.IsError {
			t.Errorf("%s: %v, want a tool error", tc.tool, out)
		}
	}
}

// tools/list stays affordable: run_action's input schema a few KB (it
// was 15.9 KB with the whole spec schema inline), the whole list about
// half of what it was (45.6 KB without output schemas).
func TestToolsListIsSmall(t *testing.T) {
	cs := connect(t, &fakeClient{}, Options{}, nil)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(list)
	for _, tool := range list.Tools {
		in, _ := json.Marshal(tool.InputSchema)
		out, _ := json.Marshal(tool.OutputSchema)
		t.Logf("%-15s input %5d bytes, output %5d bytes", tool.Name, len(in), len(out))
		if len(in) > 4096 || len(out) > 2048 {
			t.Errorf("%s: input schema %d bytes, output schema %d: want at most 4096 and 2048", tool.Name, len(in), len(out))
		}
		if strings.Contains(string(in), `"definitions"`) {
			t.Errorf("%s: input schema carries the spec's definitions", tool.Name)
		}
	}
	t.Logf("tools/list: %d bytes", len(all))
	if len(all) > 28000 {
		t.Errorf("tools/list answer %d bytes, want at most 28000", len(all))
	}
}
