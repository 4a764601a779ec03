package httpapi

import (
	"errors"
	"net/http"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// cancelRun serves DELETE /v1/runs/{task_id}: the token's own run (its
// principal is the token's name) is canceled on its behalf
// (airlock.Client.CancelAs), in ?queue= or the one queue of the token's
// that holds it; another's (even to a token with runs:read:any) is 404,
// as an unknown task is, with the same body. It answers 200
// with the canceled run's record (again for a run canceled already), 202
// with the record as it is when the worker has not stopped the run yet,
// and 409 already-final for a run that was over before. The record comes
// whole only to a token that may read runs (runs:read); to another, its
// state alone.
func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	taskID := r.PathValue("task_id")
	queue, ok := h.queueOf(w, r, taskID)
	if !ok {
		return
	}
	t := tokenOf(r)
	cur, err := h.client.Status(r.Context(), queue, taskID)
	if err == nil && cur.Principal != t.Name {
		// Not the token's, whatever it may read: as an unknown task
		// (reads.go), so that the answer does not confirm it exists.
		err = unknownRun(r, queue, taskID)
	}
	if err != nil {
		h.runError(w, r, taskID, err)
		return
	}
	rec, err := h.client.CancelAs(r.Context(), t.Name, queue, taskID)
	var fe *airlock.FinalError
	switch {
	case errors.As(err, &fe):
		h.fail(w, r, &Problem{Type: ProblemAlreadyFinal, Status: http.StatusConflict, Title: "Already final",
			TaskID: taskID, State: string(fe.Record.State), Record: readable(t, fe.Record), Detail: err.Error()})
	case err != nil:
		h.runError(w, r, taskID, err)
	case !record.Final(rec.State):
		writeJSON(w, http.StatusAccepted, readable(t, rec))
	default:
		writeJSON(w, http.StatusOK, readable(t, rec))
	}
}

// readable is rec, a run of t's own, as token t may read it: whole with
// runs:read (or runs:read:any), else its identity and state only (no
// steps, output or errors).
func readable(t *Token, rec *record.Run) *record.Run {
	if t.Grants(ScopeRunsRead) {
		return rec
	}
	return &record.Run{TaskID: rec.TaskID, RunID: rec.RunID, Queue: rec.Queue, Principal: rec.Principal,
		State: rec.State, Verdict: rec.Verdict, Attempt: rec.Attempt, MaxRetry: rec.MaxRetry, Steps: []record.Step{}}
}
