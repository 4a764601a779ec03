package httpapi

import (
	"errors"
	"net/http"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// cancelRun serves DELETE /v1/runs/{task_id}: the run is canceled on
// behalf of the token (airlock.Client.CancelAs), in ?queue= or the one
// queue of the token's that holds it. It answers 200 with the canceled
// run's record (again for a run canceled already), 202 with the record
// as it is when the worker has not stopped the run yet, and 409
// already-final, with the record, for a run that was over before.
func (h *Handler) cancelRun(w http.ResponseWriter, r *http.Request) {
	taskID := r.PathValue("task_id")
	queue, ok := h.queueOf(w, r, taskID)
	if !ok {
		return
	}
	rec, err := h.client.CancelAs(r.Context(), tokenOf(r).Name, queue, taskID)
	var fe *airlock.FinalError
	switch {
	case errors.As(err, &fe):
		h.fail(w, r, &Problem{Type: ProblemAlreadyFinal, Status: http.StatusConflict, Title: "Already final",
			TaskID: taskID, State: string(fe.Record.State), Record: fe.Record, Detail: err.Error()})
	case err != nil:
		h.runError(w, r, taskID, err)
	case !record.Final(rec.State):
		writeJSON(w, http.StatusAccepted, rec)
	default:
		writeJSON(w, http.StatusOK, rec)
	}
}
