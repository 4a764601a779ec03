package httpapi

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/tracing"
)

// Every request has a server span, a child of the caller's span when its
// traceparent header is W3C's syntax (else dropped: the request starts a
// trace of its own, or carries none while no SDK is installed). The
// span's context is the request's: a run it enqueues carries it to the
// worker (airlock.Client.Enqueue), whose spans are its children and whose
// record's trace_id is its trace id; an accept or reject links to it. Its
// log line has trace_id.

// startSpan starts r's server span, and returns r with its context.
func (h *Handler) startSpan(r *http.Request) (*http.Request, trace.Span) {
	ctx, span := h.tracer.Start(tracing.FromRequest(r), r.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrMethod.String(r.Method)))
	return r.WithContext(ctx), span
}

// Attributes of a request's span (OpenTelemetry's HTTP conventions).
const (
	attrMethod = attribute.Key("http.request.method")
	attrRoute  = attribute.Key("http.route")
	attrStatus = attribute.Key("http.response.status_code")
)

// endSpan ends r's span once served: named by the route that served it
// ("POST /v1/runs"), with the status; a 5xx is an error.
func endSpan(span trace.Span, r *http.Request, status int) {
	if method, route, ok := strings.Cut(r.Pattern, " "); ok && method == r.Method {
		span.SetName(r.Pattern)
		span.SetAttributes(attrRoute.String(route))
	}
	span.SetAttributes(attrStatus.Int(status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// traceID is the trace id of span, "" when it has none.
func traceID(span trace.Span) string {
	if sc := span.SpanContext(); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}
