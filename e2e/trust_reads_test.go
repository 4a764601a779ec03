//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/record"
)

// The tokens of TestReadsAreTheCallers' API server.
const (
	tokReadsAgent  = "reads-agent-token-e2e-0123456789"   // runs:write,runs:read
	tokReadsAgent2 = "reads-agent2-token-e2e-0123456789"  // runs:write,runs:read
	tokReadsAny    = "reads-auditor-token-e2e-0123456789" // runs:read:any
	tokReadsBound  = "reads-bound-token-e2e-0123456789"   // runs:read:any, bound to another queue
)

// readAnyScope is the auditors' scope in the token file.
const readAnyScope = "runs:read:any"

// TestReadsAreTheCallers runs issue 31's cross-principal reads through
// the real api, mcp and worker binaries: token agent opens a session,
// runs steps in it and closes it into a published result, and enqueues a
// run that publishes one; token agent2, with runs:read, gets for each of
// them (its record, with ?wait=, its events while a step runs and once
// over, its result, a DELETE) the 404 an unknown id gets, the same body
// but for the id; a runs:read:any token reads them all, unless it is bound
// to another queue; a run with no principal (the Go client's) is read by
// runs:read:any only; an MCP server with another -principal answers
// get_run, wait_run, get_result and cancel_run as for an unknown task,
// while one with agent's reads it; the other's read_file of agent's
// session answers as for an unknown session.
func TestReadsAreTheCallers(t *testing.T) {
	t.Parallel()
	b := setup(t, "-store", t.TempDir(), "-policy", writePolicy(t, `{"default": "promote", "rules": [{"name": "sessions", "when": {"session": true}, "then": "promote"}]}`), "-concurrency", "2")
	tokens := filepath.Join(t.TempDir(), "tokens")
	file := strings.Join([]string{
		"reads-agent runs:write,runs:read " + httpapi.HashToken(tokReadsAgent),
		"reads-agent2 runs:write,runs:read " + tokReadsAgent2,
		"reads-auditor " + readAnyScope + " " + tokReadsAny,
		"reads-bound " + readAnyScope + " " + tokReadsBound + " queues=" + b.queue + "-elsewhere",
	}, "\n")
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	api := newAPIClient(t, startAPI(t, b, "-tokens", tokens))

	// notFound asks path (where id is) as agent2 and as for an unknown id:
	// both must be the same 404, but for the id.
	notFound := func(method, path, id string) {
		t.Helper()
		unknown := uuid.NewString()
		status, _, body := api.do(method, path, tokReadsAgent2, nil, nil)
		ustatus, _, ubody := api.do(method, strings.ReplaceAll(path, id, unknown), tokReadsAgent2, nil, nil)
		got, want := strings.ReplaceAll(string(body), id, "ID"), strings.ReplaceAll(string(ubody), unknown, "ID")
		if status != http.StatusNotFound || ustatus != http.StatusNotFound || got != want {
			t.Errorf("HOLE: %s %s by agent2 (runs:read): %d %s\nwant what an unknown id gets: %d %s", method, path, status, body, ustatus, ubody)
		}
	}
	reads := func(token, path string, v any) {
		t.Helper()
		api.json("GET", path, token, nil, 200, v)
	}

	// agent's session: a step prints a secret of agent's.
	var opened httpapi.SessionOpened
	api.json("POST", "/v1/sessions", tokReadsAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "2m",
		"session": map[string]any{"idle_timeout": "90s"}, "output": map[string]any{"result": "out/r.json"}}, 201, &opened)
	sid := opened.SessionID
	step := func(name, cmd string) {
		t.Helper()
		var st record.Step
		api.json("POST", "/v1/sessions/"+sid+"/steps", tokReadsAgent, map[string]any{"name": name, "run": []string{"sh", "-c", cmd}}, 200, &st)
		if st.Verdict != record.VerdictOK {
			t.Fatalf("step %s: %+v", name, st)
		}
	}
	step("look", "echo agent-secret-look")
	notFound("GET", "/v1/runs/"+sid, sid)
	notFound("GET", "/v1/runs/"+sid+"?queue="+b.queue, sid)
	notFound("GET", "/v1/runs/"+sid+"?wait=2s", sid)
	// Its events, followed while the next step runs: agent2's stream is
	// a 404, the auditor's has the step.
	theirs := sseOpen(t, api.base+"/v1/runs/"+sid+"/events?queue="+b.queue, tokReadsAgent2, 4*time.Second)
	audit := sseOpen(t, api.base+"/v1/runs/"+sid+"/events?queue="+b.queue, tokReadsAny, 4*time.Second)
	step("write", `echo agent-secret-write; echo '{"n": 42}' > out/r.json`)
	if got := <-theirs; got.status != http.StatusNotFound || strings.Contains(got.body, "agent-secret") || strings.Contains(got.body, `"step"`) {
		t.Errorf("HOLE: agent2 (runs:read) follows agent's open session's events: %d\n%s", got.status, got.body)
	}
	if got := <-audit; got.status != http.StatusOK || !strings.Contains(got.body, `"step":"write"`) {
		t.Errorf("the auditor (runs:read:any) following the session's events: %d\n%s", got.status, got.body)
	}
	var closed record.Run
	api.json("POST", "/v1/sessions/"+sid+"/close", tokReadsAgent, nil, 200, &closed)
	if closed.State != record.StatePromoted && closed.State != record.StateCompleted {
		t.Fatalf("the closed session: %s", mustJSON(t, closed))
	}
	var rec record.Run
	reads(tokReadsAgent, "/v1/runs/"+sid+"?wait=1m&until=final", &rec)
	if rec.State != record.StatePromoted {
		t.Fatalf("the session's run: %s", mustJSON(t, rec))
	}
	// The closed session: record (with its steps' output), events, result.
	for _, p := range []string{"", "?wait=2s&until=final", "/events", "/result"} {
		notFound("GET", "/v1/runs/"+sid+p, sid)
	}
	notFound("DELETE", "/v1/runs/"+sid, sid)
	notFound("GET", "/v1/sessions/"+sid+"/files/out%2Fr.json", sid)

	// agent's run, which publishes a result.
	var en httpapi.Enqueued
	api.json("POST", "/v1/runs", tokReadsAgent, fmt.Sprintf(`{"version": 1, "queue": %q,
		"files": {"r.sh": "echo agent-secret-run; echo '{\"total\": 7}' > out/result.json"},
		"steps": [{"run": ["sh", "r.sh"]}], "output": {"result": "out/result.json"}}`, b.queue), 201, &en)
	reads(tokReadsAgent, "/v1/runs/"+en.TaskID+"?wait=1m&until=final", &rec)
	if rec.State != record.StatePromoted || rec.Principal != "reads-agent" {
		t.Fatalf("agent's run: %s", mustJSON(t, rec))
	}
	for _, p := range []string{"", "?queue=" + b.queue, "?wait=2s", "/events", "/result", "/result?queue=" + b.queue} {
		notFound("GET", "/v1/runs/"+en.TaskID+p, en.TaskID)
	}
	notFound("DELETE", "/v1/runs/"+en.TaskID, en.TaskID)

	// runs:read:any reads them all; bound to another queue, none of this one.
	var pub httpapi.Published
	for _, id := range []string{sid, en.TaskID} {
		reads(tokReadsAny, "/v1/runs/"+id, &rec)
		if rec.State != record.StatePromoted || !strings.Contains(mustJSON(t, rec.Steps), "agent-secret") {
			t.Errorf("the auditor reads %s: %s", id, mustJSON(t, rec))
		}
		reads(tokReadsAny, "/v1/runs/"+id+"/result", &pub)
		if len(pub.Result) == 0 {
			t.Errorf("the auditor reads %s's result: %+v", id, pub)
		}
		if status, _, body := api.do("GET", "/v1/runs/"+id+"/events", tokReadsAny, nil, nil); status != 200 || !strings.Contains(string(body), `"reason":"final"`) {
			t.Errorf("the auditor's events of %s: %d %s", id, status, body)
		}
		if status, _, body := api.do("GET", "/v1/runs/"+id, tokReadsBound, nil, nil); status != 404 {
			t.Errorf("a runs:read:any token bound to another queue reads %s: %d %s", id, status, body)
		}
		if status, _, body := api.do("GET", "/v1/runs/"+id+"?queue="+b.queue, tokReadsBound, nil, nil); status != 403 {
			t.Errorf("a runs:read:any token bound to another queue, ?queue= this one: %d %s, want 403", status, body)
		}
	}

	// A run with no principal (the Go client's): runs:read:any only.
	raw, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "steps": [{"run": ["true"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b.wait(raw.TaskID)
	if status, _, body := api.do("GET", "/v1/runs/"+raw.TaskID, tokReadsAgent, nil, nil); status != 404 {
		t.Errorf("HOLE: a run with no principal, read by agent (runs:read): %d %s", status, body)
	}
	reads(tokReadsAny, "/v1/runs/"+raw.TaskID, &rec)

	// MCP: a server of another principal finds none of agent's runs; one
	// of agent's (token names and -principal share one namespace) does.
	other := mcpStdio(t, b, "-principal", "reads-agent2")
	for _, id := range []string{en.TaskID, sid} {
		unknown := uuid.NewString()
		for _, tool := range []string{"get_run", "wait_run", "get_result", "cancel_run"} {
			args := fmt.Sprintf(`{"task_id": %q, "queue": %q}`, id, b.queue)
			res, err := other.CallTool(context.Background(), mcpParams(tool, args))
			if err != nil {
				t.Fatal(err)
			}
			ures, err := other.CallTool(context.Background(), mcpParams(tool, strings.ReplaceAll(args, id, unknown)))
			if err != nil {
				t.Fatal(err)
			}
			got, want := strings.ReplaceAll(callOut{res: res}.text(), id, "ID"), strings.ReplaceAll(callOut{res: ures}.text(), unknown, "ID")
			if !res.IsError || got != want {
				t.Errorf("HOLE: MCP -principal reads-agent2, %s of agent's %s: %s\nwant what an unknown task gets: %s", tool, id, callOut{res: res}.text(), want)
			}
		}
	}
	// Its sessions too, in the words of no session.
	unknown := uuid.NewString()
	args := fmt.Sprintf(`{"session_id": %q, "path": "out/r.json"}`, sid)
	res, err := other.CallTool(context.Background(), mcpParams("read_file", args))
	if err != nil {
		t.Fatal(err)
	}
	ures, err := other.CallTool(context.Background(), mcpParams("read_file", strings.ReplaceAll(args, sid, unknown)))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.ReplaceAll(callOut{res: res}.text(), sid, "ID"), strings.ReplaceAll(callOut{res: ures}.text(), unknown, "ID"); !res.IsError || got != want {
		t.Errorf("HOLE: MCP -principal reads-agent2, read_file of agent's session: %s\nwant what an unknown session gets: %s", got, want)
	}
	own := mcpStdio(t, b, "-principal", "reads-agent")
	if a := call(t, own, "get_run", fmt.Sprintf(`{"task_id": %q}`, en.TaskID), false).run(t); a.Record == nil || a.Record.State != record.StatePromoted {
		t.Errorf("MCP -principal reads-agent, get_run of agent's run: %+v", a)
	}
	call(t, own, "get_result", fmt.Sprintf(`{"task_id": %q}`, sid), false)
}

// sseAnswer is what an SSE route answered: its status and what it sent.
type sseAnswer struct {
	status int
	body   string
}

// sseOpen asks an SSE route for d, from now, and sends its answer once
// the stream (or the error) is over.
func sseOpen(t *testing.T, u, token string, d time.Duration) <-chan sseAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req) // answers once the stream is open
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	out := make(chan sseAnswer, 1)
	go func() {
		defer cancel()
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body) // ends with ctx
		out <- sseAnswer{status: res.StatusCode, body: string(b)}
	}()
	return out
}

// mcpParams are the parameters of a call of tool with args (a JSON object).
func mcpParams(tool, args string) *mcp.CallToolParams {
	var a map[string]any
	_ = json.Unmarshal([]byte(args), &a)
	return &mcp.CallToolParams{Name: tool, Arguments: a}
}
