package httpapi

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/session"
)

// A session call with a body (a step, a file) is checked before its body
// is read: the caller (Handler.session: the opener's, else 404), the
// session's state and room in Redis (session.Conn.Room: 409 not open yet
// or busy, 410 ended), and the calls with a body this API server has in
// progress for the session: at most maxSessionCalls, the calls that may
// wait and the one served; one more is 409 at once. Room alone would let
// parallel calls through, each reading its body before the first is
// pushed: the count here bounds what one API server reads for a session
// to maxSessionCalls bodies, whatever the number of calls.

// maxSessionCalls bounds the calls with a body one API server has in
// progress for one session.
const maxSessionCalls = session.MaxQueuedCalls + 1

// sessionCalls counts the calls with a body in progress per session.
type sessionCalls struct {
	mu sync.Mutex
	n  map[string]int
}

// take counts one more call of session id, or returns false when it has
// maxSessionCalls in progress.
func (c *sessionCalls) take(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[id] >= maxSessionCalls {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return true
}

// give counts one call of session id less.
func (c *sessionCalls) give(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[id]--; c.n[id] <= 0 {
		delete(c.n, id)
	}
}

// callable checks, before a call's body is read, that session s (the
// caller's, Handler.session) may take one more call now: it answers 409
// or 410 itself and returns false then; otherwise done, to call once the
// call is over.
func (h *Handler) callable(w http.ResponseWriter, r *http.Request, s *airlock.Session) (done func(), ok bool) {
	id := s.ID()
	if !h.calls.take(id) {
		h.sessionError(w, r, &session.Error{Status: http.StatusConflict, State: session.StateOpen,
			Msg: fmt.Sprintf("the session has %d calls in progress already: its calls are served one at a time, send the next when one answers", maxSessionCalls)})
		return nil, false
	}
	if err := h.sessions.Room(r.Context(), id); err != nil {
		h.calls.give(id)
		h.sessionError(w, r, err)
		return nil, false
	}
	return func() { h.calls.give(id) }, true
}
