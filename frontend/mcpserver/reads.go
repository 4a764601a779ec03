package mcpserver

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// Reads are the agent's: get_run, wait_run, get_result and cancel_run
// answer only about a run whose principal is the server's
// (Options.Principal), as the session tools only about a session it
// opened (ownSession). Another principal's run, and a run with no
// principal, read as an unknown task, in the same words, before anything
// of the run shows (wait_run does not wait for it): an agent cannot tell
// another's run from no run. No tool reads every run.

// ownRun reads the run of task taskID in queue now, when it is one the
// server's principal enqueued: another's, or one with no principal, is
// the error an unknown task gives (readError).
func (s *server) ownRun(ctx context.Context, queue, taskID string) (*record.Run, error) {
	rec, err := s.c.Status(ctx, queue, taskID)
	if err == nil && rec.Principal != s.o.Principal {
		err = &airlock.NotFoundError{Queue: queue, TaskID: taskID, Err: asynq.ErrTaskNotFound}
	}
	if err != nil {
		return nil, readError(err)
	}
	return rec, nil
}
