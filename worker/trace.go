//go:build linux

package worker

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// A run's spans (package tracing names them): airlock.run, a child of the
// caller's span when the task's headers carry its traceparent (a hint,
// parsed strictly: a malformed one is dropped, and the run starts a trace
// of its own); below it airlock.fetch, one airlock.step per step,
// airlock.validate, airlock.policy and airlock.park (with the inline
// airlock.promote of an output the policy accepted: package approve). The
// run's trace id is in its record (trace_id) and every log line of its
// task; without an SDK (no OTLP endpoint) the spans are no-ops, and a run
// no caller traced gets a random trace id all the same.

// tracer returns the worker's tracer, looked up once in New (the global
// provider delegates to an SDK installed later).
func (w *Worker) tracer() trace.Tracer { return w.tr }

// startRun starts the span of the task's attempt and sets rec.TraceID.
func (w *Worker) startRun(ctx context.Context, t *asynq.Task, rec *record.Run) (context.Context, trace.Span) {
	sc, present := tracing.Extract(t.Headers())
	if sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	ctx, span := w.tracer().Start(ctx, tracing.SpanRun, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(tracing.AttrTaskID.String(rec.TaskID), tracing.AttrQueue.String(rec.Queue), tracing.AttrAttempt.Int(rec.Attempt)))
	if !span.SpanContext().IsValid() {
		ctx = tracing.Ensure(ctx)
		span = trace.SpanFromContext(ctx)
	}
	rec.TraceID = span.SpanContext().TraceID().String()
	if present && !sc.IsValid() {
		w.log.Warn().Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).
			Msg("the task's traceparent (or tracestate) is malformed or too long: dropped, the run has a trace of its own")
	}
	return ctx, span
}

// endRun ends the run's span with what its record says.
func endRun(span trace.Span, rec *record.Run) {
	span.SetAttributes(tracing.AttrRunID.String(rec.RunID), tracing.AttrState.String(string(rec.State)),
		tracing.AttrVerdict.String(string(rec.Verdict)), tracing.AttrWritten.Int64(rec.Workspace.UsedBytes),
		tracing.AttrBytes.Int64(rec.Workspace.InputBytes))
	if rec.ApprovalID != "" {
		span.SetAttributes(tracing.AttrApprovalID.String(rec.ApprovalID))
	}
	if rec.State == record.StateFailed {
		span.SetStatus(codes.Error, string(rec.Verdict))
	}
	span.End()
}

// fetchTraced is fetchInputs in its span.
func (w *Worker) fetchTraced(ctx context.Context, j *job, ws *tmpfs.Workspace, deadline time.Time) (outcome, bool) {
	ctx, span := w.tracer().Start(ctx, tracing.SpanFetch, trace.WithAttributes(tracing.AttrInputs.Int(len(j.spec.Inputs))))
	out, ok := w.fetchInputs(ctx, j, ws, deadline)
	var n int64
	for _, in := range j.rec.Inputs {
		n += in.Bytes
	}
	span.SetAttributes(tracing.AttrBytes.Int64(n))
	if !ok {
		span.SetStatus(codes.Error, string(j.rec.Verdict))
	}
	span.End()
	return out, ok
}

// runStep runs one step (sandboxStep) in its span, which says its index
// among the run's steps, its verdict, exit code and output sizes.
func (w *Worker) runStep(ctx context.Context, j *job, box *sandbox.Slot, ws *tmpfs.Workspace, st tasks.Step, timeout time.Duration, keep *sandbox.KeepBudget) (record.Step, sandbox.Result, error) {
	ctx, span := w.tracer().Start(ctx, tracing.SpanStep, trace.WithAttributes(tracing.AttrStep.Int(j.stepSpans)))
	j.stepSpans++
	sr, res, err := w.sandboxStep(ctx, j, box, ws, st, timeout, keep)
	attrs := []attribute.KeyValue{tracing.AttrVerdict.String(string(sr.Verdict)),
		tracing.AttrStdout.Int64(sr.StdoutBytes), tracing.AttrStderr.Int64(sr.StderrBytes)}
	if sr.ExitCode != nil {
		attrs = append(attrs, tracing.AttrExitCode.Int(*sr.ExitCode))
	}
	span.SetAttributes(attrs...)
	if err != nil || sr.Verdict != record.VerdictOK {
		span.SetStatus(codes.Error, string(sr.Verdict))
	}
	span.End()
	return sr, res, err
}

// checkTraced is check (the output contract) in its span.
func (w *Worker) checkTraced(ctx context.Context, j *job, ws *tmpfs.Workspace, deadline time.Time) checked {
	ctx, span := w.tracer().Start(ctx, tracing.SpanValidate)
	c := w.check(ctx, j.spec, ws, deadline, j.seat.slot)
	span.SetAttributes(tracing.AttrBytes.Int(len(c.result)), tracing.AttrViolations.Int(len(c.violations)))
	if c.artifacts != nil {
		span.SetAttributes(tracing.AttrArtifacts.Int(len(c.artifacts.Artifacts)))
	}
	if c.verdict != "" {
		span.SetAttributes(tracing.AttrVerdict.String(string(c.verdict)))
		span.SetStatus(codes.Error, string(c.verdict))
	}
	span.End()
	return c
}

// decideTraced is decide (the risk policy) in its span.
func (w *Worker) decideTraced(ctx context.Context, j *job, c checked) record.Decision {
	_, span := w.tracer().Start(ctx, tracing.SpanPolicy)
	d := w.decide(j, c)
	span.SetAttributes(tracing.AttrAction.String(string(d.Action)), tracing.AttrRule.String(d.Rule))
	span.End()
	return d
}

// settleTraced is settle (the park, and an accepted output's inline
// promotion) in its span, whose context the approval keeps: its accept
// and promotion are that span's children.
func (w *Worker) settleTraced(ctx context.Context, j *job, c checked, d record.Decision) outcome {
	ctx, span := w.tracer().Start(ctx, tracing.SpanPark, trace.WithAttributes(tracing.AttrApprovalID.String(j.aid)))
	out := w.settle(ctx, j.spec, j.rec, c, d, j.aid)
	staged := int64(len(c.result))
	for _, a := range c.artifacts.Artifacts {
		staged += a.Bytes
	}
	span.SetAttributes(tracing.AttrState.String(string(j.rec.State)), tracing.AttrBytes.Int64(staged))
	if j.rec.State == record.StateFailed || out.err != nil {
		span.SetStatus(codes.Error, string(j.rec.Verdict))
	}
	span.End()
	return out
}
