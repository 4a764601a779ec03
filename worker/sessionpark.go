//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tmpfs"
)

// Between two calls a session holds no slot, helper, uid or namespace:
// its workspace is parked, an archive (tmpfs.Workspace.Archive) in a file
// of the worker's sessions directory, and its handler waits on a channel,
// costing a goroutine. A call rings the worker's bell (one Redis list for
// all its sessions, one blocking read: session.Conn.Bells); the bell's
// reader wakes the session's handler, which takes the call (popped once),
// borrows a free slot, restores the workspace into it, serves the call,
// parks the workspace again and gives the slot back before it answers.
// The worker beats once for all its sessions (session.Conn.Alive).

// bells routes the rings of the worker's bell to the sessions it holds.
// A worker that holds none reads no bell and sends no beat: an idle
// worker costs Redis nothing for sessions.
type bells struct {
	mu sync.Mutex
	m  map[string]chan struct{}
	// first is signaled when the worker takes its first session (of a
	// run of them): its bell is read and its beat sent from then on.
	first chan struct{}
}

// add registers session id and returns the channel its rings arrive on.
func (b *bells) add(id string) chan struct{} {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.m == nil {
		b.m = map[string]chan struct{}{}
	}
	b.m[id] = ch
	if len(b.m) == 1 && b.first != nil {
		select {
		case b.first <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	return ch
}

func (b *bells) remove(id string) {
	b.mu.Lock()
	delete(b.m, id)
	b.mu.Unlock()
}

// held reports how many sessions the worker holds.
func (b *bells) held() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

// ring wakes session id's handler, if the worker holds it; a ring
// already pending stands for both.
func (b *bells) ring(id string) {
	b.mu.Lock()
	ch := b.m[id]
	b.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// serveBells reads the worker's bell and beats for its sessions, while it
// holds any, until ctx ends: two goroutines, whatever the number of
// sessions.
func (w *Worker) serveBells(ctx context.Context, first chan struct{}) {
	beat := make(chan struct{}, 1)
	go func() {
		t := time.NewTicker(session.BeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				_ = w.sessions.Gone(context.WithoutCancel(ctx), w.holder)
				return
			case <-t.C:
			case <-beat:
			}
			if w.bells.held() == 0 {
				continue
			}
			if err := w.sessions.Alive(ctx, w.holder); err != nil && ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("session beat")
			}
		}
	}()
	for ctx.Err() == nil {
		if w.bells.held() == 0 {
			select {
			case <-first:
				select {
				case beat <- struct{}{}:
				default:
				}
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			continue
		}
		ids, err := w.sessions.Bells(ctx, w.holder, time.Second)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn().Err(err).Msg("session bell")
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		for _, id := range ids {
			w.bells.ring(id)
		}
	}
}

// nextCall returns the session's next call, waiting for a ring until
// until: nil, nil when none came by then.
func (w *Worker) nextCall(ctx context.Context, j *job, until time.Time) (*session.Call, error) {
	id := j.rec.TaskID
	for {
		call, err := w.sessions.Take(ctx, id, w.holder)
		if err != nil || call != nil {
			return call, err
		}
		left := time.Until(until)
		if left <= 0 {
			return nil, nil
		}
		t := time.NewTimer(left)
		select {
		case <-j.session.bell:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// errSessionPaused: the session was paused (asked for, or idle past its
// pause_after): its handler ends, and asynq keeps its task in the retry
// set, not as a failure, until its expiry or a call (session.Conn)
// sends it back to its queue.
var errSessionPaused = errors.New("session paused: its workspace and state are in the session store; the next call resumes it")

// errSessionLost: another worker took the session over (this one's beat
// stopped): this one commits nothing more of it.
var errSessionLost = errors.New("session taken over by another worker")

// pausedError is errSessionPaused until the session expires (then its
// task runs, and ends it).
type pausedError struct{ until time.Time }

func (e *pausedError) Error() string        { return errSessionPaused.Error() }
func (e *pausedError) Is(target error) bool { return target == errSessionPaused }

// sessionServer serves the calls of one held session.
type sessionServer struct {
	w        *Worker
	j        *job
	r        *stepsResult
	keep     *sandbox.KeepBudget
	deadline time.Time
	idle     time.Duration
}

// park writes the session's checkpoint (its state and the workspace of
// its seat) and gives the seat back: the session holds no slot until its
// next call. The checkpoint counts once committed with an answer.
func (sv *sessionServer) park(idleUntil time.Time) error {
	w, j, h, rec := sv.w, sv.j, sv.j.session, sv.j.rec
	ws := j.seat.ws
	if ws == nil {
		return nil
	}
	if h.pending != "" { // written, never committed (its answer failed)
		w.removeCheckpoint(rec.TaskID, h.pending)
		w.sessionBytes.Add(-h.pendingSize)
		h.pending, h.pendingSize = "", 0
	}
	if used, full, err := ws.Usage(); err == nil {
		rec.Workspace.UsedBytes, rec.Workspace.Full = used, full
	}
	meta := checkpointMeta{Seq: h.seq + 1, StartedAt: rec.StartedAt, Steps: sv.r.records, Calls: rec.Session.Calls,
		EnvSecrets: h.envSecrets, KeepLeft: sv.keep.Left(), IdleUntil: idleUntil, Workspace: rec.Workspace}
	// What the worker's parked workspaces may still take
	// (-max-session-bytes), this session's committed one included.
	budget := w.cfg.MaxSessionBytes - (w.sessionBytes.Load() - h.archived)
	if budget <= 0 {
		return fmt.Errorf("park the session's workspace: the parked workspaces of this worker's sessions hold its -max-session-bytes %d", w.cfg.MaxSessionBytes)
	}
	name, size, err := w.writeCheckpoint(rec.TaskID, &meta, ws, budget)
	if errors.Is(err, tmpfs.ErrArchiveTooLarge) {
		err = fmt.Errorf("%w: past this workspace's quota and %d bytes of names and links, or past what the worker's -max-session-bytes %d leaves", err, tmpfs.MaxArchiveMeta, w.cfg.MaxSessionBytes)
	}
	if err != nil {
		return fmt.Errorf("park the session's workspace: %w", err)
	}
	h.seq, h.pending, h.pendingSize = meta.Seq, name, size
	w.sessionBytes.Add(size)
	w.stand(j)
	return nil
}

// answer answers call callID, committing the checkpoint parked since the
// last answer with it. errSessionLost when another worker holds the
// session now; a Redis failure is logged (the caller's wait says it).
func (sv *sessionServer) answer(callID string, a *session.Answer, idleUntil time.Time) error {
	return sv.commit(callID, a, idleUntil, false)
}

// commit is answer, pausing the session with it when pause is set.
func (sv *sessionServer) commit(callID string, a *session.Answer, idleUntil time.Time, pause bool) error {
	w, h, rec := sv.w, sv.j.session, sv.j.rec
	a.ExpiresAt, a.IdleUntil = sv.deadline, idleUntil
	if a.State == "" {
		a.State = session.StateOpen
	}
	ctx := context.Background()
	err := w.sessions.Commit(ctx, rec.TaskID, w.holder, callID, h.pending, a, pause)
	switch {
	case errors.Is(err, session.ErrFenced):
		h.lost = true
		return errSessionLost
	case err != nil:
		w.log.Error().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("call", callID).Msg("answer a session call")
		return nil
	}
	if h.pending != "" {
		w.removeCheckpoint(rec.TaskID, h.committed)
		w.sessionBytes.Add(-h.archived)
		h.committed, h.archived = h.pending, h.pendingSize
		h.pending, h.pendingSize = "", 0
	}
	return nil
}

// pause marks the session paused and returns what its handler ends with:
// errHandedBack when the worker stops (asynq hands its task back to its
// queue at once, for the next worker), a pausedError otherwise.
func (sv *sessionServer) pause(stopping bool) error {
	w, h, rec := sv.w, sv.j.session, sv.j.rec
	if h.paused {
		// Paused with the answer of the call that asked for it.
	} else if err := w.sessions.Pause(context.Background(), rec.TaskID, w.holder); err != nil {
		if errors.Is(err, session.ErrFenced) {
			h.lost = true
			return errSessionLost
		}
		return fmt.Errorf("pause the session: %w", err)
	}
	h.paused = true
	w.log.Info().Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("checkpoint", h.committed).Bool("worker_stopping", stopping).Msg("session paused")
	if stopping {
		return errHandedBack
	}
	until := sv.deadline
	if u := time.Now().Add(sv.idle); u.Before(until) {
		until = u
	}
	return &pausedError{until: until}
}

// serve serves one step, write or read call in a borrowed slot: it
// restores the workspace, does the call, parks the workspace and answers.
// done: the session ends here (err says why, or errHandedBack).
func (sv *sessionServer) serve(ctx context.Context, call *session.Call, idleUntil time.Time) (done bool, err error) {
	w, j, rec := sv.w, sv.j, sv.j.rec
	if err := w.unpark(ctx, j); err != nil {
		if ctx.Err() != nil {
			if w.isStopping() {
				return true, sv.notApplied(call.ID, idleUntil)
			}
			rec.Session.Ended = "canceled"
			return true, errHandedBack
		}
		_ = sv.answer(call.ID, &session.Answer{Status: http.StatusInternalServerError, Error: "the session's workspace could not be restored: " + err.Error(), State: session.StateEnded, End: record.StateFailed}, idleUntil)
		return true, err
	}
	var a *session.Answer
	var res sandbox.Result
	var stepErr2 error
	switch call.Op {
	case session.OpStep:
		a, res, stepErr2 = w.sessionStep(ctx, j, call, len(sv.r.records), sv.deadline, sv.keep)
		if res.Canceled && w.isStopping() {
			// The worker stops: this step is not applied; the session
			// resumes on the next worker from its last answered call.
			w.stand(j)
			return true, sv.notApplied(call.ID, idleUntil)
		}
		if a.Step != nil {
			sv.r.records = append(sv.r.records, *a.Step)
		}
		if res.Canceled {
			// Deleted: the session ends; its end answers the call 410.
			return true, errHandedBack
		}
	case session.OpWrite:
		a = writeFile(j.seat.ws, call)
	case session.OpUpload:
		a = w.upload(ctx, rec.TaskID, j.seat.ws, call)
	case session.OpDownload:
		// Answered first (the file's size), then sent in chunks; the
		// workspace did not change: nothing to park.
		err := w.download(ctx, rec.TaskID, j.seat.ws, call, j.secrets, func(a *session.Answer) error { return sv.answer(call.ID, a, idleUntil) })
		w.stand(j)
		return err != nil, err
	case session.OpRead:
		a = readFile(j.seat.ws, call)
		// What goes back holds no secret's value, as the record does not.
		if red, found := j.secrets.RedactBytes(a.Data); len(found) > 0 {
			a.Data, a.Size, a.Redacted = red, int64(len(red)), true
		}
	}
	if stepErr2 == nil && !res.Canceled {
		// Parked before the answer, committed with it: the next call
		// finds the workspace as this one left it, on whichever slot.
		if err := sv.park(idleUntil); err != nil {
			// Not kept, so not applied: the session goes on as its last
			// answered call left it (a full -max-session-bytes, another
			// tenant's doing, ends no session).
			w.stand(j)
			if a.Step != nil {
				sv.r.records = sv.r.records[:len(sv.r.records)-1]
			}
			msg := "the call was not applied: its workspace could not be kept (" + err.Error() + "); the session goes on as its last call left it"
			return false, sv.answer(call.ID, &session.Answer{Status: http.StatusInsufficientStorage, Error: msg}, idleUntil)
		}
	}
	if err := sv.answer(call.ID, a, idleUntil); err != nil {
		return true, err
	}
	if a.Step != nil {
		w.stepEvent(ctx, rec, a.Step)
	}
	if stepErr2 != nil || res.Canceled {
		return true, stepErr(stepErr2)
	}
	return false, nil
}

// notApplied answers a call the worker's stop interrupted (not applied:
// the session's state is its last answered call's) and pauses the
// session for the next worker.
func (sv *sessionServer) notApplied(callID string, idleUntil time.Time) error {
	w := sv.w
	_ = sv.answer(callID, &session.Answer{Status: http.StatusServiceUnavailable, State: session.StatePaused,
		Error: fmt.Sprintf("the worker holding the session (%s) stopped during this call: it was not applied; the session goes on from its last answered call on another worker (send the call again)", w.holder)}, idleUntil)
	return sv.pause(true)
}

// unpark borrows a free slot for j and restores its session's workspace
// there from its last checkpoint, as the last call left it.
func (w *Worker) unpark(ctx context.Context, j *job) error {
	if j.seat.slot != nil {
		return nil
	}
	if err := w.sit(ctx, j); err != nil {
		return err
	}
	h := j.session
	name := h.pending
	if name == "" {
		name = h.committed
	}
	if err := w.restoreCheckpoint(j.rec.TaskID, name, j.seat.ws); err != nil {
		return fmt.Errorf("restore the session's workspace: %w", err)
	}
	return nil
}
