package httpapi

import (
	"fmt"
	"net/http"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/tasks"
)

// ActionList is the answer of GET /v1/actions: the catalog the workers
// of a queue published.
type ActionList struct {
	Queue   string         `json:"queue"`
	Actions []actions.Info `json:"actions"`
}

// listActions answers GET /v1/actions?queue=Q: the actions the workers of
// Q ("default" when absent) published, as far as the token may run them.
func (h *Handler) listActions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("queue")
	if q == "" {
		q = "default"
	}
	if !queueRE.MatchString(q) {
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "queue",
			Detail: "queue: must be 1-64 characters of letters, digits, '_' or '-'"})
		return
	}
	if !h.allowQueue(w, r, "queue", q) {
		return
	}
	infos, err := h.client.Actions(r.Context(), q)
	if err != nil {
		h.internal(w, r, err)
		return
	}
	out := ActionList{Queue: q, Actions: []actions.Info{}}
	for _, i := range infos {
		if tokenOf(r).AllowsAction(i.Name) {
			out.Actions = append(out.Actions, i)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// runAction answers POST /v1/actions/{name}/runs: the body is the call
// without its action ({"params": {...}, "queue": ..., "run_id": ...,
// "idempotency_key": ...}), enqueued as POST /v1/runs would.
func (h *Handler) runAction(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !tasks.ValidActionName(name) {
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "name",
			Detail: "name: must be 1-64 characters of letters, digits, '.', '_' or '-'"})
		return
	}
	data, ok := h.readBody(w, r, int64(h.maxPayload), "call", func(max int64) string {
		return fmt.Sprintf("spec rejected: the body is more than %d bytes, the payload cap", max)
	})
	if !ok {
		return
	}
	if len(data) == 0 {
		data = []byte("{}")
	}
	spec, ok := h.decodeSpec(w, r, data)
	if !ok {
		return
	}
	if spec.Action != "" && spec.Action != name {
		h.specRejected(w, r, &tasks.FieldError{Field: "action", Msg: fmt.Sprintf("%q differs from the path's %q", spec.Action, name), Hint: "leave it out: the path names the action"})
		return
	}
	if spec.Version == 0 {
		spec.Version = tasks.Version
	}
	spec.Action = name
	h.enqueueSpec(w, r, spec)
}
