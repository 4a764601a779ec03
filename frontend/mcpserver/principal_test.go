package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// TestRunActionStampsPrincipal checks that every run an agent enqueues
// is stamped with the server's principal (DefaultPrincipal, or
// Options.Principal), that a spec naming a principal is refused naming
// spec.principal, that the simple form has no principal field, and that
// run_action's input schema does not offer one.
func TestRunActionStampsPrincipal(t *testing.T) {
	for _, tc := range []struct{ opt, want string }{{"", "mcp"}, {"support-bot@corp", "support-bot@corp"}} {
		fc := &fakeClient{}
		cs := connect(t, fc, Options{Principal: tc.opt}, nil)
		if res, out := callTool(t, cs, ToolRunAction, `{"command": "true"}`); res.IsError {
			t.Fatalf("simple form: %v", out)
		}
		if res, out := callTool(t, cs, ToolRunAction, `{"spec": {"version": 1, "steps": [{"run": ["true"]}]}}`); res.IsError {
			t.Fatalf("spec: %v", out)
		}
		for _, who := range []string{"mcp", "admin"} {
			res, out := callTool(t, cs, ToolRunAction, `{"spec": {"version": 1, "principal": "`+who+`", "steps": [{"run": ["true"]}]}}`)
			if !res.IsError || out["field"] != "spec.principal" {
				t.Errorf("spec with principal %s: %v, want an error naming spec.principal", who, out)
			}
		}
		res, out := callTool(t, cs, ToolRunAction, `{"command": "true", "principal": "admin"}`)
		if !res.IsError || out["field"] != "principal" || !strings.Contains(out["error"].(string), "unknown field") {
			t.Errorf("simple form with principal: %v, want unknown field principal", out)
		}
		if len(fc.enqueued) != 2 {
			t.Fatalf("%d runs enqueued, want 2", len(fc.enqueued))
		}
		for _, s := range fc.enqueued {
			if s.Principal != tc.want {
				t.Errorf("Options.Principal %q: enqueued with principal %q, want %q", tc.opt, s.Principal, tc.want)
			}
		}
	}
	sc, err := buildSchemas()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sc.runAction)
	var tool struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(b, &tool); err != nil {
		t.Fatal(err)
	}
	if _, ok := tool.Properties["principal"]; ok {
		t.Error("run_action offers principal")
	}
	if _, ok := tool.Properties["spec"].Properties["principal"]; ok || len(tool.Properties["spec"].Properties) == 0 {
		t.Errorf("run_action's spec offers principal (or no properties): %v", tool.Properties["spec"].Properties)
	}
	if _, err := New(&fakeClient{}, Options{Principal: "not a name"}); err == nil {
		t.Error("New with principal \"not a name\": no error")
	}
}

// TestReadsAreThePrincipals: get_run, wait_run, get_result and cancel_run
// read a run of the server's principal only; another principal's run, and
// one with no principal, are the error an unknown task gets, the same
// words but for the id (no oracle): wait_run does not wait for them. An
// unknown task is an error, not a crash, in every tool (wait_run's was a
// nil answer that took the server down).
func TestReadsAreThePrincipals(t *testing.T) {
	fc := &fakeClient{block: true, runs: map[string]*record.Run{}}
	for id, principal := range map[string]string{"mine": "agent@corp", "theirs": "someone-else", "nobodys": ""} {
		fc.runs[id] = &record.Run{TaskID: id, Queue: "default", Principal: principal, State: record.StatePromoted}
	}
	// Waits block (fc.block) until Options.Wait: the own run's wait_run
	// answers timed out, another's must answer at once, as unknown.
	cs := connect(t, fc, Options{Principal: "agent@corp", Wait: 100 * time.Millisecond}, nil)
	unknown := func(tool, id string) string {
		res, out := callTool(t, cs, tool, `{"task_id": "`+id+`"}`)
		if !res.IsError {
			t.Errorf("%s of %s: %v, want an error", tool, id, out)
			return ""
		}
		return strings.ReplaceAll(out["error"].(string), id, "ID")
	}
	for _, tc := range []struct {
		tool string
		mine bool // the own run's answer is no error
	}{
		{ToolGetRun, true}, {ToolWaitRun, true}, {ToolGetResult, true}, {ToolCancelRun, false},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			want := unknown(tc.tool, "no-such-task")
			if !strings.Contains(want, "not found") {
				t.Errorf("%s of an unknown task: %q", tc.tool, want)
			}
			for _, id := range []string{"theirs", "nobodys"} {
				if got := unknown(tc.tool, id); got != want {
					t.Errorf("%s of %s: %q, want what an unknown task gets: %q", tc.tool, id, got, want)
				}
			}
			if tc.mine {
				if res, out := callTool(t, cs, tc.tool, `{"task_id": "mine"}`); res.IsError {
					t.Errorf("%s of the server's own run: %v", tc.tool, out)
				}
			}
		})
	}
}
