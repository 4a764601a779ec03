package httpapi_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/tracing"
)

// lockedBuffer collects log lines its writers append concurrently.
type lockedBuffer = logtest.Buffer

// TestRequestTraceReachesTheTask: a request's traceparent header makes
// its server span ("POST /v1/runs") a child of the caller's, and the task
// it enqueues carries that span's context to the worker; a malformed
// header is ignored (201 all the same, in a trace of the API's own); the
// request's log line has the trace id.
func TestRequestTraceReachesTheTask(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	logs := &lockedBuffer{}
	log := zerolog.New(logs)
	e := newEnv(t, httpapi.Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), Log: &log})
	insp := asynq.NewInspectorFromRedisClient(redistest.Client(t))
	const callerTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	caller := tracing.Parse(callerTP)

	for _, tt := range []struct {
		name, header string
		child        bool // of the caller's span
	}{
		{"valid", callerTP, true},
		{"malformed", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
	} {
		r := e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: e.spec(false, ""),
			header: map[string]string{"traceparent": tt.header, "tracestate": "vendor=abc"}})
		if r.status != http.StatusCreated {
			t.Fatalf("%s: POST /v1/runs: %d %s", tt.name, r.status, r.body)
		}
		var en httpapi.Enqueued
		r.json(t, &en)
		info, err := insp.GetTaskInfo(e.queue, en.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		task, _ := tracing.Extract(info.Headers)
		spans := rec.Ended()
		span := spans[len(spans)-1]
		if span.Name() != "POST /v1/runs" || span.SpanKind() != trace.SpanKindServer {
			t.Fatalf("%s: span %s (%s)", tt.name, span.Name(), span.SpanKind())
		}
		if task.SpanID() != span.SpanContext().SpanID() || task.TraceID() != span.SpanContext().TraceID() {
			t.Errorf("%s: the task carries %s/%s, want the request's span %s/%s", tt.name,
				task.TraceID(), task.SpanID(), span.SpanContext().TraceID(), span.SpanContext().SpanID())
		}
		if tt.child != (span.SpanContext().TraceID() == caller.TraceID()) || tt.child != (span.Parent().SpanID() == caller.SpanID()) {
			t.Errorf("%s: span in trace %s with parent %s; child of the caller's: %v", tt.name,
				span.SpanContext().TraceID(), span.Parent().SpanID(), tt.child)
		}
		if tt.child && task.TraceState().String() != "vendor=abc" {
			t.Errorf("%s: tracestate %q", tt.name, task.TraceState())
		}
		attrs := map[string]string{}
		for _, kv := range span.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		if attrs["http.route"] != "/v1/runs" || attrs["http.response.status_code"] != "201" || attrs["http.request.method"] != "POST" {
			t.Errorf("%s: span attributes %v", tt.name, attrs)
		}
		found := false
		sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
		for sc.Scan() {
			var l map[string]any
			if json.Unmarshal(sc.Bytes(), &l) == nil && l["message"] == "http" && l["trace_id"] == span.SpanContext().TraceID().String() {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no http log line with trace_id %s", tt.name, span.SpanContext().TraceID())
		}
	}
}
