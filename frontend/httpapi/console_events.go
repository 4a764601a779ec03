package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
)

// ApprovalChange is the data of an "approval" event of the console's
// stream: an approval that was parked, decided, expired or promoted. A
// token bound to queues gets those of its queues only.
type ApprovalChange struct {
	ID    string       `json:"id"`
	State record.State `json:"state,omitempty"`
}

// consoleEvents serves GET /ui/api/events: the approvals' changes as
// Server-Sent Events ("approval"), for the inbox and an approval's page
// to follow live; a comment every KeepAlive, an "end" event after
// MaxStream or when the server stops (the browser reconnects). It holds
// one of the token's waiters, as an event stream of /v1 does.
func (h *Handler) consoleEvents(w http.ResponseWriter, r *http.Request) {
	t := tokenOf(r)
	queue := approve.DefaultQueue
	if len(t.Queues) > 0 {
		queue = t.Queues[0]
	}
	ctx, cancel := h.bounded(r.Context(), h.maxStream)
	defer cancel()
	from, err := h.events.Last(ctx)
	if err != nil {
		h.internal(w, r, fmt.Errorf("events: %w", err))
		return
	}
	ev, release, ok := h.startStream(w, r, queue)
	if !ok {
		return
	}
	defer release()
	ev.comment("console events")
	nextPing := time.Now().Add(h.keepAlive)
	tick := func() (bool, error) {
		if time.Now().After(nextPing) {
			ev.comment("keep-alive")
			nextPing = time.Now().Add(h.keepAlive)
		}
		return ev.failed(), nil
	}
	err = h.events.Follow(ctx, from, time.Second, tick, func(e events.Event) (bool, error) {
		if e.ApprovalID == "" || e.Step != "" {
			return ev.failed(), nil
		}
		switch e.State {
		case record.StateParked, record.StateAccepted, record.StateRejected, record.StateExpired, record.StatePromoted:
		default:
			return ev.failed(), nil
		}
		if len(t.Queues) > 0 {
			// An event does not say its queue: its approval does.
			q, err := h.store.Queue(ctx, e.ApprovalID)
			if q == "" {
				q = approve.DefaultQueue
			}
			if err != nil || !t.AllowsQueue(q) {
				return ev.failed(), nil
			}
		}
		ev.send("approval", "", ApprovalChange{ID: e.ApprovalID, State: e.State})
		return ev.failed(), nil
	})
	switch {
	case ev.failed() || r.Context().Err() != nil:
	case h.stopCtx.Err() != nil:
		ev.send("end", "", map[string]string{"reason": "shutdown"})
	case err == nil || errors.Is(err, context.DeadlineExceeded):
		ev.send("end", "", map[string]string{"reason": "timeout"})
	default:
		h.log.Warn().Err(err).Msg("console events")
		ev.send("end", "", map[string]string{"reason": "error"})
	}
}
