//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// A session opened with "session": {} lives long enough for an agent
// that thinks between its calls: 30 minutes in all, 5 without a call,
// through the HTTP API and through MCP. A session deleted through the API
// names the deleting token, as a cancel of a run does.
func TestSessionDefaultLife(t *testing.T) {
	b := setup(t)
	api := newAPIClient(t, startAPI(t, b))
	var opened struct {
		SessionID string    `json:"session_id"`
		ExpiresAt time.Time `json:"expires_at"`
		IdleUntil time.Time `json:"idle_until"`
	}
	before := time.Now()
	api.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "session": map[string]any{}}, 201, &opened)
	if life, idle := opened.ExpiresAt.Sub(before), opened.IdleUntil.Sub(before); life < 29*time.Minute || life > 31*time.Minute || idle < 4*time.Minute || idle > 6*time.Minute {
		t.Errorf("API open: expires in %s, idle until %s from now; want 30m and 5m", life, idle)
	}
	var rec record.Run
	api.json("DELETE", "/v1/sessions/"+url.PathEscape(opened.SessionID), apiAgent, nil, 200, &rec)
	if rec.State != record.StateCanceled || !strings.HasPrefix(rec.Error, "canceled by agent while running") {
		t.Errorf("deleted through the API: state %s, error %q; want canceled by the token agent", rec.State, rec.Error)
	}

	cs := mcpStdio(t, b, "-principal", "agent-mcp")
	before = time.Now()
	open := call(t, cs, "open_session", `{"spec": {"version": 1, "session": {}}}`, false)
	var out struct {
		SessionID string    `json:"session_id"`
		ExpiresAt time.Time `json:"expires_at"`
		IdleUntil time.Time `json:"idle_until"`
	}
	if err := json.Unmarshal(open.raw, &out); err != nil {
		t.Fatalf("open_session: %s (%v)", open.raw, err)
	}
	if life, idle := out.ExpiresAt.Sub(before), out.IdleUntil.Sub(before); life < 29*time.Minute || life > 31*time.Minute || idle < 4*time.Minute || idle > 6*time.Minute {
		t.Errorf("MCP open: expires in %s, idle until %s from now; want 30m and 5m", life, idle)
	}
	// Closed without an output contract after a failing step: completed,
	// and the note says what the steps did.
	call(t, cs, "run_in_session", fmt.Sprintf(`{"session_id": %q, "run": ["false"]}`, out.SessionID), false)
	closed := call(t, cs, "close_session", fmt.Sprintf(`{"session_id": %q}`, out.SessionID), false).run(t)
	if r := closed.Record; r == nil || r.State != record.StateCompleted || r.Verdict != record.VerdictOK || r.Session == nil || r.Session.StepsFailed != 1 ||
		!strings.Contains(closed.Note, "closed with 1 of its 1 steps failed") {
		t.Errorf("closed with a failed step: %+v", closed)
	}
}

// A session that reaches its deadline ends expired, and every front end
// says so in the session's words (its deadline passed), never in an
// approval's (nobody decided).
func TestSessionDeadlineWords(t *testing.T) {
	b := setup(t)
	api := newAPIClient(t, startAPI(t, b))
	var opened struct {
		SessionID string `json:"session_id"`
	}
	// idle_timeout as long as the timeout: the deadline comes first.
	api.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "2s",
		"session": map[string]any{"idle_timeout": "2s"}}, 201, &opened)
	sid := opened.SessionID
	const want = "the session's deadline passed (timeout 2s from its open)"

	// Go: the record, the result, a call.
	rec := b.wait(sid)
	if rec.State != record.StateExpired || rec.Verdict != record.VerdictTimeout || rec.Error != want || rec.Session == nil || rec.Session.Ended != "timeout" {
		t.Errorf("record: state %s, verdict %s, error %q, session %+v; want expired, %q", rec.State, rec.Verdict, rec.Error, rec.Session, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := b.client.Result(ctx, sid); err == nil || !strings.Contains(err.Error(), "is expired, not promoted: "+want) {
		t.Errorf("Client.Result: %v", err)
	}
	s, _, err := b.client.Session(ctx, sid)
	if err == nil {
		_, err = s.Run(ctx, sh("late", "true"))
	}
	if err == nil || !strings.Contains(err.Error(), "expired ("+want+")") {
		t.Errorf("a Go call after the deadline: %v", err)
	}

	// HTTP: the run, and a call (410).
	var got record.Run
	api.json("GET", "/v1/runs/"+url.PathEscape(sid)+"?queue="+b.queue, apiAgent, nil, 200, &got)
	if got.State != record.StateExpired || got.Error != want {
		t.Errorf("GET /v1/runs: state %s, error %q", got.State, got.Error)
	}
	status, _, body := api.do("POST", "/v1/sessions/"+url.PathEscape(sid)+"/steps", apiAgent, map[string]any{"run": []string{"true"}}, nil)
	if status != 410 || !strings.Contains(string(body), want) {
		t.Errorf("a call through the API after the deadline: %d %s", status, body)
	}

	// MCP: get_run's note.
	cs := mcpStdio(t, b, "-principal", "agent")
	run := call(t, cs, "get_run", fmt.Sprintf(`{"task_id": %q}`, sid), false).run(t)
	if run.Note != "expired: "+want+"; nothing is published" {
		t.Errorf("get_run's note: %q", run.Note)
	}
}
