//go:build linux

package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// syncBuffer collects log lines its writers append concurrently.
type syncBuffer = logtest.Buffer

// taskLines returns the JSON log lines of task id in s.
func taskLines(t *testing.T, s *syncBuffer, taskID string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(s.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if l["task_id"] == taskID {
			out = append(out, l)
		}
	}
	return out
}

// tracedWorker runs a real Worker (best-effort isolation: any user) on a
// fresh queue with tp as its tracer provider, an input server on the
// loopback it may fetch from, and a store directory; it stops when the
// test ends.
func tracedWorker(t *testing.T, tp trace.TracerProvider, logs *syncBuffer) (cfg Config, inputURL string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a real worker; not with -short")
	}
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	root, err := os.MkdirTemp("", "airlock-trace-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil { // steps run as slot uids when root
		t.Fatal(err)
	}
	in := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"total": 3}`)
	}))
	t.Cleanup(in.Close)
	cfg = Config{
		Redis: rdb, Prefix: q + ":", Queues: map[string]int{q: 1}, Concurrency: 1,
		Isolation: BestEffort, Cgroup: "off", WorkspaceRoot: filepath.Join(root, "ws"),
		// Not e2e's 200000 range: its tests look for processes of those uids.
		UIDLockDir: filepath.Join(root, "uids"), UIDFirst: 380000, UIDCount: 100,
		Sink:       &promote.FS{Dir: filepath.Join(root, "store")},
		FetchAllow: []string{"127.0.0.1"}, SweepInterval: time.Hour, TracerProvider: tp,
		Logger: zerolog.New(logs),
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker Run: %v", err)
		}
	})
	return cfg, in.URL + "/in.json"
}

// TestRunSpans runs a real task (an input, two steps, a result with a
// schema, parked by the default policy) traced by its caller, accepts its
// output, and checks the spans an in-memory exporter received: airlock.run
// a child of the caller's span; fetch, each step, validate, policy and
// park children of the run; the accept and the worker's promotion
// children of the park, whose context the approval keeps; every span in
// the caller's trace, which is the record's trace_id and in every log
// line of the task. A task whose traceparent is malformed runs all the
// same, in a trace of its own.
func TestRunSpans(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	logs := &syncBuffer{}
	cfg, inputURL := tracedWorker(t, tp, logs)
	q := slices.Collect(func(yield func(string) bool) {
		for k := range cfg.Queues {
			yield(k)
		}
	})[0]
	client := airlock.NewClient(cfg.Redis, airlock.ClientOptions{Prefix: cfg.Prefix})
	caller := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx := trace.ContextWithSpanContext(context.Background(), caller)
	spec, err := tasks.Decode([]byte(`{"version": 1, "queue": "` + q + `",
		"inputs": [{"url": "` + inputURL + `", "path": "in.json"}],
		"steps": [{"name": "copy", "run": ["sh", "-c", "mkdir -p out && cp in.json out/result.json"]}, {"name": "check", "run": ["true"]}],
		"output": {"result": "out/result.json", "schema": {"type": "object", "required": ["total"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := client.Enqueue(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := client.Wait(wctx, e.Queue, e.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != record.StateParked || rec.TraceID != caller.TraceID().String() {
		t.Fatalf("record: %s/%s %q, trace_id %q; want parked in trace %s", rec.State, rec.Verdict, rec.Error, rec.TraceID, caller.TraceID())
	}
	store := approve.NewStore(cfg.Redis, approve.Options{Prefix: cfg.Prefix, TracerProvider: tp})
	ac := asynq.NewClientFromRedisClient(cfg.Redis)
	defer ac.Close()
	if _, _, err := approve.Accept(context.Background(), store, ac, rec.ApprovalID, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.WaitFinal(wctx, e.Queue, e.TaskID); err != nil {
		t.Fatal(err)
	}
	var spans []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		spans = recorder.Ended()
		if slices.ContainsFunc(spans, func(s sdktrace.ReadOnlySpan) bool { return s.Name() == tracing.SpanPromote }) || time.Now().After(deadline) {
			break
		}
	}

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
		if s.SpanContext().TraceID() != caller.TraceID() {
			t.Errorf("span %s in trace %s, want the caller's %s", s.Name(), s.SpanContext().TraceID(), caller.TraceID())
		}
	}
	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		if len(byName[name]) != 1 {
			t.Fatalf("%d spans %s, want 1 (spans: %d)", len(byName[name]), name, len(spans))
		}
		return byName[name][0]
	}
	attrs := func(s sdktrace.ReadOnlySpan) map[string]string {
		m := map[string]string{}
		for _, kv := range s.Attributes() {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		return m
	}
	run := one(tracing.SpanRun)
	if run.Parent().SpanID() != caller.SpanID() || !run.Parent().IsRemote() || run.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("run span: parent %s remote %v kind %s", run.Parent().SpanID(), run.Parent().IsRemote(), run.SpanKind())
	}
	ra := attrs(run)
	if ra["airlock.task_id"] != e.TaskID || ra["airlock.queue"] != q || ra["airlock.run_id"] != rec.RunID ||
		ra["airlock.state"] != "parked" || ra["airlock.verdict"] != "ok" || ra["airlock.approval_id"] != rec.ApprovalID {
		t.Errorf("run span attributes %v", ra)
	}
	for _, name := range []string{tracing.SpanFetch, tracing.SpanValidate, tracing.SpanPolicy, tracing.SpanPark} {
		if s := one(name); s.Parent().SpanID() != run.SpanContext().SpanID() {
			t.Errorf("%s: parent %s, want the run's %s", name, s.Parent().SpanID(), run.SpanContext().SpanID())
		}
	}
	if a := attrs(one(tracing.SpanFetch)); a["airlock.inputs"] != "1" || a["airlock.bytes"] != "12" {
		t.Errorf("fetch span attributes %v", a)
	}
	if a := attrs(one(tracing.SpanPolicy)); a["airlock.decision.action"] != "park" || a["airlock.decision.rule"] != "no-policy" {
		t.Errorf("policy span attributes %v", a)
	}
	steps := byName[tracing.SpanStep]
	if len(steps) != 2 {
		t.Fatalf("%d step spans, want 2", len(steps))
	}
	for i, s := range steps {
		a := attrs(s)
		if s.Parent().SpanID() != run.SpanContext().SpanID() || a["airlock.step.index"] != fmt.Sprint(i) ||
			a["airlock.verdict"] != "ok" || a["airlock.step.exit_code"] != "0" {
			t.Errorf("step span %d: parent %s, attributes %v", i, s.Parent().SpanID(), a)
		}
		for k := range a {
			if strings.Contains(k, "name") || strings.Contains(k, "argv") {
				t.Errorf("step span %d has %s: no spec content in spans", i, k)
			}
		}
	}
	park := one(tracing.SpanPark)
	for _, name := range []string{tracing.SpanAccept, tracing.SpanPromote} {
		if s := one(name); s.Parent().SpanID() != park.SpanContext().SpanID() {
			t.Errorf("%s: parent %s, want the park's %s", name, s.Parent().SpanID(), park.SpanContext().SpanID())
		}
	}
	if a := attrs(one(tracing.SpanPromote)); a["airlock.published"] != "true" {
		t.Errorf("promote span attributes %v", a)
	}
	if ap, err := store.Get(context.Background(), rec.ApprovalID); err != nil || ap.TraceParent != tracing.Traceparent(park.SpanContext()) {
		t.Errorf("approval trace_parent %q, want the park span's %q (%v)", ap.TraceParent, tracing.Traceparent(park.SpanContext()), err)
	}
	lines := taskLines(t, logs, e.TaskID)
	msgs := map[string]bool{}
	for _, l := range lines {
		msgs[fmt.Sprint(l["message"])] = true
		if l["trace_id"] != rec.TraceID {
			t.Errorf("log line %v: trace_id %v, want %s", l["message"], l["trace_id"], rec.TraceID)
		}
	}
	for _, m := range []string{"task start", "input", "step", "task end"} {
		if !msgs[m] {
			t.Errorf("no %q log line of the task: %v", m, msgs)
		}
	}

	// A raw enqueuer's malformed traceparent is dropped: the run has a
	// trace of its own, and says so.
	payload := []byte(`{"version": 1, "run_id": "r-bad-trace", "steps": [{"run": ["true"]}]}`)
	info, err := ac.Enqueue(asynq.NewTaskWithHeaders(tasks.TypeRun, payload, map[string]string{"traceparent": "00-NOT-A-TRACE-01"}),
		asynq.Queue(q), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := client.Wait(wctx, q, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if bad.State != record.StateCompleted || len(bad.TraceID) != 32 || bad.TraceID == caller.TraceID().String() {
		t.Errorf("run with a malformed traceparent: %s %q, trace_id %q", bad.State, bad.Error, bad.TraceID)
	}
	warned := false
	for _, l := range taskLines(t, logs, info.ID) {
		warned = warned || strings.Contains(fmt.Sprint(l["message"]), "malformed")
	}
	if !warned {
		t.Error("no log line says the traceparent was dropped")
	}
}
