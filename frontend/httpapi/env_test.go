package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// The tokens of every test server.
const (
	tokWriter   = "writer-token-0123456789"   // runs:write,runs:read
	tokEnqueuer = "enqueuer-token-0123456789" // runs:write only
	tokReader   = "reader-token-0123456789"   // runs:read:any: reads every run
	tokPeer     = "peer-token-0123456789"     // runs:write,runs:read: reads its own runs only
	tokApprover = "approver-token-0123456789" // approvals:read,approvals:write
	tokAuditor  = "auditor-token-0123456789"  // approvals:read
	// Every scope, bound to the env's queue (bound), to another queue
	// (elsewhere), or to one action (actor).
	tokBound     = "bound-token-0123456789"
	tokElsewhere = "elsewhere-token-0123456789"
	tokActor     = "actor-token-0123456789"
)

// allScopes are every scope but runs:read:any, as a token file writes
// them: a token with them reads its own runs only.
const allScopes = "runs:write,runs:read,approvals:read,approvals:write"

// testTokens are the tokens of a server whose runs go to queue.
func testTokens(t *testing.T, queue string) *httpapi.Tokens {
	t.Helper()
	file := strings.Join([]string{
		"# test tokens",
		"writer runs:write,runs:read " + tokWriter,
		"enqueuer runs:write " + httpapi.HashToken(tokEnqueuer),
		"reader runs:read:any " + tokReader,
		"peer runs:write,runs:read " + tokPeer,
		"alice approvals:read,approvals:write " + httpapi.HashToken(tokApprover),
		"auditor approvals:read " + tokAuditor,
		"bound " + allScopes + " " + tokBound + " queues=" + queue + ",unused",
		// runs:read:any too: a queue binding bounds it still.
		"elsewhere " + allScopes + ",runs:read:any " + tokElsewhere + " queues=elsewhere",
		"actor " + allScopes + " " + tokActor + " actions=csv.transform",
	}, "\n")
	ts, err := httpapi.ParseTokens("tokens", strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// env is one test's API server, over a fresh key prefix and queue, with a
// fake worker (serveFake) when the test asks for one.
type env struct {
	t       *testing.T
	prefix  string
	queue   string
	h       *httpapi.Handler
	srv     *httptest.Server
	client  *http.Client
	store   *approve.Store
	events  *events.Stream
	release chan struct{} // closes to let held runs finish
	relOnce sync.Once
}

func newEnv(t *testing.T, opts httpapi.Options) *env {
	t.Helper()
	prefix, q := approvetest.Prefix(t)
	rdb := redistest.Client(t)
	opts.Prefix = prefix
	opts.Tokens = testTokens(t, q)
	h, err := httpapi.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	base := &http.Transport{}
	e := &env{
		t: t, prefix: prefix, queue: q, h: h, srv: srv,
		client:  &http.Client{Transport: httpapitest.Transport(t, base), Timeout: time.Minute},
		store:   approve.NewStore(rdb, approve.Options{Prefix: prefix}),
		events:  events.NewStream(rdb, prefix),
		release: make(chan struct{}),
	}
	t.Cleanup(func() {
		h.Close()
		base.CloseIdleConnections()
		srv.Close()
	})
	return e
}

// serveFake runs a fake worker on the env's queue: a run whose spec has
// an output is parked (result {"total": 42}, artifact out/report.csv),
// one without completes; a run whose spec holds the file "hold" waits for
// releaseRuns first. Promote tasks publish into a temporary store with the
// real approve.Promoter.
func (e *env) serveFake() {
	e.t.Helper()
	// The promoter's store appends the "promoted" event (MarkPromoted).
	promoter := &approve.Promoter{Store: e.store, Sink: &promote.FS{Dir: e.t.TempDir()}, Worker: "fake"}
	redistest.Serve(e.t, e.queue, func(ctx context.Context, task *asynq.Task) error {
		switch task.Type() {
		case approve.TypePromote:
			var p approve.Payload
			if err := json.Unmarshal(task.Payload(), &p); err != nil {
				return err
			}
			_, _, err := promoter.Promote(ctx, p.ApprovalID)
			return err
		case tasks.TypeRun:
		default:
			return nil
		}
		var s tasks.Spec
		if err := json.Unmarshal(task.Payload(), &s); err != nil {
			return err
		}
		if _, hold := s.Files["hold"]; hold {
			select {
			case <-e.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		id := task.ResultWriter().TaskID()
		now := time.Now().UTC()
		rec := record.Run{TaskID: id, RunID: s.RunID, Queue: s.Queue, Principal: s.Principal, State: record.StateCompleted, Verdict: record.VerdictOK,
			StartedAt: now, FinishedAt: now, Attempt: 1, MaxRetry: *s.MaxRetry, Worker: "fake",
			Steps: []record.Step{}}
		if s.Output != nil && s.Output.Result != "" {
			result := []byte(`{"total": 42}`)
			csv := []byte("region,amount\neu,10\n")
			sum := sha256.Sum256(result)
			a := &approve.Approval{
				ID: "ap-" + id, TaskID: id, RunID: s.RunID, State: approve.StatePending,
				Reasons: []string{"no policy: every output is parked"}, Result: result, ResultSHA256: hex.EncodeToString(sum[:]),
				Artifacts: []record.Artifact{{Name: "out/report.csv", ContentType: "text/csv"}},
				Run:       approve.RunSummary{Queue: s.Queue, Principal: s.Principal, Attempt: 1, Worker: "fake"},
			}
			if _, _, err := e.store.Quiet().Park(ctx, a, map[string][]byte{"out/report.csv": csv}); err != nil {
				return err
			}
			rec.State, rec.ApprovalID = record.StateParked, a.ID
			rec.Decision = &record.Decision{Action: record.Park, Reasons: a.Reasons, Rule: "no-policy"}
			rec.ResultBytes, rec.ResultSHA256 = int64(len(result)), a.ResultSHA256
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if _, err := task.ResultWriter().Write(b); err != nil {
			return err
		}
		return e.events.Append(ctx, events.Event{RunID: rec.RunID, TaskID: id, State: rec.State, Verdict: rec.Verdict,
			ApprovalID: rec.ApprovalID, Principal: rec.Principal})
	})
	// Runs still held when the test ends are let go before the fake
	// worker shuts down (cleanups run last-in first-out).
	e.t.Cleanup(e.releaseRuns)
}

func (e *env) releaseRuns() { e.relOnce.Do(func() { close(e.release) }) }

// resp is a response, read.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response %d: %v\n%s", r.status, err, r.body)
	}
}

// problem decodes a problem+json answer, checking its content type and
// status.
func (r resp) problem(t *testing.T, status int) httpapi.Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body: %s", ct, r.body)
	}
	var p httpapi.Problem
	r.json(t, &p)
	if p.Status != status || p.Type == "" || p.Title == "" {
		t.Errorf("problem %+v: want status %d, a type and a title", p, status)
	}
	return p
}

// request is one call: a method, a path, a token and a JSON body.
type request struct {
	method, path, token string
	body                any // string or []byte as is, else JSON-encoded; nil: none
	header              map[string]string
	invalid             bool // the request breaks the document on purpose
}

func (e *env) do(rq request) resp {
	e.t.Helper()
	var body io.Reader
	switch b := rq.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequest(rq.method, e.srv.URL+rq.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if rq.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if rq.token != "" {
		req.Header.Set("Authorization", "Bearer "+rq.token)
	}
	for k, v := range rq.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	if rq.invalid {
		req = httpapitest.Invalid(req)
	}
	res, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// spec is a valid free-form spec on the env's queue; output adds an
// output (the fake worker parks it); mark "hold" adds the file hold (the
// fake worker holds the run until releaseRuns).
func (e *env) spec(output bool, mark string) map[string]any {
	s := map[string]any{"version": 1, "queue": e.queue, "steps": []any{map[string]any{"run": []string{"true"}}}}
	if output {
		s["output"] = map[string]any{"result": "out/result.json"}
	}
	if mark == "hold" {
		s["files"] = map[string]string{"hold": ""}
	}
	return s
}

// enqueue posts a spec and returns the answer.
func (e *env) enqueue(spec any) httpapi.Enqueued {
	e.t.Helper()
	r := e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: spec})
	if r.status != http.StatusCreated {
		e.t.Fatalf("POST /v1/runs: %d %s", r.status, r.body)
	}
	var en httpapi.Enqueued
	r.json(e.t, &en)
	return en
}

// run reads a run record, with query (wait, until, queue) when not "".
func (e *env) run(taskID, query string) record.Run {
	e.t.Helper()
	p := "/v1/runs/" + taskID
	if query != "" {
		p += "?" + query
	}
	r := e.do(request{method: "GET", path: p, token: tokReader})
	if r.status != http.StatusOK {
		e.t.Fatalf("GET %s: %d %s", p, r.status, r.body)
	}
	var rec record.Run
	r.json(e.t, &rec)
	return rec
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id, name, data string
}

// readSSE reads the events of an event stream until it ends.
func readSSE(t *testing.T, body io.Reader, each func(sseEvent)) {
	t.Helper()
	sc := bufio.NewScanner(body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" || ev.data != "" {
				each(ev)
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Errorf("unexpected event-stream line %q", line)
		}
	}
}
