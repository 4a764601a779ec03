package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// checker validates results: in the worker when cheap, else in a child
// (this binary re-executed) running as uid when the worker is root.
func (w *Worker) checker(uid int) *contract.Checker {
	c := &contract.Child{UID: -1, GID: -1}
	if os.Geteuid() == 0 {
		c.UID, c.GID = uid, uid
	}
	return &contract.Checker{Child: c}
}

// approvalID is the id of a run's approval: derived from the task id, so
// that a retried run task never parks (or publishes) twice.
func approvalID(taskID string) string {
	s := sha256.Sum256([]byte("airlock-approval\x00" + taskID))
	return "ap-" + hex.EncodeToString(s[:6])
}

// output applies the output contract to a run whose steps all succeeded,
// then the risk policy: the output is parked for a human, or accepted and
// promoted at once. It fills rec; an error means the worker failed.
//
// The result's validation ends by deadline, the task's, or fails the run
// with the verdict timeout; uid is the slot's, for a validation child.
func (w *Worker) output(ctx context.Context, spec *tasks.Spec, ws *tmpfs.Workspace, rec *record.Run, deadline time.Time, uid int) error {
	out := spec.Output
	var result []byte
	fail := func(verdict, msg string) error {
		rec.State, rec.Verdict, rec.Error = record.StateFailed, verdict, msg
		return nil
	}
	if out.Result != "" {
		var err error
		result, err = contract.ReadResult(ws, out.Result, w.cfg.Artifacts.MaxResult)
		if err != nil {
			return fail(record.VerdictOutput, "output.result: "+err.Error())
		}
		rec.ResultBytes, rec.ResultSHA256 = int64(len(result)), hexSHA(result)
		var schema *contract.Schema
		if len(out.Schema) > 0 {
			if schema, err = contract.Compile(out.Schema); err != nil {
				return fail(record.VerdictSchema, "output.schema: "+err.Error())
			}
		}
		vs, err := w.checker(uid).Check(ctx, schema, result, deadline)
		switch {
		case errors.Is(err, contract.ErrDeadline):
			return fail(record.VerdictTimeout, fmt.Sprintf("output.result: %v (task timeout %s)", err, spec.Timeout))
		case errors.Is(err, contract.ErrTooCostly):
			return fail(record.VerdictSchema, "output.result: "+err.Error())
		case err != nil:
			return fail(record.VerdictOutput, "output.result: "+err.Error())
		}
		if len(vs) > 0 {
			for _, v := range vs {
				rec.SchemaErrors = append(rec.SchemaErrors, record.Violation{Path: v.Path, Message: v.Message})
			}
			return fail(record.VerdictSchema, fmt.Sprintf("output.result does not satisfy output.schema (%d errors)", len(vs)))
		}
	}
	col, err := contract.CollectArtifacts(ws, out.Artifacts, w.cfg.Artifacts)
	if err != nil {
		return fail(record.VerdictOutput, "output.artifacts: "+err.Error())
	}
	rec.Artifacts, rec.Refused = col.Artifacts, col.Refused
	var artBytes int64
	for _, a := range col.Artifacts {
		artBytes += a.Bytes
	}
	stderr := false
	for _, st := range rec.Steps {
		stderr = stderr || st.StderrBytes > 0
	}
	d := w.cfg.RiskPolicy.Evaluate(policy.Input{
		Queue: spec.Queue, Action: spec.Action, ArtifactBytes: artBytes, Result: result,
		Network: spec.Network, Stderr: stderr, SpecApproval: spec.Approval,
	})
	rec.Decision = &record.Decision{Action: d.Action, Rule: d.Rule, Reasons: d.Reasons}

	a := &approve.Approval{
		ID: approvalID(rec.TaskID), TaskID: rec.TaskID, RunID: rec.RunID, State: approve.StatePending,
		Reasons: d.Reasons, Result: result, ResultSHA256: rec.ResultSHA256, Artifacts: col.Artifacts,
		Run: summary(spec, rec),
	}
	if d.Action == "promote" {
		a.State, a.DecidedBy, a.DecidedAt = approve.StateAccepted, "policy:"+d.Rule, time.Now().UTC()
	}
	stored, _, err := w.approvals.Park(ctx, a, col.Data)
	if errors.Is(err, approve.ErrTooLarge) {
		return fail(record.VerdictOutput, "output.artifacts: "+err.Error())
	}
	if err != nil {
		return fmt.Errorf("park output: %w", err)
	}
	rec.ApprovalID = stored.ID
	rec.Verdict = record.VerdictOK
	switch stored.State {
	case approve.StatePending:
		rec.State = record.StateParked
	case approve.StateAccepted:
		rec.State, rec.DecidedBy = record.StateAccepted, stored.DecidedBy
		at := stored.DecidedAt
		rec.DecidedAt = &at
		_, _, err := w.promoter.Promote(ctx, stored.ID)
		if errors.Is(err, promote.ErrRefused) {
			w.log.Error().Err(err).Str("approval_id", stored.ID).Msg("promotion refused")
			rec.Error = err.Error()
			return nil
		}
		if err != nil {
			// The promote task retries it; the record says it is queued.
			w.log.Warn().Err(err).Str("approval_id", stored.ID).Msg("auto-promotion failed; queued for retry")
			if qerr := promote.Enqueue(ctx, w.asynq, spec.Queue, stored.ID); qerr != nil {
				return fmt.Errorf("queue promotion: %w (after %v)", qerr, err)
			}
			return nil
		}
		rec.State, rec.PublishedTo = record.StatePromoted, w.cfg.Sink.Where(rec.RunID, rec.TaskID)
	default:
		rec.State = stored.State // rejected or expired by an earlier attempt's approver
	}
	return nil
}

// summary is what an approval keeps of the run record.
func summary(spec *tasks.Spec, rec *record.Run) approve.RunSummary {
	s := approve.RunSummary{
		Queue: rec.Queue, Attempt: rec.Attempt, StartedAt: rec.StartedAt,
		DurationMS: ms(time.Since(rec.StartedAt)), Worker: rec.Worker, Network: spec.Network,
		Limits: rec.Limits, Isolation: rec.Isolation, Workspace: rec.Workspace,
	}
	for _, st := range rec.Steps {
		s.Steps = append(s.Steps, approve.StepSummary{Name: st.Name, Argv: st.Argv, Verdict: st.Verdict,
			ExitCode: st.ExitCode, Signal: st.Signal, CPUMS: st.CPUMS, MaxRSSKB: st.MaxRSSKB})
	}
	return s
}

// emit appends a run's state change to the events stream; a failure is
// logged, not fatal: the record stays the source of truth.
func (w *Worker) emit(ctx context.Context, rec *record.Run) {
	err := events.Append(ctx, w.cfg.Redis, events.Event{RunID: rec.RunID, TaskID: rec.TaskID,
		State: rec.State, Verdict: rec.Verdict, ApprovalID: rec.ApprovalID})
	if err != nil {
		w.log.Warn().Err(err).Str("task_id", rec.TaskID).Msg("events")
	}
}

func hexSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
