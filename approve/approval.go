// Package approve owns the approval lifecycle: parked runs waiting for a
// human to accept or reject what they produced, and every transition of
// them, promotion included. The Store keeps approvals in Redis through a
// go-redis UniversalClient (single node, Sentinel or Cluster: one
// approval's keys share a hash slot); every transition is atomic and
// appended to an audit stream, and when two approvers decide at once
// exactly one wins, and the other is told who decided what and when.
//
// Accept (every front end's accept) decides and queues the promotion
// (Enqueue, TypePromote); a Promoter publishes an accepted approval's
// output through a Sink, exactly once, and marks it promoted. The stores
// that implement Sink (a directory, S3) are package promote's, as
// litestream keeps its backends apart from its replication. View and
// Summary are the one shape of an approval for the CLI and the API.
package approve

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
)

// State is the state of an approval.
type State string

// States of an approval.
const (
	StatePending  State = "pending"
	StateAccepted State = "accepted"
	StateRejected State = "rejected"
	StateExpired  State = "expired"
)

// Run returns the state of the run whose approval is in state s: the one
// place where an approval's state is mapped onto a run's (pending is
// parked; accepted, rejected and expired are the same words). EventPromoted
// maps to promoted; anything else to "".
func (s State) Run() record.State {
	switch s {
	case StatePending:
		return record.StateParked
	case StateAccepted:
		return record.StateAccepted
	case StateRejected:
		return record.StateRejected
	case StateExpired:
		return record.StateExpired
	case EventPromoted:
		return record.StatePromoted
	}
	return ""
}

// StepSummary is what an approver sees of a step.
type StepSummary struct {
	Name     string         `json:"name"`
	Argv     []string       `json:"argv"`
	Verdict  record.Verdict `json:"verdict"`
	ExitCode *int           `json:"exit_code"`
	Signal   string         `json:"signal,omitempty"`
	CPUMS    float64        `json:"cpu_ms"`
	MaxRSSKB int64          `json:"max_rss_kb"`
}

// RunSummary is the part of the run record kept with an approval and
// copied into the manifest at promotion.
type RunSummary struct {
	Queue string `json:"queue"`
	// Principal is who asked for the run (the run record's principal):
	// the API token's name, the MCP server's -principal; empty when the
	// enqueuer named nobody.
	Principal string `json:"principal,omitempty"`
	// Action is the catalog action the run ran (the run record's
	// action); empty for a free-form spec.
	Action string `json:"action,omitempty"`
	// Secrets are the names of the secrets the run was granted (the
	// spec's, or its action's), never their values.
	Secrets   []string  `json:"secrets,omitempty"`
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	// StepsMS is the time its steps took, together (the run record's
	// duration_ms, the whole run's, includes the checks and publication).
	StepsMS   float64          `json:"steps_ms"`
	Worker    string           `json:"worker"`
	Network   bool             `json:"network"`
	Limits    limits.Set       `json:"limits"`
	Isolation record.Isolation `json:"isolation"`
	Steps     []StepSummary    `json:"steps"`
	Workspace record.Workspace `json:"workspace"`
}

// Approval is one parked (or auto-accepted) run output.
type Approval struct {
	ID        string    `json:"id"`
	TaskID    string    `json:"task_id"`
	RunID     string    `json:"run_id"`
	State     State     `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Reasons   []string  `json:"reasons"`
	// Checked are the values of the result the policy's deciding rules
	// looked at (record.Decision.Checked).
	Checked []record.Check `json:"checked,omitempty"`
	Result  []byte         `json:"result,omitempty"` // the run's JSON result, as produced
	// ResultSHA256 is the hex sha256 of Result, checked again at promotion.
	ResultSHA256 string            `json:"result_sha256,omitempty"`
	Artifacts    []record.Artifact `json:"artifacts"`
	Run          RunSummary        `json:"run"`
	// Decision, once made.
	DecidedBy string `json:"decided_by,omitempty"` // a login, or "policy:<name>" for auto-promotion
	// ByNote is a display note beside DecidedBy: the name a decider's
	// front end was given but could not vouch for (the HTTP API's body
	// "by", when it is not the token's name). It is never who decided.
	ByNote    string    `json:"by_note,omitempty"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	Comment   string    `json:"comment,omitempty"`
	// PromotedAt is set once the promote task has published the output,
	// PublishedTo to where (the store's name for it).
	PromotedAt  time.Time `json:"promoted_at,omitzero"`
	PublishedTo string    `json:"published_to,omitempty"`
	// StagedBytes is what the approval counts against the store's
	// MaxPendingBytes while it holds its staged bytes: its result and
	// its artifacts' bytes. Park sets it.
	StagedBytes int64 `json:"staged_bytes,omitempty"`
	// TraceParent is the W3C traceparent of the span that parked it (the
	// run's park span): the spans of its accept or reject and of its
	// promotion are that span's children, in the run's trace. Empty for
	// an approval parked without one.
	TraceParent string `json:"trace_parent,omitempty"`
}

// Errors matched with errors.Is.
var (
	ErrNotFound       = errors.New("approval not found")
	ErrAlreadyDecided = errors.New("approval already decided")
	ErrTooLarge       = errors.New("staged artifacts above the cap")
	// ErrPendingFull: Park of an output that would take the bytes all
	// approvals hold in Redis past the store's MaxPendingBytes.
	ErrPendingFull = errors.New("pending approvals hold the most bytes the operator allows")
	// ErrPrincipalPendingFull: Park of an output that would take the
	// bytes its principal's approvals hold past its quota
	// (Options.PrincipalMaxPendingBytes: the policy's max_pending_bytes).
	ErrPrincipalPendingFull = errors.New("the principal's pending approvals hold the most bytes its quota allows")
	// ErrIDTaken: Park of an id that holds another task's approval.
	ErrIDTaken = errors.New("approval id taken by another task")
)

// DecidedError says who decided an approval first, what and when. It
// matches ErrAlreadyDecided.
type DecidedError struct {
	ID, By string
	State  State
	At     time.Time
}

func (e *DecidedError) Error() string {
	if e.State == StateExpired {
		return fmt.Sprintf("approval %s expired at %s", e.ID, e.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("approval %s was already %s by %s at %s", e.ID, e.State, e.By, e.At.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrAlreadyDecided.
func (e *DecidedError) Is(target error) bool { return target == ErrAlreadyDecided }
