package mcpserver

import (
	"fmt"
	"strings"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// The notes the tools add to a run record: what its state means for an
// agent, in words it acts on.

// note says what a run's state means for an agent.
func note(r *record.Run) string {
	switch r.State {
	case airlock.StatePending, airlock.StateScheduled:
		return fmt.Sprintf("%s: not started yet (is a worker serving queue %s?); wait_run waits for it", r.State, r.Queue)
	case airlock.StateActive:
		return "active: a worker is running it; wait_run waits for it"
	case airlock.StateRetry:
		return "retry: an attempt failed on the worker's side (" + r.Error + "); it will be run again"
	case record.StateCompleted:
		if r.Session != nil {
			return fmt.Sprintf("completed: the session was closed with %d of its %d steps failed (each step's verdict is in steps); it has no output contract, so nothing is published", r.Session.StepsFailed, len(r.Steps))
		}
		return "completed: every step ended ok; the action has no output contract, so nothing is published (each step's stdout and stderr are in the record)"
	case record.StateFailed:
		msg := fmt.Sprintf("failed (verdict %s)", r.Verdict)
		if r.Error != "" {
			msg += ": " + r.Error
		}
		return msg
	case record.StateParked:
		return parkedNote(r)
	case record.StateAccepted:
		return "accepted" + by(r) + "; its promotion is queued: get_result returns the result once it is promoted (wait_run until=final waits for it)"
	case record.StatePromoted:
		return "promoted" + by(r) + ": published; get_result returns the result and its manifest"
	case record.StateRejected:
		return "rejected" + by(r) + ": nothing is published"
	case record.StateExpired:
		if r.Session != nil && r.ApprovalID == "" {
			return "expired: " + r.Error + "; nothing is published"
		}
		return "expired: nobody decided before the approval expired; nothing is published"
	case record.StateCanceled:
		return "canceled: " + r.Error + "; it is not run again and nothing is published"
	}
	return string(r.State)
}

// parkedNote is the note of a parked run.
func parkedNote(r *record.Run) string {
	msg := "parked: the output is " + CannotApprove + "."
	if r.ApprovalID != "" {
		msg += " A human reviews approval " + r.ApprovalID + " (approve show " + r.ApprovalID + ")."
	}
	if r.Decision != nil && len(r.Decision.Reasons) > 0 {
		msg += " Why: " + strings.Join(r.Decision.Reasons, "; ") + "."
	}
	return msg + " wait_run with until=final waits for the decision; get_result returns the result once it is promoted."
}

// by says who decided, when known.
func by(r *record.Run) string {
	if r.DecidedBy == "" {
		return ""
	}
	return " by " + r.DecidedBy
}

// notPublished is get_result's error for a run that is not promoted.
func notPublished(r *record.Run) string {
	prefix := fmt.Sprintf("task %s has no published result: ", r.TaskID)
	switch r.State {
	case record.StateParked:
		return prefix + parkedNote(r)
	case record.StateCompleted:
		return prefix + "it completed without an output contract (no output_result), so there is nothing to publish; its record (get_run) has each step's stdout"
	}
	return prefix + note(r)
}
