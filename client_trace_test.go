package airlock_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/tracing"
)

// TestEnqueueCarriesTraceContext: a task enqueued with a span context in
// ctx carries its traceparent and tracestate as task headers (with an
// idempotency key too), outside the payload; one enqueued without has no
// headers.
func TestEnqueueCarriesTraceContext(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	insp := inspector(t)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	traced := trace.ContextWithSpanContext(context.Background(), tracing.Parse(tp).WithTraceState(ts))
	withTrace := map[string]string{"traceparent": tp, "tracestate": "vendor=abc"}
	for _, tt := range []struct {
		name string
		ctx  context.Context
		key  string
		want map[string]string
	}{
		{"traced", traced, "", withTrace},
		{"traced, idempotent", traced, "k-trace", withTrace},
		{"untraced", context.Background(), "", nil},
	} {
		s := newSpec(q)
		s.IdempotencyKey = tt.key
		e, err := c.Enqueue(tt.ctx, s)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		info, err := insp.GetTaskInfo(q, e.TaskID)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(info.Headers) != len(tt.want) {
			t.Errorf("%s: headers %v, want %v", tt.name, info.Headers, tt.want)
		}
		for k, v := range tt.want {
			if info.Headers[k] != v {
				t.Errorf("%s: header %s = %q, want %q", tt.name, k, info.Headers[k], v)
			}
		}
	}
}
