package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/cancelrun"
	"github.com/airlock-run/airlock/record"
)

// ErrFinal is matched (errors.Is) by the error of Cancel for a run that
// was over before the cancel reached it: a *FinalError holds its record.
var ErrFinal = errors.New("run already final")

// FinalError is the error of Cancel for a run that was over (completed,
// failed, parked, accepted, promoted, rejected or expired) before the
// cancel reached it: nothing was canceled.
type FinalError struct {
	Record *record.Run // the run's record, as Status gives it
}

// Error names the task and its state.
func (e *FinalError) Error() string {
	return fmt.Sprintf("airlock: task %s is already %s: nothing to cancel", e.Record.TaskID, e.Record.State)
}

// Is reports whether target is ErrFinal.
func (e *FinalError) Is(target error) bool { return target == ErrFinal }

// CancelWait bounds how long Cancel waits for the worker of a running run
// to stop it and store its record.
const CancelWait = 5 * time.Second

// Cancel cancels the run of task taskID in queue ("" looks for the task
// in every queue, as Locate does) on behalf of ClientOptions.Principal,
// and returns its record. See CancelAs.
func (c *Client) Cancel(ctx context.Context, queue, taskID string) (*record.Run, error) {
	return c.CancelAs(ctx, c.opts.Principal, queue, taskID)
}

// CancelAs cancels the run of task taskID in queue ("" looks for it in
// every queue) on behalf of by, whom the record's error names ("canceled
// by BY ..."; "" names nobody), and returns its record:
//
//   - a run waiting for a worker (pending, scheduled, retry) is taken off
//     its queue: its task is archived with a record of state and verdict
//     "canceled" (attempt the one it would have run as, no steps), kept
//     as long as asynq keeps archived tasks, and the run's event is
//     emitted, which wakes Wait;
//   - a running run is stopped: the run is marked (package cancelrun) and
//     asynq's cancel is published; its worker kills the steps' process
//     trees and stores a record of state "canceled" with the steps that
//     ran, and the run is never retried. CancelAs waits up to CancelWait
//     for that record; past it, the record returned is the run as it is
//     then (state "active": the cancel is under way).
//
// A run already canceled gives its record and a nil error (cancelling is
// idempotent). A run that was over before the cancel reached it (one its
// worker refused too) gives a *FinalError (errors.Is ErrFinal) holding its
// record; a task in no queue, an error matching ErrNotFound.
func (c *Client) CancelAs(ctx context.Context, by, queue, taskID string) (*record.Run, error) {
	if queue == "" {
		q, err := c.Locate(ctx, taskID)
		if err != nil {
			return nil, err
		}
		queue = q
	}
	// A task's state may change between a read and the step that acts on
	// it (a worker takes it): each step checks, and the loop reads again.
	for range 4 {
		info, err := c.insp.GetTaskInfo(queue, taskID)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			// A run its worker refused is over: its record says why.
			rec, err := c.refusedRecord(ctx, queue, taskID, err)
			if err != nil {
				return nil, err
			}
			return rec, &FinalError{Record: rec}
		}
		if err != nil {
			return nil, fmt.Errorf("airlock: task %s in queue %q: %w", taskID, queue, err)
		}
		if rec, ok := c.endedBeforeCancel(info); ok {
			return rec, &FinalError{Record: rec}
		}
		switch {
		case cancelrun.Waiting(info.State.String()):
			rec, done, err := c.cancelWaiting(ctx, by, info)
			if err != nil || done {
				return rec, err
			}
		case info.State == asynq.TaskStateActive && !storedThisAttempt(info):
			return c.cancelRunning(ctx, by, queue, taskID)
		default:
			rec, err := c.Status(ctx, queue, taskID)
			if err != nil {
				return nil, err
			}
			if rec.State == record.StateCanceled {
				return rec, nil
			}
			return rec, &FinalError{Record: rec}
		}
	}
	return nil, fmt.Errorf("airlock: task %s in queue %q: its state kept changing while it was canceled; try again", taskID, queue)
}

// republishEvery is how often Cancel publishes asynq's cancel again while
// it waits for a running task's worker to stop it.
const republishEvery = 250 * time.Millisecond

// storedThisAttempt reports whether an active task's result is the record
// of the attempt under way (its worker stored it, asynq has not marked the
// task yet), not that of an earlier attempt.
func storedThisAttempt(info *asynq.TaskInfo) bool {
	if len(info.Result) == 0 {
		return false
	}
	var r struct {
		Attempt int `json:"attempt"`
	}
	return json.Unmarshal(info.Result, &r) == nil && r.Attempt >= info.Retried+1
}

// cancelWaiting cancels a task that waits for a worker: its canceled
// record is stored as its result, then it is archived. done is false when
// the task left the waiting states first (look again).
func (c *Client) cancelWaiting(ctx context.Context, by string, info *asynq.TaskInfo) (*record.Run, bool, error) {
	queue, taskID := info.Queue, info.ID
	rec := canceledRecord(info, cancelrun.Message(cancelrun.Cut(by), "before it started"))
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, false, err
	}
	state, err := cancelrun.StoreIfWaiting(ctx, c.rdb, queue, taskID, b)
	if err != nil {
		return nil, false, fmt.Errorf("airlock: canceling task %s in queue %q: %w", taskID, queue, err)
	}
	if !cancelrun.Waiting(state) {
		return nil, false, nil
	}
	if aerr := c.insp.ArchiveTask(queue, taskID); aerr != nil {
		now, err := c.insp.GetTaskInfo(queue, taskID)
		switch {
		case err != nil:
			return nil, false, fmt.Errorf("airlock: canceling task %s in queue %q: %w", taskID, queue, aerr)
		case now.State == asynq.TaskStateActive:
			// A worker took it since: stop it there. (Until its worker
			// stores its own, the task's result is the record above.)
			r, err := c.cancelRunning(ctx, by, queue, taskID)
			return r, true, err
		case now.State != asynq.TaskStateArchived:
			return nil, false, fmt.Errorf("airlock: canceling task %s in queue %q: %w", taskID, queue, aerr)
		}
		// Archived meanwhile, by another cancel: that one's record holds.
		r, err := c.Status(ctx, queue, taskID)
		return r, true, err
	}
	// The record is the truth; without the event, Wait finds it within
	// its poll (a second).
	_ = c.events.Append(ctx, events.Event{RunID: rec.RunID, TaskID: rec.TaskID, State: rec.State, Verdict: rec.Verdict,
		Error: rec.Error, Principal: rec.Principal})
	return rec, true, nil
}

// cancelRunning stops a running task: the mark first, which its worker
// reads when it starts the run, then asynq's cancel, which reaches the
// handler once the run started; then it waits for the worker's record.
func (c *Client) cancelRunning(ctx context.Context, by, queue, taskID string) (*record.Run, error) {
	if err := cancelrun.Set(ctx, c.rdb, c.opts.Prefix, queue, taskID, by, c.opts.Retention).Err(); err != nil {
		return nil, fmt.Errorf("airlock: canceling task %s in queue %q: %w", taskID, queue, err)
	}
	if err := c.insp.CancelProcessing(taskID); err != nil {
		return nil, fmt.Errorf("airlock: canceling task %s in queue %q: %w", taskID, queue, err)
	}
	var retried int
	if info, err := c.insp.GetTaskInfo(queue, taskID); err == nil {
		retried = info.Retried
	}
	dctx, cancel := context.WithTimeout(ctx, CancelWait)
	defer cancel()
	var rec *record.Run
	var err error
	for {
		wctx, wcancel := context.WithTimeout(dctx, republishEvery)
		rec, err = c.Wait(wctx, queue, taskID)
		wcancel()
		if err == nil || dctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		// asynq's cancel reaches only a handler that runs already: one
		// published as a worker took the task is lost. While the attempt
		// it was meant for is still active, again. (The worker reads the
		// mark itself only on a retried attempt, so that a first attempt,
		// the per-task path, costs no read.)
		info, err := c.insp.GetTaskInfo(queue, taskID)
		if err != nil {
			continue
		}
		if info.State == asynq.TaskStateActive && info.Retried == retried {
			_ = c.insp.CancelProcessing(taskID)
		}
		if rec, ok := c.endedBeforeCancel(info); ok {
			return rec, &FinalError{Record: rec}
		}
	}
	// A task that may not be retried (a session's) is archived by asynq
	// as soon as its context is canceled, before its worker stores the
	// canceled record: wait for that record, not asynq's account.
	for err == nil && rec.Worker == "" && rec.State != record.StateCanceled && dctx.Err() == nil {
		select {
		case <-dctx.Done():
		case <-time.After(10 * time.Millisecond):
			rec, err = c.Status(dctx, queue, taskID)
		}
	}
	switch {
	case err != nil && ctx.Err() == nil && dctx.Err() != nil:
		// Not stopped yet: the run as it is (the worker stops it).
		return c.Status(ctx, queue, taskID)
	case err != nil:
		return nil, err
	case rec.State == record.StateCanceled:
		return rec, nil
	}
	// It ended by itself before the cancel reached it (and, should asynq
	// have put it back for a retry all the same, it is archived).
	if info, err := c.insp.GetTaskInfo(queue, taskID); err == nil {
		if ended, ok := c.endedBeforeCancel(info); ok {
			rec = ended
		}
	}
	return rec, &FinalError{Record: rec}
}

// endedBeforeCancel reports whether the run of a task asynq put back for
// a retry had ended by itself as the cancel reached it, and returns its
// record then. asynq's processor, seeing the handler's end and the
// cancel at once, may take either (its select picks at random): it then
// retries a task whose worker stored the record of a run that is over
// (parked, completed). That task is archived
// here, with its record, so that it never runs again (a retry would find
// the cancel mark and cancel a run whose output is parked already).
func (c *Client) endedBeforeCancel(info *asynq.TaskInfo) (*record.Run, bool) {
	rec, ok := endedRecord(info)
	if !ok || rec.State == record.StateCanceled {
		return nil, false // a canceled run's task is archived by its worker
	}
	if err := c.insp.ArchiveTask(info.Queue, info.ID); err != nil {
		return nil, false // taken again, or archived meanwhile: look again
	}
	return rec, true
}

// canceledRecord is the record of a waiting task canceled with error msg.
func canceledRecord(info *asynq.TaskInfo, msg string) *record.Run {
	now := time.Now().UTC()
	p := payloadFacts(info.Payload)
	return &record.Run{
		TaskID: info.ID, RunID: p.RunID, Queue: info.Queue, Principal: p.Principal, Action: p.Action,
		State: record.StateCanceled, Verdict: record.VerdictCanceled, Error: msg,
		StartedAt: now, FinishedAt: now, Attempt: info.Retried + 1, MaxRetry: info.MaxRetry,
		Steps: []record.Step{},
	}
}

// facts are what a record says of a task before a worker ran it, read
// from its payload.
type facts struct {
	RunID     string `json:"run_id"`
	Principal string `json:"principal"`
	Action    string `json:"action"`
}

// payloadFacts reads a task payload's run_id, principal and action (""
// for what it lacks).
func payloadFacts(payload []byte) facts {
	var f facts
	_ = json.Unmarshal(payload, &f)
	return f
}
