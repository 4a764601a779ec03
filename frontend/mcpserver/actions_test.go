package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/internal/testkit/mcptest"
	"github.com/airlock-run/airlock/record"
)

// toolNames lists the server's tools.
func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// TestActionTools: each published action is a tool with its params as
// input schema; calling it enqueues a call of the action with the
// arguments as params, stamped with the server's principal; an action
// named like a built-in tool is not offered; a withdrawn action's tool
// goes.
func TestActionTools(t *testing.T) {
	params := json.RawMessage(`{"type":"object","properties":{"day":{"type":"string"}},"required":["day"],"additionalProperties":false}`)
	f := &fakeClient{catalog: []actions.Info{
		{Name: "csv-report", Description: "Summarize an export.", Params: params, Digest: "sha256:1"},
		{Name: ToolGetRun, Description: "shadows a tool", Params: params, Digest: "sha256:2"},
	}}
	cs := connect(t, f, Options{Principal: "agent-7", Wait: time.Second}, nil)
	names := toolNames(t, cs)
	if !slices.Contains(names, "csv-report") || len(names) != len(Tools)+1 {
		t.Fatalf("tools %v: want the built-ins and csv-report", names)
	}
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range res.Tools {
		if tl.Name == "csv-report" {
			b, _ := json.Marshal(tl.InputSchema)
			var got, want any
			_ = json.Unmarshal(b, &got)
			_ = json.Unmarshal(params, &want)
			if string(mustMarshal(got)) != string(mustMarshal(want)) {
				t.Errorf("input schema %s, want %s", b, params)
			}
		}
	}
	call, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "csv-report", Arguments: map[string]any{"day": "2026-12-05"}})
	if err != nil || call.IsError {
		t.Fatalf("call: %v %+v", err, call)
	}
	mcptest.CheckOutput(t, cs, "csv-report", call)
	f.mu.Lock()
	got := f.enqueued[len(f.enqueued)-1]
	f.mu.Unlock()
	if got.Action != "csv-report" || string(got.Params) != `{"day":"2026-12-05"}` || got.Principal != "agent-7" || len(got.Steps) != 0 {
		t.Errorf("enqueued %+v", got)
	}
	var out struct {
		Record *record.Run `json:"record"`
	}
	if err := json.Unmarshal(mustMarshal(call.StructuredContent), &out); err != nil || out.Record == nil || out.Record.Action != "csv-report" {
		t.Errorf("answer %+v (%v)", out, err)
	}
	f.mu.Lock()
	f.catalog = nil
	f.mu.Unlock()
	time.Sleep(1100 * time.Millisecond) // the catalog is read at most once a second
	if names := toolNames(t, cs); slices.Contains(names, "csv-report") || len(names) != len(Tools) {
		t.Errorf("after the catalog emptied: tools %v", names)
	}
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
