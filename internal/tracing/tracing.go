// Package tracing carries a run's W3C trace context (traceparent,
// tracestate) from the caller through the task to the worker, and names
// the OpenTelemetry spans Airlock makes of a run's life: the run itself,
// its fetch, each step, the validation, the policy, the park, then the
// approver's accept (or reject) and the promotion.
//
// It uses only OpenTelemetry's API: spans go to the global tracer
// provider, or to the one a component is given, and cost nothing while no
// SDK is installed. The propagation never depends on that: the client and
// the HTTP API carry a caller's context whether or not they export spans.
// Exporting (OTLP over HTTP, opt-in by OTEL_EXPORTER_OTLP_ENDPOINT) is
// package tracing/otlp's, which only the binaries that export link.
//
// A trace context is a hint, never trusted for anything else: a
// traceparent that is not exactly W3C's syntax is dropped (the run starts a
// trace of its own), a tracestate above MaxTraceState bytes or malformed is
// dropped, and nothing in them decides anything but the spans' parentage
// and sampling.
package tracing

import (
	"context"
	"crypto/rand"
	"net/http"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of Airlock's spans.
const Scope = "github.com/airlock-run/airlock"

// Header names of the W3C trace context: HTTP headers of the API's
// requests, and asynq task headers of a run's task.
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Bounds of what is read of a trace context: a traceparent of version 00
// is 55 bytes (later versions may append fields); W3C asks that at least
// 512 bytes of tracestate be propagated, and lets a vendor drop more.
const (
	MaxTraceParent = 256
	MaxTraceState  = 512
)

// Span names.
const (
	SpanRun      = "airlock.run"      // one attempt of a task, in the worker
	SpanFetch    = "airlock.fetch"    // the download of the spec's inputs
	SpanStep     = "airlock.step"     // one step in the sandbox
	SpanValidate = "airlock.validate" // the output contract: the result, its schema, the artifacts
	SpanPolicy   = "airlock.policy"   // the risk policy's decision
	SpanPark     = "airlock.park"     // the output staged with its approval
	SpanAccept   = "airlock.accept"   // an approver's accept
	SpanReject   = "airlock.reject"   // an approver's reject
	SpanPromote  = "airlock.promote"  // the publication of an accepted output
)

// Attribute keys of Airlock's spans: ids, states, counts and sizes; never
// a secret, and nothing of a spec's content (no argv, URL, file name, step
// name or result).
const (
	AttrTaskID     = attribute.Key("airlock.task_id")
	AttrQueue      = attribute.Key("airlock.queue")
	AttrRunID      = attribute.Key("airlock.run_id")
	AttrAttempt    = attribute.Key("airlock.attempt")
	AttrState      = attribute.Key("airlock.state")
	AttrVerdict    = attribute.Key("airlock.verdict")
	AttrApprovalID = attribute.Key("airlock.approval_id")
	AttrStep       = attribute.Key("airlock.step.index")
	AttrExitCode   = attribute.Key("airlock.step.exit_code")
	AttrInputs     = attribute.Key("airlock.inputs")
	AttrBytes      = attribute.Key("airlock.bytes") // bytes the span's work moved: run, the spec's files written; fetch, downloaded; validate, read; park, staged; promote, published
	AttrStdout     = attribute.Key("airlock.stdout_bytes")
	AttrStderr     = attribute.Key("airlock.stderr_bytes")
	AttrWritten    = attribute.Key("airlock.bytes_written")
	AttrAction     = attribute.Key("airlock.decision.action")
	AttrRule       = attribute.Key("airlock.decision.rule")
	AttrViolations = attribute.Key("airlock.schema_errors")
	AttrArtifacts  = attribute.Key("airlock.artifacts")
	AttrPublished  = attribute.Key("airlock.published")
)

// w3c is the one propagator: W3C Trace Context, whatever the global one
// is (it is a no-op until a program sets one).
var w3c = propagation.TraceContext{}

// Tracer returns Airlock's tracer of tp, or of the global provider when tp
// is nil.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(Scope)
}

// Inject returns the traceparent (and tracestate, if any) of ctx's span
// context as task headers, or nil when ctx holds none.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := make(map[string]string, 2)
	w3c.Inject(ctx, propagation.MapCarrier(h))
	return h
}

// Extract returns the remote span context task headers carry. present
// says a traceparent was there; the span context is invalid when it was
// not, or was malformed or too long (dropped: the caller starts a trace of
// its own). A malformed or oversized tracestate is dropped alone.
func Extract(headers map[string]string) (sc trace.SpanContext, present bool) {
	tp, ok := headers[HeaderTraceParent]
	if !ok {
		return trace.SpanContext{}, false
	}
	return parse(tp, headers[HeaderTraceState]), true
}

// FromRequest returns r's context with the remote span context of r's
// traceparent and tracestate headers; r's own context when it has none or
// a malformed one (per W3C, the server then starts a trace of its own).
// A request with more than one traceparent header has a malformed one.
func FromRequest(r *http.Request) context.Context {
	ctx := r.Context()
	tps := r.Header.Values(HeaderTraceParent)
	if len(tps) != 1 {
		return ctx
	}
	sc := parse(tps[0], r.Header.Get(HeaderTraceState))
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// parse parses a traceparent and a tracestate strictly (W3C's syntax:
// lower-case hex, version ff refused, ids not all zero; version 00 has no
// field more), within the bounds.
func parse(traceparent, tracestate string) trace.SpanContext {
	if len(traceparent) > MaxTraceParent {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{HeaderTraceParent: traceparent}
	if tracestate != "" && len(tracestate) <= MaxTraceState {
		c[HeaderTraceState] = tracestate
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), c))
}

// Parse returns the span context of a traceparent (with no tracestate), or
// an invalid one when it is not W3C's syntax.
func Parse(traceparent string) trace.SpanContext { return parse(traceparent, "") }

// Traceparent formats sc as a W3C traceparent; "" when sc is invalid.
func Traceparent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), c)
	return c[HeaderTraceParent]
}

// TraceID returns the hex trace id of ctx's span context, "" when it holds
// none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Ensure returns ctx when it holds a valid span context, else ctx with a
// new random one, not sampled: a run has a trace id (in its record and its
// log lines) when nobody sent one and no SDK makes spans.
func Ensure(ctx context.Context) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	var c trace.SpanContextConfig
	for !c.TraceID.IsValid() || !c.SpanID.IsValid() {
		_, _ = rand.Read(c.TraceID[:])
		_, _ = rand.Read(c.SpanID[:])
	}
	c.TraceFlags = trace.FlagsRandom
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(c))
}
