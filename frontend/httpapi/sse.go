package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/live"
	"github.com/airlock-run/airlock/record"
)

// StreamEnd is the data of the last event of a stream, "end".
type StreamEnd struct {
	// State is the last state sent.
	State record.State `json:"state"`
	// Reason is why the stream ends: "final" (the run's state changes no
	// more), "timeout" (the stream's bound: ask again to follow on) or
	// "shutdown" (the server stops).
	Reason string `json:"reason"`
}

// rank orders the states of a run: a stream sends a state only when it is
// further than the last one sent, so that its events are in order even
// when a re-read and the events stream report the same change.
func rank(s record.State) int {
	switch s {
	case airlock.StatePending, airlock.StateScheduled, airlock.StateRetry, "aggregating":
		return 0
	case airlock.StateActive:
		return 1
	case record.StateParked:
		return 2
	case record.StateAccepted:
		return 3
	}
	return 4 // completed, failed, promoted, rejected, expired
}

// snapshot is the event that says what a run record says now.
func snapshot(rec *record.Run) events.Event {
	t := rec.FinishedAt
	if rec.DecidedAt != nil && !rec.DecidedAt.IsZero() {
		t = *rec.DecidedAt
	}
	if t.IsZero() {
		t = time.Now().UTC()
	}
	return events.Event{RunID: rec.RunID, TaskID: rec.TaskID, State: rec.State, Verdict: rec.Verdict,
		ApprovalID: rec.ApprovalID, Error: rec.Error, Principal: rec.Principal, Time: t}
}

// runEvents serves GET /v1/runs/{task_id}/events: the run's state changes
// as Server-Sent Events. The first event is the run's state now; then one
// event per change, each further than the last (pending, active, parked,
// accepted, then a final state), each with the events stream's entry id
// when it came from there; a session's steps are "step" events (the step's
// name and verdict), as they end. The stream ends with an "end" event once the
// state is final, after MaxStream, or when the server stops; a comment is
// sent every KeepAlive. A run the token may not read is 404, as an
// unknown one (reads.go).
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request) {
	taskID := r.PathValue("task_id")
	queue, ok := h.queueOf(w, r, taskID)
	if !ok {
		return
	}
	ctx, cancel := h.bounded(r.Context(), h.maxStream)
	defer cancel()
	// The position comes first: a change after it is never missed.
	from, err := h.events.Last(ctx)
	if err != nil {
		h.internal(w, r, fmt.Errorf("events: %w", err))
		return
	}
	rec, ok := h.readRun(ctx, w, r, queue, taskID) // the token's to read (reads.go)
	if !ok {
		return
	}
	ev, release, ok := h.startStream(w, r, queue)
	if !ok {
		return
	}
	defer release()
	send := ev.send
	last := rec.State
	approvalID := rec.ApprovalID
	send("state", "", snapshot(rec))
	end := func(reason string) {
		send("end", "", StreamEnd{State: last, Reason: reason})
	}
	if record.Final(last) {
		end("final")
		return
	}
	stopOutput := h.followOutput(ctx, r, taskID, func(o live.Output) { send("output", o.Seq, o) })
	defer stopOutput()
	nextPing := time.Now().Add(h.keepAlive)
	// reread looks at the run again (a lost event, asynq's own states):
	// at least once a second, from Follow's tick.
	reread := func() (bool, error) {
		cur, err := h.client.Status(ctx, queue, taskID)
		if err != nil {
			return false, err
		}
		if cur.ApprovalID != "" {
			approvalID = cur.ApprovalID
		}
		if rank(cur.State) > rank(last) {
			last = cur.State
			send("state", "", snapshot(cur))
		}
		if time.Now().After(nextPing) {
			ev.comment("keep-alive")
			nextPing = time.Now().Add(h.keepAlive)
		}
		return record.Final(last) || ev.failed(), nil
	}
	err = h.events.Follow(ctx, from, time.Second, reread, func(e events.Event) (bool, error) {
		if e.TaskID != taskID && (approvalID == "" || e.ApprovalID != approvalID) {
			return false, nil
		}
		if e.ApprovalID != "" {
			approvalID = e.ApprovalID
		}
		if e.Step != "" {
			// A session's step that ended: no change of state.
			send("step", e.ID, e)
			return ev.failed(), nil
		}
		if rank(e.State) > rank(last) {
			last = e.State
			send("state", e.ID, e)
		}
		return record.Final(last) || ev.failed(), nil
	})
	stopOutput() // what the steps printed comes before the end
	switch {
	case ev.failed() || r.Context().Err() != nil:
		// The client went away: nothing more to say.
	case err == nil:
		end("final")
	case h.stopCtx.Err() != nil:
		end("shutdown")
	case errors.Is(err, context.DeadlineExceeded):
		end("timeout")
	default:
		h.log.Warn().Str("task_id", taskID).Err(err).Msg("event stream")
		end("error")
	}
}

// followOutput sends run taskID's step output as it comes (package live),
// each piece an "output" event whose id is its position: a client that
// reconnects with that id as Last-Event-ID resumes after it, missing
// nothing and seeing nothing twice; otherwise the output starts now.
func (h *Handler) followOutput(ctx context.Context, r *http.Request, taskID string, send func(live.Output)) (stop func()) {
	return h.live.Follow(ctx, taskID, r.Header.Get("Last-Event-ID"), send)
}

// eventWriter writes Server-Sent Events to a response, each flushed under
// a write deadline; after a write fails it writes nothing more. It may be
// used from several goroutines.
type eventWriter struct {
	mu  sync.Mutex
	w   http.ResponseWriter
	rc  *http.ResponseController
	err error
}

// startStream holds one of r's token's waiters on queue (holdWaiter) and
// answers 200 with an event stream's headers; it answers the refusal
// itself and returns false then. The caller defers release.
func (h *Handler) startStream(w http.ResponseWriter, r *http.Request, queue string) (ev *eventWriter, release func(), ok bool) {
	release, ok = h.holdWaiter(w, r, queue)
	if !ok {
		return nil, nil, false
	}
	return startEvents(w), release, true
}

// startEvents answers 200 with an event stream's headers.
func startEvents(w http.ResponseWriter) *eventWriter {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	return &eventWriter{w: w, rc: http.NewResponseController(w)}
}

// send writes event name with id (none when "") and data as JSON.
func (e *eventWriter) send(name, id string, data any) {
	b, err := json.Marshal(data)
	msg := ""
	if id != "" {
		msg = "id: " + id + "\n"
	}
	e.write(msg+"event: "+name+"\ndata: "+string(b)+"\n\n", err)
}

// comment writes a comment line (a keep-alive).
func (e *eventWriter) comment(text string) { e.write(": "+text+"\n\n", nil) }

func (e *eventWriter) write(msg string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	if e.err = err; err != nil {
		return
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, e.err = fmt.Fprint(e.w, msg); e.err == nil {
		e.err = e.rc.Flush()
	}
}

// failed reports whether a write failed: the client went away.
func (e *eventWriter) failed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err != nil
}
