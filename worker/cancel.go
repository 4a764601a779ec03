//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/cancelrun"
	"github.com/airlock-run/airlock/record"
)

// A run is canceled by airlock.Client.Cancel (DELETE /v1/runs/{id}, enqueue
// -cancel, the MCP tool cancel_run) or by asynq's own cancel
// (asynq.Inspector.CancelProcessing, what asynqmon does): either way asynq
// cancels the handler's context, which kills the steps' process trees as
// a shutdown does. What tells the two apart is asynq's processor: it hands
// a canceled task's context error to the ErrorHandler (asynqFailed) before
// it schedules the retry, context.Canceled for a cancel, ErrLeaseExpired
// when the worker lost its lease; and on shutdown the worker closes
// w.stopping first and asynq requeues the task rather than fail it. A
// canceled run is reported as such (state and verdict "canceled"), stored
// with its event and its mark, and its task archived at once: asynq
// scheduled a retry (delayRetry holds it back for cancelRetryDelay), and a
// canceled run is never run again. A mark (package cancelrun) read when a
// retried run starts ends it there, should that archiving have failed; a
// cancel published before a first attempt's handler took the task is
// published again by Client.Cancel while it waits.

// cancelRetryDelay is how long asynq holds back the retry it schedules for
// a canceled task: the handler archives the task long before; should the
// worker die first, the retry finds the run's mark and ends canceled.
const cancelRetryDelay = time.Hour

// verdictWait bounds how long a handler whose context was canceled waits
// for asynq's processor to say why (asynqFailed); it says so at once.
const verdictWait = time.Second

// markTTL is how long the mark a worker sets for a canceled run lasts:
// past the retry cancelRetryDelay holds back.
const markTTL = 24 * time.Hour

// markReadTimeout bounds the read of a run's mark.
const markReadTimeout = 2 * time.Second

// archiveFor bounds how long a canceled task's archiving is tried while
// asynq's processor still holds it active.
const archiveFor = 5 * time.Second

// asynqCancel names asynq's own cancel in a record, when no mark names
// the canceler.
const asynqCancel = "asynq's cancel (Inspector.CancelProcessing, asynqmon)"

// watchEnd registers the handler of task id for asynqFailed; the returned
// func unregisters it.
func (w *Worker) watchEnd(id string) func() {
	w.ended.Store(id, make(chan error, 1))
	return func() { w.ended.Delete(id) }
}

// asynqFailed is the asynq ErrorHandler: it hands why asynq failed a task
// to the task's handler, if it still runs (a canceled or expired context).
func (w *Worker) asynqFailed(ctx context.Context, _ *asynq.Task, err error) {
	id, _ := asynq.GetTaskID(ctx)
	w.gate.Failed(id)
	if v, ok := w.ended.Load(id); ok {
		select {
		case v.(chan error) <- err:
		default:
		}
	}
}

// delayRetry is the asynq RetryDelayFunc: retryDelay, but cancelRetryDelay
// for a task whose run was canceled (its handler archives it).
func (w *Worker) delayRetry(n int, err error, t *asynq.Task) time.Duration {
	var pe *pausedError
	if errors.As(err, &pe) {
		return max(time.Until(pe.until), time.Second) // a paused session's expiry
	}
	if errors.Is(err, context.Canceled) && !w.isStopping() {
		return cancelRetryDelay
	}
	return retryDelay(n, err, t)
}

// isStopping reports whether the worker's shutdown started.
func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
	}
	return false
}

// canceledBeforeStart ends a retried run when its mark says it was
// canceled: one bounded read, on retries only (handler.go). A mark that cannot be read is logged,
// and the run goes on (a cancel then reaches it through asynq).
func (w *Worker) canceledBeforeStart(ctx context.Context, rec *record.Run) bool {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markReadTimeout)
	defer cancel()
	by, ok, err := cancelrun.Get(rctx, w.cfg.Redis, w.cfg.Prefix, rec.Queue, rec.TaskID)
	if err != nil {
		w.log.Warn().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Msg("read the run's cancel mark")
		return false
	}
	if !ok {
		return false
	}
	rec.State, rec.Verdict, rec.Error = record.StateCanceled, record.VerdictCanceled, cancelrun.Message(by, "before it started")
	return true
}

// wasCanceled reports whether the handler's context ended by a cancel:
// canceled (not past its deadline) while the worker does not stop, and
// asynq's processor says so (not a lost lease). When the processor said
// nothing in time, the run's mark decides.
func (w *Worker) wasCanceled(ctx context.Context, rec *record.Run) bool {
	if !errors.Is(ctx.Err(), context.Canceled) || w.isStopping() {
		return false
	}
	if v, ok := w.ended.Load(rec.TaskID); ok {
		select {
		case err := <-v.(chan error):
			return errors.Is(err, context.Canceled)
		case <-time.After(verdictWait):
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markReadTimeout)
	defer cancel()
	_, marked, _ := cancelrun.Get(rctx, w.cfg.Redis, w.cfg.Prefix, rec.Queue, rec.TaskID)
	return marked
}

// onCancel is report's first look at a run whose handler's context ended:
// for a canceled run it returns a context for reporting that the cancel
// does not end, and true (report then archives the task). A run the
// cancel interrupted ends canceled (out.canceled), with the steps that
// ran, and its mark goes with its record; one that was over already keeps
// its record, and is not retried either.
func (w *Worker) onCancel(ctx context.Context, rec *record.Run, out *outcome) (context.Context, bool) {
	if ctx.Err() == nil || !w.wasCanceled(ctx, rec) {
		return ctx, false
	}
	ctx = context.WithoutCancel(ctx)
	out.retry = false
	if out.err == nil && !out.canceled {
		return ctx, true
	}
	rctx, cancel := context.WithTimeout(ctx, markReadTimeout)
	by, ok, _ := cancelrun.Get(rctx, w.cfg.Redis, w.cfg.Prefix, rec.Queue, rec.TaskID)
	cancel()
	if !ok {
		by = asynqCancel
	}
	when := "while running"
	switch n := len(rec.Steps); {
	case n == 0 && out.session != nil && out.session.answered:
		// An open session between its calls: running, with no step yet.
	case n == 0:
		when = "before its steps ran" // waiting for a slot, or fetching inputs
	case rec.Steps[n-1].Verdict == record.VerdictCanceled:
		when = fmt.Sprintf("while running (step %s)", rec.Steps[n-1].Name)
	}
	if !out.canceled {
		rec.State, rec.Verdict, rec.Error = record.StateCanceled, record.VerdictCanceled, cancelrun.Message(by, when)
	}
	if rec.Session != nil {
		rec.Session.Ended = "canceled"
	}
	// A later attempt (should the archiving below fail) finds the mark.
	after := out.after
	out.after = func(ctx context.Context, p redis.Pipeliner) {
		if after != nil {
			after(ctx, p)
		}
		cancelrun.Set(ctx, p, w.cfg.Prefix, rec.Queue, rec.TaskID, by, markTTL)
	}
	out.err, out.canceled = nil, true
	return ctx, true
}

// archiveCanceled archives the task of a canceled run, which asynq's
// processor put back for a retry (or archived already): it is never run
// again. The processor may still hold it active for a moment.
func (w *Worker) archiveCanceled(rec *record.Run) {
	queue := rec.Queue
	// An Inspector wraps the worker's client (never closed here: that
	// would close the client).
	insp := asynq.NewInspectorFromRedisClient(w.cfg.Redis)
	deadline := time.Now().Add(archiveFor)
	for {
		err := insp.ArchiveTask(queue, rec.TaskID)
		if err == nil {
			return
		}
		info, ierr := insp.GetTaskInfo(queue, rec.TaskID)
		if ierr == nil && info.State == asynq.TaskStateArchived {
			return
		}
		if time.Now().After(deadline) {
			w.log.Error().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Msg("archive the canceled run's task; its retry will find its cancel mark")
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// canceledErr is what the handler of a canceled run returns to asynq.
func canceledErr(rec *record.Run) error {
	return fmt.Errorf("run %s: %w", rec.Error, asynq.SkipRetry)
}
