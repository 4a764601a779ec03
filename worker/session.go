//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// A session is a run whose steps arrive call by call (package session):
// the worker that takes its task holds it (session.Conn.Hold, once: never
// replayed), sets up its workspace as for any run, runs the spec's steps,
// answers the open, then serves calls from the session's list until a
// close (the output then goes through the contract, the policy and the
// approval as any run's), a cancel (Session.Delete), or its idle timeout or
// deadline (expired). Every step is bounded as a spec's step is; the
// record lists them all in order.

// sessionStateTTL is how long an ended session's state stays for callers
// to learn how it ended.
const sessionStateTTL = 24 * time.Hour

// heldSession is a session this worker holds.
type heldSession struct {
	answered bool // the open was answered
	// bell is rung when a call waits (the worker's bell, sessionpark.go).
	bell chan struct{}
	// resumed is the state of a session this worker resumed (paused, or
	// its holder died), read from its checkpoint; ckpt is that
	// checkpoint's name ("" when the session never answered its open).
	resumed     *checkpointMeta
	ckpt        string
	resumedHold bool // taken over or resumed, not opened here
	// seq is the last checkpoint written, committed is the name of the
	// last one committed with an answer, pending the one written since.
	seq       int
	committed string
	pending   string
	// archived is the size of its committed checkpoint, for
	// -max-session-bytes.
	archived, pendingSize int64
	// paused: the session ended on this worker paused (asked for, idle,
	// or the worker stops), not over: its state and checkpoint stay.
	// lost: another worker took it over; this one commits nothing more.
	paused, lost bool
	// envSecrets are the secrets its step calls saw in their environment
	// (the spec's own steps' are the spec's EnvSecrets), for the policy.
	envSecrets []string
}

// holdSession takes the session of j's run for this worker: a new one
// within -max-sessions and -max-session-bytes, or one to resume (paused,
// or its holder died). nil: the run is refused, as the outcome says (its
// record says why).
func (w *Worker) holdSession(ctx context.Context, j *job) (*heldSession, outcome) {
	rec, spec := j.rec, j.spec
	rec.Session = &record.Session{IdleTimeout: spec.Session.IdleTimeout}
	deadline := time.Now().Add(time.Duration(spec.Timeout))
	held, err := w.sessions.Hold(ctx, rec.TaskID, spec.Queue, w.holder, deadline)
	if err != nil {
		// Not this task's to end: a session a live worker holds, one of
		// another queue, or one that ended.
		rec.Session.Ended = "worker"
		return nil, w.refuse(rec, record.VerdictError, err.Error())
	}
	n := w.sessionsHeld.Add(1)
	if !held.Resumed && (n > int64(w.cfg.MaxSessions) || w.sessionBytes.Load() >= w.cfg.MaxSessionBytes) {
		w.sessionsHeld.Add(-1)
		msg := fmt.Sprintf("this worker holds its -max-sessions %d sessions; try again later", w.cfg.MaxSessions)
		if n <= int64(w.cfg.MaxSessions) {
			msg = fmt.Sprintf("the parked workspaces of this worker's sessions hold its -max-session-bytes %d; try again later", w.cfg.MaxSessionBytes)
		}
		rec.Session.Ended = "session_limit"
		_ = w.sessions.Answer(ctx, rec.TaskID, "open", &session.Answer{Status: http.StatusTooManyRequests, Error: msg, State: session.StateEnded, End: record.StateFailed})
		// The opener has its answer, and no id to call (429): the state
		// goes with the task; the run's record says why.
		_ = w.sessions.Forget(ctx, rec.TaskID)
		return nil, w.refuse(rec, record.VerdictSessionLimit, msg)
	}
	h := &heldSession{bell: w.bells.add(rec.TaskID)}
	if held.Resumed {
		h.resumedHold = true
		h.ckpt, h.committed, h.answered = held.Checkpoint, held.Checkpoint, held.Checkpoint != ""
		if h.ckpt != "" {
			var size int64
			if h.resumed, size, err = w.readCheckpointMeta(rec.TaskID, h.ckpt); err == nil {
				h.seq, h.archived = h.resumed.Seq, size
				w.sessionBytes.Add(size)
				if held.IdleUntil.After(h.resumed.IdleUntil) {
					h.resumed.IdleUntil = held.IdleUntil // a call since (a pause, a resume) moved it
				}
			} else {
				w.log.Error().Err(err).Str("task_id", rec.TaskID).Msg("resume a session")
			}
		}
		if !held.ExpiresAt.IsZero() {
			j.deadline = held.ExpiresAt
		}
		w.log.Info().Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("checkpoint", h.ckpt).Msg("session resumed")
	}
	// The worker's beat (one for all its sessions, sessionpark.go)
	// tells callers the holder is alive; its bell brings the calls.
	return h, outcome{}
}

// endSession marks the held session ended with its run's state (failed
// when the run was handed back: a session is never replayed), answers an
// open it never answered, and gives its place back.
func (w *Worker) endSession(ctx context.Context, rec *record.Run, h *heldSession) {
	ctx = context.WithoutCancel(ctx) // a delete cancels the run's: its end is still to write
	w.bells.remove(rec.TaskID)
	w.sessionsHeld.Add(-1)
	w.sessionBytes.Add(-h.archived - h.pendingSize)
	if h.pending != "" {
		w.removeCheckpoint(rec.TaskID, h.pending) // written, never committed
	}
	if h.paused || h.lost || !w.sessions.Holds(ctx, rec.TaskID, w.holder) {
		// Its checkpoint and state go on, for the next holder (or the
		// one that took it over while this worker was cut off).
		return
	}
	w.removeCheckpoint(rec.TaskID, h.committed)
	end := rec.State
	if !record.Final(end) && end != record.StateParked && end != record.StateAccepted {
		end = record.StateFailed
	}
	if !h.answered {
		msg := rec.Error
		if msg == "" {
			msg = "the session ended before it opened"
		}
		_ = w.sessions.Answer(ctx, rec.TaskID, "open", &session.Answer{Status: http.StatusGone, Error: msg, State: session.StateEnded, End: end})
	}
	why := rec.Error
	if rec.Session != nil && rec.Session.Ended == "close" && why == "" {
		why = "closed"
	}
	if err := w.sessions.End(ctx, rec.TaskID, end, why, sessionStateTTL); err != nil {
		w.log.Error().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Msg("mark the session ended")
	}
}

// serveSession runs the spec's steps (or, resumed, takes up the state of
// its checkpoint), answers the open, then serves the session's calls.
// Between two calls the session holds no slot: its workspace is parked in
// a checkpoint (checkpoint.go), committed with each answer, and each call
// borrows a free slot to restore it into. closed: the caller closed it,
// and the output goes on to its contract (the workspace restored in a
// seat); errSessionPaused: it was paused (asked for, idle, or the worker
// stops), and resumes from its checkpoint; otherwise r says how it ended.
func (w *Worker) serveSession(ctx context.Context, j *job, deadline time.Time) (r stepsResult, closed bool, err error) {
	spec, rec, h := j.spec, j.rec, j.session
	r = stepsResult{records: []record.Step{}, state: record.StateCompleted, verdict: record.VerdictOK}
	keep := sandbox.NewKeepBudget(int64(spec.MaxRecordBytes))
	defer func() {
		if keep.Left() <= 0 {
			rec.KeptOutput.Reached = true
		}
	}()
	idle, pauseAfter := time.Duration(spec.Session.IdleTimeout), time.Duration(spec.Session.PauseAfter)
	idleUntil := time.Now().Add(idle)
	sv := &sessionServer{w: w, j: j, r: &r, keep: keep, deadline: deadline, idle: idle}
	switch {
	case h.resumed != nil:
		m := h.resumed
		r.records, rec.Session.Calls, h.envSecrets = m.Steps, m.Calls, m.EnvSecrets
		rec.StartedAt, rec.Workspace, idleUntil = m.StartedAt, m.Workspace, m.IdleUntil
		keep = sandbox.NewKeepBudget(m.KeepLeft)
		sv.keep = keep
		if r.records == nil {
			r.records = []record.Step{}
		}
	case h.resumedHold:
		// Taken over, with nothing to resume from: its holder died
		// before it answered the open, or its checkpoint is gone.
		r.state, r.verdict = record.StateFailed, record.VerdictError
		r.err = "the worker that held the session stopped before its open was answered, or its checkpoint is not in this worker's -session-store"
		return r, false, nil
	default:
		for i, st := range spec.Steps {
			sr, res, err := w.runStep(ctx, j, j.seat.box, j.seat.ws, st, min(spec.StepTimeout(i), time.Until(deadline)), keep)
			r.records = append(r.records, sr)
			if err != nil || res.Canceled {
				return r, false, stepErr(err)
			}
			w.stepEvent(ctx, rec, &sr)
		}
		if err := sv.park(idleUntil); err != nil {
			return r, false, err
		}
		if err := sv.answer("open", &session.Answer{Status: http.StatusCreated, Steps: r.records}, idleUntil); err != nil {
			return r, false, err
		}
		h.answered = true
	}
	lastCall := time.Now()
	for {
		now := time.Now()
		expired := !now.Before(idleUntil) || !now.Before(deadline)
		until := idleUntil
		if deadline.Before(until) {
			until = deadline
		}
		pauseAt := lastCall.Add(pauseAfter)
		pausing := !expired && pauseAt.Before(until)
		if pausing {
			until = pauseAt
		}
		if expired {
			// Resumed past its idle timeout or deadline: it ends now,
			// and what was queued meanwhile is answered 410.
			r.state, r.verdict = record.StateExpired, record.VerdictTimeout
			rec.Session.Ended, r.err = "idle_timeout", idleExpired(spec)
			if !now.Before(deadline) {
				rec.Session.Ended, r.err = "timeout", deadlineExpired(spec)
			}
			return r, false, nil
		}
		call, err := w.nextCall(ctx, j, until)
		if err != nil {
			if ctx.Err() != nil {
				if w.isStopping() && j.seat.slot == nil {
					return r, false, sv.pause(true) // a deploy: the next worker resumes it
				}
				rec.Session.Ended = "canceled"
				return r, false, errHandedBack // canceled (a delete), or the worker stops
			}
			return r, false, fmt.Errorf("session calls: %w", err)
		}
		if call == nil {
			if pausing {
				return r, false, sv.pause(false) // pause_after: idle, it frees the worker
			}
			r.state, r.verdict = record.StateExpired, record.VerdictTimeout
			rec.Session.Ended, r.err = "idle_timeout", idleExpired(spec)
			if time.Until(deadline) <= 0 {
				rec.Session.Ended, r.err = "timeout", deadlineExpired(spec)
			}
			return r, false, nil
		}
		rec.Session.Calls++
		lastCall, idleUntil = time.Now(), time.Now().Add(idle)
		switch call.Op {
		case session.OpClose:
			rec.Session.Ended = "close"
			// The output is read from the workspace: it sits again.
			if err := w.unpark(ctx, j); err != nil {
				return r, false, err
			}
			if err := sv.answer(call.ID, &session.Answer{Status: http.StatusOK, State: "closing"}, idleUntil); err != nil {
				return r, false, err
			}
			return r, true, nil
		case session.OpPause:
			if err := sv.commit(call.ID, &session.Answer{Status: http.StatusOK, State: session.StatePaused}, idleUntil, true); err != nil {
				return r, false, err
			}
			h.paused = true
			return r, false, sv.pause(false)
		case session.OpResume:
			if err := sv.answer(call.ID, &session.Answer{Status: http.StatusOK}, idleUntil); err != nil {
				return r, false, err
			}
			continue
		case session.OpStep, session.OpWrite, session.OpRead, session.OpUpload, session.OpDownload:
		default:
			if err := sv.answer(call.ID, &session.Answer{Status: http.StatusBadRequest, Field: "op", Error: fmt.Sprintf("%q is not a call (step, write, read, upload, download, pause, resume, close)", call.Op)}, idleUntil); err != nil {
				return r, false, err
			}
			continue
		}
		if done, err := sv.serve(ctx, call, idleUntil); done || err != nil {
			return r, false, err
		}
	}
}

// The words of a session's end by time, in its record's error and in the
// 410 its callers get after: its deadline (timeout, its whole life from
// the open) or its idle timeout (the most time between two calls). Never
// an approval's expiry: nobody was asked to decide.
func deadlineExpired(spec *tasks.Spec) string {
	return fmt.Sprintf("the session's deadline passed (timeout %s from its open)", spec.Timeout)
}

func idleExpired(spec *tasks.Spec) string {
	return fmt.Sprintf("the session's idle timeout passed (no call for idle_timeout %s)", spec.Session.IdleTimeout)
}

// stepsFailed counts the steps whose verdict is not ok.
func stepsFailed(steps []record.Step) int {
	n := 0
	for _, st := range steps {
		if st.Verdict != record.VerdictOK {
			n++
		}
	}
	return n
}

// stepEvent appends a session step's "step" event (state active, the
// step's verdict) for the run's followers (Wait, the API's SSE route).
func (w *Worker) stepEvent(ctx context.Context, rec *record.Run, sr *record.Step) {
	e := events.Event{RunID: rec.RunID, TaskID: rec.TaskID, State: "active", Verdict: sr.Verdict, Step: sr.Name, Principal: rec.Principal}
	if err := w.completer.events.Append(ctx, e); err != nil {
		w.completer.eventFailed(rec, err)
	}
}

// stepErr is the error of a step that did not end by itself: the
// worker's failure, or errHandedBack when its run was canceled.
func stepErr(err error) error {
	if err == nil {
		return errHandedBack
	}
	return err
}

// sessionStep checks and runs one step call, the session's n+1th step.
func (w *Worker) sessionStep(ctx context.Context, j *job, call *session.Call, n int, deadline time.Time, keep *sandbox.KeepBudget) (*session.Answer, sandbox.Result, error) {
	if call.Step == nil {
		return &session.Answer{Status: http.StatusBadRequest, Field: "step", Error: "a step call holds a step"}, sandbox.Result{}, nil
	}
	if n >= tasks.MaxSessionSteps {
		return &session.Answer{Status: http.StatusConflict, Field: "step", Error: fmt.Sprintf("the session ran %d steps, the most one session runs: close it", n)}, sandbox.Result{}, nil
	}
	st := *call.Step
	if err := j.spec.CheckStep(&st, n+1); err != nil {
		var fe *tasks.FieldError
		a := &session.Answer{Status: http.StatusBadRequest, Error: err.Error()}
		if errors.As(err, &fe) {
			a.Field, a.Error = fe.Field, fe.Msg
		}
		return a, sandbox.Result{}, nil
	}
	// A secret in a step's environment: granted to steps' environments,
	// as for a spec's steps (checkGrants), and a fact for the policy.
	for _, k := range slices.Sorted(maps.Keys(st.Env)) {
		for _, name := range tasks.SecretRefs(st.Env[k]) {
			if g, ok := w.grantFor(j.spec, name); !ok || !g.Env {
				return &session.Answer{Status: http.StatusBadRequest, Field: fmt.Sprintf("step.env[%q]", k),
					Error: fmt.Sprintf("secret %s: not granted to steps' environments (its grant lacks env: true)", name)}, sandbox.Result{}, nil
			}
			if !slices.Contains(j.session.envSecrets, name) {
				j.session.envSecrets = append(j.session.envSecrets, name)
			}
		}
	}
	timeout := time.Until(deadline)
	if st.Timeout > 0 {
		timeout = min(timeout, time.Duration(st.Timeout))
	}
	sr, res, err := w.runStep(ctx, j, j.seat.box, j.seat.ws, st, timeout, keep)
	if sr.Verdict == record.VerdictTimeout && time.Until(deadline) <= 0 {
		sr.Error = deadlineExpired(j.spec) + " in this step"
	}
	a := &session.Answer{Status: http.StatusOK, Step: &sr}
	if err != nil {
		a.Status, a.Error = http.StatusInternalServerError, err.Error()
	}
	return a, res, err
}

// writeFile writes one file of a write call into the workspace, within its
// quota, never through a link, replacing what was there.
func writeFile(ws *tmpfs.Workspace, call *session.Call) *session.Answer {
	if err := tasks.CheckPath("path", call.Path); err != nil {
		return &session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()}
	}
	if len(call.Data) > session.MaxFileBytes {
		return &session.Answer{Status: http.StatusRequestEntityTooLarge, Field: "data", Error: fmt.Sprintf("%d bytes, at most %d per call", len(call.Data), session.MaxFileBytes)}
	}
	// Replaced, not opened: a step may have left a link or a FIFO there.
	n, err := ws.ReplaceFile(call.Path, call.Data)
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return &session.Answer{Status: http.StatusRequestEntityTooLarge, Field: "data", Error: "the workspace is full (limits.workspace)"}
	case err != nil:
		return &session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()}
	}
	return &session.Answer{Status: http.StatusOK, Size: n}
}

// readFile reads one regular file of the workspace that a step wrote,
// bounded, never through a link.
func readFile(ws *tmpfs.Workspace, call *session.Call) *session.Answer {
	if err := tasks.CheckPath("path", call.Path); err != nil {
		return &session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()}
	}
	data, err := ws.ReadFile(call.Path, session.MaxFileBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &session.Answer{Status: http.StatusNotFound, Field: "path", Error: fmt.Sprintf("no file %s in the workspace", call.Path)}
	case errors.Is(err, tmpfs.ErrTooLarge):
		return &session.Answer{Status: http.StatusRequestEntityTooLarge, Field: "path", Error: fmt.Sprintf("%s is larger than %d bytes, the most one call reads", call.Path, session.MaxFileBytes)}
	case err != nil:
		return &session.Answer{Status: http.StatusBadRequest, Field: "path", Error: err.Error()}
	}
	return &session.Answer{Status: http.StatusOK, Data: data, Size: int64(len(data))}
}
