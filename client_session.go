package airlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// Session errors, matched with errors.Is on what Session's methods and
// OpenSession return (a *session.Error says more: status, state, how it
// ended, when to retry).
var (
	ErrSessionNotFound = session.ErrNotFound
	ErrSessionEnded    = session.ErrEnded
	ErrSessionBusy     = session.ErrBusy
	// ErrNoRoom: no worker had room for the session (each holds at most
	// its -max-sessions, and keeps slots for one-shot runs); retry after
	// the error's RetryAfter.
	ErrNoRoom = session.ErrNoRoom
	// ErrNotApplied: the worker holding the session died (or stopped)
	// during the call, which was not applied: the session goes on from
	// its last answered call, on another worker; send the call again.
	ErrNotApplied = session.ErrNotApplied
)

// DefaultOpenWait is how long OpenSession waits for a worker to take the
// session (ClientOptions.OpenWait).
const DefaultOpenWait = 10 * time.Second

// sessionMoves is how many times a session's task may be taken up again
// after the worker holding it died (asynq's retries of it).
const sessionMoves = 8

// callGrace is what a call waits past its step's own bound: the worker's
// grace to stop a step, and the wire.
const callGrace = 10 * time.Second

// Session is an open session: one run whose steps arrive call by call, in
// one workspace, on one worker's slot, until Close (the output then goes
// through the contract, the policy and the approval), Delete, or its idle
// timeout or timeout. A Session holds no connection of its own: any
// client (or API server) reaches it by its id (Client.Session).
type Session struct {
	c       *Client
	conn    *session.Conn
	id      string
	queue   string
	timeout time.Duration
	// Opened is the answer to the open: the steps the spec ran, when the
	// session expires.
	Opened *session.Answer
}

// ID is the session's id, which is its run's task id.
func (s *Session) ID() string { return s.id }

// Queue is the queue of the session's run.
func (s *Session) Queue() string { return s.queue }

// OpenSession queues spec as a session (spec.Session is set when nil) and
// waits until a worker holds it and has set it up (its inputs, the spec's
// steps, if any). No worker takes it within ClientOptions.OpenWait: the
// run is canceled and the error matches ErrNoRoom (HTTP 429).
func (c *Client) OpenSession(ctx context.Context, spec *tasks.Spec) (*Session, error) {
	if spec == nil {
		return nil, errors.New("airlock: OpenSession of a nil spec")
	}
	if spec.Session == nil {
		spec.Session = &tasks.Session{}
	}
	if spec.IdempotencyKey != "" {
		return nil, &tasks.FieldError{Field: "idempotency_key", Msg: "a session is opened once", Hint: "leave it out; the session's id names it"}
	}
	payload, o, err := c.prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	id := uuid.NewString()
	s := &Session{c: c, conn: c.sessions, id: id, queue: spec.Queue, timeout: time.Duration(spec.Timeout)}
	ttl := time.Duration(spec.Timeout) + c.opts.Retention + time.Hour
	if err := s.conn.Create(ctx, session.Info{ID: id, TaskID: id, Queue: spec.Queue, Principal: spec.Principal, OpenedAt: time.Now()}, ttl); err != nil {
		return nil, fmt.Errorf("airlock: open session: %w", err)
	}
	// asynq's retries of a session's task are its moves (a pause uses
	// none, a worker that died one): its steps are never replayed.
	o.maxRetry = sessionMoves
	if err := c.enqueueTask(ctx, spec, payload, o, id); err != nil {
		_ = s.conn.Forget(context.WithoutCancel(ctx), id) // refused, or withdrawn by the sweep
		return nil, err
	}
	wait := c.opts.OpenWait
	if wait <= 0 {
		wait = DefaultOpenWait
	}
	a, err := s.conn.AwaitOpen(ctx, id, wait)
	var se *session.Error
	if errors.As(err, &se) && se.Status == http.StatusGatewayTimeout && se.State == session.StateOpen {
		// A worker holds it, and sets it up (its inputs, the spec's own
		// steps): up to the session's deadline, while its beat goes on.
		a, err = s.conn.AwaitOpen(ctx, id, time.Duration(spec.Timeout))
	}
	if errors.As(err, &se) && se.Status == http.StatusGatewayTimeout && se.State == session.StateOpening {
		// No worker took it: take it back, unless one takes it now.
		if _, cerr := c.Cancel(context.WithoutCancel(ctx), spec.Queue, id); cerr == nil || errors.Is(cerr, ErrFinal) {
			return nil, &session.Error{Status: http.StatusTooManyRequests, State: se.State, RetryAfter: time.Second,
				Msg: fmt.Sprintf("no worker of queue %q took the session in %s: all are busy or none runs", spec.Queue, wait)}
		}
		a, err = s.conn.AwaitOpen(ctx, id, callGrace)
	}
	if err != nil {
		return nil, err
	}
	s.Opened = a
	return s, nil
}

// Session returns the open session id, for any client to call: the state
// lives in Redis, not in the client that opened it.
func (c *Client) Session(ctx context.Context, id string) (*Session, *session.Info, error) {
	in, err := c.sessions.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return &Session{c: c, conn: c.sessions, id: id, queue: in.Queue, timeout: time.Until(in.ExpiresAt)}, in, nil
}

// call sends one call and waits for its answer, at most bound past the
// call's own work.
func (s *Session) call(ctx context.Context, c session.Call, bound time.Duration) (*session.Answer, error) {
	// Random: two clients (two API servers) may call one session.
	c.ID = uuid.NewString()
	a, err := s.conn.Call(ctx, s.id, c, bound+callGrace)
	var se *session.Error
	if errors.As(err, &se) && se.Status == http.StatusGatewayTimeout {
		// No answer: the worker may have died. Its run's state says.
		if rec, serr := s.c.Status(ctx, s.queue, s.id); serr == nil && record.Final(rec.State) {
			return nil, &session.Error{Status: http.StatusGone, State: session.StateEnded, End: record.StateFailed,
				Msg: fmt.Sprintf("the session's run ended without answering: %s %s", rec.State, rec.Error)}
		}
	}
	return a, err
}

// Run runs one step in the session's workspace and returns its record
// entry (exit code, verdict, kept stdout and stderr, timings). A step that
// fails does not end the session: the caller decides what comes next.
//
// With OnOutput, the step's output reaches f while it runs (secrets
// redacted, what the record keeps), and all of it before Run returns.
func (s *Session) Run(ctx context.Context, st tasks.Step, opts ...FollowOption) (*record.Step, error) {
	if o := followOpts(opts); o.onOutput != nil {
		defer s.c.followOutput(ctx, s.id, o.onOutput)()
	}
	bound := s.timeout
	if st.Timeout > 0 {
		bound = time.Duration(st.Timeout)
	}
	a, err := s.call(ctx, session.Call{Op: session.OpStep, Step: &st}, bound)
	if err != nil {
		return nil, err
	}
	return a.Step, nil
}

// WriteFile writes data (at most session.MaxFileBytes) to path in the
// session's workspace, within its quota.
func (s *Session) WriteFile(ctx context.Context, path string, data []byte) error {
	if err := tasks.CheckPath("path", path); err != nil {
		return err
	}
	_, err := s.call(ctx, session.Call{Op: session.OpWrite, Path: path, Data: data}, 0)
	return err
}

// ReadFile reads the regular file path of the session's workspace (at
// most session.MaxFileBytes; a link is never followed).
func (s *Session) ReadFile(ctx context.Context, path string) ([]byte, error) {
	if err := tasks.CheckPath("path", path); err != nil {
		return nil, err
	}
	a, err := s.call(ctx, session.Call{Op: session.OpRead, Path: path}, 0)
	if err != nil {
		return nil, err
	}
	return a.Data, nil
}

// Upload writes r to path in the session's workspace, replacing what is
// there, streamed in chunks of session.ChunkBytes (no file is ever whole
// in the client, Redis or the worker): any size the workspace's quota
// takes (413 past it). It returns the bytes written.
func (s *Session) Upload(ctx context.Context, path string, r io.Reader) (int64, error) {
	if err := tasks.CheckPath("path", path); err != nil {
		return 0, err
	}
	a, err := s.conn.Upload(ctx, s.id, session.Call{ID: uuid.NewString(), Op: session.OpUpload, Path: path, Xfer: uuid.NewString()}, r, maxTransfer, callGrace+session.ChunkWait)
	if err != nil {
		return 0, err
	}
	return a.Size, nil
}

// Download copies the regular file path of the session's workspace to w,
// streamed in chunks (secrets' values redacted; a link is never
// followed), whatever its size. It returns the file's size.
func (s *Session) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	if err := tasks.CheckPath("path", path); err != nil {
		return 0, err
	}
	a, err := s.conn.Download(ctx, s.id, session.Call{ID: uuid.NewString(), Op: session.OpDownload, Path: path, Xfer: uuid.NewString()}, callGrace,
		func(*session.Answer) (io.Writer, error) { return w, nil })
	if err != nil {
		return 0, err
	}
	return a.Size, nil
}

// maxTransfer bounds an upload: the workspace's quota bounds it first.
const maxTransfer = 1 << 40

// Pause parks the session: its workspace and state go to the workers'
// session store and its worker is freed (a session also pauses by itself
// after its spec's session.pause_after without a call). Its next call, or
// Resume, brings it back on whichever worker takes it, files byte for
// byte; its deadline keeps running. The answer says the session paused.
func (s *Session) Pause(ctx context.Context) (*session.Answer, error) {
	return s.call(ctx, session.Call{Op: session.OpPause}, 0)
}

// Resume brings a paused session back on a worker now (any call would),
// and returns when one holds it again; on an open one it does nothing.
func (s *Session) Resume(ctx context.Context) (*session.Answer, error) {
	return s.call(ctx, session.Call{Op: session.OpResume}, 0)
}

// Close ends the session into its output contract, the policy and the
// approval, and returns the run's record once it is parked or finished
// (every step in order).
func (s *Session) Close(ctx context.Context) (*record.Run, error) {
	// The position before the close: the run's event may come before the
	// close's answer is read.
	from, err := s.c.events.Last(ctx)
	if err != nil {
		return nil, fmt.Errorf("airlock: close session %s: %w", s.id, err)
	}
	if _, err := s.call(ctx, session.Call{Op: session.OpClose}, 0); err != nil {
		return nil, err
	}
	return s.c.waitFrom(ctx, s.queue, s.id, from, false)
}

// Delete ends the session at once, keeping nothing (a running step is
// killed, an idle session ends within a second), and returns its record:
// canceled, or how it ended if it had already. The record names the
// client's principal as the canceler (DeleteAs names another).
func (s *Session) Delete(ctx context.Context) (*record.Run, error) {
	return s.DeleteAs(ctx, s.c.opts.Principal)
}

// DeleteAs is Delete on behalf of by, whom the record's error names
// ("canceled by BY while running"), as Client.CancelAs does for a run: a
// front end passes the name of whoever asked (the HTTP API its token's).
func (s *Session) DeleteAs(ctx context.Context, by string) (*record.Run, error) {
	rec, err := s.c.CancelAs(ctx, by, s.queue, s.id)
	if errors.Is(err, ErrFinal) {
		return s.c.Status(ctx, s.queue, s.id)
	}
	return rec, err
}
