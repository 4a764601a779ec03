//go:build linux

package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
)

// A run the worker refuses without running it ends in refuse, the one
// place every refusal goes through: a session's open past -max-sessions
// (session.go), a session it may not hold, a spec it rejects (decode), a
// secret it may not grant (checkGrants), a quota. Its record says failed,
// with the verdict and why, and nothing of a run (isolation, limits and
// workspace empty: nothing ran). report stores that record as any run's,
// with its event, and for its refusal too (package refused: a queue's
// last 10,000, kept a day), then returns asynq.RevokeTask: asynq deletes
// the task at once, payload and all. What a caller sent to a worker that
// never ran it does not stay in Redis, however large it was (asynq
// archived it before, for 90 days). Status, Wait, Result, Cancel and
// Locate read the refusal's record where asynq has no task.

// refuse ends rec as refused with verdict, why saying what the caller may
// do (the record's error): report then deletes its task. A refusal comes
// before the run holds a slot, a session or a secret's value.
func (w *Worker) refuse(rec *record.Run, verdict record.Verdict, why string) outcome {
	rec.State, rec.Verdict, rec.Error = record.StateFailed, verdict, why
	rec.Isolation, rec.Limits, rec.KeptOutput = record.Isolation{}, limits.Set{}, nil
	return outcome{refused: true}
}

// refusedErr is what the handler of a refused run returns to asynq:
// asynq.RevokeTask, which has asynq delete the task (it comes first in
// asynq's processor). It matches asynq.SkipRetry too: whoever reads the
// handler's error (shareEnded) sees a run that is over.
func refusedErr(rec *record.Run) error {
	return fmt.Errorf("run refused with verdict %s: %s: %w (%w)", rec.Verdict, rec.Error, asynq.RevokeTask, asynq.SkipRetry)
}

// dropRefused deletes the task of a refused run that a cancel reached
// before its handler returned: asynq's processor then scheduled a retry
// (cancel.go) instead of deleting it, and may hold it active a moment
// more. Should that fail, the retry finds the cancel's mark.
func (w *Worker) dropRefused(rec *record.Run) {
	insp := asynq.NewInspectorFromRedisClient(w.cfg.Redis) // never closed: that would close the client
	deadline := time.Now().Add(archiveFor)
	for {
		err := insp.DeleteTask(rec.Queue, rec.TaskID)
		if err == nil || errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			return
		}
		if time.Now().After(deadline) {
			w.log.Error().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Msg("delete the refused run's task; its retry will find its cancel mark")
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
