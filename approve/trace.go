package approve

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/tracing"
)

// startSpan starts span name of approval a's life (accept, reject,
// promote) at start: a child of the span that parked a (a.TraceParent), in
// the run's trace, when it has one, else of ctx's. ctx's span, when it
// is of another trace (an approver's request), is linked.
func (s *Store) startSpan(ctx context.Context, name string, a *Approval, start time.Time) (context.Context, trace.Span) {
	caller := trace.SpanContextFromContext(ctx)
	opts := []trace.SpanStartOption{trace.WithTimestamp(start), trace.WithAttributes(
		tracing.AttrApprovalID.String(a.ID), tracing.AttrTaskID.String(a.TaskID),
		tracing.AttrRunID.String(a.RunID), tracing.AttrQueue.String(a.Run.Queue))}
	if parked := tracing.Parse(a.TraceParent); parked.IsValid() {
		if caller.IsValid() && caller.TraceID() != parked.TraceID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, parked)
	}
	return s.tracer.Start(ctx, name, opts...)
}

// traceDecision records the span of a decision that took effect (a is
// not nil): airlock.accept or airlock.reject, from start to now.
func (s *Store) traceDecision(ctx context.Context, start time.Time, to State, a *Approval) {
	if a == nil {
		return
	}
	name := tracing.SpanAccept
	if to == StateRejected {
		name = tracing.SpanReject
	}
	_, span := s.startSpan(ctx, name, a, start)
	span.SetAttributes(tracing.AttrState.String(string(a.State)))
	span.End()
}

// endPromote ends the span of a promotion with what it did: published or
// not, the bytes published, the artifacts; a refused or failed one is an
// error (its kind only: the message may name the run's files).
func endPromote(span trace.Span, m *Manifest, published bool, err error) {
	span.SetAttributes(tracing.AttrPublished.Bool(published))
	if m != nil {
		n := int64(0)
		if m.Result != nil {
			n += m.Result.Bytes
		}
		for _, a := range m.Artifacts {
			n += a.Bytes
		}
		span.SetAttributes(tracing.AttrBytes.Int64(n), tracing.AttrArtifacts.Int(len(m.Artifacts)))
	}
	switch {
	case errors.Is(err, ErrRefused):
		span.SetStatus(codes.Error, "refused")
	case err != nil:
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}
