package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

const (
	traceHex = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanHex  = "00f067aa0ba902b7"
	valid    = "00-" + traceHex + "-" + spanHex + "-01"
)

// TestExtractIsStrict: a traceparent is taken only in W3C's exact syntax;
// anything else is dropped (present, but no span context), and a bad
// tracestate is dropped alone.
func TestExtractIsStrict(t *testing.T) {
	for _, tt := range []struct {
		name, tp, ts string
		ok           bool
		wantTS       string
	}{
		{"valid, sampled", valid, "", true, ""},
		{"valid, with tracestate", valid, "vendor=abc,other=1", true, "vendor=abc,other=1"},
		{"not sampled", "00-" + traceHex + "-" + spanHex + "-00", "", true, ""},
		{"a later version may add fields", "01-" + traceHex + "-" + spanHex + "-01-more", "", true, ""},
		{"upper-case hex", "00-" + strings.ToUpper(traceHex) + "-" + spanHex + "-01", "", false, ""},
		{"version ff", "ff-" + traceHex + "-" + spanHex + "-01", "", false, ""},
		{"version 00 with a field more", valid + "-x", "", false, ""},
		{"zero trace id", "00-" + strings.Repeat("0", 32) + "-" + spanHex + "-01", "", false, ""},
		{"zero span id", "00-" + traceHex + "-" + strings.Repeat("0", 16) + "-01", "", false, ""},
		{"short trace id", "00-" + traceHex[1:] + "-" + spanHex + "-01", "", false, ""},
		{"not hex", "00-" + strings.Repeat("g", 32) + "-" + spanHex + "-01", "", false, ""},
		{"reserved flag bits on version 00", "00-" + traceHex + "-" + spanHex + "-09", "", false, ""},
		{"too long", "01-" + traceHex + "-" + spanHex + "-01-" + strings.Repeat("a", MaxTraceParent), "", false, ""},
		{"empty", "", "", false, ""},
		{"malformed tracestate dropped alone", valid, "no equals sign", true, ""},
		{"oversized tracestate dropped alone", valid, "v=" + strings.Repeat("a", MaxTraceState), true, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{HeaderTraceParent: tt.tp}
			if tt.ts != "" {
				h[HeaderTraceState] = tt.ts
			}
			sc, present := Extract(h)
			if !present {
				t.Fatal("present false with a traceparent header")
			}
			if sc.IsValid() != tt.ok {
				t.Fatalf("valid %v, want %v (%q)", sc.IsValid(), tt.ok, tt.tp)
			}
			if !tt.ok {
				return
			}
			if sc.TraceID().String() != traceHex || sc.SpanID().String() != spanHex || !sc.IsRemote() {
				t.Errorf("span context %s/%s remote %v", sc.TraceID(), sc.SpanID(), sc.IsRemote())
			}
			if got := sc.TraceState().String(); got != tt.wantTS {
				t.Errorf("tracestate %q, want %q", got, tt.wantTS)
			}
		})
	}
	if sc, present := Extract(map[string]string{"other": "x"}); present || sc.IsValid() {
		t.Errorf("no traceparent: present %v, valid %v", present, sc.IsValid())
	}
	if sc, present := Extract(nil); present || sc.IsValid() {
		t.Errorf("nil headers: present %v, valid %v", present, sc.IsValid())
	}
}

// TestInjectRoundTrip: what Inject writes from a span context, Extract
// reads back; a context without one gives no headers.
func TestInjectRoundTrip(t *testing.T) {
	if h := Inject(context.Background()); h != nil {
		t.Errorf("headers %v from a context without a span", h)
	}
	sc := Parse(valid)
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc = sc.WithTraceState(ts)
	h := Inject(trace.ContextWithSpanContext(context.Background(), sc))
	if h[HeaderTraceParent] != valid || h[HeaderTraceState] != "vendor=abc" || len(h) != 2 {
		t.Fatalf("headers %v", h)
	}
	back, _ := Extract(h)
	if !back.Equal(sc.WithRemote(true)) {
		t.Errorf("round trip: %v, want %v", back, sc)
	}
	if got := Traceparent(back); got != valid {
		t.Errorf("Traceparent %q, want %q", got, valid)
	}
	if got := Traceparent(trace.SpanContext{}); got != "" {
		t.Errorf("Traceparent of nothing %q", got)
	}
}

// TestFromRequest: one valid traceparent header is the request's remote
// parent; none, a malformed one or two are dropped.
func TestFromRequest(t *testing.T) {
	for _, tt := range []struct {
		name    string
		headers []string
		ok      bool
	}{
		{"one", []string{valid}, true},
		{"none", nil, false},
		{"malformed", []string{"00-xyz"}, false},
		{"two", []string{valid, valid}, false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		for _, v := range tt.headers {
			r.Header.Add("Traceparent", v)
		}
		sc := trace.SpanContextFromContext(FromRequest(r))
		if sc.IsValid() != tt.ok || (tt.ok && sc.TraceID().String() != traceHex) {
			t.Errorf("%s: span context %v, want valid %v", tt.name, sc, tt.ok)
		}
	}
}

// TestEnsure: a context without a span context gets a random valid one,
// another each time; one with a span context keeps it.
func TestEnsure(t *testing.T) {
	a := trace.SpanContextFromContext(Ensure(context.Background()))
	b := trace.SpanContextFromContext(Ensure(context.Background()))
	if !a.IsValid() || !b.IsValid() || a.TraceID() == b.TraceID() || a.IsSampled() {
		t.Errorf("Ensure gave %v and %v: want two valid, different, unsampled", a, b)
	}
	if got := TraceID(Ensure(context.Background())); len(got) != 32 {
		t.Errorf("TraceID %q", got)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), Parse(valid))
	if got := TraceID(Ensure(ctx)); got != traceHex {
		t.Errorf("Ensure replaced the caller's trace: %s", got)
	}
	if got := TraceID(context.Background()); got != "" {
		t.Errorf("TraceID of nothing %q", got)
	}
}

// BenchmarkRunSpansOff is what tracing costs a run when no SDK is
// installed (no OTLP endpoint): its trace context extracted from the
// task's headers, the run span and its eight children started and ended
// on the global provider, with their attributes.
func BenchmarkRunSpansOff(b *testing.B) {
	headers := map[string]string{HeaderTraceParent: valid}
	tr := Tracer(nil)
	b.ReportAllocs()
	for b.Loop() {
		sc, _ := Extract(headers)
		ctx, run := tr.Start(trace.ContextWithRemoteSpanContext(context.Background(), sc), SpanRun,
			trace.WithAttributes(AttrTaskID.String("t"), AttrQueue.String("q"), AttrAttempt.Int(1)))
		for _, name := range []string{SpanFetch, SpanStep, SpanStep, SpanStep, SpanValidate, SpanPolicy, SpanPark, SpanPromote} {
			_, s := tr.Start(ctx, name)
			s.SetAttributes(AttrVerdict.String("ok"), AttrBytes.Int64(1))
			s.End()
		}
		run.SetAttributes(AttrState.String("parked"))
		run.End()
		_ = TraceID(ctx)
	}
}
