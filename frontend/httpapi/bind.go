package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/tasks"
)

// What a token may ask for: who it is (the principal every run it enqueues
// is stamped with), and the queues and actions it is bound to (Token.Queues,
// Token.Actions).
//
// A token bound to queues gets 403 (forbidden, naming the queue) for a
// spec, a ?queue= or an approval in another queue. A task id it names
// without ?queue= is looked for in its own queues only, so that a run of
// another queue is 404 as an unknown one is: a 403 would confirm to the
// token that the task exists, and in which queue.

// maxBoundList bounds how many approvals a list for a queue-bound token
// looks at (newest first) to fill its page with approvals of its queues.
const maxBoundList = 10 * maxListLimit

// admit checks who may enqueue spec with r's token and stamps the spec
// with the token's name: a spec that sets principal itself is 400, one in
// a queue or of an action the token is not bound to 403. It answers the
// errors itself and returns false then.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, spec *tasks.Spec) bool {
	t := tokenOf(r)
	if spec.Principal != "" {
		h.specRejected(w, r, &tasks.FieldError{Field: "principal", Msg: "set by the server from your token",
			Hint: "leave principal out: every run is stamped with the name of the token that enqueued it"})
		return false
	}
	queue := spec.Queue
	if queue == "" {
		queue = approve.DefaultQueue
	}
	if !h.allowQueue(w, r, "queue", queue) {
		return false
	}
	if !t.AllowsAction(spec.Action) {
		detail := fmt.Sprintf("token %s may enqueue only runs of the actions %s, not a free-form spec", t.Name, strings.Join(t.Actions, ", "))
		if spec.Action != "" {
			detail = fmt.Sprintf("token %s may not enqueue action %q (its actions: %s)", t.Name, spec.Action, strings.Join(t.Actions, ", "))
		}
		h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, Field: "action", Action: spec.Action, Detail: detail})
		return false
	}
	spec.Principal = t.Name
	return true
}

// allowQueue answers 403 naming queue q, which field of the request named,
// when r's token is bound to other queues, and returns false then.
func (h *Handler) allowQueue(w http.ResponseWriter, r *http.Request, field, q string) bool {
	t := tokenOf(r)
	if t.AllowsQueue(q) {
		return true
	}
	h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, Field: field, Queue: q,
		Detail: fmt.Sprintf("token %s may not use queue %s (its queues: %s)", t.Name, q, strings.Join(t.Queues, ", "))})
	return false
}

// locate returns the queue that holds task taskID, as Client.Locate does,
// looking only in the queues of t when it is bound to some.
func (h *Handler) locate(ctx context.Context, t *Token, taskID string) (string, error) {
	if len(t.Queues) == 0 {
		return h.client.Locate(ctx, taskID)
	}
	return h.client.LocateIn(ctx, taskID, t.Queues)
}

// approvalQueue is the queue of approval a's run.
func approvalQueue(a *approve.Approval) string {
	if a.Run.Queue == "" {
		return approve.DefaultQueue
	}
	return a.Run.Queue
}

// allowApproval answers 403 naming the queue of approval a's run when r's
// token is bound to other queues, and returns false then.
func (h *Handler) allowApproval(w http.ResponseWriter, r *http.Request, a *approve.Approval) bool {
	return h.allowQueue(w, r, "id", approvalQueue(a))
}

// checkApproval reads approval id and checks its queue against r's token,
// when the token is bound to queues: it answers the errors itself and
// returns false then. An unbound token is not checked (no read).
func (h *Handler) checkApproval(w http.ResponseWriter, r *http.Request, id string) bool {
	if len(tokenOf(r).Queues) == 0 {
		return true
	}
	a, err := h.store.Get(r.Context(), id)
	if err != nil {
		h.approvalError(w, r, err)
		return false
	}
	return h.allowApproval(w, r, a)
}

// listFor lists up to limit approvals in state that t may see: for a
// token bound to queues, those of its queues among the newest
// maxBoundList.
func (h *Handler) listFor(ctx context.Context, t *Token, state approve.State, limit int) ([]*approve.Approval, error) {
	if len(t.Queues) == 0 {
		return h.store.List(ctx, state, limit)
	}
	for n := limit; ; n = min(4*n, maxBoundList) {
		as, err := h.store.List(ctx, state, n)
		if err != nil {
			return nil, err
		}
		out := make([]*approve.Approval, 0, limit)
		for _, a := range as {
			if len(out) < limit && t.AllowsQueue(approvalQueue(a)) {
				out = append(out, a)
			}
		}
		if len(out) >= limit || len(as) < n || n >= maxBoundList {
			return out, nil
		}
	}
}
