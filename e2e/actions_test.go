//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-run/airlock/actions"
	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// noteAction echoes its params: the file in/params.json, and an input
// whose URL and header carry ${param:note}.
const noteAction = `
description: Echo a note.
params:
  type: object
  properties: {note: {type: string, maxLength: 200}}
  required: [note]
  additionalProperties: false
spec:
  inputs:
    - url: "%s/echo?q=${param:note}"
      path: in/echo.txt
      headers: {X-Note: "${param:note}"}
  steps:
    - run: [sh, -c, 'cat in/params.json; echo; cat in/echo.txt']
  output: {result: in/params.json}
`

// catalogSetup starts a worker with a catalog of csv-report (its partner
// a test server that records the queries it gets) and note (its echo
// server), the example's policy, and the partner's token as a secret.
func catalogSetup(t *testing.T) (*bundle, *queries) {
	t.Helper()
	token := csvreport.NewToken()
	q := &queries{}
	partner := &csvreport.Partner{Token: token, Rows: 500}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q.add(r.URL.RawQuery + " X-Note=" + r.Header.Get("X-Note"))
		if r.URL.Path == "/echo" {
			fmt.Fprintf(w, "path=%s q=%s header=%s", r.URL.Path, r.URL.Query().Get("q"), r.Header.Get("X-Note"))
			return
		}
		partner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	def, err := csvreport.Definition(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"csv-report.yaml": def, "note.yaml": fmt.Appendf(nil, noteAction, srv.URL)} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := setup(t, "-actions", dir, "-policy", "../examples/csv-report/policy.yaml", "-store", t.TempDir(),
		"-fetch-allow", "127.0.0.1", "-secrets-dir", secretsDir(t, "PARTNER_TOKEN", token))
	return b, q
}

// queries are what the test servers were asked.
type queries struct {
	mu  sync.Mutex
	got []string
}

func (q *queries) add(s string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.got = append(q.got, s)
}

func (q *queries) all() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.got...)
}

// call is a call of action with params on the bundle's queue.
func (b *bundle) call(action, params string) *tasks.Spec {
	return &tasks.Spec{Version: 1, Action: action, Params: json.RawMessage(params), Queue: b.queue}
}

// TestActionCatalog: the catalog action by name and params is promoted by
// the example policy, its record naming the action and the digest the
// worker published; a free-form spec that claims the action is refused
// at enqueue and by the worker; the same steps without the claim are not
// promoted; unknown actions and bad params are refused naming the field,
// at enqueue and, sent past the client, by the worker.
func TestActionCatalog(t *testing.T) {
	t.Parallel()
	b, q := catalogSetup(t)
	ctx := context.Background()
	infos, err := b.client.Actions(ctx, b.queue)
	if err != nil || len(infos) != 2 {
		t.Fatalf("published catalog: %v, %v", infos, err)
	}
	info, _ := actions.Find(infos, csvreport.Name)

	e, err := b.client.Enqueue(ctx, b.call(csvreport.Name, `{"day": "2026-12-05"}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := b.wait(e.TaskID)
	if rec.State != record.StatePromoted || rec.Action != csvreport.Name || rec.ActionDigest != info.Digest ||
		!strings.HasPrefix(rec.ActionDigest, "sha256:") || rec.Decision == nil || rec.Decision.Rule != "quiet-report" {
		t.Fatalf("the catalog run: want promoted by quiet-report, its action and digest recorded:\n%s", mustJSON(t, rec))
	}
	if got := q.all(); len(got) != 1 || !strings.HasPrefix(got[0], "day=2026-12-05 ") {
		t.Errorf("the partner was asked %q, want one export of day=2026-12-05", got)
	}

	// A free-form spec claiming the action: the client refuses it; past the
	// client, so does the worker.
	claim := `{"version": 1, "action": "csv-report", "steps": [{"run": ["sh", "-c", "echo '{\"rows\":1,\"paid_revenue\":1,\"refund_rate\":0}' > out/result.json"]}], "output": {"result": "out/result.json"}}`
	var fe *tasks.FieldError
	if _, err := b.client.Enqueue(ctx, b.spec(claim)); !errors.As(err, &fe) || fe.Field != "steps" {
		t.Errorf("a free-form spec claiming csv-report: %v, want refused on steps", err)
	}
	rec = b.runRaw(claim)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, `a run of action "csv-report" takes only params`) || len(rec.Steps) != 0 {
		t.Errorf("the claim past the client:\n%s", mustJSON(t, rec))
	}
	// The same result without the claim: the policy sees no action, and
	// its default parks it.
	rec = b.run(strings.Replace(claim, `"action": "csv-report", `, "", 1))
	if rec.State != record.StateParked || rec.Action != "" || rec.Decision.Rule != "default" {
		t.Errorf("the same steps without a claim: want parked by the default:\n%s", mustJSON(t, rec))
	}

	// Unknown actions and bad params.
	for _, c := range []struct{ action, params, field, worker string }{
		{"nope", `{}`, "action", `"nope" is not in this worker's catalog`},
		{csvreport.Name, `{"day": "yesterday"}`, "params.day", "params.day: does not match pattern"},
		{csvreport.Name, `{"day": "2026-12-05", "extra": 1}`, "params", "params: additional property extra is not allowed"},
	} {
		if _, err := b.client.Enqueue(ctx, b.call(c.action, c.params)); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s %s at enqueue: %v, want refused on %s", c.action, c.params, err, c.field)
		}
		rec := b.runRaw(fmt.Sprintf(`{"version": 1, "action": %q, "params": %s}`, c.action, c.params))
		if rec.State != record.StateFailed || !strings.Contains(rec.Error, c.worker) || len(rec.Steps) != 0 {
			t.Errorf("%s %s past the client: want failed with %q:\n%s", c.action, c.params, c.worker, mustJSON(t, rec))
		}
	}
	if got := q.all(); len(got) != 1 {
		t.Errorf("refused calls reached the partner: %q", got)
	}
}

// TestActionParamsAreData: params full of shell and URL metacharacters
// reach the run as data only: in/params.json byte for byte, the input's
// query value and header, never the URL's structure, the argv or a
// command.
func TestActionParamsAreData(t *testing.T) {
	t.Parallel()
	b, q := catalogSetup(t)
	note := `$(touch pwned); ` + "`id`" + `; rm -rf /workspace/* & q=1#frag/../x?y`
	params, _ := json.Marshal(map[string]string{"note": note})
	rec := b.run(fmt.Sprintf(`{"version": 1, "action": "note", "params": %s}`, params))
	if rec.State == record.StateFailed || len(rec.Steps) != 1 {
		t.Fatalf("note: %s", mustJSON(t, rec))
	}
	st := rec.Steps[0]
	if want := `sh -c cat in/params.json; echo; cat in/echo.txt`; strings.Join(st.Argv, " ") != want {
		t.Errorf("argv %q, want the definition's", st.Argv)
	}
	if want := string(params) + "\npath=/echo q=" + note + " header=" + note; st.Stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", st.Stdout, want)
	}
	for _, f := range rec.Files {
		if strings.Contains(f.Path, "pwned") {
			t.Errorf("a param ran as a command: %s", f.Path)
		}
	}
	got := q.all()
	raw, _, _ := strings.Cut(strings.Join(got, ""), " X-Note=")
	if len(got) != 1 || !strings.HasPrefix(raw, "q=") || strings.ContainsAny(raw[2:], "&#/?=$` ;") {
		t.Errorf("the echo server was asked %q: the param changed the URL's structure", got)
	}
}

// TestActionFrontDoors: the HTTP API lists the catalog and runs an action
// by name (POST /v1/actions/{name}/runs), its run stamped with the
// token's name; the MCP server offers each action as a tool of its own,
// with its params as input schema, and runs it stamped with its
// principal.
func TestActionFrontDoors(t *testing.T) {
	t.Parallel()
	b, _ := catalogSetup(t)
	api := newAPIClient(t, startAPI(t, b))
	var list struct {
		Queue   string         `json:"queue"`
		Actions []actions.Info `json:"actions"`
	}
	api.json("GET", "/v1/actions?queue="+b.queue, apiAgent, nil, 200, &list)
	if len(list.Actions) != 2 || list.Actions[0].Name != csvreport.Name || list.Actions[1].Name != "note" || !strings.Contains(string(list.Actions[1].Params), `"note"`) {
		t.Fatalf("GET /v1/actions: %s", mustJSON(t, list))
	}
	var en struct {
		TaskID string `json:"task_id"`
	}
	api.json("POST", "/v1/actions/note/runs", apiAgent, fmt.Sprintf(`{"params": {"note": "via api"}, "queue": %q}`, b.queue), 201, &en)
	rec := b.wait(en.TaskID)
	if rec.Action != "note" || rec.Principal != "agent" || len(rec.Steps) != 1 || !strings.HasPrefix(rec.Steps[0].Stdout, `{"note":"via api"}`) {
		t.Errorf("the API's run of note:\n%s", mustJSON(t, rec))
	}
	status, _, body := api.do("POST", "/v1/actions/note/runs", apiAgent, fmt.Sprintf(`{"params": {"note": 5}, "queue": %q}`, b.queue), nil)
	if status != 400 || !strings.Contains(string(body), `"field":"params.note"`) {
		t.Errorf("bad params through the API: %d %s", status, body)
	}
	status, _, body = api.send("POST", "/v1/actions/note/runs", apiAgent, fmt.Sprintf(`{"params": {"note": "x"}, "queue": %q, "steps": [{"run": ["id"]}]}`, b.queue), nil, true)
	if status != 400 || !strings.Contains(string(body), `"field":"steps"`) {
		t.Errorf("steps beside an action through the API: %d %s", status, body)
	}

	cs := mcpStdio(t, b, "-principal", "agent-7")
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, tl := range tools.Tools {
		if tl.Name == "note" {
			found = strings.Contains(mustJSON(t, tl.InputSchema), `"note"`) && strings.HasPrefix(tl.Description, "Echo a note.")
		}
	}
	if !found {
		t.Fatalf("the MCP server's tools lack note: %s", mustJSON(t, tools.Tools))
	}
	a := call(t, cs, "note", `{"note": "via mcp"}`, false).run(t)
	if a.Record == nil || a.Record.Action != "note" || a.Record.Principal != "agent-7" || !strings.HasPrefix(a.Record.Steps[0].Stdout, `{"note":"via mcp"}`) {
		t.Errorf("the MCP tool note: %s", mustJSON(t, a))
	}
	if e := call(t, cs, "note", `{"note": "x", "extra": 1}`, true); !strings.Contains(e.text(), "params") {
		t.Errorf("bad params through MCP: %s", e.text())
	}

	// Params that violate the schema twice, through every front end: the
	// error lists both, the missing property first, naming its field; its
	// hint names what that front end's caller can do to see the schema.
	const date = `{"date": "2026-12-05"}`
	const both = "params: day is required; params: additional property date is not allowed"
	for _, fe := range []struct {
		name       string
		call       func() (field, msg string)
		field, msg string
	}{
		{"Go client", func() (string, string) {
			_, err := b.client.Enqueue(context.Background(), b.call(csvreport.Name, date))
			var fe *tasks.FieldError
			if !errors.As(err, &fe) {
				return "", fmt.Sprint(err)
			}
			return fe.Field, err.Error()
		}, "params", both + " (Client.Actions(ctx, queue) returns each action's params schema)"},
		{"enqueue", func() (string, string) {
			_, stdout, _ := b.enqueueCLI("", "-json", "-queue", b.queue, "-action", csvreport.Name, "-params", date)
			var e struct{ Error, Field string }
			_ = json.Unmarshal([]byte(stdout), &e)
			return e.Field, e.Error
		}, "params", "spec rejected: " + both + " (enqueue -list-actions [-queue Q] shows each action's params schema)"},
		{"HTTP API", func() (string, string) {
			_, _, body := api.do("POST", "/v1/actions/"+csvreport.Name+"/runs", apiAgent, fmt.Sprintf(`{"params": %s, "queue": %q}`, date, b.queue), nil)
			var p struct{ Field, Detail, Hint string }
			_ = json.Unmarshal(body, &p)
			if p.Hint != "GET /v1/actions?queue=Q shows each action's params schema" {
				return p.Field, "hint " + p.Hint
			}
			return p.Field, p.Detail
		}, "params", "spec rejected: " + both + " (GET /v1/actions?queue=Q shows each action's params schema)"},
		{"MCP action tool", func() (string, string) {
			e := call(t, cs, csvreport.Name, date, true).err(t)
			return e.Field, e.Error
		}, "params", "spec rejected: " + both + " (this tool's input schema in tools/list is the action's params schema)"},
		{"MCP run_action", func() (string, string) {
			e := call(t, cs, "run_action", fmt.Sprintf(`{"spec": {"version": 1, "action": %q, "params": %s}}`, csvreport.Name, date), true).err(t)
			return e.Field, e.Error
		}, "spec.params", "spec rejected: spec." + both + " (the action's own tool in tools/list has its params schema as input schema)"},
	} {
		if field, msg := fe.call(); field != fe.field || msg != fe.msg {
			t.Errorf("%s: field %q, %q\nwant field %q, %q", fe.name, field, msg, fe.field, fe.msg)
		}
	}
}
