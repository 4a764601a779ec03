package mcpserver

import (
	"encoding/json"
	"strings"
	"testing"
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
