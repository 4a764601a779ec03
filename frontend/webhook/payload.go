package webhook

import (
	"bytes"
	"encoding/json"
	"regexp"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
)

// Envelope is the body of a FormatStandard delivery: the Standard
// Webhooks payload structure. Data is a Pending for EventApprovalPending
// and a Final for EventRunFinal.
type Envelope struct {
	Type string `json:"type"`
	// Timestamp is when the event happened (the events stream's time),
	// not when it was delivered.
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// Pending is the data of EventApprovalPending: what an approver needs to
// decide, without the result, the artifacts' bytes, the steps' argv or
// output (which may hold what should not leave the approval queue: run
// Commands.Show for them).
type Pending struct {
	EventID    string `json:"event_id"` // the webhook-id
	RunID      string `json:"run_id"`
	TaskID     string `json:"task_id"`
	ApprovalID string `json:"approval_id"`
	Queue      string `json:"queue,omitempty"`
	// Principal is who asked for the run (the API token's name, the MCP
	// server's -principal), when it names one.
	Principal string `json:"principal,omitempty"`
	// Reasons are the policy's reasons for parking the output.
	Reasons   []string  `json:"reasons"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	Result    Summary   `json:"result"`
	Commands  Commands  `json:"commands"`
	// Gone is true when the approval was no longer in Redis when the event
	// was dispatched (deleted after its retention), or could not be read
	// (a damaged hash, after retries): only the event's own fields are set.
	Gone bool `json:"gone,omitempty"`
}

// Summary describes a parked output without its content.
type Summary struct {
	Bytes     int64             `json:"bytes"` // of the JSON result
	SHA256    string            `json:"sha256,omitempty"`
	Artifacts []record.Artifact `json:"artifacts"` // names, sizes, sha256, content types
	Steps     []Step            `json:"steps"`
	Worker    string            `json:"worker,omitempty"`
	Network   bool              `json:"network"`
}

// Step is a step of a parked run, as a notice shows it.
type Step struct {
	Name     string         `json:"name"`
	Verdict  record.Verdict `json:"verdict"`
	ExitCode *int           `json:"exit_code"`
	Signal   string         `json:"signal,omitempty"`
}

// Commands are the approve CLI's command lines for an approval.
type Commands struct {
	Accept string `json:"accept"` // approve accept ID -by "$USER"
	Reject string `json:"reject"` // approve reject ID -by "$USER" -comment "WHY"
	Show   string `json:"show"`   // approve show ID
}

// Final is the data of EventRunFinal: a run reached a state it does not
// leave.
type Final struct {
	EventID string `json:"event_id"` // the webhook-id
	RunID   string `json:"run_id"`
	TaskID  string `json:"task_id"`
	// State is promoted, rejected, expired, failed or completed (no
	// output to publish).
	State   record.State   `json:"state"`
	Verdict record.Verdict `json:"verdict"`
	Error   string         `json:"error,omitempty"` // as the events stream has it (at most 512 bytes)
	// Principal is who asked for the run, when it names one.
	Principal string `json:"principal,omitempty"`
	// The rest comes from the run's approval, when it had one.
	ApprovalID  string    `json:"approval_id,omitempty"`
	Queue       string    `json:"queue,omitempty"`
	PublishedTo string    `json:"published_to,omitempty"` // promoted: where the store put it
	DecidedBy   string    `json:"decided_by,omitempty"`   // a login, or policy:<rule>
	ByNote      string    `json:"by_note,omitempty"`      // a display note beside decided_by, never who decided
	DecidedAt   time.Time `json:"decided_at,omitzero"`
	Comment     string    `json:"comment,omitempty"`
	Reasons     []string  `json:"reasons,omitempty"`
}

// classify returns the event type of a stream entry, "" for none: parked
// (with an approval) is EventApprovalPending; a final state is
// EventRunFinal; accepted is neither (promoted follows).
func classify(e events.Event) string {
	switch e.State {
	case record.StateParked:
		if e.ApprovalID != "" {
			return EventApprovalPending
		}
	case record.StatePromoted, record.StateRejected, record.StateExpired, record.StateFailed, record.StateCompleted:
		return EventRunFinal
	}
	return ""
}

// parseEntry reads an events stream entry: the fields the events package
// writes and documents (run_id, task_id, state, verdict, approval_id,
// error, time, principal).
func parseEntry(m redis.XMessage) events.Event {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	t, _ := time.Parse(time.RFC3339Nano, s("time"))
	return events.Event{ID: m.ID, RunID: s("run_id"), TaskID: s("task_id"), State: record.State(s("state")),
		Verdict: record.Verdict(s("verdict")), ApprovalID: s("approval_id"), Error: s("error"), Principal: s("principal"), Time: t}
}

// pendingData is the data of a parked event; a is its approval, nil when
// gone.
func pendingData(e events.Event, a *approve.Approval, prefix string) Pending {
	p := Pending{EventID: e.ID, RunID: e.RunID, TaskID: e.TaskID, ApprovalID: e.ApprovalID, Principal: e.Principal,
		Reasons: []string{}, Commands: commands(e.ApprovalID, prefix),
		Result: Summary{Artifacts: []record.Artifact{}, Steps: []Step{}}}
	if a == nil {
		p.Gone = true
		return p
	}
	p.Queue, p.CreatedAt, p.ExpiresAt = a.Run.Queue, a.CreatedAt, a.ExpiresAt
	if a.Run.Principal != "" {
		p.Principal = a.Run.Principal
	}
	if a.Reasons != nil {
		p.Reasons = a.Reasons
	}
	p.Result.Bytes, p.Result.SHA256 = int64(len(a.Result)), a.ResultSHA256
	if a.Artifacts != nil {
		p.Result.Artifacts = a.Artifacts
	}
	p.Result.Worker, p.Result.Network = a.Run.Worker, a.Run.Network
	for _, st := range a.Run.Steps {
		p.Result.Steps = append(p.Result.Steps, Step{Name: st.Name, Verdict: st.Verdict, ExitCode: st.ExitCode, Signal: st.Signal})
	}
	return p
}

// finalData is the data of a final event; a is its approval, nil when it
// had none or it is gone.
func finalData(e events.Event, a *approve.Approval) Final {
	f := Final{EventID: e.ID, RunID: e.RunID, TaskID: e.TaskID, State: e.State, Verdict: e.Verdict,
		Error: e.Error, ApprovalID: e.ApprovalID, Principal: e.Principal}
	if a != nil {
		f.Queue, f.DecidedBy, f.DecidedAt, f.Comment, f.Reasons = a.Run.Queue, a.DecidedBy, a.DecidedAt, a.Comment, a.Reasons
		f.ByNote = a.ByNote
		if a.Run.Principal != "" {
			f.Principal = a.Run.Principal
		}
		if e.State == record.StatePromoted {
			f.PublishedTo = a.PublishedTo
		}
	}
	return f
}

// shellSafe matches what a shell takes as one word without quotes.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9._:/=-]+$`)

func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += `'\''`
		} else {
			out += string(r)
		}
	}
	return out + "'"
}

// commands are the approve command lines for approval id, with -prefix
// when the prefix is not the default.
func commands(id, prefix string) Commands {
	base := "approve "
	if prefix != "" && prefix != events.DefaultPrefix {
		base += "-prefix " + shellQuote(prefix) + " "
	}
	id = shellQuote(id)
	return Commands{
		Accept: base + "accept " + id + ` -by "$USER"`,
		Reject: base + "reject " + id + ` -by "$USER" -comment "WHY"`,
		Show:   base + "show " + id,
	}
}

// marshal is json.Marshal without escaping <, > and & (bodies are JSON,
// never HTML: a reason reads "/amount 5000 > 1000").
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// standardBody is the Standard Webhooks envelope of data.
func standardBody(typ string, at time.Time, data any) ([]byte, error) {
	return marshal(struct {
		Type      string    `json:"type"`
		Timestamp time.Time `json:"timestamp"`
		Data      any       `json:"data"`
	}{typ, at.UTC(), data})
}
