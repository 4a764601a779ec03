// Package session is the wire between the callers of a session (the Go
// client, the HTTP API, the MCP server) and the worker that holds it: the
// session's state in Redis, the list its calls arrive on and the lists its
// answers go back on. A call never waits on the queue's poll: the caller
// pushes it and blocks on its answer (BLPOP), the worker blocks on the
// calls (BLPOP), so a step's round trip is two Redis commands on each side.
//
// A session is one run: its id is its task's id. The state hash is
// written by the opener (state opening), taken by exactly one worker
// (Hold: opening → open, once; a second taker, a retry after the holder
// died included, is refused, so a session is never replayed) and ended by
// that worker (End). Calls are pushed only while the state is open, in one
// script, so a call never waits on a session that has ended. Every key is
// under one hash tag, {task id}, so a session lives in one Cluster slot.
//
// The package is portable and holds no Airlock policy: what a call may do
// is the worker's to decide.
package session

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// Ops of a call.
const (
	OpStep  = "step"  // run one step; the answer holds its record entry
	OpWrite = "write" // write one file of the workspace
	OpRead  = "read"  // read one file of the workspace
	OpClose = "close" // end the session into the output contract, the policy and the approval
	// OpPause parks the session in the store and frees its worker: the
	// next call resumes it on whichever worker takes it.
	OpPause = "pause"
	// OpResume does nothing but bring a paused session back to a worker:
	// its answer says the session is open.
	OpResume = "resume"
	// OpUpload writes one file from the chunks of transfer Call.Xfer,
	// and OpDownload sends one in chunks (stream.go): files of any size
	// the workspace holds.
	OpUpload   = "upload"
	OpDownload = "download"
)

// States of a session, in its hash.
const (
	StateOpening = "opening" // queued, no worker holds it yet
	StateOpen    = "open"    // a worker holds it and takes calls
	// StatePaused: no worker holds it; its workspace and state are in the
	// store, and a call (pushed, as to an open one) brings it back on
	// whichever worker takes its task.
	StatePaused = "paused"
	StateEnded  = "ended" // over: Info.End says how (the run's state)
)

// Bounds of the wire.
const (
	// MaxFileBytes bounds the bytes of one file written or read by a call.
	MaxFileBytes = 4 << 20
	// MaxCallBytes bounds one encoded call (a step with its stdin, or a
	// file): a bigger one is refused before it reaches Redis.
	MaxCallBytes = MaxFileBytes*4/3 + 64<<10
	// AnswerTTL is how long an answer nobody took stays in Redis.
	AnswerTTL = time.Minute
	// MaxQueuedCalls bounds the calls waiting for the worker (while a step
	// runs): one more is refused, 409 (ErrBusy).
	MaxQueuedCalls = 4
)

// Call is one call of a session, as the worker receives it.
type Call struct {
	ID   string      `json:"id"` // unique per session: the answer's list
	Op   string      `json:"op"`
	Step *tasks.Step `json:"step,omitempty"`
	Path string      `json:"path,omitempty"`
	Data []byte      `json:"data,omitempty"`
	// Xfer names the chunk list of an upload or download.
	Xfer string `json:"xfer,omitempty"`
}

// Answer is the worker's answer to a call (and to the open: ID "open").
type Answer struct {
	// Status is an HTTP status: 200, 201 (opened), 400 (a bad call; Field
	// names what), 404 (no such file), 409 (busy), 410 (ended), 413 (too
	// large), 429 (no room for a session), 500 (the worker failed).
	Status int          `json:"status"`
	Error  string       `json:"error,omitempty"`
	Field  string       `json:"field,omitempty"`
	Step   *record.Step `json:"step,omitempty"`
	// Steps are the steps a spec's opening ran (the open's answer).
	Steps []record.Step `json:"steps,omitempty"`
	Data  []byte        `json:"data,omitempty"`
	Size  int64         `json:"size,omitempty"`
	// Redacted: the file read held a secret's value, replaced in Data.
	Redacted bool `json:"redacted,omitempty"`
	// State is the session's after the call ("open", or "ended" with End).
	State string       `json:"state,omitempty"`
	End   record.State `json:"end,omitempty"`
	// ExpiresAt is when the session ends at the latest; IdleUntil when it
	// ends if no call comes (open's answer and each call's).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	IdleUntil time.Time `json:"idle_until,omitzero"`
}

// Info is a session's state hash.
type Info struct {
	ID        string       `json:"session_id"`
	TaskID    string       `json:"task_id"`
	Queue     string       `json:"queue"`
	Principal string       `json:"principal,omitempty"`
	State     string       `json:"state"`
	End       record.State `json:"end,omitempty"` // the run's state once ended
	// Why says how it ended, in words ("the session's idle timeout
	// passed (…)", "closed", "canceled by agent while running"), once
	// ended.
	Why       string    `json:"why,omitempty"`
	Worker    string    `json:"worker,omitempty"`
	OpenedAt  time.Time `json:"opened_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	SeenAt    time.Time `json:"seen_at,omitzero"` // when its holder took it
	// Checkpoint is the last workspace and state committed with an
	// answer ("" before the open's): what a resume restores.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// Error is a call that did not succeed, as its answer said (or as the
// session's state says when no answer came).
type Error struct {
	Status int
	Msg    string
	Field  string       // the call's field that is wrong (400)
	State  string       // the session's state
	End    record.State // how it ended (410)
	// RetryAfter is when an open refused for room (429) may be tried again.
	RetryAfter time.Duration
	// notApplied: the holder died during the call (ErrNotApplied).
	notApplied bool
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("session: %s: %s", e.Field, e.Msg)
	}
	return "session: " + e.Msg
}

// NotFound is the error of a session id that names no session: none was
// opened, or its record's retention passed. A front end gives it for a
// session its caller may not call (another's) too, so that the caller
// cannot tell the two apart.
func NotFound(id string) *Error {
	return &Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no session %s (never opened, or its record's retention passed)", id)}
}

// Is matches ErrEnded (410), ErrNotFound (404 of the session), ErrBusy
// (409) and ErrNoRoom (429).
func (e *Error) Is(target error) bool {
	switch target {
	case ErrEnded:
		return e.Status == http.StatusGone
	case ErrBusy:
		return e.Status == http.StatusConflict
	case ErrNoRoom:
		return e.Status == http.StatusTooManyRequests
	case ErrNotFound:
		return e.Status == http.StatusNotFound && e.State == ""
	case ErrNotApplied:
		return e.notApplied || e.Status == http.StatusServiceUnavailable && e.State == StatePaused
	}
	return false
}

// Errors matched with errors.Is.
var (
	ErrNotFound = errors.New("no such session")
	ErrEnded    = errors.New("session ended")
	ErrBusy     = errors.New("session busy with another call")
	ErrNoRoom   = errors.New("no room for a session")
)

// Err is the answer's error, nil for a 2xx.
func (a *Answer) Err() error {
	if a.Status >= 200 && a.Status < 300 {
		return nil
	}
	e := &Error{Status: a.Status, Msg: a.Error, Field: a.Field, State: a.State, End: a.End}
	if a.Status == http.StatusTooManyRequests {
		e.RetryAfter = time.Second
	}
	return e
}

// encodeCall encodes c as json.Marshal does, refusing one above
// MaxCallBytes. Its data (a file, up to MaxFileBytes) is encoded straight
// into a buffer of the call's size: one allocation, not json.Marshal's
// growing buffer and its copy (three times the file's base64, for each
// upload an API server holds at once).
func encodeCall(c Call) ([]byte, error) {
	data := c.Data
	c.Data = nil
	head, err := json.Marshal(c) // data, omitted when empty, comes last
	if err != nil {
		return nil, err
	}
	if len(data) == 0 {
		return head, tooLargeCall(len(head))
	}
	const key = `,"data":"`
	n := len(head) - 1 + len(key) + base64.StdEncoding.EncodedLen(len(data)) + len(`"}`)
	if err := tooLargeCall(n); err != nil {
		return nil, err
	}
	b := make([]byte, 0, n)
	b = append(append(b, head[:len(head)-1]...), key...)
	b = base64.StdEncoding.AppendEncode(b, data)
	return append(b, `"}`...), nil
}

// tooLargeCall is the error of a call of n bytes encoded, above
// MaxCallBytes; nil when it is not.
func tooLargeCall(n int) error {
	if n > MaxCallBytes {
		return &Error{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("the call is %d bytes encoded, at most %d", n, MaxCallBytes)}
	}
	return nil
}
