//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/xeipuuv/gojsonschema"

	"github.com/airlock-run/airlock/internal/testkit/mcptest"
	"github.com/airlock-run/airlock/record"
)

// specSchema reads and compiles the resource airlock://spec-schema.
func specSchema(t *testing.T, cs *mcp.ClientSession) *gojsonschema.Schema {
	t.Helper()
	text := mustRead(t, cs, "airlock://spec-schema")
	return mcptest.CompileSchema(t, "airlock://spec-schema", json.RawMessage(text))
}

// mustRead reads a resource's text (mcptest.ReadResource), failing the
// test on an error.
func mustRead(t *testing.T, cs *mcp.ClientSession, uri string) string {
	t.Helper()
	text, err := mcptest.ReadResource(t, cs, uri, "")
	if err != nil {
		t.Fatalf("read %s: %v", uri, err)
	}
	return text
}

// TestMCPCompactAnswers runs an action through the real binary and a
// real worker and reads its record both ways: compact by default (the
// isolation as {mode, uid, off, uri}, empty fields left out) and whole
// with full: true; the resource at the compact record's isolation.uri
// holds the worker's tiers, the full record's but for the uid. It logs
// the bytes of each, and of tools/list.
func TestMCPCompactAnswers(t *testing.T) {
	b := setup(t)
	cs := mcpStdio(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(list)
	for _, tool := range list.Tools {
		if tool.Name == "run_action" {
			in, _ := json.Marshal(tool.InputSchema)
			t.Logf("run_action input schema: %d bytes", len(in))
			if len(in) > 4096 {
				t.Errorf("run_action's input schema is %d bytes, want at most 4 KiB", len(in))
			}
		}
	}
	t.Logf("tools/list: %d bytes", len(all))

	o := call(t, cs, "run_action", `{"command": "cat in/a.txt; echo done", "files": {"in/a.txt": "hello mcp\n"}, "timeout": "30s", "wait": true, "wait_timeout": "2m"}`, false)
	a := o.run(t)
	if a.Record == nil || a.Record.State != record.StateCompleted || a.Record.Steps[0].Stdout != "hello mcp\ndone\n" {
		t.Fatalf("run_action: %s", o.raw)
	}
	full := call(t, cs, "get_run", `{"task_id": "`+a.TaskID+`", "full": true}`, false)
	compact := call(t, cs, "get_run", `{"task_id": "`+a.TaskID+`"}`, false)
	t.Logf("a typical run's answer: run_action wait %d bytes; get_run %d bytes compact, %d with full: true", len(o.raw), len(compact.raw), len(full.raw))
	if len(o.raw) > 1600 || len(compact.raw) >= len(full.raw)/2 {
		t.Errorf("run_action answered %d bytes, get_run %d compact and %d full: want at most 1600 and half", len(o.raw), len(compact.raw), len(full.raw))
	}

	var c struct {
		Record struct {
			Isolation map[string]any   `json:"isolation"`
			Steps     []map[string]any `json:"steps"`
		} `json:"record"`
	}
	if err := json.Unmarshal(compact.raw, &c); err != nil {
		t.Fatal(err)
	}
	iso := c.Record.Isolation
	uri, _ := iso["uri"].(string)
	if iso["mode"] != "strict" || iso["uid"] == nil || iso["off"] != nil || !strings.HasPrefix(uri, "airlock://isolation/") || iso["seccomp"] != nil {
		t.Errorf("compact isolation %v", iso)
	}
	if st := c.Record.Steps[0]; st["stderr"] != nil || st["stdout_bytes"] != nil || st["stdout"] != "hello mcp\ndone\n" || st["exit_code"] != 0.0 {
		t.Errorf("compact step %v", st)
	}
	f := full.run(t)
	want := f.Record.Isolation
	if want.Seccomp == "" || want.UID == 0 || f.Record.Steps[0].StdoutBytes != 15 {
		t.Fatalf("full record %s", full.raw)
	}
	want.UID = 0
	var got record.Isolation
	if err := json.Unmarshal([]byte(mustRead(t, cs, uri)), &got); err != nil || got != want {
		t.Errorf("%s: %+v (%v), want the full record's %+v", uri, got, err, want)
	}
	if text := mustRead(t, cs, "airlock://isolation"); !strings.Contains(text, strings.TrimPrefix(uri, "airlock://isolation/")) {
		t.Errorf("airlock://isolation: %s", text)
	}
}
