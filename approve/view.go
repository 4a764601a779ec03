package approve

import (
	"encoding/json"
	"time"

	"github.com/airlock-run/airlock/record"
)

// View is an approval as its readers show it: the HTTP API's
// GET /v1/approvals/{id} and `approve show -json`. The result is JSON when
// it is valid JSON (Approval alone would print its bytes in base64), a
// string otherwise; lists are never null; Principal, who asked for the
// run, is also at run.principal.
type View struct {
	*Approval
	Result    any    `json:"result,omitempty"`
	Principal string `json:"principal,omitempty"`
}

// View returns the approval as its readers show it.
func (a *Approval) View() View {
	c := *a
	if c.Artifacts == nil {
		c.Artifacts = []record.Artifact{}
	}
	if c.Reasons == nil {
		c.Reasons = []string{}
	}
	v := View{Approval: &c, Principal: a.Run.Principal}
	if len(a.Result) > 0 {
		if json.Valid(a.Result) {
			v.Result = json.RawMessage(a.Result)
		} else {
			v.Result = string(a.Result)
		}
	}
	return v
}

// Summary is an approval as a list shows it: the HTTP API's
// GET /v1/approvals and `approve list -json`. It holds what a list reads
// (Store.List), nothing more: no empty run or artifacts standing in for
// what was not read.
type Summary struct {
	ID         string    `json:"id"`
	TaskID     string    `json:"task_id"`
	RunID      string    `json:"run_id"`
	Queue      string    `json:"queue"`
	State      State     `json:"state"`
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	Reasons    []string  `json:"reasons"`
	Principal  string    `json:"principal,omitempty"`
	Action     string    `json:"action,omitempty"`
	DecidedBy  string    `json:"decided_by,omitempty"`
	ByNote     string    `json:"by_note,omitempty"`
	DecidedAt  time.Time `json:"decided_at,omitzero"`
	PromotedAt time.Time `json:"promoted_at,omitzero"`
}

// Summary returns the approval as a list shows it.
func (a *Approval) Summary() Summary {
	reasons := a.Reasons
	if reasons == nil {
		reasons = []string{}
	}
	return Summary{ID: a.ID, TaskID: a.TaskID, RunID: a.RunID, Queue: a.Run.Queue, State: a.State,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, Reasons: reasons, Principal: a.Run.Principal, Action: a.Run.Action,
		DecidedBy: a.DecidedBy, ByNote: a.ByNote, DecidedAt: a.DecidedAt, PromotedAt: a.PromotedAt}
}
