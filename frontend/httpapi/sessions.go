package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// Sessions: POST /v1/sessions opens one (a spec, steps optional), then
// each call names it by id; the API keeps no session state (it lives in
// Redis, package session), so any API server serves any session. A
// session's calls are its opener's: another token (even with the scope)
// gets 404, as for a session that does not exist.

// SessionOpened is the answer to POST /v1/sessions.
type SessionOpened struct {
	SessionID string `json:"session_id"`
	TaskID    string `json:"task_id"`
	Queue     string `json:"queue"`
	State     string `json:"state"`
	// Steps are the records of the spec's own steps, run before the open
	// was answered.
	Steps     any       `json:"steps"`
	ExpiresAt time.Time `json:"expires_at"`
	IdleUntil time.Time `json:"idle_until"`
}

// openSession serves POST /v1/sessions.
func (h *Handler) openSession(w http.ResponseWriter, r *http.Request) {
	spec, ok := h.readSpec(w, r)
	if !ok || !h.admit(w, r, spec) {
		return
	}
	if spec.Action != "" {
		h.specRejected(w, r, &tasks.FieldError{Field: "action", Msg: "a catalog action is a one-shot run", Hint: "open a session with a free-form spec"})
		return
	}
	queue := spec.Queue
	if queue == "" {
		queue = "default"
	}
	if !h.waitRequest(w, r, queue) { // an open waits for a worker to hold it
		return
	}
	s, err := h.client.OpenSession(r.Context(), spec)
	var fe *tasks.FieldError
	if tasks.IsInvalid(err) && errors.As(err, &fe) {
		h.specRejected(w, r, fe)
		return
	}
	if err != nil {
		h.sessionError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+s.ID())
	writeJSON(w, http.StatusCreated, SessionOpened{SessionID: s.ID(), TaskID: s.ID(), Queue: s.Queue(), State: session.StateOpen,
		Steps: s.Opened.Steps, ExpiresAt: s.Opened.ExpiresAt, IdleUntil: s.Opened.IdleUntil})
}

// session returns the request's session when the token may call it: its
// opener's, in a queue the token may use. It answers the errors itself.
func (h *Handler) session(w http.ResponseWriter, r *http.Request) (*airlock.Session, *session.Info, bool) {
	id := r.PathValue("id")
	s, in, err := h.client.Session(r.Context(), id)
	if err == nil && (in.Principal != tokenName(tokenOf(r)) || !tokenOf(r).AllowsQueue(in.Queue)) {
		err = session.NotFound(id) // as an unknown session: no oracle
	}
	if err != nil {
		h.sessionError(w, r, err)
		return nil, nil, false
	}
	// A session's call waits for its worker: one of the token's waiters
	// until the request ends.
	if !h.waitRequest(w, r, in.Queue) {
		return nil, nil, false
	}
	return s, in, true
}

// sessionError answers a session call's error as a problem.
func (h *Handler) sessionError(w http.ResponseWriter, r *http.Request, err error) {
	var se *session.Error
	if !errors.As(err, &se) {
		h.internal(w, r, err)
		return
	}
	p := &Problem{Status: se.Status, Detail: se.Error(), Field: se.Field, State: se.State, End: string(se.End), TaskID: r.PathValue("id")}
	switch se.Status {
	case http.StatusBadRequest:
		p.Type = ProblemBadRequest
	case http.StatusNotFound:
		p.Type = ProblemNotFound
	case http.StatusConflict:
		p.Type = ProblemSessionBusy
	case http.StatusGone:
		p.Type = ProblemSessionEnded
	case http.StatusRequestEntityTooLarge:
		p.Type = ProblemTooLarge
	case http.StatusTooManyRequests:
		p.Type = ProblemNoRoom
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(se.RetryAfter.Seconds()))))
	case http.StatusGatewayTimeout:
		p.Type = ProblemNoAnswer
	case http.StatusInsufficientStorage:
		p.Type = ProblemNotApplied
	case http.StatusServiceUnavailable:
		p.Type = ProblemNotApplied
		w.Header().Set("Retry-After", "1")
	default:
		p.Type, p.Status = ProblemInternal, http.StatusInternalServerError
	}
	h.fail(w, r, p)
}

// sessionStep serves POST /v1/sessions/{id}/steps: one step, as in a
// spec; 200 with its record entry, whatever its verdict.
func (h *Handler) sessionStep(w http.ResponseWriter, r *http.Request) {
	s, _, ok := h.session(w, r)
	if !ok {
		return
	}
	done, ok := h.callable(w, r, s) // before the body is read
	if !ok {
		return
	}
	defer done()
	data, ok := h.readBody(w, r, int64(h.maxPayload), "step", func(max int64) string {
		return fmt.Sprintf("step: the body is more than %d bytes, the payload cap", max)
	})
	if !ok {
		return
	}
	var st tasks.Step
	if err := tasks.DecodeStep(data, &st); err != nil {
		var fe *tasks.FieldError
		if errors.As(err, &fe) {
			h.specRejected(w, r, fe)
			return
		}
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "step", Detail: err.Error()})
		return
	}
	rec, err := s.Run(r.Context(), st)
	if err != nil {
		h.sessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}

// sessionFile is the session and the checked {path...} of a files route;
// it answers the errors itself.
func (h *Handler) sessionFile(w http.ResponseWriter, r *http.Request) (*airlock.Session, string, bool) {
	s, _, ok := h.session(w, r)
	if !ok {
		return nil, "", false
	}
	p := r.PathValue("path")
	if err := tasks.CheckPath("path", p); err != nil {
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: "path", Detail: err.Error()})
		return nil, "", false
	}
	return s, p, true
}

// putSessionFile serves PUT /v1/sessions/{id}/files/{path...}: the raw
// body, at most session.MaxFileBytes, becomes the file. The caller, the
// path, the Content-Length and the session's room are checked before the
// body is read (sessioncall.go).
func (h *Handler) putSessionFile(w http.ResponseWriter, r *http.Request) {
	s, p, ok := h.sessionFile(w, r)
	if !ok {
		return
	}
	tooLarge := func(max int64) string {
		return fmt.Sprintf("the file is more than %d bytes, the most one call writes", max)
	}
	if r.ContentLength > session.MaxFileBytes || r.ContentLength < 0 {
		h.uploadSessionFile(w, r, s, p)
		return
	}
	done, ok := h.callable(w, r, s)
	if !ok {
		return
	}
	defer done()
	b, ok := h.readAll(w, r, session.MaxFileBytes, "body", tooLarge)
	if !ok {
		return
	}
	size := len(b) // b is the call's: not kept while it waits for its answer
	if err := s.WriteFile(r.Context(), p, b); err != nil {
		h.sessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": p, "size": size})
}

// getSessionFile serves GET /v1/sessions/{id}/files/{path...}: the file's
// raw bytes.
func (h *Handler) getSessionFile(w http.ResponseWriter, r *http.Request) {
	s, p, ok := h.sessionFile(w, r)
	if !ok {
		return
	}
	b, err := s.ReadFile(r.Context(), p)
	var se *session.Error
	if errors.As(err, &se) && se.Status == http.StatusRequestEntityTooLarge {
		h.downloadSessionFile(w, r, s, p) // more than one call reads: streamed
		return
	}
	if err != nil {
		h.sessionError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

// uploadSessionFile writes a body above session.MaxFileBytes (or of no
// stated length) to the file, streamed in chunks of session.ChunkBytes
// (streamBody): the workspace's quota bounds it.
func (h *Handler) uploadSessionFile(w http.ResponseWriter, r *http.Request, s *airlock.Session, p string) {
	done, ok := h.callable(w, r, s)
	if !ok {
		return
	}
	defer done()
	var n int64
	ok, err := h.streamBody(w, r, session.ChunkBytes, func(body io.Reader) (err error) {
		n, err = s.Upload(r.Context(), p, body)
		return err
	})
	if !ok {
		return
	}
	if err != nil {
		h.sessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"path": p, "size": n})
}

// downloadSessionFile sends a file above session.MaxFileBytes, streamed
// in chunks as they come from the worker (no Content-Length: a secret's
// value in it is redacted on the way).
func (h *Handler) downloadSessionFile(w http.ResponseWriter, r *http.Request, s *airlock.Session, p string) {
	started := false
	rc := http.NewResponseController(w)
	_, err := s.Download(r.Context(), p, writerFunc(func(b []byte) (int, error) {
		// A client that stops reading is dropped, not waited for.
		_ = rc.SetWriteDeadline(time.Now().Add(session.ChunkWait))
		if !started {
			started = true
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
		}
		return w.Write(b)
	}))
	if err != nil && !started {
		h.sessionError(w, r, err)
		return
	}
	if !started { // an empty file
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
	}
}

// writerFunc is an io.Writer of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// closeSession serves POST /v1/sessions/{id}/close: the run record once
// parked or finished.
func (h *Handler) closeSession(w http.ResponseWriter, r *http.Request) {
	h.endSession(w, r, (*airlock.Session).Close)
}

// pauseSession serves POST /v1/sessions/{id}/pause: the session's
// workspace and state to the store, its worker freed; 200 with the
// answer (state paused, expires_at, idle_until).
func (h *Handler) pauseSession(w http.ResponseWriter, r *http.Request) {
	h.sessionOp(w, r, (*airlock.Session).Pause)
}

// resumeSession serves POST /v1/sessions/{id}/resume: 200 once a worker
// holds the session again (state open).
func (h *Handler) resumeSession(w http.ResponseWriter, r *http.Request) {
	h.sessionOp(w, r, (*airlock.Session).Resume)
}

// sessionOp runs op on the request's session and answers its answer.
func (h *Handler) sessionOp(w http.ResponseWriter, r *http.Request, op func(*airlock.Session, context.Context) (*session.Answer, error)) {
	s, _, ok := h.session(w, r)
	if !ok {
		return
	}
	a, err := op(s, r.Context())
	if err != nil {
		h.sessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session_id": s.ID(), "state": a.State, "expires_at": a.ExpiresAt, "idle_until": a.IdleUntil})
}

// deleteSession serves DELETE /v1/sessions/{id}: ended at once, the run
// record (canceled, or how it had ended).
func (h *Handler) deleteSession(w http.ResponseWriter, r *http.Request) {
	by := tokenOf(r).Name // the record names the token, as a cancel of a run does
	h.endSession(w, r, func(s *airlock.Session, ctx context.Context) (*record.Run, error) { return s.DeleteAs(ctx, by) })
}

// endSession ends the request's session with end and answers its record.
func (h *Handler) endSession(w http.ResponseWriter, r *http.Request, end func(*airlock.Session, context.Context) (*record.Run, error)) {
	s, _, ok := h.session(w, r)
	if !ok {
		return
	}
	rec, err := end(s, r.Context())
	if err != nil {
		h.sessionError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rec)
}
