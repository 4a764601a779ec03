//go:build linux

package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/isolation/cgroup"
	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// checked is what the contract phase found: the result and the artifacts,
// or the contract's failure.
type checked struct {
	result    []byte
	artifacts *contract.Collected

	verdict    record.Verdict // "" when the output met its contract
	msg        string
	violations []record.Violation

	// leaked names the run's secrets found (and redacted) in leakedIn.
	leaked   []string
	leakedIn string

	// canceled: the worker shut down while a child validated the result.
	canceled bool
}

// output applies the output contract to a run whose steps all succeeded
// (check), looks for the run's secrets in what it produced (scrub), then
// asks the risk policy (decide), then parks or accepts the output
// (settle). It fills the record.
func (w *Worker) output(ctx context.Context, j *job, ws *tmpfs.Workspace, deadline time.Time) outcome {
	rec := j.rec
	c := w.checkTraced(ctx, j, ws, deadline)
	if c.canceled {
		return outcome{err: errHandedBack}
	}
	if c.verdict == "" {
		c.scrub(j.secrets)
	}
	if len(c.result) > 0 {
		rec.ResultBytes, rec.ResultSHA256 = int64(len(c.result)), hexSHA(c.result)
	}
	if c.verdict != "" {
		rec.State, rec.Verdict, rec.Error, rec.SchemaErrors = record.StateFailed, c.verdict, c.msg, c.violations
		return outcome{}
	}
	rec.Artifacts, rec.Refused = c.artifacts.Artifacts, c.artifacts.Refused
	d := w.decideTraced(ctx, j, c)
	rec.Decision = &d
	return w.settleTraced(ctx, j, c, d)
}

// scrub replaces every form of the run's secrets in the result and the
// artifacts, their names included, before anything of them is stored
// (approvals live in Redis; published files are read by others), and
// keeps the names found. The digests are those of what is staged and
// published; an artifact is staged under its redacted name. A result
// that redaction leaves with a key twice (or not JSON), or two artifacts
// it leaves with one name, break the output contract.
func (c *checked) scrub(s *secrets.Set) {
	if s.Empty() {
		return
	}
	var where []string
	if r, found := s.RedactBytes(c.result); len(found) > 0 {
		c.result, c.leaked = r, append(c.leaked, found...)
		where = append(where, "the result")
		if !json.Valid(r) {
			c.verdict, c.msg = record.VerdictOutput, "output.result: not JSON once the run's secrets are redacted"
			return
		}
		if err := contract.CheckDuplicateKeys(r); err != nil {
			c.verdict, c.msg = record.VerdictOutput, "output.result: "+err.Error()+" once the run's secrets are redacted"
			return
		}
	}
	renamed := false
	for i := range c.artifacts.Artifacts {
		a := &c.artifacts.Artifacts[i]
		if d, found := s.RedactBytes(c.artifacts.Data[a.Name]); len(found) > 0 {
			c.artifacts.Data[a.Name] = d
			sum := sha256.Sum256(d)
			a.SHA256, a.Bytes = hex.EncodeToString(sum[:]), int64(len(d))
			c.leaked = append(c.leaked, found...)
			where = append(where, a.Name)
		}
		if n, found := s.RedactBytes([]byte(a.Name)); len(found) > 0 {
			name := string(n)
			if _, taken := c.artifacts.Data[name]; taken {
				c.verdict, c.msg = record.VerdictOutput, fmt.Sprintf("output.artifacts: two artifacts are named %s once the run's secrets are redacted", name)
				return
			}
			for j := range where {
				if where[j] == a.Name {
					where[j] = name // its content's mention, by the name it is staged under
				}
			}
			c.artifacts.Data[name] = c.artifacts.Data[a.Name]
			delete(c.artifacts.Data, a.Name)
			a.Name, renamed = name, true
			c.leaked = append(c.leaked, found...)
			where = append(where, "the name of "+name)
		}
	}
	if renamed {
		slices.SortFunc(c.artifacts.Artifacts, func(a, b record.Artifact) int { return strings.Compare(a.Name, b.Name) })
	}
	if len(where) > 0 {
		slices.Sort(c.leaked)
		c.leaked = slices.Compact(c.leaked)
		c.leakedIn = strings.Join(where, ", ")
	}
}

// check reads the result and validates it (within the task's deadline),
// then collects the artifacts.
func (w *Worker) check(ctx context.Context, spec *tasks.Spec, ws *tmpfs.Workspace, deadline time.Time, s *slot) checked {
	out := spec.Output
	var c checked
	fail := func(v record.Verdict, msg string) checked {
		c.verdict, c.msg = v, msg
		return c
	}
	if out.Result != "" {
		var err error
		c.result, err = contract.ReadResult(ws, out.Result, w.cfg.Artifacts.MaxResult)
		if err != nil {
			return fail(record.VerdictOutput, "output.result: "+err.Error())
		}
		var schema *contract.Schema
		if len(out.Schema) > 0 {
			if schema, err = contract.Compile(out.Schema); err != nil {
				return fail(record.VerdictSchema, "output.schema: "+err.Error())
			}
		}
		vs, err := w.checker(s).Check(ctx, schema, c.result, deadline)
		switch {
		case errors.Is(err, contract.ErrCanceled):
			c.canceled = true
			return c
		case errors.Is(err, contract.ErrDeadline):
			return fail(record.VerdictTimeout, fmt.Sprintf("output.result: %v (task timeout %s)", err, spec.Timeout))
		case errors.Is(err, contract.ErrTooCostly):
			return fail(record.VerdictSchema, "output.result: "+err.Error())
		case err != nil:
			return fail(record.VerdictOutput, "output.result: "+err.Error())
		}
		if len(vs) > 0 {
			c.violations = vs
			return fail(record.VerdictSchema, fmt.Sprintf("output.result does not satisfy output.schema (%d errors)", len(vs)))
		}
	}
	col, err := contract.CollectArtifacts(ws, out.Artifacts, w.cfg.Artifacts)
	if err != nil {
		return fail(record.VerdictOutput, "output.artifacts: "+err.Error())
	}
	c.artifacts = col
	return c
}

// checker validates results: in the worker when cheap, else in a child
// (this binary re-executed, confined as a step: see contract.Child) running
// as the slot's uid when the worker is root, in the slot's control group
// when it has one.
func (w *Worker) checker(s *slot) *contract.Checker {
	c := &contract.Child{UID: -1, GID: -1}
	if os.Geteuid() == 0 {
		c.UID, c.GID = s.uidN, s.uidN
	}
	if g := s.group; g != nil {
		c.Join = func(pid int) error { return joinGroup(g, pid) }
	}
	return &contract.Checker{Child: c}
}

// joinGroup puts a validation child in a slot's control group, with the
// limits of the task's last step: on cgroup v2 the whole process, on v1
// its main thread, whose group its memory is charged to.
func joinGroup(g *cgroup.Group, pid int) error {
	for _, f := range g.Join() {
		if _, err := f.WriteAt([]byte(strconv.Itoa(pid)), 0); err != nil {
			return err
		}
	}
	return nil
}

// decide asks the risk policy.
func (w *Worker) decide(j *job, c checked) record.Decision {
	spec, rec := j.spec, j.rec
	stderr := false
	for _, st := range rec.Steps {
		stderr = stderr || st.StderrBytes > 0
	}
	inEnv := spec.EnvSecrets()
	if h := j.session; h != nil && len(h.envSecrets) > 0 {
		inEnv = slices.Compact(slices.Sorted(slices.Values(append(inEnv, h.envSecrets...))))
	}
	d := w.cfg.RiskPolicy.Evaluate(policy.Input{
		SecretInEnv: len(inEnv) > 0, SecretsInEnv: inEnv,
		Queue: spec.Queue, Principal: spec.Principal, Action: spec.Action, ArtifactBytes: c.artifacts.Bytes(), Result: c.result,
		Network: spec.Network, Stderr: stderr, SpecApproval: spec.Approval, SecretInArtifacts: len(c.leaked) > 0,
		Session: spec.Session != nil,
	})
	if len(c.leaked) > 0 {
		// Whatever the policy says: a human looks at an output that held
		// a secret (redacted in what was staged), never a rule.
		reason := fmt.Sprintf("the value of secret %s appears in %s (redacted in what was staged)", strings.Join(c.leaked, ", "), c.leakedIn)
		if d.Action == record.Park {
			d.Reasons = append([]string{reason}, d.Reasons...)
		} else {
			d = record.Decision{Action: record.Park, Rule: "secret", Reasons: []string{reason}}
		}
	}
	return d
}

// settle stages the output with its approval, pending or accepted by the
// policy, and promotes an accepted one at once. An approval whose inline
// promotion failed for a transient reason is left for report to queue.
func (w *Worker) settle(ctx context.Context, spec *tasks.Spec, rec *record.Run, c checked, d record.Decision, aid string) outcome {
	a := &approve.Approval{
		ID: aid, TaskID: rec.TaskID, RunID: rec.RunID, State: approve.StatePending,
		Reasons: d.Reasons, Checked: d.Checked, Result: c.result, ResultSHA256: rec.ResultSHA256, Artifacts: c.artifacts.Artifacts,
		Run: summary(spec, rec), TraceParent: tracing.Traceparent(trace.SpanContextFromContext(ctx)),
	}
	if d.Action == record.Promote {
		a.State, a.DecidedBy, a.DecidedAt = approve.StateAccepted, "policy:"+d.Rule, time.Now().UTC()
	}
	// The worker's own transitions emit no run event: report emits the
	// record's state once it is stored.
	stored, created, err := w.approvals.Park(ctx, a, c.artifacts.Data)
	if errors.Is(err, approve.ErrTooLarge) {
		rec.State, rec.Verdict, rec.Error = record.StateFailed, record.VerdictOutput, "output.artifacts: "+err.Error()
		return outcome{}
	}
	if errors.Is(err, approve.ErrPendingFull) {
		// Nothing of another run's is evicted: this run fails, and its
		// caller may enqueue it again once approvers have drained the
		// queue.
		rec.State, rec.Verdict = record.StateFailed, record.VerdictPendingLimit
		rec.Error = err.Error() + " (ask an approver to decide pending approvals, or the operator to raise -max-pending-bytes)"
		return outcome{}
	}
	if errors.Is(err, approve.ErrPrincipalPendingFull) {
		// The principal's own share is full: others still park.
		rec.State, rec.Verdict = record.StateFailed, record.VerdictPendingLimit
		rec.Error = "quota max_pending_bytes: " + err.Error() + " (ask an approver to decide its pending approvals, or the operator to raise its quota)"
		return outcome{}
	}
	if err != nil {
		return outcome{err: fmt.Errorf("park output: %w", err)}
	}
	rec.ApprovalID = stored.ID
	rec.Verdict = record.VerdictOK
	rec.State = stored.State.Run()
	if stored.State != approve.StateAccepted {
		return outcome{} // pending, or rejected or expired by an earlier attempt's approver
	}
	rec.DecidedBy = stored.DecidedBy
	at := stored.DecidedAt
	rec.DecidedAt = &at
	if !stored.PromotedAt.IsZero() {
		rec.State, rec.PublishedTo = record.StatePromoted, w.cfg.Sink.Where(rec.RunID, rec.TaskID)
		return outcome{} // an earlier attempt published it
	}
	// Published from what this attempt holds when it just parked it; the
	// approval's index and audit updates then go with the record
	// (report), in its round trip.
	_, _, ops, err := w.promoter.PromoteInline(ctx, stored, c.artifacts.Data, created)
	switch {
	case errors.Is(err, approve.ErrRefused):
		w.log.Error().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("approval_id", stored.ID).Msg("promotion refused")
		rec.Error = err.Error()
		return outcome{}
	case err != nil:
		// The promote task retries it; the record says accepted.
		w.log.Warn().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("approval_id", stored.ID).Msg("auto-promotion failed; queued for retry")
		return outcome{promote: stored.ID}
	}
	rec.State, rec.PublishedTo = record.StatePromoted, w.cfg.Sink.Where(rec.RunID, rec.TaskID)
	return outcome{after: ops}
}

// approvalID is the id of a run's approval: 128 bits of the SHA-256 of its
// task id and payload, so that a retried attempt of a task finds its
// approval again (never parks or publishes twice), while a new task that
// reuses a task id (after the old one's retention) with another spec gets
// an approval of its own. The store also refuses an id whose approval
// holds another task id.
func approvalID(taskID string, payload []byte) string {
	p := sha256.Sum256(payload)
	s := sha256.Sum256(append([]byte("airlock-approval\x00"+taskID+"\x00"), p[:]...))
	return "ap-" + hex.EncodeToString(s[:16])
}

// summary is what an approval keeps of the run record.
func summary(spec *tasks.Spec, rec *record.Run) approve.RunSummary {
	s := approve.RunSummary{
		Queue: rec.Queue, Principal: rec.Principal, Action: rec.Action, Secrets: slices.Sorted(slices.Values(spec.Secrets)), Attempt: rec.Attempt, StartedAt: rec.StartedAt,
		Worker: rec.Worker, Network: spec.Network,
		Limits: rec.Limits, Isolation: rec.Isolation, Workspace: rec.Workspace,
	}
	for _, st := range rec.Steps {
		s.StepsMS += st.DurationMS
		s.Steps = append(s.Steps, approve.StepSummary{Name: st.Name, Argv: st.Argv, Verdict: st.Verdict,
			ExitCode: st.ExitCode, Signal: st.Signal, CPUMS: st.CPUMS, MaxRSSKB: st.MaxRSSKB})
	}
	return s
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
