package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestTokenReads checks what a token's scopes let it read: runs:read its
// own runs (a run with no principal is nobody's), runs:read:any every
// run, and runs:read:any holds runs:read's routes (Grants) while no other
// scope does.
func TestTokenReads(t *testing.T) {
	ts, err := httpapi.ParseTokens("f", strings.NewReader(strings.Join([]string{
		"own runs:write,runs:read " + tokWriter,
		"any runs:read:any " + tokReader,
		"both runs:read,runs:read:any,runs:read " + tokPeer + " queues=q1",
		"writer runs:write " + tokEnqueuer,
		"approver approvals:read,approvals:write " + tokApprover,
	}, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token     string
		principal string
		grants    bool // Grants(runs:read)
		mayRead   bool
	}{
		{tokWriter, "own", true, true},
		{tokWriter, "someone-else", true, false},
		{tokWriter, "", true, false},
		{tokReader, "someone-else", true, true},
		{tokReader, "", true, true},
		{tokPeer, "own", true, true},
		{tokEnqueuer, "writer", false, false},
		{tokApprover, "approver", false, false},
	} {
		tk := ts.Lookup(tc.token)
		if g := tk.Grants(httpapi.ScopeRunsRead); g != tc.grants {
			t.Errorf("%s (%v): Grants(runs:read) %v, want %v", tk.Name, tk.Scopes, g, tc.grants)
		}
		if m := tk.MayRead(tc.principal); m != tc.mayRead {
			t.Errorf("%s (%v): MayRead(%q) %v, want %v", tk.Name, tk.Scopes, tc.principal, m, tc.mayRead)
		}
		if tk.Grants(httpapi.ScopeRunsWrite) != tk.Has(httpapi.ScopeRunsWrite) || tk.Grants(httpapi.ScopeApprovalsRead) != tk.Has(httpapi.ScopeApprovalsRead) {
			t.Errorf("%s: Grants of another scope than runs:read is not Has", tk.Name)
		}
	}
	if both := ts.Lookup(tokPeer); len(both.Scopes) != 2 || !both.AllowsQueue("q1") || both.AllowsQueue("q2") {
		t.Errorf("runs:read,runs:read:any,runs:read queues=q1: scopes %v, queues %v", both.Scopes, both.Queues)
	}
}

// TestReadsAreTheCallers: a token with runs:read reads its own runs only;
// for another token's run (parked, promoted, or held running), and for a
// run with no principal, every read route (the record, a long poll, the
// events, the result) and the cancel answer the 404 an unknown id gets,
// the same body but for the id, at once; runs:read:any reads them all,
// within the queues it is bound to.
func TestReadsAreTheCallers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()

	// The writer's runs: one promoted (accepted), one held running.
	done := e.enqueue(e.spec(true, ""))
	rec := e.run(done.TaskID, "wait=30s")
	if r := e.do(request{method: "POST", path: "/v1/approvals/" + rec.ApprovalID + "/accept", token: tokApprover, body: map[string]string{}}); r.status != 200 {
		t.Fatalf("accept: %d %s", r.status, r.body)
	}
	if rec = e.run(done.TaskID, "wait=30s&until=final"); rec.State != record.StatePromoted || rec.Principal != "writer" {
		t.Fatalf("the writer's run: %+v", rec)
	}
	held := e.enqueue(e.spec(false, "hold"))
	// A run with no principal, as the Go client enqueues it.
	c := airlock.NewClient(redistest.Client(t), airlock.ClientOptions{Prefix: e.prefix})
	t.Cleanup(func() { c.Close() })
	nobodys, err := c.Enqueue(t.Context(), &tasks.Spec{Version: tasks.Version, Queue: e.queue, Steps: []tasks.Step{{Run: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := e.run(nobodys.TaskID, "wait=30s"); rec.Principal != "" || rec.State != record.StateCompleted {
		t.Fatalf("the run with no principal: %+v", rec)
	}

	// unknown asks rq as for an unknown id: rq must answer the same but
	// for the id, fast.
	unknown := func(name string, rq request, id string) {
		t.Helper()
		start := time.Now()
		got := e.do(rq)
		took := time.Since(start)
		other := uuid.NewString()
		rq.path = strings.ReplaceAll(rq.path, id, other)
		want := e.do(rq)
		if got.status != http.StatusNotFound || want.status != http.StatusNotFound ||
			strings.ReplaceAll(string(got.body), id, "ID") != strings.ReplaceAll(string(want.body), other, "ID") {
			t.Errorf("%s: %d %s\nwant what an unknown id gets: %d %s", name, got.status, got.body, want.status, want.body)
		}
		if took > 5*time.Second {
			t.Errorf("%s: answered in %s: it waited", name, took)
		}
	}
	for _, tc := range []struct {
		name, token, id string
	}{
		{"another token's promoted run", tokPeer, done.TaskID},
		{"another token's running run", tokPeer, held.TaskID},
		{"a run with no principal, by runs:read", tokWriter, nobodys.TaskID},
		{"another queue's run, by runs:read:any bound elsewhere", tokElsewhere, done.TaskID},
	} {
		for _, rq := range []request{
			{method: "GET", path: "/v1/runs/" + tc.id},
			{method: "GET", path: "/v1/runs/" + tc.id + "?wait=20s&until=final"},
			{method: "GET", path: "/v1/runs/" + tc.id + "/events"},
			{method: "GET", path: "/v1/runs/" + tc.id + "/result"},
			{method: "DELETE", path: "/v1/runs/" + tc.id},
		} {
			rq.token = tc.token
			unknown(tc.name+": "+rq.method+" "+rq.path, rq, tc.id)
			if tc.token != tokElsewhere { // bound elsewhere, ?queue= is 403 (TestQueueBoundToken)
				sep := "?"
				if strings.Contains(rq.path, "?") {
					sep = "&"
				}
				rq.path += sep + "queue=" + e.queue
				unknown(tc.name+": "+rq.method+" "+rq.path, rq, tc.id)
			}
		}
	}

	// runs:read:any reads every run; the owner its own.
	for _, tc := range []struct {
		token, id string
		result    int // the result route's status
	}{
		{tokWriter, done.TaskID, http.StatusOK},
		{tokReader, done.TaskID, http.StatusOK},
		{tokReader, held.TaskID, http.StatusConflict},
		{tokReader, nobodys.TaskID, http.StatusConflict},
	} {
		if r := e.do(request{method: "GET", path: "/v1/runs/" + tc.id + "?queue=" + e.queue, token: tc.token}); r.status != http.StatusOK {
			t.Errorf("GET /v1/runs/%s by %s: %d %s", tc.id, tc.token, r.status, r.body)
		}
		if r := e.do(request{method: "GET", path: "/v1/runs/" + tc.id + "/result", token: tc.token}); r.status != tc.result {
			t.Errorf("GET /v1/runs/%s/result by %s: %d %s, want %d", tc.id, tc.token, r.status, r.body, tc.result)
		}
	}
	r := e.do(request{method: "GET", path: "/v1/runs/" + done.TaskID + "/events", token: tokReader})
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"reason":"final"`) {
		t.Errorf("events by runs:read:any: %d %s", r.status, r.body)
	}
	// The others' DELETEs did nothing to it.
	if rec := e.run(held.TaskID, ""); rec.State != airlock.StateActive {
		t.Errorf("the held run after the others' cancels: %s, want active", rec.State)
	}
}
