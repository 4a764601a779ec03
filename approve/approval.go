// Package approve is the approval queue: parked runs waiting for a human to
// accept or reject what they produced, kept in Redis through a go-redis
// UniversalClient (single node, Sentinel or Cluster: one approval's keys
// share a hash slot). Every transition is atomic and appended to an audit
// stream; when two approvers decide at once exactly one wins, and the other
// is told who decided what and when.
package approve

import (
	"errors"
	"fmt"
	"time"
)

// States of an approval.
const (
	StatePending  = "pending"
	StateAccepted = "accepted"
	StateRejected = "rejected"
	StateExpired  = "expired"
)

// Artifact is one file a run produced, staged with its approval.
type Artifact struct {
	Name        string `json:"name"` // path relative to the workspace, e.g. "out/report.csv"
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"` // hex
	ContentType string `json:"content_type"`
}

// StepSummary is what an approver sees of a step.
type StepSummary struct {
	Name     string   `json:"name"`
	Argv     []string `json:"argv"`
	Verdict  string   `json:"verdict"`
	ExitCode *int     `json:"exit_code"`
	Signal   string   `json:"signal,omitempty"`
	CPUMS    float64  `json:"cpu_ms"`
	MaxRSSKB int64    `json:"max_rss_kb"`
}

// RunSummary is the part of the run record kept with an approval and
// copied into the manifest at promotion.
type RunSummary struct {
	Queue      string        `json:"queue"`
	Attempt    int           `json:"attempt"`
	StartedAt  time.Time     `json:"started_at"`
	DurationMS float64       `json:"duration_ms"`
	Worker     string        `json:"worker"`
	Network    bool          `json:"network"`
	Limits     any           `json:"limits"`
	Isolation  any           `json:"isolation"`
	Steps      []StepSummary `json:"steps"`
	Workspace  any           `json:"workspace"`
}

// Approval is one parked (or auto-accepted) run output.
type Approval struct {
	ID        string    `json:"id"`
	TaskID    string    `json:"task_id"`
	RunID     string    `json:"run_id"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Reasons   []string  `json:"reasons"`
	Result    []byte    `json:"result,omitempty"` // the run's JSON result, as produced
	// ResultSHA256 is the hex sha256 of Result, checked again at promotion.
	ResultSHA256 string     `json:"result_sha256,omitempty"`
	Artifacts    []Artifact `json:"artifacts"`
	Run          RunSummary `json:"run"`
	// Decision, once made.
	DecidedBy string    `json:"decided_by,omitempty"` // a login, or "policy:<name>" for auto-promotion
	DecidedAt time.Time `json:"decided_at,omitzero"`
	Comment   string    `json:"comment,omitempty"`
	// PromotedAt is set once the promote task has published the output.
	PromotedAt time.Time `json:"promoted_at,omitzero"`
}

// Errors matched with errors.Is.
var (
	ErrNotFound       = errors.New("approval not found")
	ErrAlreadyDecided = errors.New("approval already decided")
	ErrTooLarge       = errors.New("staged artifacts above the cap")
)

// DecidedError says who decided an approval first, what and when. It
// matches ErrAlreadyDecided.
type DecidedError struct {
	ID, State, By string
	At            time.Time
}

func (e *DecidedError) Error() string {
	if e.State == StateExpired {
		return fmt.Sprintf("approval %s expired at %s", e.ID, e.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("approval %s was already %s by %s at %s", e.ID, e.State, e.By, e.At.UTC().Format(time.RFC3339))
}

// Is reports whether target is ErrAlreadyDecided.
func (e *DecidedError) Is(target error) bool { return target == ErrAlreadyDecided }
