// Package record defines the run record: the honest account of one task
// attempt that the worker stores as the asynq task's result and logs, and
// that enqueue -wait prints, with the types it is made of (states,
// verdicts, artifacts, decisions, violations). Field names are part of
// Airlock's public contract (see docs/record.md).
//
// It is a leaf: it imports nothing of Airlock but limits, nothing of
// Redis or Linux, and builds on every platform a backend runs on.
package record

import (
	"encoding/base64"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/limits"
)

// State is the state of a run.
type State string

// States of a run.
const (
	StateCompleted State = "completed" // every step ended ok and the spec has no output to publish
	StateFailed    State = "failed"    // a step failed, the output broke its contract, or the run could not be carried out
	StateParked    State = "parked"    // the output waits for a human in the approval queue
	StateAccepted  State = "accepted"  // accepted (by a human or the policy); its promotion is queued
	StatePromoted  State = "promoted"  // the output is published in the store
	StateRejected  State = "rejected"  // a human rejected the output
	StateExpired   State = "expired"   // nobody decided before the approval expired, or a session passed its deadline (timeout) or idle_timeout
	StateCanceled  State = "canceled"  // canceled (Client.Cancel, DELETE /v1/runs/{id}, asynq's cancel) or a session deleted: stopped, never retried, nothing kept
)

// Verdict says what ended a step, or a run.
type Verdict string

// Verdicts of a step and of a run. A run's verdict is that of its first
// failing step, "ok" when every step succeeded, or "error" when the worker
// could not carry the run out (the error field says why).
const (
	VerdictOK             Verdict = "ok"
	VerdictExit           Verdict = "exit"            // exited with a non-zero code
	VerdictSignal         Verdict = "signal"          // killed by a signal the worker did not send, cause unknown
	VerdictTimeout        Verdict = "timeout"         // the worker killed it at its deadline
	VerdictCPUTime        Verdict = "cpu_time"        // RLIMIT_CPU: SIGXCPU, or SIGKILL at the hard limit
	VerdictFileSize       Verdict = "file_size"       // RLIMIT_FSIZE: SIGXFSZ
	VerdictWorkspaceQuota Verdict = "workspace_quota" // failed while the workspace was full
	VerdictMemory         Verdict = "memory"          // the kernel killed a process of the step at its cgroup's memory limit (never emitted without a cgroup)
	VerdictExecError      Verdict = "exec_error"      // the program could not be started
	VerdictCanceled       Verdict = "canceled"        // the worker shut down mid-step, or the run was canceled (state canceled)
	VerdictOutputLimit    Verdict = "output_limit"    // wrote more than limits.output_total to stdout and stderr together; the worker killed it
	VerdictError          Verdict = "error"           // the worker failed; see error
	VerdictSchema         Verdict = "schema"          // the result does not satisfy output.schema
	VerdictOutput         Verdict = "output"          // the result or artifacts broke the contract (missing, not a regular file, too large, not JSON)
	VerdictFetch          Verdict = "fetch"           // an input could not be downloaded (refused address, status, size, sha256, timeout)
	VerdictPendingLimit   Verdict = "pending_limit"   // parking the output would take the bytes pending approvals hold in Redis past the worker's -max-pending-bytes
	VerdictSessionLimit   Verdict = "session_limit"   // the worker that took a session's open held its -max-sessions sessions already
)

// Run is the record of one attempt of a task.
type Run struct {
	TaskID string `json:"task_id"`
	RunID  string `json:"run_id"`
	Queue  string `json:"queue"`
	// Principal is who asked for the run, as the front end that took the
	// request stamped it (the API's token name, the MCP server's
	// -principal); empty when the enqueuer named nobody.
	Principal string `json:"principal,omitempty"`
	// TraceID is the W3C trace id of the run (32 lower-case hex digits):
	// the caller's, when its traceparent reached the worker (the HTTP
	// request's, Client.Enqueue's context), else one of the worker's own.
	// Its log lines carry it too (trace_id), and its spans when the
	// worker exports them. Empty in records of workers without tracing.
	TraceID string `json:"trace_id,omitempty"`
	// Action is the catalog action the run ran (worker -actions), and
	// ActionDigest the SHA-256 of the definition it ran; empty for a
	// free-form spec.
	Action       string    `json:"action,omitempty"`
	ActionDigest string    `json:"action_digest,omitempty"`
	State        State     `json:"state"`
	Verdict      Verdict   `json:"verdict"`
	Error        string    `json:"error,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	FinishedAt   time.Time `json:"finished_at"`
	DurationMS   float64   `json:"duration_ms"`
	// Attempt is 1 for the first run of a task, 2 for its first retry...
	Attempt   int        `json:"attempt"`
	MaxRetry  int        `json:"max_retry"`
	Worker    string     `json:"worker"`
	Isolation Isolation  `json:"isolation"`
	Limits    limits.Set `json:"limits"`
	Workspace Workspace  `json:"workspace"`
	Inputs    []Input    `json:"inputs,omitempty"`
	Steps     []Step     `json:"steps"`
	// KeptOutput says what the record keeps of the steps' stdout and
	// stderr against the run's bound; absent from records of workers
	// without one.
	KeptOutput *KeptOutput `json:"kept_output,omitempty"`
	Files      []File      `json:"files,omitempty"`
	Egress     []Egress    `json:"egress,omitempty"`
	// Session marks a session's run (its steps were chosen call by call,
	// at run time): how long it could stay idle, how many calls it took
	// and how it ended.
	Session *Session `json:"session,omitempty"`

	// Output contract and its fate. The result and artifacts themselves are
	// never in the record: a run publishes nothing by itself.
	ResultBytes  int64       `json:"result_bytes,omitempty"`
	ResultSHA256 string      `json:"result_sha256,omitempty"`
	SchemaErrors []Violation `json:"schema_errors,omitempty"`
	Artifacts    []Artifact  `json:"artifacts,omitempty"`
	Refused      []File      `json:"refused,omitempty"` // matched an artifact glob but not a regular file
	Decision     *Decision   `json:"decision,omitempty"`
	ApprovalID   string      `json:"approval_id,omitempty"`
	PublishedTo  string      `json:"published_to,omitempty"`
	DecidedBy    string      `json:"decided_by,omitempty"`
	DecidedAt    *time.Time  `json:"decided_at,omitempty"`
}

// Violation is one way a result fails its schema.
type Violation struct {
	// Path is an RFC 6901 JSON pointer to the offending value of the result:
	// "" for the whole document, "/items/0/price" for a nested one. For a
	// missing required property or a property that is not allowed, it is the
	// object holding it; Message names the property. A pointer longer than
	// 1 KiB is cut and ends with "…".
	Path string `json:"path"`
	// Message is the validator's description, e.g. "Invalid type. Expected:
	// integer, given: string", cut at 1 KiB.
	Message string `json:"message"`
}

func (v Violation) String() string {
	p := v.Path
	if p == "" {
		p = "(root)"
	}
	return p + ": " + v.Message
}

// Action is what the risk policy decided for an output.
type Action string

// Actions.
const (
	Promote Action = "promote"
	Park    Action = "park"
)

// Decision is the risk policy's verdict on an output.
type Decision struct {
	Action  Action   `json:"action"`  // promote | park
	Reasons []string `json:"reasons"` // why, for the approver and the run record
	// Rule is the name of the rule that decided (the first matching park
	// rule, or the first matching promote rule), or "default", "spec" or
	// "no-policy".
	Rule string `json:"rule"`
	// Checked are the values of the result that the rules which decided
	// looked at (their result conditions), for the approver; absent when
	// none did.
	Checked []Check `json:"checked,omitempty"`
}

// Check is a value of the result a policy rule looked at: the rule's name
// and the value's RFC 6901 JSON pointer ("" for the whole result).
type Check struct {
	Rule    string `json:"rule"`
	Pointer string `json:"pointer"`
}

// Artifact is one file a run produced, with its digest: staged with its
// approval, and published by name.
type Artifact struct {
	Name        string `json:"name"` // path relative to the workspace, e.g. "out/report.csv"
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"` // hex
	ContentType string `json:"content_type"`
}

// Isolation says which confinement tier was in force, one field per tier,
// each a mechanism name or "off: <reason>".
type Isolation struct {
	Mode     string `json:"mode"`          // strict | best-effort
	User     string `json:"user"`          // e.g. "uid per slot from 200000" or "off: worker is not root"
	UID      int    `json:"uid,omitempty"` // the uid this run's steps ran as
	Network  string `json:"network"`       // e.g. "network namespace (loopback only)"
	Root     string `json:"root"`          // the steps' filesystem: "pivot_root: own tree (...)" or "off: ..."
	Landlock string `json:"landlock"`      // e.g. "abi 7 (...)" or "off: ..."
	Seccomp  string `json:"seccomp"`       // the syscall filter: profile and rule count, or "off: ..."
	IPC      string `json:"ipc"`           // e.g. "ipc namespace per slot; ... removed after each step"
	Keys     string `json:"keys"`          // kernel keyrings
	FDs      string `json:"descriptors"`   // what descriptors reach a step
	Quota    string `json:"quota"`         // e.g. "tmpfs per slot, sized to each task's quota" or "scan after each step"
	Tree     string `json:"tree"`          // e.g. "pid namespace" or "process group"
	Rlimits  string `json:"rlimits"`       // e.g. "prlimit while stopped at exec (ptrace)"
	Memory   string `json:"memory"`        // what limits memory and processes: a cgroup, or "off: RLIMIT_AS ... fallback"
	// Validation says where the result is validated against output.schema:
	// in the worker within the cost model's bound, else in a child process
	// and how it is confined.
	Validation string `json:"validation,omitempty"`
}

// Workspace is what the run's workspace used.
type Workspace struct {
	QuotaBytes int64 `json:"quota_bytes"` // its size: limits.workspace
	// UsedBytes is what it held after the last step (the blocks allocated,
	// for every file: the spec's, the downloads, the steps'), measured
	// before the output is read; Full, that no block or inode was left.
	UsedBytes int64 `json:"used_bytes"`
	Full      bool  `json:"full,omitempty"`
	// InputBytes is the bytes of the spec's inline files the worker wrote
	// before the first step; the downloads are each Input's Bytes.
	InputBytes int64 `json:"input_bytes"`
}

// Step is the record of one step.
type Step struct {
	Name string   `json:"name"`
	Argv []string `json:"argv"`
	// Cwd is the directory the step started in, relative to the
	// workspace, when its spec or call gave one.
	Cwd        string  `json:"cwd,omitempty"`
	ExitCode   *int    `json:"exit_code"`
	Signal     string  `json:"signal,omitempty"`
	Verdict    Verdict `json:"verdict"`
	Error      string  `json:"error,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	CPUMS      float64 `json:"cpu_ms"`
	MaxRSSKB   int64   `json:"max_rss_kb"`
	// MemoryPeakBytes is the peak of the step's cgroup (its processes'
	// memory, tmpfs, shm and memfd pages, page cache); absent without a
	// cgroup. OOMKills counts the processes the kernel killed at the limit.
	MemoryPeakBytes int64 `json:"memory_peak_bytes,omitempty"`
	OOMKills        int64 `json:"oom_kills,omitempty"`
	// LimitsHit names the limits the kernel reported reached during the
	// step (LimitProcesses, LimitMemory, LimitCPUTime, LimitFileSize,
	// LimitOutput), whatever ended it; PidsRefused counts the forks the
	// processes limit refused. Limits the kernel does not report
	// (open_files) are never listed.
	LimitsHit       []string `json:"limits_hit,omitempty"`
	PidsRefused     int64    `json:"pids_refused,omitempty"`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	StdoutEncoding  string   `json:"stdout_encoding,omitempty"` // "base64" when not UTF-8
	StderrEncoding  string   `json:"stderr_encoding,omitempty"`
	StdoutBytes     int64    `json:"stdout_bytes"` // bytes the step wrote, kept or not
	StderrBytes     int64    `json:"stderr_bytes"`
	StdoutTruncated bool     `json:"stdout_truncated"`
	StderrTruncated bool     `json:"stderr_truncated"`
}

// Names of limits in Step.LimitsHit: those of limits.Set.
const (
	LimitProcesses = "processes"
	LimitMemory    = "memory"
	LimitCPUTime   = "cpu_time"
	LimitFileSize  = "file_size"
	LimitOutput    = "output_total"
)

// KeptOutput is what a run record keeps of its steps' stdout and stderr,
// all steps and both streams together, against the run's bound.
type KeptOutput struct {
	// MaxBytes is the bound: the worker's -max-record-bytes, or the
	// spec's max_record_bytes when lower.
	MaxBytes int64 `json:"max_bytes"`
	// Bytes is what the steps' stdout and stderr fields hold, as encoded
	// in the record (JSON escapes and base64 included).
	Bytes int64 `json:"bytes"`
	// DroppedBytes is what the steps wrote and the record does not keep:
	// past each stream's limits.output, or past the bound.
	DroppedBytes int64 `json:"dropped_bytes"`
	// Reached is true when the bound cut the output: from there on, the
	// steps' bytes were counted (stdout_bytes, stderr_bytes), not kept.
	Reached bool `json:"reached,omitempty"`
}

// Input is what the download of one of the spec's inputs did.
type Input struct {
	URL        string  `json:"url"`                 // without credentials or secret-looking query values
	FinalURL   string  `json:"final_url,omitempty"` // after redirects, redacted alike
	Path       string  `json:"path"`
	Status     int     `json:"status,omitempty"`
	Bytes      int64   `json:"bytes"`
	SHA256     string  `json:"sha256,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	Error      string  `json:"error,omitempty"`
}

// Session is what a session's record says of the session.
type Session struct {
	IdleTimeout limits.Duration `json:"idle_timeout"`
	Calls       int             `json:"calls"` // steps, file writes and reads, the close or delete
	// Ended says how: "close", "idle_timeout", "timeout", "canceled"
	// (deleted, or canceled as any run), "session_limit" or "worker" (the
	// worker failed, or the session was taken again after its worker
	// stopped: never replayed).
	Ended string `json:"ended"`
	// StepsFailed counts its steps whose verdict is not ok. A failing
	// step does not end a session (its caller saw the answer and chose
	// the next call), so a closed session's state and verdict are its
	// close's (docs/record.md), and this says what its steps did.
	StepsFailed int `json:"steps_failed"`
}

// Egress is one connection a networked run's steps made through the
// worker's egress proxy, allowed or not; or, with Count, several: those
// refused before they named a destination, one entry per reason (Host
// ""), and those past the listed ones (Host "(more)").
type Egress struct {
	Host      string `json:"host"`
	Port      int    `json:"port"`
	Allowed   bool   `json:"allowed"`
	Reason    string `json:"reason,omitempty"` // why it was refused, or ended
	BytesUp   int64  `json:"bytes_up"`         // what the step sent, request head included
	BytesDown int64  `json:"bytes_down"`
	Count     int    `json:"count,omitempty"` // connections the entry stands for, when it aggregates
}

// File is one entry the run left under out/, read without following links.
type File struct {
	Path  string `json:"path"`
	Bytes int64  `json:"bytes"`
	Type  string `json:"type"` // file | dir | symlink | fifo | socket | device
}

// Text returns b as a string and "" when it is valid UTF-8, or its base64
// encoding and "base64" otherwise, so that binary output is kept safely.
func Text(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), ""
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// Final reports whether state is one a run does not leave.
func Final(state State) bool {
	switch state {
	case StateCompleted, StateFailed, StatePromoted, StateRejected, StateExpired, StateCanceled:
		return true
	}
	return false
}
