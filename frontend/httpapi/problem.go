package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/airlock-run/airlock/record"
)

// Problem is an error response, application/problem+json (RFC 9457). Type
// is one of the ProblemType constants; the extension members say which
// field was wrong and, for a decided approval or a run not promoted, its
// state.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Instance is the request's path.
	Instance string `json:"instance,omitempty"`

	// Field names what was wrong: a spec field as its JSON path
	// ("steps[0].run"), "spec" for the document as a whole, a query
	// parameter ("wait"), a body member ("comment") or a header
	// ("Idempotency-Key").
	Field string `json:"field,omitempty"`
	// Hint says how to fix a rejected spec, when the decoder has one.
	Hint string `json:"hint,omitempty"`
	// RequiredScope is the scope a token lacked (403).
	RequiredScope Scope `json:"required_scope,omitempty"`
	// Queue is the queue a token bound to others may not use (403).
	Queue string `json:"queue,omitempty"`
	// Action is the action a token bound to others may not enqueue (403;
	// absent, with field action, for a free-form spec).
	Action string `json:"action,omitempty"`
	// State is the run's state (a result not promoted) or the approval's
	// (decided already).
	State string `json:"state,omitempty"`
	// DecidedBy and DecidedAt say who decided an approval first, and when.
	DecidedBy string     `json:"decided_by,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	// TaskID is the task a problem is about, when there is one.
	TaskID string `json:"task_id,omitempty"`
	// End is how a session ended (410): its run's state.
	End string `json:"end,omitempty"`
	// Quota is the name of the principal's quota that refused the call
	// (429, ProblemQuota: max_queued, max_sessions, runs_per_minute,
	// max_waiters), and Limit its value.
	Quota string `json:"quota,omitempty"`
	Limit int64  `json:"limit,omitempty"`
	// Record is the run's record, for a run that was over before a cancel
	// reached it (already-final).
	Record *record.Run `json:"record,omitempty"`
}

// Problem types (the "type" member): URNs, one per kind of error.
const (
	ProblemUnauthorized      = "urn:airlock:problem:unauthorized"       // 401: no token, or not one of the file's
	ProblemForbidden         = "urn:airlock:problem:forbidden"          // 403: the token lacks the scope, or is bound to other queues or actions
	ProblemSpecRejected      = "urn:airlock:problem:spec-rejected"      // 400: the spec is invalid (field names it)
	ProblemBadRequest        = "urn:airlock:problem:bad-request"        // 400: a parameter, header or body member
	ProblemTooLarge          = "urn:airlock:problem:payload-too-large"  // 413: the body is above the cap
	ProblemUnsupportedType   = "urn:airlock:problem:unsupported-media"  // 415: not application/json
	ProblemNotFound          = "urn:airlock:problem:not-found"          // 404: no such task, approval or path
	ProblemMethodNotAllowed  = "urn:airlock:problem:method-not-allowed" // 405
	ProblemAmbiguousTask     = "urn:airlock:problem:ambiguous-task"     // 409: the task id is in several queues
	ProblemNotPromoted       = "urn:airlock:problem:not-promoted"       // 409: the run's output is not published (state says why)
	ProblemAlreadyDecided    = "urn:airlock:problem:already-decided"    // 409: another decision won (decided_by, decided_at)
	ProblemAlreadyFinal      = "urn:airlock:problem:already-final"      // 409: the run was over before the cancel (state, record)
	ProblemPromotionNotQueue = "urn:airlock:problem:promotion-not-queued"
	ProblemUnavailable       = "urn:airlock:problem:unavailable" // 503: Redis does not answer
	ProblemOverloaded        = "urn:airlock:problem:overloaded"  // 503: the API is at a bound of its own: bodies in flight (-max-body-bytes-in-flight), waiters (-max-waiters); Retry-After
	ProblemInternal          = "urn:airlock:problem:internal"    // 500
	// Sessions.
	ProblemSessionBusy  = "urn:airlock:problem:session-busy"  // 409: not open yet, or another call holds it
	ProblemSessionEnded = "urn:airlock:problem:session-ended" // 410: closed, expired, canceled or failed (state, end say which)
	ProblemNoRoom       = "urn:airlock:problem:no-room"       // 429: no worker had room for a session (Retry-After)
	ProblemQuota        = "urn:airlock:problem:quota"         // 429: the caller's quota refused the call (quota, limit; Retry-After)
	ProblemNoAnswer     = "urn:airlock:problem:no-answer"     // 504: the worker holding the session did not answer in time
	// ProblemNotApplied: the call was not applied: 503, the worker
	// holding the session died during it (send it again); 507, its
	// workspace could not be kept (the workers' session store is full).
	ProblemNotApplied = "urn:airlock:problem:not-applied"
)

// writeProblem writes p as application/problem+json.
func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	if r != nil && p.Instance == "" {
		p.Instance = r.URL.Path
	}
	b, err := json.Marshal(p)
	if err != nil {
		b = []byte(`{"type":"` + ProblemInternal + `","title":"Internal Server Error","status":500}`)
		p.Status = http.StatusInternalServerError
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}
