//go:build linux

package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/network/egress"
	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// A run goes through phases, each returning what it found: the spec is
// decoded (decode), the steps run (runSteps: steps.go), the output is
// checked against its contract (check: output.go), the risk policy decides
// (decide) and the output is parked or accepted (settle). Each phase fills
// the record with what it owns; one place, report, then bounds and redacts
// the record, queues a promotion the run could not finish inline, and
// hands the record to the completer (completer.go), which stores it with
// the run's event and its approval's updates in one round trip and logs
// the run's end.

// errHandedBack marks a run interrupted by shutdown: the task goes back to
// its queue and will run again, so no record is written.
var errHandedBack = errors.New("worker shutting down: task handed back")

// outcome is what a run comes to, for report.
type outcome struct {
	// err is the worker's own failure (asynq retries the task), or
	// errHandedBack; nil when the run was carried out, whatever its verdict.
	err error
	// promote is the approval whose inline promotion failed for a
	// transient reason: report queues its promote task.
	promote string
	// retry: the run failed for a reason that may pass (a transient
	// download failure): the record says so, and asynq tries again.
	retry bool
	// secrets are the run's, for redacting what report writes.
	secrets *secrets.Set
	// after are the index and audit updates of the run's approval that
	// report sends with the record (approve.Store.MarkPromotedOps).
	after approve.Ops
	// session is the session the run held (worker/session.go), ended
	// once the record is stored; nil for a one-shot run.
	session *heldSession
	// canceled: the run was canceled (cancel.go); the record says so,
	// and it is never run again.
	canceled bool
	// refused: the worker refused the run without running it (refuse.go):
	// its record is kept, its task deleted.
	refused bool
}

// handle is the asynq handler of TypeRun.
func (w *Worker) handle(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	release := w.gate.Start(id)
	defer release() // a run that never sat, or a session that ended seated
	w.inflight.Add(1)
	defer w.inflight.Done()
	rec := w.newRecord(ctx)
	ctx, span := w.startRun(ctx, t, &rec)
	defer endRun(span, &rec)
	defer w.watchEnd(rec.TaskID)()
	out := w.carryOut(ctx, t, &rec, release)
	if h := out.session; h != nil && (h.paused || h.lost) && !errors.Is(out.err, errHandedBack) {
		// Paused (its task waits in asynq's retry set, not as a
		// failure, until a call or its expiry) or taken over by
		// another worker: no record yet, and the session goes on.
		w.endSession(ctx, &rec, h)
		if out.err == nil {
			w.gate.Succeeded(id)
		}
		return out.err
	}
	err := w.report(ctx, &rec, out)
	if out.session != nil {
		w.endSession(ctx, &rec, out.session)
	}
	w.shareEnded(ctx, &rec, err)
	if err == nil {
		w.gate.Succeeded(id)
	}
	return err
}

// carryOut runs the phases of one attempt and fills rec.
func (w *Worker) carryOut(ctx context.Context, t *asynq.Task, rec *record.Run, released func()) outcome {
	spec, digest, err := w.decode(t.Payload())
	if err != nil {
		return w.refuse(rec, record.VerdictError, "spec rejected: "+err.Error())
	}
	// The queue is a fact: the one the task was taken from, whatever its
	// spec says (a raw enqueuer could name another queue, and borrow its
	// policy rules and secret grants).
	if q, ok := asynq.GetQueueName(ctx); ok && q != "" {
		spec.Queue = q
	}
	rec.Action, rec.ActionDigest = spec.Action, digest
	rec.RunID, rec.Queue, rec.MaxRetry, rec.Limits = spec.RunID, spec.Queue, *spec.MaxRetry, spec.Limits
	rec.Principal = spec.Principal
	w.shareStarted(ctx, spec.Queue, spec.Principal, rec.TaskID)
	rec.KeptOutput = &record.KeptOutput{MaxBytes: int64(spec.MaxRecordBytes)}
	w.log.Info().Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Int("attempt", rec.Attempt).Str("run_id", spec.RunID).
		Str("queue", spec.Queue).Int("steps", len(spec.Steps)).Int("inputs", len(spec.Inputs)).Msg("task start")
	// A first attempt reads no mark (the per-task path): a cancel that
	// came before its handler ran is published again by Client.Cancel. A
	// retry reads it, in case the attempt the cancel stopped could not
	// archive its task.
	if rec.Attempt > 1 && w.canceledBeforeStart(ctx, rec) {
		return outcome{canceled: true}
	}
	if err := w.checkGrants(spec); err != nil {
		// Before any value is read: the error names the secret and the grant it lacks.
		return w.refuse(rec, record.VerdictError, err.Error())
	}
	sec, err := w.secretSrc.Load(spec.Secrets)
	if err != nil {
		// Never a value: the error names the secret and where it is looked for.
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictError, err.Error()
		return outcome{}
	}

	j := &job{spec: spec, rec: rec, aid: approvalID(rec.TaskID, t.Payload()), secrets: sec, released: released}
	if spec.Session != nil {
		var refused outcome
		if j.session, refused = w.holdSession(ctx, j); j.session == nil {
			return refused
		}
	}
	// Steps are canceled when the worker shuts down; the task's own
	// deadline is enforced per step by the sandbox.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopping:
			cancel()
		case <-runCtx.Done():
		}
	}()
	out := w.run(runCtx, j)
	out.secrets, out.session = sec, j.session
	return out
}

// job is one attempt of a run, as its phases share it.
type job struct {
	spec *tasks.Spec
	// seat is the slot the run sits in now (seat.go): for its whole
	// attempt, or a session's for one call; empty while a session is
	// parked.
	seat seat
	// egress is a networked run's, served by whichever slot it sits in.
	egress *egress.Run
	// deadline is a resumed session's (its open's timeout); zero: the
	// run's starts now.
	deadline time.Time
	// released tells the gate the run gave its first slot back (once).
	released func()
	rec      *record.Run
	aid      string // the id its approval gets, if it comes to one
	secrets  *secrets.Set
	session  *heldSession // the session the run holds; nil for a one-shot run
	// stepSpans counts the step spans started, for their index.
	stepSpans int
}

// report is the one place a run's end is reported: the record is stored as
// the task's result and logged, the event emitted, a pending promotion
// queued. It returns what asynq should do with the task.
func (w *Worker) report(ctx context.Context, rec *record.Run, out outcome) error {
	ctx, canceled := w.onCancel(ctx, rec, &out)
	if errors.Is(out.err, errHandedBack) {
		w.log.Warn().Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Msg("task interrupted by shutdown; handing it back to the queue")
		w.handedBack.Store(rec.Queue, true)
		<-ctx.Done() // asynq requeues the task when its shutdown timeout ends
		return ctx.Err()
	}
	if out.err != nil {
		// The worker failed, not the action: asynq retries the task.
		out.err = errors.New(out.secrets.Redact(out.err.Error())) // asynq keeps it in Redis
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictError, out.err.Error()
	}
	if rec.State == record.StateFailed && rec.Error == "" {
		rec.Error = failure(rec)
	}
	if out.promote != "" {
		if err := w.promoter.Store.QueuePromotion(ctx, w.asynq, rec.Queue, out.promote); err != nil {
			// The sweeper queues it later; the record says accepted.
			rec.Error = joinErr(rec.Error, "queue promotion: "+err.Error())
		}
	}
	redact(rec, out.secrets)
	boundOutput(rec) // after redact, which may lengthen text
	boundRest(rec)
	// A final state is the run's event, stored with the record: one that
	// asynq will retry says nothing yet.
	final := out.err == nil && !out.retry
	if !final {
		max, ok := asynq.GetMaxRetry(ctx)
		final = ok && rec.Attempt > max // the last attempt: no retry will say more
	}
	if err := w.completer.complete(ctx, rec, out.err != nil, final, out.refused, out.after); err != nil {
		// Without its record the task would end completed (or archived)
		// with nothing for Wait to read: asynq runs it again, and that
		// attempt stores one (finding its approval, if it has one).
		return fmt.Errorf("store the run record: %w", err)
	}
	switch {
	case canceled && out.refused:
		w.dropRefused(rec)
	case canceled:
		w.archiveCanceled(rec)
	}
	switch {
	case out.canceled:
		return canceledErr(rec)
	case out.refused:
		return refusedErr(rec)
	case out.err != nil:
		return out.err
	case out.retry:
		return fmt.Errorf("run failed with verdict %s, which may pass: %s", rec.Verdict, rec.Error)
	case rec.State == record.StateFailed:
		// A step's verdict, or a broken contract, is the action's own: it
		// is never run again.
		return fmt.Errorf("run failed with verdict %s: %w", rec.Verdict, asynq.SkipRetry)
	}
	return nil
}

// failure is the top-level error of a failed run whose phases left none:
// which step failed, with what.
func failure(rec *record.Run) string {
	for _, st := range rec.Steps {
		if st.Verdict == record.VerdictOK {
			continue
		}
		msg := fmt.Sprintf("step %s: %s", st.Name, st.Verdict)
		switch {
		case st.Error != "":
			msg += ": " + st.Error
		case st.ExitCode != nil:
			msg += fmt.Sprintf(" (exit code %d)", *st.ExitCode)
		case st.Signal != "":
			msg += " (" + st.Signal + ")"
		}
		return msg
	}
	return string(rec.Verdict)
}

// redact replaces the values of the run's secrets wherever the record
// holds text a step or a server wrote: nothing of a secret is stored in
// Redis, logged or shown.
func redact(rec *record.Run, s *secrets.Set) {
	if s.Empty() {
		return
	}
	rec.Error = s.Redact(rec.Error)
	for i := range rec.Steps {
		st := &rec.Steps[i]
		st.Error = s.Redact(st.Error)
		if st.StdoutEncoding == "" {
			st.Stdout = s.Redact(st.Stdout)
		}
		if st.StderrEncoding == "" {
			st.Stderr = s.Redact(st.Stderr)
		}
	}
	for i := range rec.Inputs {
		in := &rec.Inputs[i]
		in.URL, in.FinalURL, in.Error = s.Redact(in.URL), s.Redact(in.FinalURL), s.Redact(in.Error)
	}
	for i := range rec.Egress {
		// The proxy records host names lower-cased.
		rec.Egress[i].Reason = s.RedactLower(rec.Egress[i].Reason)
		rec.Egress[i].Host = s.RedactLower(rec.Egress[i].Host)
	}
	// Names a step chose: the files it left, the artifacts (already
	// staged under their redacted names: see checked.scrub).
	for i := range rec.Files {
		rec.Files[i].Path = s.Redact(rec.Files[i].Path)
	}
	for i := range rec.Refused {
		rec.Refused[i].Path = s.Redact(rec.Refused[i].Path)
	}
	for i := range rec.Artifacts {
		rec.Artifacts[i].Name = s.Redact(rec.Artifacts[i].Name)
	}
	if d := rec.Decision; d != nil {
		for i := range d.Reasons {
			d.Reasons[i] = s.Redact(d.Reasons[i])
		}
	}
	for i := range rec.SchemaErrors {
		rec.SchemaErrors[i].Message = s.Redact(rec.SchemaErrors[i].Message)
		rec.SchemaErrors[i].Path = s.Redact(rec.SchemaErrors[i].Path)
	}
}

func (w *Worker) newRecord(ctx context.Context) record.Run {
	id, _ := asynq.GetTaskID(ctx)
	n, _ := asynq.GetRetryCount(ctx)
	q, _ := asynq.GetQueueName(ctx)
	return record.Run{
		TaskID: id, Queue: q, Attempt: n + 1, StartedAt: time.Now().UTC(),
		Worker: w.name + " " + airlock.Version, Isolation: w.isolation, Steps: []record.Step{},
	}
}

// decode checks the payload again: the enqueuer is not trusted.
//
// A call of an action ({"action": NAME, "params": ...}) is expanded from
// the worker's own catalog, never from anything the caller sent; digest is
// then the definition's (record.Run.ActionDigest).
func (w *Worker) decode(payload []byte) (spec *tasks.Spec, digest string, err error) {
	if len(payload) > w.cfg.MaxPayload {
		return nil, "", tasks.PayloadError(len(payload), w.cfg.MaxPayload)
	}
	spec, err = tasks.Decode(payload)
	if err != nil {
		return nil, "", err
	}
	if err := spec.Prepare(w.cfg.Policy); err != nil {
		return nil, "", err
	}
	if spec.Action == "" {
		return spec, "", nil
	}
	def, ok := w.cfg.Actions.Lookup(spec.Action)
	if !ok {
		return nil, "", &tasks.FieldError{Field: "action", Msg: fmt.Sprintf("%q is not in this worker's catalog (worker -actions): %s", spec.Action, catalogNames(w.cfg.Actions))}
	}
	expanded, err := def.Expand(spec, w.cfg.Policy)
	if err != nil {
		return nil, "", err
	}
	return expanded, def.Digest, nil
}

// catalogNames lists a catalog's actions for an error message.
func catalogNames(c *actions.Catalog) string {
	names := c.Names()
	switch {
	case len(names) == 0:
		return "it has none"
	case len(names) > 20:
		return fmt.Sprintf("it has %d, e.g. %s", len(names), strings.Join(names[:20], ", "))
	}
	return "it has " + strings.Join(names, ", ")
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// handlePromote is the asynq handler of approve.TypePromote.
func (w *Worker) handlePromote(ctx context.Context, t *asynq.Task) (err error) {
	// A promotion takes no slot, but the gate counted one when asynq
	// took its task.
	id, _ := asynq.GetTaskID(ctx)
	defer w.gate.Start(id)()
	defer func() {
		if err == nil {
			w.gate.Succeeded(id)
		}
	}()
	var p approve.Payload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.ApprovalID == "" {
		return fmt.Errorf("promote: bad payload: %w", asynq.SkipRetry)
	}
	log := w.log.With().Str("approval_id", p.ApprovalID).Logger()
	m, published, err := w.promoter.Promote(ctx, p.ApprovalID)
	if o := w.cfg.Observer; o != nil {
		o.Promotion(promotionResult(published, err))
	}
	if errors.Is(err, approve.ErrRefused) {
		log.Error().Err(err).Msg("promotion refused")
		return fmt.Errorf("%v: %w", err, asynq.SkipRetry)
	}
	if err != nil {
		log.Warn().Err(err).Msg("promotion failed; asynq retries it")
		return err
	}
	log.Info().Str("run_id", m.RunID).Bool("published", published).Str("to", w.cfg.Sink.Where(m.RunID, m.TaskID)).
		Int("artifacts", len(m.Artifacts)).Msg("promoted")
	return nil
}

// promotionResult names a promote task's result for the Observer.
func promotionResult(published bool, err error) string {
	switch {
	case errors.Is(err, approve.ErrRefused):
		return "refused"
	case err != nil:
		return "failed"
	case published:
		return "published"
	}
	return "already"
}
