package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/frontend/webhook"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// hit is one request a receiver got.
type hit struct {
	path   string
	header http.Header
	body   []byte
}

func (h hit) id() string { return h.header.Get(webhook.HeaderID) }

// receiver is a real HTTP server (a loopback listener) that records what it
// is sent. status, when set, picks the answer to the n-th request (from 0)
// of one path and webhook-id; a 3xx redirects to /elsewhere.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hits   []hit
	status func(path string, n int) int
}

func newReceiver(t *testing.T, status func(path string, n int) int) *receiver {
	r := &receiver{status: status}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		h := hit{path: req.URL.Path, header: req.Header.Clone(), body: body}
		r.mu.Lock()
		n := 0
		for _, o := range r.hits {
			if o.path == h.path && o.id() == h.id() {
				n++
			}
		}
		r.hits = append(r.hits, h)
		r.mu.Unlock()
		code := http.StatusNoContent
		if r.status != nil {
			code = r.status(h.path, n)
		}
		if code >= 300 && code < 400 {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "thanks\n")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// at returns the hits of path.
func (r *receiver) at(path string) []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []hit
	for _, h := range r.hits {
		if h.path == path {
			out = append(out, h)
		}
	}
	return out
}

// waitHits waits until path got n hits, and returns them.
func (r *receiver) waitHits(t *testing.T, path string, n int) []hit {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		hs := r.at(path)
		if len(hs) >= n {
			return hs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s got %d requests, want %d", path, len(hs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// env is a key prefix and a delivery queue of the test's own.
type env struct {
	rdb    redis.UniversalClient
	prefix string
	queue  string
	store  *approve.Store
	stream *events.Stream
}

func newEnv(t *testing.T) *env {
	prefix, q := approvetest.Prefix(t)
	rdb := redistest.Client(t)
	return &env{rdb: rdb, prefix: prefix, queue: q,
		store: approve.NewStore(rdb, approve.Options{Prefix: prefix}), stream: events.NewStream(rdb, prefix)}
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// serve runs webhook.Serve (dispatcher and delivery server) until the test
// ends, fast: retries after 20ms, polls every 10ms. It returns once the
// group exists, so that what is appended next is dispatched.
func (e *env) serve(t *testing.T, consumer string, eps []webhook.Endpoint, mod func(*webhook.Config)) {
	t.Helper()
	c := webhook.Config{
		Redis: e.rdb, Prefix: e.prefix, Endpoints: eps, Queue: e.queue, Consumer: consumer,
		Log:          zerolog.New(logWriter{t}).Level(zerolog.InfoLevel),
		RetryDelay:   func(int) time.Duration { return 20 * time.Millisecond },
		PollInterval: 10 * time.Millisecond, Block: 100 * time.Millisecond,
	}
	if mod != nil {
		mod(&c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- webhook.Serve(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		groups, _ := e.rdb.XInfoGroups(context.Background(), e.stream.Key()).Result()
		if slices.ContainsFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == webhook.DefaultGroup }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the dispatcher did not create its group")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func secret(t *testing.T) []byte {
	b, err := webhook.ParseSecret(webhook.NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode verifies a standard delivery and returns its envelope.
func decode(t *testing.T, key []byte, h hit) webhook.Envelope {
	t.Helper()
	if err := webhook.Verify(key, h.header, h.body, 0); err != nil {
		t.Errorf("delivery %s does not verify: %v", h.id(), err)
	}
	if ct := h.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var env webhook.Envelope
	if err := json.Unmarshal(h.body, &env); err != nil {
		t.Fatalf("body %s: %v", h.body, err)
	}
	return env
}

// pending parks a pending approval as the worker does: the approval, then
// the run's parked event.
func (e *env) pending(t *testing.T, id string, mod func(*approve.Approval)) {
	t.Helper()
	exit := 0
	a := &approve.Approval{
		ID: id, TaskID: "task-" + id, RunID: "run-" + id, State: approve.StatePending,
		Reasons: []string{"rule big-amounts: /amount 5000 > 1000", "rule networked: network: true"},
		Result:  []byte(`{"amount":5000,"private_note":"do not leak"}`),
		Artifacts: []record.Artifact{{Name: "out/report.csv", Bytes: 24, ContentType: "text/csv",
			SHA256: "5a0b1e3f5a0b1e3f5a0b1e3f5a0b1e3f5a0b1e3f5a0b1e3f5a0b1e3f5a0b1e3f"}},
		Run: approve.RunSummary{Queue: "payments", Attempt: 1, Worker: "host/1", Network: true,
			Steps: []approve.StepSummary{{Name: "sum", Argv: []string{"sh", "-c", "sum --token=argv-secret"}, Verdict: "ok", ExitCode: &exit}}},
	}
	if mod != nil {
		mod(a)
	}
	ctx := context.Background()
	if _, _, err := e.store.Quiet().Park(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.stream.Append(ctx, events.Event{RunID: a.RunID, TaskID: a.TaskID, State: record.StateParked,
		Verdict: record.VerdictOK, ApprovalID: a.ID}); err != nil {
		t.Fatal(err)
	}
}

// TestDispatchPendingAndFinal: a parked run, then every final state, go
// end to end (events stream → dispatcher → asynq → HTTP) to a standard
// endpoint, signed and with their data; the pending notice also goes to a
// Slack endpoint, in Slack's shape; nothing of the endpoints reaches Redis.
func TestDispatchPendingAndFinal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	r := newReceiver(t, nil)
	key := secret(t)
	std := webhook.Endpoint{URL: r.srv.URL + "/std?token=url-secret", Secret: key}
	slack := webhook.Endpoint{URL: r.srv.URL + "/slack/T0/B0/slack-url-secret", Format: webhook.FormatSlack}
	e.serve(t, "", []webhook.Endpoint{std, slack}, nil)

	// Pending, then rejected.
	e.pending(t, "ap-1", nil)
	hs := r.waitHits(t, "/std", 1)
	env := decode(t, key, hs[0])
	if env.Type != webhook.EventApprovalPending {
		t.Fatalf("first delivery is %s, want %s", env.Type, webhook.EventApprovalPending)
	}
	var p webhook.Pending
	if err := json.Unmarshal(env.Data, &p); err != nil {
		t.Fatal(err)
	}
	if p.EventID != hs[0].id() || p.RunID != "run-ap-1" || p.TaskID != "task-ap-1" || p.ApprovalID != "ap-1" ||
		p.Queue != "payments" || len(p.Reasons) != 2 || p.Result.Bytes != 44 || len(p.Result.Artifacts) != 1 ||
		len(p.Result.Steps) != 1 || p.Result.Steps[0].Name != "sum" || !p.Result.Network || p.ExpiresAt.IsZero() || p.Gone {
		t.Errorf("pending data: %+v", p)
	}
	wantAccept := "approve -prefix " + e.prefix + ` accept ap-1 -by "$USER"`
	if p.Commands.Accept != wantAccept || !strings.Contains(p.Commands.Reject, "reject ap-1") {
		t.Errorf("commands %+v, want accept %q", p.Commands, wantAccept)
	}
	if time.Since(env.Timestamp) > time.Minute || env.Timestamp.Location() != time.UTC {
		t.Errorf("envelope timestamp %v: not the event's time", env.Timestamp)
	}
	for _, leak := range []string{"do not leak", "argv-secret"} {
		if strings.Contains(string(hs[0].body), leak) {
			t.Errorf("the pending notice holds %q (the result or argv): %s", leak, hs[0].body)
		}
	}

	sh := r.waitHits(t, "/slack/T0/B0/slack-url-secret", 1)[0]
	var sm webhook.SlackMessage
	if err := json.Unmarshal(sh.body, &sm); err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(sm.Blocks)
	if sm.Text == "" || len(sm.Blocks) < 4 || sm.Blocks[0].Type != "header" ||
		!strings.Contains(sm.Blocks[0].Text.Text, "run-ap-1") ||
		!strings.Contains(string(all), "rule big-amounts") || !strings.Contains(string(all), "accept ap-1 -by") {
		t.Errorf("slack body: %s", sh.body)
	}
	if sh.id() != hs[0].id() || sh.header.Get(webhook.HeaderSignature) != "" || sh.header.Get(webhook.HeaderTimestamp) == "" {
		t.Errorf("slack headers (no secret: no signature): %v", sh.header)
	}

	if _, err := e.store.Reject(ctx, "ap-1", "alice", "too big"); err != nil {
		t.Fatal(err)
	}
	// Accepted then promoted (the approval store's events), a failure and
	// a completion (the worker's), an expiry (the sweeper's).
	e.pending(t, "ap-2", nil)
	if _, err := e.store.Accept(ctx, "ap-2", "bob", ""); err != nil {
		t.Fatal(err)
	}
	if err := e.store.MarkPromoted(ctx, "ap-2", time.Time{}, "/srv/airlock-store/run-ap-2/task-ap-2"); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []events.Event{
		{RunID: "run-3", TaskID: "task-3", State: record.StateFailed, Verdict: record.VerdictExit, Error: "step sum: exit (exit code 1)"},
		{RunID: "run-4", TaskID: "task-4", State: record.StateCompleted, Verdict: record.VerdictOK},
	} {
		if err := e.stream.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	e.pending(t, "ap-5", func(a *approve.Approval) { a.ExpiresAt = time.Now().Add(-time.Second) })
	if n, err := e.store.ExpireDue(ctx); err != nil || n != 1 {
		t.Fatalf("ExpireDue = %d, %v", n, err)
	}

	hs = r.waitHits(t, "/std", 8) // pending ×3, final ×5
	finals := map[string]webhook.Final{}
	ids := map[string]bool{}
	for _, h := range hs {
		ids[h.id()] = true
		env := decode(t, key, h)
		if env.Type != webhook.EventRunFinal {
			continue
		}
		var f webhook.Final
		if err := json.Unmarshal(env.Data, &f); err != nil {
			t.Fatal(err)
		}
		if f.EventID != h.id() {
			t.Errorf("event_id %s, webhook-id %s", f.EventID, h.id())
		}
		finals[f.RunID] = f
	}
	if len(ids) != len(hs) {
		t.Errorf("%d deliveries, %d distinct ids", len(hs), len(ids))
	}
	want := map[string]webhook.Final{
		"run-ap-1": {State: record.StateRejected, ApprovalID: "ap-1", DecidedBy: "alice", Comment: "too big", Queue: "payments"},
		"run-ap-2": {State: record.StatePromoted, ApprovalID: "ap-2", DecidedBy: "bob", Queue: "payments", PublishedTo: "/srv/airlock-store/run-ap-2/task-ap-2"},
		"run-3":    {State: record.StateFailed, Verdict: record.VerdictExit, Error: "step sum: exit (exit code 1)"},
		"run-4":    {State: record.StateCompleted},
		"run-ap-5": {State: record.StateExpired, ApprovalID: "ap-5", Queue: "payments"},
	}
	for run, w := range want {
		f, ok := finals[run]
		if !ok {
			t.Errorf("no run.final for %s", run)
			continue
		}
		if f.State != w.State || f.ApprovalID != w.ApprovalID || f.DecidedBy != w.DecidedBy || f.Comment != w.Comment ||
			f.Queue != w.Queue || f.PublishedTo != w.PublishedTo || (w.Verdict != "" && f.Verdict != w.Verdict) || f.Error != w.Error {
			t.Errorf("run.final of %s = %+v, want %+v", run, f, w)
		}
	}
	if f := finals["run-ap-1"]; len(f.Reasons) != 2 || f.DecidedAt.IsZero() {
		t.Errorf("rejected: reasons %v, decided_at %v", f.Reasons, f.DecidedAt)
	}

	// The Slack endpoint wants approval.pending only (its default).
	time.Sleep(300 * time.Millisecond)
	if n := len(r.at("/slack/T0/B0/slack-url-secret")); n != 3 {
		t.Errorf("slack endpoint got %d requests, want the 3 pending notices", n)
	}
	if n := len(r.at("/std")); n != 8 {
		t.Errorf("standard endpoint got %d requests, want 8", n)
	}

	// What asynq keeps in Redis names the endpoints by a hash only.
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	tasks, err := insp.ListCompletedTasks(e.queue, asynq.PageSize(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 11 {
		t.Errorf("%d completed delivery tasks, want 11", len(tasks))
	}
	for _, ti := range tasks {
		for _, s := range []string{"url-secret", "slack-url-secret", r.srv.URL, string(key)} {
			if strings.Contains(string(ti.Payload), s) {
				t.Errorf("task %s's payload holds %q", ti.ID, s)
			}
		}
		if ti.Type != webhook.TypeDeliver || ti.MaxRetry != webhook.DefaultMaxRetry {
			t.Errorf("task %s: type %s, max retry %d", ti.ID, ti.Type, ti.MaxRetry)
		}
	}
}

// failed appends n failed-run events and returns their ids.
func (e *env) failed(t *testing.T, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		if err := e.stream.Append(context.Background(), events.Event{RunID: fmt.Sprintf("run-%d", i), TaskID: fmt.Sprintf("task-%d", i),
			State: record.StateFailed, Verdict: record.VerdictError, Error: "worker: no luck"}); err != nil {
			t.Fatal(err)
		}
		last, err := e.stream.Last(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, last)
	}
	return ids
}

// TestTwoDispatchers: two processes share the stream; each event reaches
// each endpoint once. Reading the whole stream again (the group reset to
// its start) enqueues nothing new: the task ids are the events' and the
// endpoints'.
func TestTwoDispatchers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, nil)
	eps := []webhook.Endpoint{
		{URL: r.srv.URL + "/a", Secret: secret(t), Events: []string{webhook.EventRunFinal}},
		{URL: r.srv.URL + "/b", Secret: secret(t)},
	}
	e.serve(t, "one", eps, nil)
	e.serve(t, "two", eps, nil)
	consumers := func() []string {
		cs, err := e.rdb.XInfoConsumers(context.Background(), e.stream.Key(), webhook.DefaultGroup).Result()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range cs {
			names = append(names, c.Name)
		}
		slices.Sort(names)
		return names
	}
	const n = 40
	ids := e.failed(t, n)
	r.waitHits(t, "/a", n)
	r.waitHits(t, "/b", n)
	if err := e.rdb.XGroupSetID(context.Background(), e.stream.Key(), webhook.DefaultGroup, "0").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	for _, path := range []string{"/a", "/b"} {
		count := map[string]int{}
		for _, h := range r.at(path) {
			count[h.id()]++
		}
		for _, id := range ids {
			if count[id] != 1 {
				t.Errorf("%s got event %s %d times, want once", path, id, count[id])
			}
		}
		if len(count) != n {
			t.Errorf("%s got %d distinct events, want %d", path, len(count), n)
		}
	}
	pending, err := e.rdb.XPending(context.Background(), e.stream.Key(), webhook.DefaultGroup).Result()
	if err != nil || pending.Count != 0 {
		t.Errorf("entries left pending: %+v, %v", pending, err)
	}
	// Redis adds a consumer to the group when it is first served an
	// entry: which of the two read what is up to Redis.
	t.Logf("consumers that read entries: %v", consumers())
	for _, c := range consumers() {
		if c != "one" && c != "two" {
			t.Errorf("unknown consumer %s in the group", c)
		}
	}
}

// TestClaimFromDeadDispatcher: entries a dispatcher read and never
// acknowledged (it died) are claimed and delivered by another.
func TestClaimFromDeadDispatcher(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	r := newReceiver(t, nil)
	if err := e.rdb.XGroupCreateMkStream(ctx, e.stream.Key(), webhook.DefaultGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	ids := e.failed(t, 3)
	got, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: webhook.DefaultGroup, Consumer: "dead",
		Streams: []string{e.stream.Key(), ">"}, Count: 10}).Result()
	if err != nil || len(got) != 1 || len(got[0].Messages) != 3 {
		t.Fatalf("the dead dispatcher's read: %v, %v", got, err)
	}
	start := time.Now()
	e.serve(t, "alive", []webhook.Endpoint{{URL: r.srv.URL + "/h", Secret: secret(t)}},
		func(c *webhook.Config) { c.ClaimIdle = 300 * time.Millisecond })
	hs := r.waitHits(t, "/h", 3)
	var gotIDs []string
	for _, h := range hs {
		gotIDs = append(gotIDs, h.id())
	}
	slices.Sort(gotIDs)
	if !slices.Equal(gotIDs, ids) {
		t.Errorf("delivered %v, want %v", gotIDs, ids)
	}
	t.Logf("claimed and delivered %s after start", time.Since(start).Round(time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending, err := e.rdb.XPending(ctx, e.stream.Key(), webhook.DefaultGroup).Result()
		if err == nil && pending.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries left pending: %+v, %v", pending, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// taskState waits for the delivery task of event id to endpoint ep to
// reach state, and fails t if it does not.
func (e *env) taskState(t *testing.T, id string, ep webhook.Endpoint, state asynq.TaskState) {
	t.Helper()
	insp := asynq.NewInspectorFromRedisClient(e.rdb)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ti, err := insp.GetTaskInfo(e.queue, webhook.TaskID(id, ep))
		if err == nil && ti.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task of %s: %+v, %v; want state %s", id, ti, err, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRetryUntilDelivered: a receiver that fails twice gets the event a
// third time, with the same webhook-id and a valid signature each time.
func TestRetryUntilDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, func(_ string, n int) int {
		if n < 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	key := secret(t)
	ep := webhook.Endpoint{URL: r.srv.URL + "/h", Secret: key}
	e.serve(t, "", []webhook.Endpoint{ep}, nil)
	ids := e.failed(t, 1)
	hs := r.waitHits(t, "/h", 3)
	for _, h := range hs {
		if h.id() != ids[0] {
			t.Errorf("webhook-id %s, want %s on every attempt", h.id(), ids[0])
		}
		decode(t, key, h)
		if string(h.body) != string(hs[0].body) {
			t.Errorf("attempts sent different bodies: %s, %s", hs[0].body, h.body)
		}
	}
	e.taskState(t, ids[0], ep, asynq.TaskStateCompleted)
	time.Sleep(200 * time.Millisecond)
	if n := len(r.at("/h")); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
}

// TestGoneStops: 410 Gone stops the delivery at once (archived, no retry).
func TestGoneStops(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, func(string, int) int { return http.StatusGone })
	ep := webhook.Endpoint{URL: r.srv.URL + "/h", Secret: secret(t)}
	e.serve(t, "", []webhook.Endpoint{ep}, nil)
	ids := e.failed(t, 1)
	r.waitHits(t, "/h", 1)
	e.taskState(t, ids[0], ep, asynq.TaskStateArchived)
	time.Sleep(300 * time.Millisecond)
	if n := len(r.at("/h")); n != 1 {
		t.Errorf("%d attempts after 410, want 1", n)
	}
}

// TestRedirectIsAFailure: a redirect is never followed; the delivery is
// retried at its own URL.
func TestRedirectIsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := newReceiver(t, func(path string, n int) int {
		if path == "/h" && n == 0 {
			return http.StatusFound
		}
		return http.StatusOK
	})
	ep := webhook.Endpoint{URL: r.srv.URL + "/h", Secret: secret(t)}
	e.serve(t, "", []webhook.Endpoint{ep}, nil)
	ids := e.failed(t, 1)
	r.waitHits(t, "/h", 2)
	e.taskState(t, ids[0], ep, asynq.TaskStateCompleted)
	if n := len(r.at("/elsewhere")); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

func TestRunWithoutEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := webhook.Run(ctx, redistest.Client(t), "", nil, zerolog.Nop()); err != nil {
		t.Errorf("Run without endpoints: %v", err)
	}
	if ctx.Err() != nil {
		t.Error("Run without endpoints waited")
	}
	err := webhook.Run(ctx, redistest.Client(t), "", []webhook.Endpoint{{URL: "https://h.example/x"}}, zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "secret is required") {
		t.Errorf("Run with an endpoint without a secret: %v", err)
	}
}

// TestCluster: the consumer group, the approval store and asynq through a
// Redis Cluster client (3 masters; the stream, the approval and asynq's
// queue on different slots).
func TestCluster(t *testing.T) {
	t.Parallel()
	url := redistest.Cluster(t)
	rdb, _, err := redisconn.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	e := &env{rdb: rdb, prefix: "cl:", queue: "webhooks-cluster",
		store: approve.NewStore(rdb, approve.Options{Prefix: "cl:"}), stream: events.NewStream(rdb, "cl:")}
	r := newReceiver(t, nil)
	key := secret(t)
	e.serve(t, "c1", []webhook.Endpoint{{URL: r.srv.URL + "/h", Secret: key}}, nil)
	e.pending(t, "ap-cluster", nil)
	e.failed(t, 2)
	hs := r.waitHits(t, "/h", 3)
	types := map[string]int{}
	for _, h := range hs {
		types[decode(t, key, h).Type]++
	}
	if types[webhook.EventApprovalPending] != 1 || types[webhook.EventRunFinal] != 2 {
		t.Errorf("delivered %v", types)
	}
}

// TestUnreadableApproval: an event whose approval cannot be read (a
// damaged hash) is retried, then sent without it, rather than left
// pending for ever.
func TestUnreadableApproval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	r := newReceiver(t, nil)
	key := secret(t)
	e.serve(t, "", []webhook.Endpoint{{URL: r.srv.URL + "/h", Secret: key}},
		func(c *webhook.Config) { c.ClaimIdle = 20 * time.Millisecond })
	a := &approve.Approval{ID: "ap-bad", TaskID: "task-bad", RunID: "run-bad", State: approve.StatePending, Reasons: []string{"r"}}
	if _, _, err := e.store.Quiet().Park(ctx, a, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(ctx, e.store.Keys(a.ID)[0], "artifacts", "{broken").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Get(ctx, a.ID); err == nil {
		t.Fatal("the damaged approval still reads")
	}
	if err := e.stream.Append(ctx, events.Event{RunID: a.RunID, TaskID: a.TaskID, State: record.StateParked,
		Verdict: record.VerdictOK, ApprovalID: a.ID}); err != nil {
		t.Fatal(err)
	}
	h := r.waitHits(t, "/h", 1)[0]
	var p webhook.Pending
	if err := json.Unmarshal(decode(t, key, h).Data, &p); err != nil {
		t.Fatal(err)
	}
	if !p.Gone || p.ApprovalID != "ap-bad" || p.RunID != "run-bad" || p.Commands.Accept == "" {
		t.Errorf("pending data without its approval: %+v", p)
	}
}
