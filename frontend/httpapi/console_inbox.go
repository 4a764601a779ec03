package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-run/airlock/approve"
)

// Bounds of the console's inbox.
const (
	// inboxPage is how many approvals a page of the inbox lists.
	inboxPage = 50
	// inboxScan bounds how many pending approvals one page looks at to
	// fill itself with those that match its filters (and the token's
	// queues): past it the page is shorter, and its next cursor goes on.
	inboxScan = 20000
)

// InboxPage is the answer to GET /ui/api/approvals: a page of the
// pending approvals, newest first, that match the filters.
type InboxPage struct {
	Approvals []ApprovalSummary `json:"approvals"`
	// Next is the cursor of the next page (?after=), "" after the last.
	Next string `json:"next"`
	// Pending counts every pending approval, before filters; absent for
	// a token bound to queues (they are counted together).
	Pending *int64 `json:"pending,omitempty"`
	// Now is the server's clock, which ages and time left are counted
	// from.
	Now time.Time `json:"now"`
}

// consoleInbox serves GET /ui/api/approvals?queue=&action=&principal=&after=:
// the pending approvals the token may see, filtered by queue, action and
// principal (exact names; empty: any), a page from the cursor after.
func (h *Handler) consoleInbox(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var start int64
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "after",
				Detail: "after: a cursor the previous page gave (its next)"})
			return
		}
		start = n
	}
	t := tokenOf(r)
	queue, action, principal := q.Get("queue"), q.Get("action"), q.Get("principal")
	var keep func(*approve.Approval) bool
	if queue != "" || action != "" || principal != "" || len(t.Queues) > 0 {
		keep = func(a *approve.Approval) bool {
			qa := approvalQueue(a)
			return t.AllowsQueue(qa) && (queue == "" || qa == queue) &&
				(action == "" || a.Run.Action == action) && (principal == "" || a.Run.Principal == principal)
		}
	}
	as, next, err := h.store.Scan(r.Context(), approve.StatePending, start, inboxPage, inboxScan, keep)
	if err != nil {
		h.approvalError(w, r, err)
		return
	}
	out := InboxPage{Approvals: make([]ApprovalSummary, len(as)), Now: h.store.Now().UTC()}
	if len(t.Queues) == 0 {
		pending, err := h.store.Count(r.Context(), approve.StatePending)
		if err != nil {
			h.approvalError(w, r, err)
			return
		}
		out.Pending = &pending
	}
	for i, a := range as {
		out.Approvals[i] = a.Summary()
	}
	if next >= 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	writeJSON(w, http.StatusOK, out)
}
