package approve

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-run/airlock/record"
)

// Manifest is the provenance of a publication, written last, as
// <run_id>/<task_id>/manifest.json.
type Manifest struct {
	RunID      string            `json:"run_id"`
	TaskID     string            `json:"task_id"`
	ApprovalID string            `json:"approval_id"`
	AcceptedBy string            `json:"accepted_by"` // a login, or "policy:<rule>" when auto-promoted
	AcceptedAt time.Time         `json:"accepted_at"`
	Comment    string            `json:"comment,omitempty"`
	Reasons    []string          `json:"reasons"`
	Result     *record.Artifact  `json:"result,omitempty"`
	Artifacts  []record.Artifact `json:"artifacts"`
	Run        RunSummary        `json:"run"`
	PromotedAt time.Time         `json:"promoted_at"`
	PromotedBy string            `json:"promoted_by"` // worker and version
}

// ResultName is where a run's JSON result is published.
const ResultName = "result.json"

// Sink is durable storage for promoted outputs, which a Promoter
// publishes through (package promote has the stores: promote.FS, a
// directory; s3store.Store, a bucket; storage.Open opens either from a
// URL). Publish makes a run's files and manifest visible all at once or
// not at all; publishing the same approval again changes nothing and
// reports published=false; publishing a run's task that another approval
// published is ErrConflict.
type Sink interface {
	Publish(ctx context.Context, m *Manifest, files map[string][]byte) (published bool, err error)
	// Where says where the output of a run's task is published, for
	// records and logs.
	Where(runID, taskID string) string
}

// ErrConflict is returned by a Sink when a run's output was already
// published from another approval.
var ErrConflict = errors.New("run already published from another approval")
