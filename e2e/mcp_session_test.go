//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// An agent's session through the real mcp binary and the SDK's client:
// open, run a step, write a file, run the next step that reads it, read
// what it wrote, close into the approval queue (parked: the agent cannot
// approve). Another server's principal does not see the session.
func TestMCPSession(t *testing.T) {
	b := setup(t)
	cs := mcpStdio(t, b, "-principal", "agent-mcp")
	open := call(t, cs, "open_session", `{"spec": {"version": 1, "timeout": "60s", "session": {"idle_timeout": "30s"},
		"files": {"in/data.csv": "a,b\n1,2\n3,4\n"}, "output": {"result": "out/sum.json"}}}`, false)
	var opened struct {
		SessionID string `json:"session_id"`
		Queue     string `json:"queue"`
	}
	if err := json.Unmarshal(open.raw, &opened); err != nil || opened.SessionID == "" || opened.Queue != b.queue {
		t.Fatalf("open_session: %s (%v)", open.raw, err)
	}
	sid := opened.SessionID
	var st record.Step
	// run as run_action's command: an argv, or a command line run with sh -c.
	for _, c := range []struct {
		name, run string
		argv      []string
		stdout    string
	}{
		{"look", `["head", "-1", "in/data.csv"]`, []string{"head", "-1", "in/data.csv"}, "a,b\n"},
		{"look-line", `"head -1 in/data.csv | tr , ';'"`, []string{"sh", "-c", "head -1 in/data.csv | tr , ';'"}, "a;b\n"},
	} {
		look := call(t, cs, "run_in_session", fmt.Sprintf(`{"session_id": %q, "name": %q, "run": %s}`, sid, c.name, c.run), false)
		if err := json.Unmarshal(look.raw, &st); err != nil || st.Verdict != record.VerdictOK || st.Stdout != c.stdout || !slices.Equal(st.Argv, c.argv) {
			t.Fatalf("run_in_session %s: %s (%v)", c.run, look.raw, err)
		}
	}
	call(t, cs, "write_file", fmt.Sprintf(`{"session_id": %q, "path": "in/column", "content": "2"}`, sid), false)
	sum := call(t, cs, "run_in_session", fmt.Sprintf(`{"session_id": %q, "name": "sum",
		"run": ["sh", "-c", "awk -F, -v c=$(cat in/column) 'NR>1 {s+=$c} END {printf \"{\\\"sum\\\": %%d}\", s}' in/data.csv > out/sum.json"]}`, sid), false)
	if err := json.Unmarshal(sum.raw, &st); err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("sum: %s (%v)", sum.raw, err)
	}
	read := call(t, cs, "read_file", fmt.Sprintf(`{"session_id": %q, "path": "out/sum.json"}`, sid), false)
	var file struct{ Content, Encoding string }
	if err := json.Unmarshal(read.raw, &file); err != nil || file.Content != `{"sum": 6}` || file.Encoding != "utf-8" {
		t.Fatalf("read_file: %s (%v)", read.raw, err)
	}
	for _, run := range []string{`[]`, `""`, `5`, `"echo a\u0000b"`} {
		if e := call(t, cs, "run_in_session", fmt.Sprintf(`{"session_id": %q, "run": %s}`, sid, run), true).err(t); e.Field != "run" {
			t.Errorf("run %s: %+v, want an error naming run", run, e)
		}
	}
	// Another principal's server does not reach this session.
	other := mcpStdio(t, b, "-principal", "someone-else")
	if e := call(t, other, "run_in_session", fmt.Sprintf(`{"session_id": %q, "run": ["true"]}`, sid), true).err(t); !strings.Contains(e.Error, "no session") {
		t.Errorf("another principal's call: %+v", e)
	}
	closed := call(t, cs, "close_session", fmt.Sprintf(`{"session_id": %q}`, sid), false).run(t)
	if closed.Record == nil || closed.Record.State != record.StateParked || len(closed.Record.Steps) != 3 ||
		closed.Record.Principal != "agent-mcp" || !strings.Contains(closed.Note, "cannot approve") {
		t.Fatalf("close_session: %+v", closed)
	}
	if e := call(t, cs, "run_in_session", fmt.Sprintf(`{"session_id": %q, "run": ["true"]}`, sid), true).err(t); !strings.Contains(e.Error, "ended") {
		t.Errorf("a call after the close: %+v", e)
	}
}
