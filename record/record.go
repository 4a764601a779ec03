// Package record defines the run record: the honest account of one task
// attempt that the worker stores as the asynq task's result and logs, and
// that enqueue -wait prints. Field names are part of Airlock's public
// contract (see the README).
package record

import (
	"encoding/base64"
	"github.com/airlock-run/airlock/approve"
	"time"
	"unicode/utf8"
)

// States of a run.
const (
	StateCompleted = "completed" // every step ended ok and the spec has no output to publish
	StateFailed    = "failed"    // a step failed, the output broke its contract, or the run could not be carried out
	StateParked    = "parked"    // the output waits for a human in the approval queue
	StateAccepted  = "accepted"  // accepted (by a human or the policy); its promotion is queued
	StatePromoted  = "promoted"  // the output is published in the store
	StateRejected  = "rejected"  // a human rejected the output
	StateExpired   = "expired"   // nobody decided before the approval expired
)

// Verdicts of a step and of a run. A run's verdict is that of its first
// failing step, "ok" when every step succeeded, or "error" when the worker
// could not carry the run out (the error field says why).
const (
	VerdictOK             = "ok"
	VerdictExit           = "exit"            // exited with a non-zero code
	VerdictSignal         = "signal"          // killed by a signal the worker did not send, cause unknown
	VerdictTimeout        = "timeout"         // the worker killed it at its deadline
	VerdictCPUTime        = "cpu_time"        // RLIMIT_CPU: SIGXCPU, or SIGKILL at the hard limit
	VerdictFileSize       = "file_size"       // RLIMIT_FSIZE: SIGXFSZ
	VerdictWorkspaceQuota = "workspace_quota" // failed while the workspace was full
	VerdictMemory         = "memory"          // the kernel killed a process of the step at its cgroup's memory limit (never emitted without a cgroup)
	VerdictExecError      = "exec_error"      // the program could not be started
	VerdictCanceled       = "canceled"        // the worker shut down mid-step
	VerdictError          = "error"           // the worker failed; see error
	VerdictSchema         = "schema"          // the result does not satisfy output.schema
	VerdictOutput         = "output"          // the result or artifacts broke the contract (missing, not a regular file, too large, not JSON)
)

// Run is the record of one attempt of a task.
type Run struct {
	TaskID     string    `json:"task_id"`
	RunID      string    `json:"run_id"`
	Queue      string    `json:"queue"`
	State      string    `json:"state"`
	Verdict    string    `json:"verdict"`
	Error      string    `json:"error,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS float64   `json:"duration_ms"`
	// Attempt is 1 for the first run of a task, 2 for its first retry...
	Attempt   int       `json:"attempt"`
	MaxRetry  int       `json:"max_retry"`
	Worker    string    `json:"worker"`
	Isolation Isolation `json:"isolation"`
	Limits    any       `json:"limits"`
	Workspace Workspace `json:"workspace"`
	Steps     []Step    `json:"steps"`
	Files     []File    `json:"files,omitempty"`

	// Output contract and its fate. The result and artifacts themselves are
	// never in the record: a run publishes nothing by itself.
	ResultBytes  int64              `json:"result_bytes,omitempty"`
	ResultSHA256 string             `json:"result_sha256,omitempty"`
	SchemaErrors []Violation        `json:"schema_errors,omitempty"`
	Artifacts    []approve.Artifact `json:"artifacts,omitempty"`
	Refused      []File             `json:"refused,omitempty"` // matched an artifact glob but not a regular file
	Decision     *Decision          `json:"decision,omitempty"`
	ApprovalID   string             `json:"approval_id,omitempty"`
	PublishedTo  string             `json:"published_to,omitempty"`
	DecidedBy    string             `json:"decided_by,omitempty"`
	DecidedAt    *time.Time         `json:"decided_at,omitempty"`
}

// Violation is one way a result breaks its schema.
type Violation struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Decision is the risk policy's verdict on an output.
type Decision struct {
	Action  string   `json:"action"` // promote | park
	Rule    string   `json:"rule"`
	Reasons []string `json:"reasons"`
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
}

// Workspace is what the run's workspace used.
type Workspace struct {
	QuotaBytes int64 `json:"quota_bytes"`
	UsedBytes  int64 `json:"used_bytes"`
	Full       bool  `json:"full,omitempty"`
	InputBytes int64 `json:"input_bytes"`
}

// Step is the record of one step.
type Step struct {
	Name       string   `json:"name"`
	Argv       []string `json:"argv"`
	ExitCode   *int     `json:"exit_code"`
	Signal     string   `json:"signal,omitempty"`
	Verdict    string   `json:"verdict"`
	Error      string   `json:"error,omitempty"`
	DurationMS float64  `json:"duration_ms"`
	CPUMS      float64  `json:"cpu_ms"`
	MaxRSSKB   int64    `json:"max_rss_kb"`
	// MemoryPeakBytes is the peak of the step's cgroup (its processes'
	// memory, tmpfs, shm and memfd pages, page cache); absent without a
	// cgroup. OOMKills counts the processes the kernel killed at the limit.
	MemoryPeakBytes int64  `json:"memory_peak_bytes,omitempty"`
	OOMKills        int64  `json:"oom_kills,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutEncoding  string `json:"stdout_encoding,omitempty"` // "base64" when not UTF-8
	StderrEncoding  string `json:"stderr_encoding,omitempty"`
	StdoutBytes     int64  `json:"stdout_bytes"` // bytes the step wrote, kept or not
	StderrBytes     int64  `json:"stderr_bytes"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
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
func Final(state string) bool {
	switch state {
	case StateCompleted, StateFailed, StatePromoted, StateRejected, StateExpired:
		return true
	}
	return false
}
