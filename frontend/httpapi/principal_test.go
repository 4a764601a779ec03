package httpapi_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/record"
)

// TestParseTokensBindings checks queues= and actions= in a token file,
// and that each of their errors names its line.
func TestParseTokensBindings(t *testing.T) {
	ts, err := httpapi.ParseTokens("f", strings.NewReader(
		"a runs:write "+tokWriter+" queues=payments,reports\n"+
			"b runs:write "+tokReader+"\tactions=csv.transform,send-email queues=payments,payments\n"+
			"c runs:write "+tokEnqueuer+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := ts.Lookup(tokWriter), ts.Lookup(tokReader), ts.Lookup(tokEnqueuer)
	if !slices.Equal(a.Queues, []string{"payments", "reports"}) || a.Actions != nil {
		t.Errorf("a: %+v", a)
	}
	if !slices.Equal(b.Queues, []string{"payments"}) || !slices.Equal(b.Actions, []string{"csv.transform", "send-email"}) {
		t.Errorf("b: %+v", b)
	}
	for _, tc := range []struct {
		tok           *httpapi.Token
		queue, action string
		want          bool
	}{
		{a, "payments", "", true}, {a, "default", "", false}, {a, "reports", "anything", true},
		{b, "payments", "csv.transform", true}, {b, "payments", "", false}, {b, "payments", "csv", false},
		{b, "reports", "csv.transform", false}, {c, "default", "", true}, {c, "x", "y", true},
	} {
		if got := tc.tok.MayRun(tc.queue, tc.action); got != tc.want {
			t.Errorf("%s.MayRun(%q, %q) = %v, want %v", tc.tok.Name, tc.queue, tc.action, got, tc.want)
		}
	}
	ok := "a runs:write " + tokWriter + "\n"
	for _, tc := range []struct{ line, want string }{
		{"b runs:read " + tokReader + " queues=", `f:2: token b: queues=: "" is not a queue name`},
		{"b runs:read " + tokReader + " queues=a,,b", `f:2: token b: queues=: "" is not a queue name`},
		{"b runs:read " + tokReader + " queues=a.b", `f:2: token b: queues=: "a.b" is not a queue name`},
		{"b runs:read " + tokReader + " actions=a/b", `f:2: token b: actions=: "a/b" is not an action name`},
		{"b runs:read " + tokReader + " queues=a queues=b", "f:2: token b: queues= is given twice"},
		{"b runs:read " + tokReader + " tenants=a", `f:2: token b: unknown binding "tenants"`},
		{"b runs:read " + tokReader + " payments", `f:2: token b: "payments": want queues=`},
		{"b runs:read queues=payments,refunds " + tokReader, `f:2: token of b: the third field is a binding (queues= or actions=): the token comes third`},
		{"b runs:read " + tokReader + " queues=a actions=b queues=c", "f:2: want NAME SCOPE[,SCOPE...] TOKEN [queues=Q,...] [actions=A,...], got 6 fields"},
	} {
		_, err := httpapi.ParseTokens("f", strings.NewReader(ok+tc.line))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTokens(%q) = %v, want an error with %q", tc.line, err, tc.want)
		}
	}
}

// TestEnqueuePrincipal checks that the API stamps every run with its
// token's name, refuses a spec that names a principal, and scopes
// idempotency keys per token: two tokens with one key get two tasks, one
// token its own task again.
func TestEnqueuePrincipal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	for _, who := range []string{"writer", "someone-else"} {
		s := e.spec(false, "")
		s["principal"] = who
		p := e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: s}).problem(t, http.StatusBadRequest)
		if p.Type != httpapi.ProblemSpecRejected || p.Field != "principal" || p.Detail != "spec rejected: principal: set by the server from your token (leave principal out: every run is stamped with the name of the token that enqueued it)" {
			t.Errorf("spec with principal %q: %+v", who, p)
		}
	}

	key := map[string]string{"Idempotency-Key": "order-7"}
	post := func(token string, wantStatus int) httpapi.Enqueued {
		t.Helper()
		r := e.do(request{method: "POST", path: "/v1/runs", token: token, body: e.spec(false, ""), header: key})
		if r.status != wantStatus {
			t.Fatalf("POST: %d %s, want %d", r.status, r.body, wantStatus)
		}
		var en httpapi.Enqueued
		r.json(t, &en)
		return en
	}
	w1 := post(tokWriter, http.StatusCreated)
	en1 := post(tokEnqueuer, http.StatusCreated)
	if en1.Duplicate || en1.TaskID == w1.TaskID {
		t.Errorf("another token's same key: %+v, the writer's %+v: want a task of its own", en1, w1)
	}
	if w1.TaskID != airlock.IdempotentTaskIDFor(e.queue, "writer", "order-7") || en1.TaskID != airlock.IdempotentTaskIDFor(e.queue, "enqueuer", "order-7") {
		t.Errorf("task ids %s, %s: want the ids of (queue, principal, key)", w1.TaskID, en1.TaskID)
	}
	if w2 := post(tokWriter, http.StatusOK); !w2.Duplicate || w2.TaskID != w1.TaskID || w2.RunID != w1.RunID {
		t.Errorf("the same token's same key: %+v, want a duplicate of %+v", w2, w1)
	}

	for _, tc := range []struct{ taskID, principal string }{{w1.TaskID, "writer"}, {en1.TaskID, "enqueuer"}} {
		if rec := e.run(tc.taskID, "wait=30s"); rec.Principal != tc.principal || rec.State != record.StateCompleted {
			t.Errorf("run %s: principal %q, state %s; want %s, completed", tc.taskID, rec.Principal, rec.State, tc.principal)
		}
	}
}

// TestQueueBoundToken checks a token bound to queues: 403 naming the
// queue for a spec, a ?queue= or an approval elsewhere; a run of another
// queue named without ?queue= is 404 (its existence is not confirmed);
// lists hold only its queues' approvals; a token bound to the run's queue
// does everything there.
func TestQueueBoundToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	forbidden := func(r resp, field, queue string) {
		t.Helper()
		p := r.problem(t, http.StatusForbidden)
		if p.Type != httpapi.ProblemForbidden || p.Field != field || p.Queue != queue || !strings.Contains(p.Detail, "may not use queue "+queue) {
			t.Errorf("problem %+v, want forbidden, field %s, queue %s", p, field, queue)
		}
	}
	forbidden(e.do(request{method: "POST", path: "/v1/runs", token: tokElsewhere, body: e.spec(false, "")}), "queue", e.queue)
	noQueue := e.spec(false, "")
	delete(noQueue, "queue")
	forbidden(e.do(request{method: "POST", path: "/v1/runs", token: tokBound, body: noQueue}), "queue", "default")

	// The bound token enqueues in its queue, the run is parked.
	r := e.do(request{method: "POST", path: "/v1/runs", token: tokBound, body: e.spec(true, "")})
	if r.status != http.StatusCreated {
		t.Fatalf("bound token, its queue: %d %s", r.status, r.body)
	}
	var en httpapi.Enqueued
	r.json(t, &en)
	var rec record.Run
	e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "?wait=30s", token: tokBound}).json(t, &rec)
	if rec.State != record.StateParked || rec.Principal != "bound" {
		t.Fatalf("bound token's run: %+v", rec)
	}
	id := rec.ApprovalID

	// Another queue's token: 403 with ?queue=, 404 without.
	forbidden(e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "?queue=" + e.queue, token: tokElsewhere}), "queue", e.queue)
	forbidden(e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "/result?queue=" + e.queue, token: tokElsewhere}), "queue", e.queue)
	for _, path := range []string{"/v1/runs/" + en.TaskID, "/v1/runs/" + en.TaskID + "/events", "/v1/runs/" + en.TaskID + "/result"} {
		if p := e.do(request{method: "GET", path: path, token: tokElsewhere}).problem(t, http.StatusNotFound); p.Type != httpapi.ProblemNotFound || strings.Contains(p.Detail, e.queue) {
			t.Errorf("GET %s by another queue's token: %+v, want 404 not naming the queue", path, p)
		}
	}
	for _, rq := range []request{
		{method: "GET", path: "/v1/approvals/" + id},
		{method: "GET", path: "/v1/approvals/" + id + "/history"},
		{method: "GET", path: "/v1/approvals/" + id + "/artifacts/out%2Freport.csv"},
		{method: "POST", path: "/v1/approvals/" + id + "/accept", body: map[string]string{}},
		{method: "POST", path: "/v1/approvals/" + id + "/reject", body: map[string]string{"comment": "mine now"}},
	} {
		rq.token = tokElsewhere
		forbidden(e.do(rq), "id", e.queue)
	}
	var list httpapi.ApprovalList
	e.do(request{method: "GET", path: "/v1/approvals?state=all", token: tokElsewhere}).json(t, &list)
	if len(list.Approvals) != 0 {
		t.Errorf("another queue's token lists %+v", list.Approvals)
	}
	if a, err := e.store.Get(t.Context(), id); err != nil || a.State != approve.StatePending {
		t.Fatalf("after another queue's token tried: %+v, %v; want pending", a, err)
	}

	// The token bound to the run's queue lists, shows and decides it.
	e.do(request{method: "GET", path: "/v1/approvals", token: tokBound}).json(t, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != id || list.Approvals[0].Principal != "bound" {
		t.Errorf("bound token's list: %+v", list.Approvals)
	}
	var show httpapi.Approval
	e.do(request{method: "GET", path: "/v1/approvals/" + id, token: tokBound}).json(t, &show)
	if show.Principal != "bound" || show.Run.Principal != "bound" {
		t.Errorf("show: principal %q, run.principal %q", show.Principal, show.Run.Principal)
	}
	if r := e.do(request{method: "POST", path: "/v1/approvals/" + id + "/reject", token: tokBound, body: map[string]string{"comment": "no"}}); r.status != 200 {
		t.Errorf("bound token's reject: %d %s", r.status, r.body)
	}
}

// TestActionBoundToken checks that a token bound to actions may not
// enqueue a free-form spec, nor another action.
func TestActionBoundToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	p := e.do(request{method: "POST", path: "/v1/runs", token: tokActor, body: e.spec(false, "")}).problem(t, http.StatusForbidden)
	if p.Field != "action" || p.Action != "" || !strings.Contains(p.Detail, "not a free-form spec") {
		t.Errorf("free-form spec: %+v", p)
	}
	call := map[string]any{"version": 1, "queue": e.queue, "action": "send-email"}
	p = e.do(request{method: "POST", path: "/v1/runs", token: tokActor, body: call}).problem(t, http.StatusForbidden)
	if p.Field != "action" || p.Action != "send-email" || !strings.Contains(p.Detail, `may not enqueue action "send-email" (its actions: csv.transform)`) {
		t.Errorf("another action: %+v", p)
	}
	call["action"] = "csv.transform"
	if r := e.do(request{method: "POST", path: "/v1/runs", token: tokActor, body: call}); r.status == http.StatusForbidden {
		t.Errorf("its own action: %d %s", r.status, r.body)
	}
}

// TestDecisionAttributedToToken checks that who decides is the token's
// name whatever the body's by says; a by other than it is kept as a
// display note (by_note) in the approval and its history, and is bounded.
func TestDecisionAttributedToToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	en := e.enqueue(e.spec(true, ""))
	id := e.run(en.TaskID, "wait=30s").ApprovalID
	reject := "/v1/approvals/" + id + "/reject"
	p := e.do(request{method: "POST", path: reject, token: tokApprover, body: map[string]string{"by": strings.Repeat("b", 257), "comment": "x"}}).problem(t, 400)
	if p.Field != "by" {
		t.Errorf("a by of 257 bytes: %+v", p)
	}
	var a httpapi.Approval
	r := e.do(request{method: "POST", path: reject, token: tokApprover, body: map[string]string{"by": "security-officer-bob", "comment": "fraud"}})
	r.json(t, &a)
	if r.status != 200 || a.DecidedBy != "alice" || a.ByNote != "security-officer-bob" || a.State != approve.StateRejected {
		t.Fatalf("reject with by security-officer-bob by alice's token: %d %s", r.status, r.body)
	}
	var hist struct {
		History []approve.Event `json:"history"`
	}
	e.do(request{method: "GET", path: "/v1/approvals/" + id + "/history", token: tokAuditor}).json(t, &hist)
	last := hist.History[len(hist.History)-1]
	if last.To != approve.StateRejected || last.By != "alice" || last.ByNote != "security-officer-bob" {
		t.Errorf("history's decision: %+v", last)
	}
	if rec := e.run(en.TaskID, ""); rec.DecidedBy != "alice" {
		t.Errorf("run record: decided_by %q, want alice", rec.DecidedBy)
	}
	// A by that is the token's own name is no note.
	en2 := e.enqueue(e.spec(true, ""))
	id2 := e.run(en2.TaskID, "wait=30s").ApprovalID
	r = e.do(request{method: "POST", path: "/v1/approvals/" + id2 + "/accept", token: tokApprover, body: map[string]string{"by": "alice"}})
	var a2 httpapi.Approval
	r.json(t, &a2)
	if a2.DecidedBy != "alice" || a2.ByNote != "" {
		t.Errorf("accept with by alice: %s", r.body)
	}
}
