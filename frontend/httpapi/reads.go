package httpapi

import (
	"context"
	"net/http"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// Reads are the caller's. A run is its principal's, the name of the token
// that enqueued it: a token with runs:read reads its own runs only (their
// record, with ?wait=, their events, their result), as a session's calls
// are its opener's; a token with runs:read:any reads every run, a run
// with no principal (the Go client's, enqueue's) included. The queues a
// token is bound to bound it either way (bind.go).
//
// A run the token may not read is answered exactly as an unknown task:
// the same 404 and the same body but for the id, before anything of the
// run (its state, how long it waits) shows, so that a token cannot tell
// another's run from no run.

// unknownRun is the error of task taskID in queue when the request may
// not read it: the one an unknown task gives, in queue when the request
// named it (?queue=), else in no queue (the task was looked for).
func unknownRun(r *http.Request, queue, taskID string) error {
	if r.URL.Query().Get("queue") == "" {
		queue = ""
	}
	return &airlock.NotFoundError{Queue: queue, TaskID: taskID, Err: asynq.ErrTaskNotFound}
}

// readRun reads the run of task taskID in queue as it is now, for the
// request's token: a run it may not read (Token.MayRead) is answered as an
// unknown one. It answers the errors itself and returns false then.
func (h *Handler) readRun(ctx context.Context, w http.ResponseWriter, r *http.Request, queue, taskID string) (*record.Run, bool) {
	rec, err := h.client.Status(ctx, queue, taskID)
	if err == nil && !tokenOf(r).MayRead(rec.Principal) {
		err = unknownRun(r, queue, taskID)
	}
	if err != nil {
		h.runError(w, r, taskID, err)
		return nil, false
	}
	return rec, true
}
