package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestAuth checks 401 without a token or with an unknown one, 403 with a
// token that lacks the route's scope (an enqueuer can never approve), and
// that the public documents need none.
func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	spec := e.spec(false, "")
	for _, tc := range []struct {
		name   string
		rq     request
		status int
		scope  httpapi.Scope
	}{
		{"no token", request{method: "POST", path: "/v1/runs", body: spec, invalid: true}, 401, ""},
		{"not bearer", request{method: "GET", path: "/v1/approvals", header: map[string]string{"Authorization": "Basic YTpi"}, invalid: true}, 401, ""},
		{"unknown token", request{method: "POST", path: "/v1/runs", token: "not-a-token-of-the-file", body: spec}, 401, ""},
		{"hash instead of token", request{method: "POST", path: "/v1/runs", token: httpapi.HashToken(tokEnqueuer), body: spec}, 401, ""},
		{"reader cannot enqueue", request{method: "POST", path: "/v1/runs", token: tokReader, body: spec}, 403, httpapi.ScopeRunsWrite},
		{"enqueuer cannot read", request{method: "GET", path: "/v1/runs/x", token: tokEnqueuer}, 403, httpapi.ScopeRunsRead},
		{"enqueuer cannot accept", request{method: "POST", path: "/v1/approvals/ap-1/accept", token: tokEnqueuer, body: map[string]string{}}, 403, httpapi.ScopeApprovalsWrite},
		{"writer cannot reject", request{method: "POST", path: "/v1/approvals/ap-1/reject", token: tokWriter, body: map[string]string{"comment": "no"}}, 403, httpapi.ScopeApprovalsWrite},
		{"writer cannot list approvals", request{method: "GET", path: "/v1/approvals", token: tokWriter}, 403, httpapi.ScopeApprovalsRead},
		{"auditor cannot accept", request{method: "POST", path: "/v1/approvals/ap-1/accept", token: tokAuditor}, 403, httpapi.ScopeApprovalsWrite},
		{"approver cannot enqueue", request{method: "POST", path: "/v1/runs", token: tokApprover, body: spec}, 403, httpapi.ScopeRunsWrite},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do(tc.rq)
			p := r.problem(t, tc.status)
			if tc.status == 401 {
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer ") || p.Type != httpapi.ProblemUnauthorized || p.Field != "Authorization" {
					t.Errorf("401: WWW-Authenticate %q, problem %+v", r.header.Get("WWW-Authenticate"), p)
				}
			} else if p.RequiredScope != tc.scope || p.Type != httpapi.ProblemForbidden || !strings.Contains(p.Detail, string(tc.scope)) {
				t.Errorf("403: problem %+v, want required_scope %s", p, tc.scope)
			}
		})
	}
	for _, path := range []string{"/openapi.json", "/spec.schema.json", "/healthz"} {
		if r := e.do(request{method: "GET", path: path}); r.status != 200 || !json.Valid(r.body) {
			t.Errorf("GET %s without a token: %d %.200s", path, r.status, r.body)
		}
	}
	if r := e.do(request{method: "GET", path: "/spec.schema.json"}); string(r.body) != string(tasks.SpecSchema) {
		t.Errorf("/spec.schema.json is not tasks.SpecSchema")
	}
}

// TestEnqueueIdempotencyKey checks 201 for a new task, 200 with the same
// task for the same Idempotency-Key, and a 400 naming the header when it
// and the spec's key differ.
func TestEnqueueIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	post := func(key string, spec any) resp {
		return e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: spec, header: map[string]string{"Idempotency-Key": key},
			invalid: len(key) > 256}) // the document caps the header too
	}
	first := post("agent-42/tool-call-7", e.spec(false, ""))
	if first.status != http.StatusCreated {
		t.Fatalf("first POST: %d %s", first.status, first.body)
	}
	var a, b httpapi.Enqueued
	first.json(t, &a)
	if a.Duplicate || a.Queue != e.queue || a.TaskID != airlock.IdempotentTaskIDFor(e.queue, "writer", "agent-42/tool-call-7") {
		t.Errorf("first: %+v", a)
	}
	if loc := first.header.Get("Location"); loc != "/v1/runs/"+a.TaskID+"?queue="+e.queue {
		t.Errorf("Location %q", loc)
	}
	again := post("agent-42/tool-call-7", e.spec(false, ""))
	if again.status != http.StatusOK {
		t.Fatalf("second POST: %d %s, want 200", again.status, again.body)
	}
	again.json(t, &b)
	if !b.Duplicate || b.TaskID != a.TaskID || b.RunID != a.RunID {
		t.Errorf("second: %+v, want a duplicate of %+v", b, a)
	}
	// The spec's own key works the same way.
	s := e.spec(false, "")
	s["idempotency_key"] = "agent-42/tool-call-7"
	if r := post("", s); r.status != http.StatusOK {
		t.Errorf("spec's key: %d %s, want 200", r.status, r.body)
	}
	s["idempotency_key"] = "another"
	p := post("agent-42/tool-call-7", s).problem(t, http.StatusBadRequest)
	if p.Field != "Idempotency-Key" || p.Type != httpapi.ProblemBadRequest {
		t.Errorf("header and spec differ: %+v", p)
	}
	p = post(strings.Repeat("k", 300), e.spec(false, "")).problem(t, http.StatusBadRequest)
	if p.Field != "Idempotency-Key" || !strings.HasPrefix(p.Detail, "spec rejected: ") {
		t.Errorf("key too long: %+v", p)
	}
}

// TestEnqueueSpecErrors checks that a rejected spec is a problem naming
// the field, with enqueue's message.
func TestEnqueueSpecErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	for _, tc := range []struct {
		name, body, field string
		invalid           bool // the document rejects it too
	}{
		{"unknown field", `{"version": 1, "steps": [{"run": ["true"], "timeout": "1s", "chdir": "x"}]}`, "steps[0].chdir", true},
		{"wrong type", `{"version": 1, "steps": [{"run": "true"}]}`, "steps[0].run", true},
		{"bad duration", `{"version": 1, "timeout": "soon", "steps": [{"run": ["true"]}]}`, "timeout", true},
		{"no steps", `{"version": 1}`, "steps", true},
		{"version", `{"version": 2, "steps": [{"run": ["true"]}]}`, "version", true},
		{"unsafe path", `{"version": 1, "files": {"../x": "y"}, "steps": [{"run": ["true"]}]}`, `files["../x"]`, true},
		{"limit above maximum", `{"version": 1, "limits": {"memory": "8GiB"}, "steps": [{"run": ["true"]}]}`, "limits.memory", false},
		{"undeclared secret", `{"version": 1, "steps": [{"run": ["true"], "env": {"T": "${secret:T}"}}]}`, `steps[0].env["T"]`, false},
		{"not JSON", `{"version": 1,`, "spec", true},
		{"trailing data", `{"version": 1, "steps": [{"run": ["true"]}]} {}`, "spec", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: tc.body, invalid: tc.invalid}).problem(t, http.StatusBadRequest)
			if p.Field != tc.field || p.Type != httpapi.ProblemSpecRejected {
				t.Errorf("problem %+v, want field %s", p, tc.field)
			}
			// The message is enqueue's: "spec rejected: " and the decoder's error.
			_, err := decodeAndPrepare(tc.body)
			var fe *tasks.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("the decoder accepts %s: %v", tc.body, err)
			}
			if want := "spec rejected: " + fe.Error(); p.Detail != want {
				t.Errorf("detail %q, want %q", p.Detail, want)
			}
		})
	}
}

func decodeAndPrepare(body string) (*tasks.Spec, error) {
	s, err := tasks.Decode([]byte(body))
	if err != nil {
		return nil, err
	}
	return s, s.Prepare(limits.DefaultPolicy())
}

// TestEnqueueBodyLimits checks 413 above the payload cap (with and
// without a Content-Length) and 415 for a body that is not JSON.
func TestEnqueueBodyLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{MaxPayload: 4096})
	big := e.spec(false, "")
	big["files"] = map[string]string{"big.txt": strings.Repeat("x", 5000)}
	p := e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: big, invalid: true}).problem(t, http.StatusRequestEntityTooLarge)
	if p.Field != "spec" || p.Type != httpapi.ProblemTooLarge || !strings.Contains(p.Detail, "4096") {
		t.Errorf("413: %+v", p)
	}
	// Chunked: no Content-Length, the reader stops at the cap.
	b, _ := json.Marshal(big)
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/runs", struct{ *strings.Reader }{strings.NewReader(string(b))})
	req.Header.Set("Authorization", "Bearer "+tokWriter)
	req.Header.Set("Content-Type", "application/json")
	res, err := e.client.Do(httpapitest.Invalid(req))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || res.ContentLength == 0 {
		t.Errorf("chunked body above the cap: %d", res.StatusCode)
	}
	p = e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: "version=1", invalid: true,
		header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}).problem(t, http.StatusUnsupportedMediaType)
	if p.Field != "Content-Type" {
		t.Errorf("415: %+v", p)
	}
}

// TestRunWait checks reading a run record, the long poll (wait, until)
// and the errors of its parameters.
func TestRunWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	en := e.enqueue(e.spec(true, "hold"))
	rec := e.run(en.TaskID, "")
	if rec.TaskID != en.TaskID || rec.Queue != e.queue || (rec.State != airlock.StatePending && rec.State != airlock.StateActive) {
		t.Fatalf("before the run: %+v", rec)
	}
	start := time.Now()
	rec = e.run(en.TaskID, "wait=300ms")
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second || record.Final(rec.State) || rec.State == record.StateParked {
		t.Errorf("wait=300ms on a held run: %s after %s", rec.State, d)
	}
	go func() { time.Sleep(200 * time.Millisecond); e.releaseRuns() }()
	rec = e.run(en.TaskID, "wait=30s&queue="+e.queue)
	if rec.State != record.StateParked || rec.ApprovalID == "" {
		t.Fatalf("wait=30s: %+v, want parked", rec)
	}
	// until=final waits through the approval.
	done := make(chan record.Run, 1)
	go func() { done <- e.run(en.TaskID, "wait=30s&until=final") }()
	time.Sleep(200 * time.Millisecond)
	if r := e.do(request{method: "POST", path: "/v1/approvals/" + rec.ApprovalID + "/accept", token: tokApprover}); r.status != 200 {
		t.Fatalf("accept: %d %s", r.status, r.body)
	}
	select {
	case fin := <-done:
		if fin.State != record.StatePromoted || fin.DecidedBy != "alice" {
			t.Errorf("until=final: %+v, want promoted, decided by alice", fin)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("until=final did not answer")
	}
	// A completed run answers at once.
	en2 := e.enqueue(e.spec(false, ""))
	if rec := e.run(en2.TaskID, "wait=30s&until=final"); rec.State != record.StateCompleted {
		t.Errorf("a run without output: %+v", rec)
	}
	for _, tc := range []struct{ query, field string }{
		{"wait=soon", "wait"}, {"wait=6m", "wait"}, {"wait=-1s", "wait"}, {"until=never", "until"}, {"queue=a.b", "queue"},
	} {
		p := e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "?" + tc.query, token: tokReader, invalid: true}).problem(t, 400)
		if p.Field != tc.field {
			t.Errorf("?%s: %+v, want field %s", tc.query, p, tc.field)
		}
	}
	p := e.do(request{method: "GET", path: "/v1/runs/no-such-task", token: tokReader}).problem(t, 404)
	if p.TaskID != "no-such-task" || p.Type != httpapi.ProblemNotFound {
		t.Errorf("404: %+v", p)
	}
	p = e.do(request{method: "GET", path: "/v1/runs/no-such-task?queue=" + e.queue + "&wait=1s", token: tokReader}).problem(t, 404)
	if !strings.Contains(p.Detail, e.queue) {
		t.Errorf("404 in a queue: %+v", p)
	}
}

// TestRunEvents checks the event stream: the state when it opens, then
// each change in order (parked, accepted, promoted) with its entry id,
// then "end" once final; and that a stream of a final run ends at once.
func TestRunEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{KeepAlive: 100 * time.Millisecond})
	e.serveFake()
	en := e.enqueue(e.spec(true, "hold"))
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/runs/"+en.TaskID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tokReader)
	res, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	var got []string
	var ids []string
	var end httpapi.StreamEnd
	go e.releaseRuns()
	readSSE(t, res.Body, func(ev sseEvent) {
		switch ev.name {
		case "state":
			var x struct {
				TaskID     string       `json:"task_id"`
				State      record.State `json:"state"`
				ApprovalID string       `json:"approval_id"`
			}
			if err := json.Unmarshal([]byte(ev.data), &x); err != nil || x.TaskID != en.TaskID {
				t.Errorf("state event %q: %v", ev.data, err)
			}
			got = append(got, string(x.State))
			ids = append(ids, ev.id)
			if x.State == record.StateParked {
				go func() {
					r := e.do(request{method: "POST", path: "/v1/approvals/" + x.ApprovalID + "/accept", token: tokApprover,
						body: map[string]string{"comment": "looks right"}})
					if r.status != 200 {
						t.Errorf("accept: %d %s", r.status, r.body)
					}
				}()
			}
		case "end":
			if err := json.Unmarshal([]byte(ev.data), &end); err != nil {
				t.Errorf("end event %q: %v", ev.data, err)
			}
		default:
			t.Errorf("unexpected event %+v", ev)
		}
	})
	// The first is the state when the stream opened; then the changes.
	if len(got) < 3 || got[len(got)-3] != "parked" || got[len(got)-2] != "accepted" || got[len(got)-1] != "promoted" {
		t.Fatalf("states %v, want ... parked, accepted, promoted", got)
	}
	if got[0] != "pending" && got[0] != "active" && got[0] != "parked" {
		t.Errorf("first state %s", got[0])
	}
	for i, id := range ids[1:] {
		if id == "" {
			t.Logf("event %d (%s) came from a re-read, not the stream", i+1, got[i+1])
		}
	}
	if end.Reason != "final" || end.State != record.StatePromoted {
		t.Errorf("end %+v, want final, promoted", end)
	}
	// A stream of a final run: its state, then end.
	req, _ = http.NewRequest("GET", e.srv.URL+"/v1/runs/"+en.TaskID+"/events?queue="+e.queue, nil)
	req.Header.Set("Authorization", "Bearer "+tokReader)
	res2, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	var names []string
	readSSE(t, res2.Body, func(ev sseEvent) { names = append(names, ev.name) })
	if strings.Join(names, ",") != "state,end" {
		t.Errorf("stream of a final run: %v", names)
	}
}

// TestRunEventsBounded checks that a stream ends after MaxStream with
// reason timeout, with keep-alive comments meanwhile, and with reason
// shutdown when the handler closes.
func TestRunEventsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{MaxStream: 700 * time.Millisecond, KeepAlive: 100 * time.Millisecond})
	en := e.enqueue(e.spec(false, "")) // no worker: stays pending
	stream := func() httpapi.StreamEnd {
		req, _ := http.NewRequest("GET", e.srv.URL+"/v1/runs/"+en.TaskID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+tokReader)
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var end httpapi.StreamEnd
		readSSE(t, res.Body, func(ev sseEvent) {
			if ev.name == "end" {
				_ = json.Unmarshal([]byte(ev.data), &end)
			}
		})
		return end
	}
	start := time.Now()
	if end := stream(); end.Reason != "timeout" || end.State != airlock.StatePending {
		t.Errorf("end %+v, want timeout in pending", end)
	}
	if d := time.Since(start); d < 700*time.Millisecond || d > 5*time.Second {
		t.Errorf("stream lasted %s, want about 700ms", d)
	}
	go func() { time.Sleep(200 * time.Millisecond); e.h.Close() }()
	if end := stream(); end.Reason != "shutdown" {
		t.Errorf("end %+v, want shutdown", end)
	}
	// After Close, a long poll answers at once with the run as it is.
	start = time.Now()
	if rec := e.run(en.TaskID, "wait=1m"); rec.State != airlock.StatePending || time.Since(start) > 5*time.Second {
		t.Errorf("long poll after Close: %s after %s", rec.State, time.Since(start))
	}
}

// TestResultAndApprovals checks the result (409 with the state while
// parked, 200 once accepted and promoted), the approval routes, and the
// exactly-once decision: a second accept gets 409 naming who decided.
func TestResultAndApprovals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	en := e.enqueue(e.spec(true, ""))
	rec := e.run(en.TaskID, "wait=30s")
	if rec.State != record.StateParked {
		t.Fatalf("run: %+v", rec)
	}
	id := rec.ApprovalID
	p := e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "/result", token: tokReader}).problem(t, http.StatusConflict)
	if p.Type != httpapi.ProblemNotPromoted || p.State != "parked" || !strings.Contains(p.Detail, "is parked, not promoted: waiting for approval "+id) {
		t.Errorf("result while parked: %+v", p)
	}

	// List, show, history, artifact.
	var list httpapi.ApprovalList
	e.do(request{method: "GET", path: "/v1/approvals?limit=10", token: tokAuditor}).json(t, &list)
	if len(list.Approvals) != 1 || list.Approvals[0].ID != id || list.Approvals[0].Queue != e.queue {
		t.Errorf("list: %+v", list)
	}
	var show struct {
		ID     string          `json:"id"`
		State  string          `json:"state"`
		Result json.RawMessage `json:"result"`
	}
	e.do(request{method: "GET", path: "/v1/approvals/" + id, token: tokAuditor}).json(t, &show)
	if show.ID != id || show.State != "pending" || !jsonEqual(show.Result, `{"total": 42}`) {
		t.Errorf("show: %+v %s", show, show.Result)
	}
	art := e.do(request{method: "GET", path: "/v1/approvals/" + id + "/artifacts/" + url.PathEscape("out/report.csv"), token: tokAuditor})
	if art.status != 200 || string(art.body) != "region,amount\neu,10\n" || art.header.Get("X-Airlock-Content-Type") != "text/csv" {
		t.Errorf("artifact: %d %q %v", art.status, art.body, art.header)
	}
	if p := e.do(request{method: "GET", path: "/v1/approvals/" + id + "/artifacts/nope", token: tokAuditor}).problem(t, 404); p.Field != "name" {
		t.Errorf("unknown artifact: %+v", p)
	}
	if p := e.do(request{method: "GET", path: "/v1/approvals?state=maybe", token: tokAuditor, invalid: true}).problem(t, 400); p.Field != "state" {
		t.Errorf("bad state: %+v", p)
	}
	if p := e.do(request{method: "GET", path: "/v1/approvals?limit=0", token: tokAuditor, invalid: true}).problem(t, 400); p.Field != "limit" {
		t.Errorf("bad limit: %+v", p)
	}
	if p := e.do(request{method: "GET", path: "/v1/approvals/ap-none", token: tokAuditor}).problem(t, 404); p.Detail != "approval not found: ap-none" {
		t.Errorf("unknown approval: %+v", p)
	}

	// Reject needs a comment; an unknown body member is named.
	if p := e.do(request{method: "POST", path: "/v1/approvals/" + id + "/reject", token: tokApprover, body: map[string]string{}}).problem(t, 400); p.Field != "comment" {
		t.Errorf("reject without comment: %+v", p)
	}
	if p := e.do(request{method: "POST", path: "/v1/approvals/" + id + "/accept", token: tokApprover, body: `{"by": "bob", "coment": "x"}`, invalid: true}).problem(t, 400); p.Field != "coment" {
		t.Errorf("unknown member: %+v", p)
	}

	// Two approvers at once: exactly one wins. Both send alice's token, so
	// alice decides whatever by they give: their by is a note.
	type out struct {
		r  resp
		by string
	}
	results := make(chan out, 2)
	for _, by := range []string{"bob", "carol"} {
		go func() {
			results <- out{e.do(request{method: "POST", path: "/v1/approvals/" + id + "/accept", token: tokApprover,
				body: map[string]string{"by": by, "comment": "ok"}}), by}
		}()
	}
	a, b := <-results, <-results
	if a.r.status != 200 {
		a, b = b, a
	}
	if a.r.status != 200 || b.r.status != http.StatusConflict {
		t.Fatalf("two accepts: %d and %d, want 200 and 409", a.r.status, b.r.status)
	}
	p = b.r.problem(t, http.StatusConflict)
	if p.Type != httpapi.ProblemAlreadyDecided || p.DecidedBy != "alice" || p.State != "accepted" || p.DecidedAt == nil ||
		!strings.Contains(p.Detail, "was already accepted by alice") {
		t.Errorf("second accept: %+v, want already accepted by alice", p)
	}
	var won struct {
		DecidedBy string `json:"decided_by"`
		ByNote    string `json:"by_note"`
	}
	a.r.json(t, &won)
	if won.DecidedBy != "alice" || won.ByNote != a.by {
		t.Errorf("accept with by %q: decided_by %q, by_note %q; want alice, %s", a.by, won.DecidedBy, won.ByNote, a.by)
	}
	p = e.do(request{method: "POST", path: "/v1/approvals/" + id + "/reject", token: tokApprover, body: map[string]string{"comment": "too late"}}).problem(t, http.StatusConflict)
	if p.DecidedBy != "alice" {
		t.Errorf("reject after accept: %+v", p)
	}

	if rec := e.run(en.TaskID, "wait=30s&until=final"); rec.State != record.StatePromoted {
		t.Fatalf("after accept: %+v", rec)
	}
	r := e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "/result", token: tokReader})
	var pub struct {
		Where    string          `json:"where"`
		Result   json.RawMessage `json:"result"`
		Manifest struct {
			TaskID     string `json:"task_id"`
			AcceptedBy string `json:"accepted_by"`
			Artifacts  []struct {
				Name string `json:"name"`
			} `json:"artifacts"`
		} `json:"manifest"`
	}
	if r.status != 200 {
		t.Fatalf("result: %d %s", r.status, r.body)
	}
	r.json(t, &pub)
	if !jsonEqual(pub.Result, `{"total": 42}`) || pub.Manifest.TaskID != en.TaskID || pub.Manifest.AcceptedBy != "alice" ||
		len(pub.Manifest.Artifacts) != 1 || pub.Where == "" {
		t.Errorf("result: %s", r.body)
	}
	// A store the API cannot read any more is a 500 whose detail names
	// no path of the API's: the cause is in its log.
	if err := os.Remove(filepath.Join(pub.Where, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	p = e.do(request{method: "GET", path: "/v1/runs/" + en.TaskID + "/result", token: tokReader}).problem(t, http.StatusInternalServerError)
	if wd, _ := os.Getwd(); strings.Contains(p.Detail, pub.Where) || strings.Contains(p.Detail, wd) || !strings.Contains(p.Detail, "could not read the run's publication in the store; its log has the cause") {
		t.Errorf("a store the API cannot read: %+v", p)
	}
	var hist struct {
		History []struct {
			From, To, By string
		} `json:"history"`
	}
	e.do(request{method: "GET", path: "/v1/approvals/" + id + "/history", token: tokAuditor}).json(t, &hist)
	var trail []string
	for _, h := range hist.History {
		trail = append(trail, h.From+">"+h.To)
	}
	if strings.Join(trail, " ") != ">pending pending>accepted accepted>promoted" {
		t.Errorf("history: %v", trail)
	}

	// Reject, on another run.
	en2 := e.enqueue(e.spec(true, ""))
	rec2 := e.run(en2.TaskID, "wait=30s")
	var rj struct {
		State, DecidedBy, Comment string
	}
	r = e.do(request{method: "POST", path: "/v1/approvals/" + rec2.ApprovalID + "/reject", token: tokApprover, body: map[string]string{"comment": "wrong totals"}})
	r.json(t, &rj)
	if r.status != 200 || rj.State != "rejected" || rj.Comment != "wrong totals" {
		t.Errorf("reject: %d %s", r.status, r.body)
	}
	if rec := e.run(en2.TaskID, ""); rec.State != record.StateRejected || rec.DecidedBy != "alice" {
		t.Errorf("rejected run: %+v", rec)
	}
	if p := e.do(request{method: "GET", path: "/v1/runs/" + en2.TaskID + "/result", token: tokReader}).problem(t, 409); p.State != "rejected" {
		t.Errorf("result of a rejected run: %+v", p)
	}
}

// TestRoutesProblems checks that an unknown path and a wrong method are
// problems too.
func TestRoutesProblems(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.do(request{method: "GET", path: "/v2/nothing", invalid: true}).problem(t, 404)
	r := e.do(request{method: "GET", path: "/v1/runs", token: tokWriter, invalid: true})
	r.problem(t, 405)
	if r.header.Get("Allow") != "POST" {
		t.Errorf("Allow %q", r.header.Get("Allow"))
	}
	r = e.do(request{method: "DELETE", path: "/v1/approvals/x", token: tokApprover, invalid: true})
	r.problem(t, 405)
}

// TestParseTokens checks the token file's format and its errors, and that
// only hashes are kept.
func TestParseTokens(t *testing.T) {
	ts, err := httpapi.ParseTokens("f", strings.NewReader("\n# comment\n  a   runs:write,runs:read   "+tokWriter+"\nb\tapprovals:write\t"+httpapi.HashToken(tokApprover)+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ts.Len() != 2 {
		t.Fatalf("Len %d", ts.Len())
	}
	if tk := ts.Lookup(tokWriter); tk == nil || tk.Name != "a" || !tk.Has(httpapi.ScopeRunsRead) || tk.Has(httpapi.ScopeApprovalsWrite) {
		t.Errorf("Lookup(writer) = %+v", tk)
	}
	if tk := ts.Lookup(tokApprover); tk == nil || tk.Name != "b" || !tk.Has(httpapi.ScopeApprovalsWrite) || tk.Has(httpapi.ScopeApprovalsRead) {
		t.Errorf("Lookup(approver) = %+v", tk)
	}
	for _, bad := range []string{"", tokWriter[:5], httpapi.HashToken(tokWriter), "x"} {
		if tk := ts.Lookup(bad); tk != nil {
			t.Errorf("Lookup(%q) = %+v", bad, tk)
		}
	}
	if s := fmt.Sprintf("%+v", *ts.Lookup(tokWriter)); strings.Contains(s, tokWriter) {
		t.Errorf("a token holds its plain value: %s", s)
	}
	for _, tc := range []struct{ file, want string }{
		{"", "no token"},
		{"a runs:write", "want NAME SCOPE"},
		{"a runs:delete " + tokWriter, `unknown scope "runs:delete"`},
		{"a runs:write short", "shorter than 16"},
		{"a runs:write sha256:abc", "64 lower-case hex"},
		{"a/b runs:write " + tokWriter, `name "a/b"`},
		{"a runs:write " + tokWriter + "\na runs:read " + tokReader, "f:2: name \"a\" is used on line 1"},
		{"a runs:write " + tokWriter + "\nb runs:read " + httpapi.HashToken(tokWriter), "f:2: the token of b is the one on line 1"},
	} {
		_, err := httpapi.ParseTokens("f", strings.NewReader(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseTokens(%q) = %v, want an error with %q", tc.file, err, tc.want)
		}
	}
}

func jsonEqual(a json.RawMessage, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}

// TestHealthz checks /healthz with Redis up.
func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	r := e.do(request{method: "GET", path: "/healthz"})
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"status":"ok"}` {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
}
