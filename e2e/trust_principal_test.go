//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// The tokens of TestAPIPrincipals' API server.
const (
	tokAliceBackend = "alice-backend-token-e2e-0123456789" // runs:write,runs:read
	tokBobBackend   = "bob-backend-token-e2e-0123456789"   // runs:write,runs:read
	tokAliceOfficer = "alice-approver-token-e2e-0123456789"
	tokBound        = "bound-token-e2e-0123456789" // every scope, bound to another queue
)

// TestAPIPrincipals runs the red team's identity cases through the real
// api and worker binaries: two API tokens with one Idempotency-Key get two
// tasks (the same token its own task again); each run's record, events
// and approval say which token asked, and a policy rule on principal
// decides on it; a token bound to another queue gets 403 for this one;
// a reject whose body says someone else's by is recorded as the token's
// name, the other name kept only as a note.
func TestAPIPrincipals(t *testing.T) {
	t.Parallel()
	pol := writePolicy(t, `{"default": "park", "rules": [
		{"name": "bob-is-trusted", "when": {"principal": ["bob-backend"]}, "then": "promote"}]}`)
	b := setup(t, "-store", t.TempDir(), "-policy", pol)
	tokens := filepath.Join(t.TempDir(), "tokens")
	file := strings.Join([]string{
		"alice-backend runs:write,runs:read " + httpapi.HashToken(tokAliceBackend),
		"bob-backend runs:write,runs:read " + tokBobBackend,
		"alice approvals:read,approvals:write " + httpapi.HashToken(tokAliceOfficer),
		"bound runs:write,runs:read,approvals:read,approvals:write " + tokBound + " queues=" + b.queue + "-elsewhere",
	}, "\n")
	if err := os.WriteFile(tokens, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	api := newAPIClient(t, startAPI(t, b, "-tokens", tokens))
	spec := fmt.Sprintf(`{"version": 1, "queue": %q,
		"files": {"pay.sh": "echo '{\"total\": 10, \"pay_to\": \"DE00 1234\"}' > out/result.json"},
		"steps": [{"run": ["sh", "pay.sh"]}],
		"output": {"result": "out/result.json", "schema": {"type": "object", "required": ["total"]}}}`, b.queue)
	key := map[string]string{"Idempotency-Key": "payment-run-" + b.queue}
	post := func(token string, wantStatus int) httpapi.Enqueued {
		t.Helper()
		status, _, body := api.do("POST", "/v1/runs", token, spec, key)
		var en httpapi.Enqueued
		if status != wantStatus || json.Unmarshal(body, &en) != nil {
			t.Fatalf("POST /v1/runs: %d %s, want %d", status, body, wantStatus)
		}
		return en
	}

	// One key, two tokens: two tasks. The same token: its own task.
	alice := post(tokAliceBackend, 201)
	bob := post(tokBobBackend, 201)
	if bob.Duplicate || bob.TaskID == alice.TaskID {
		t.Fatalf("bob's POST with alice's key: %+v, alice's %+v: want a task of his own", bob, alice)
	}
	if again := post(tokAliceBackend, 200); !again.Duplicate || again.TaskID != alice.TaskID {
		t.Errorf("alice's same key again: %+v, want her task %s", again, alice.TaskID)
	}
	if alice.TaskID != airlock.IdempotentTaskIDFor(b.queue, "alice-backend", key["Idempotency-Key"]) {
		t.Errorf("alice's task id %s", alice.TaskID)
	}
	// A spec cannot say who asks.
	withPrincipal := strings.Replace(spec, `"version": 1,`, `"version": 1, "principal": "bob-backend",`, 1)
	status, _, body := api.do("POST", "/v1/runs", tokAliceBackend, withPrincipal, nil)
	var p httpapi.Problem
	if status != 400 || json.Unmarshal(body, &p) != nil || p.Field != "principal" || !strings.Contains(p.Detail, "set by the server from your token") {
		t.Errorf("a spec naming bob-backend, by alice's token: %d %s", status, body)
	}

	// Each record says who asked (each token reads its own: reads are
	// the caller's, TestReadsAreTheCallers); the policy promotes bob's run
	// only.
	runOf := func(token, taskID, query string) record.Run {
		t.Helper()
		var rec record.Run
		api.json("GET", "/v1/runs/"+taskID+"?"+query, token, nil, 200, &rec)
		return rec
	}
	recA := runOf(tokAliceBackend, alice.TaskID, "wait=2m")
	recB := runOf(tokBobBackend, bob.TaskID, "wait=2m&until=final")
	if recA.Principal != "alice-backend" || recA.State != record.StateParked || recA.ApprovalID == "" {
		t.Fatalf("alice's run: principal %q, state %s\nworker logs:\n%s", recA.Principal, recA.State, b.worker.logs.String())
	}
	if recB.Principal != "bob-backend" || recB.State != record.StatePromoted || recB.DecidedBy != "policy:bob-is-trusted" {
		t.Errorf("bob's run: principal %q, state %s, decided by %q; want bob-backend, promoted by policy:bob-is-trusted",
			recB.Principal, recB.State, recB.DecidedBy)
	}

	// A token bound to another queue: 403 naming this one.
	for _, rq := range []struct{ method, path string }{
		{"POST", "/v1/runs"},
		{"GET", "/v1/runs/" + alice.TaskID + "?queue=" + b.queue},
		{"GET", "/v1/approvals/" + recA.ApprovalID},
		{"POST", "/v1/approvals/" + recA.ApprovalID + "/accept"},
	} {
		var reqBody any
		switch {
		case rq.path == "/v1/runs":
			reqBody = spec
		case rq.method == "POST":
			reqBody = map[string]string{"comment": "mine"}
		}
		status, _, body := api.do(rq.method, rq.path, tokBound, reqBody, nil)
		if status != 403 || json.Unmarshal(body, &p) != nil || p.Queue != b.queue || p.Type != httpapi.ProblemForbidden {
			t.Errorf("%s %s by a token bound to another queue: %d %s, want 403 naming %s", rq.method, rq.path, status, body, b.queue)
		}
	}
	if status, _, body := api.do("GET", "/v1/runs/"+alice.TaskID, tokBound, nil, nil); status != 404 {
		t.Errorf("GET a run of another queue without ?queue=, by a bound token: %d %s, want 404", status, body)
	}

	// Alice rejects, claiming to be bob: she is recorded, bob is a note.
	var rj httpapi.Approval
	api.json("POST", "/v1/approvals/"+recA.ApprovalID+"/reject", tokAliceOfficer,
		map[string]string{"by": "security-officer-bob", "comment": "wrong IBAN"}, 200, &rj)
	if rj.DecidedBy != "alice" || rj.ByNote != "security-officer-bob" || rj.Principal != "alice-backend" {
		t.Errorf("reject: decided_by %q, by_note %q, principal %q; want alice, security-officer-bob, alice-backend", rj.DecidedBy, rj.ByNote, rj.Principal)
	}
	if rec := runOf(tokAliceBackend, alice.TaskID, "wait=1m&until=final"); rec.State != record.StateRejected || rec.DecidedBy != "alice" {
		t.Errorf("alice's run after the reject: %s by %q, want rejected by alice", rec.State, rec.DecidedBy)
	}
	code, out, stderr := b.approveCLI("show", recA.ApprovalID)
	if code != 0 || !strings.Contains(out, "rejected by alice") || !strings.Contains(out, "security-officer-bob") || !strings.Contains(out, "alice-backend") {
		t.Errorf("approve show: exit %d\n%s%s", code, out, stderr)
	}

	// The events stream says who asked, for every state of both runs.
	msgs, err := redistest.Client(t).XRange(context.Background(), events.Key, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for _, m := range msgs {
		task, _ := m.Values["task_id"].(string)
		if task == alice.TaskID || task == bob.TaskID {
			who, _ := m.Values["principal"].(string)
			seen[task] = append(seen[task], fmt.Sprintf("%s:%s", m.Values["state"], who))
		}
	}
	if got := strings.Join(seen[alice.TaskID], " "); got != "parked:alice-backend rejected:alice-backend" {
		t.Errorf("alice's run's events: %s", got)
	}
	if got := strings.Join(seen[bob.TaskID], " "); got != "promoted:bob-backend" {
		t.Errorf("bob's run's events: %s", got)
	}
}
