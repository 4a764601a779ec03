package airlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/refused"
	"github.com/airlock-run/airlock/record"
)

// States of a task that has no run record yet, as Status reports them in
// record.Run.State: asynq's own names for the task's state.
const (
	StatePending   record.State = "pending"   // waiting for a worker
	StateActive    record.State = "active"    // a worker is running it
	StateScheduled record.State = "scheduled" // to be run later
	StateRetry     record.State = "retry"     // an attempt failed (a worker failure); to be retried
	// StatePaused: a session paused (its workspace and state in the
	// session store); its next call resumes it on any worker.
	StatePaused record.State = "paused"
)

// Status returns the run of task taskID in queue as it is now, without
// waiting:
//
//   - before the worker stored its record, a record with only task_id,
//     run_id, queue, principal, action (both from the task's payload),
//     max_retry, attempt and a State of StatePending,
//     StateActive, StateScheduled or StateRetry (asynq's last error in
//     error);
//   - then the record the worker stored (or, for a run canceled before
//     it started, the one Cancel stored), or, for a task archived
//     without one, the record Wait gives (failed, verdict error);
//   - for a run whose output went to the approval queue, the approval's
//     fate applied as WaitFinal does: accepted, promoted, rejected or
//     expired, with decided_by and decided_at.
//
// A run its worker refused without running it (its task deleted from
// asynq, payload and all: package refused) gives the refusal's record. A
// task that is not in the queue gives an error matching ErrNotFound.
func (c *Client) Status(ctx context.Context, queue, taskID string) (*record.Run, error) {
	rec, _, err := c.status(ctx, queue, taskID)
	return rec, err
}

// status is Status, and tells whether Wait would take the run as done
// from what it read (the task completed or archived, or gone with its
// refusal's record).
func (c *Client) status(ctx context.Context, queue, taskID string) (*record.Run, bool, error) {
	info, err := c.taskInfo(ctx, queue, taskID)
	if err == nil {
		_, ended := endedRecord(info)
		done := info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived || ended
		rec, err := c.statusOf(ctx, info)
		return rec, done, err
	}
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		rec, err := c.refusedRecord(ctx, queue, taskID, err) // refused.go
		return rec, err == nil, err
	}
	return nil, false, fmt.Errorf("airlock: task %s in queue %q: %w", taskID, queue, err)
}

// statusOf is Status of the task info read.
func (c *Client) statusOf(ctx context.Context, info *asynq.TaskInfo) (*record.Run, error) {
	var err error
	var rec *record.Run
	_, ended := endedRecord(info)
	switch {
	case info.State == asynq.TaskStateCompleted, ended,
		info.State == asynq.TaskStateArchived && len(info.Result) > 0,
		// The worker stores the record just before asynq marks the
		// task completed.
		info.State == asynq.TaskStateActive && len(info.Result) > 0:
		if rec, err = decodeRecord(info); err != nil {
			return nil, err
		}
	case info.State == asynq.TaskStateArchived:
		rec = archivedRecord(info)
	default:
		f := payloadFacts(info.Payload)
		state := record.State(info.State.String())
		if info.State == asynq.TaskStateRetry && strings.HasPrefix(info.LastErr, "session paused") {
			state, info.LastErr = StatePaused, ""
		}
		if info.State == asynq.TaskStateAggregating {
			// Held in its principal's line (fairshare): it waits for
			// a worker, behind its principal's earlier runs.
			state = StatePending
		}
		return &record.Run{
			TaskID:    info.ID,
			RunID:     f.RunID,
			Queue:     info.Queue,
			Principal: f.Principal,
			Action:    f.Action,
			State:     state,
			Error:     info.LastErr,
			Attempt:   info.Retried + 1,
			MaxRetry:  info.MaxRetry,
		}, nil
	}
	if rec.ApprovalID != "" && !record.Final(rec.State) {
		if err := c.withApproval(ctx, rec); err != nil {
			return nil, err
		}
	}
	return rec, nil
}

// endedRecord returns the record of the attempt that just ended, when
// asynq put its task back for a retry although its run had ended by
// itself (parked, completed, canceled...): a cancel that reached asynq
// as the run ended, which asynq's processor may take for the handler's
// failure (its select picks at random). The run is over: its worker
// archives a canceled run's task, Cancel a parked one's
// (endedBeforeCancel). A record of an earlier attempt, or a failed one
// (a worker's failure, or a failure that may pass, such as a download's:
// a run that failed by its own steps is archived, never retried), is no
// such end: the retry is due.
func endedRecord(info *asynq.TaskInfo) (*record.Run, bool) {
	if info.State != asynq.TaskStateRetry || len(info.Result) == 0 {
		return nil, false
	}
	rec, err := decodeRecord(info)
	if err != nil || rec.Attempt != info.Retried || rec.Worker == "" || rec.State == record.StateFailed {
		return nil, false
	}
	return rec, true
}

// mayHaveEnded reports whether a task's result is a record that may say
// its run ended (endedRecord), from what a peek reads (no attempt count):
// a record of a worker's, not failed. A retry after a failure that may
// pass (a download's) is waited for without the Inspector's read.
func mayHaveEnded(info *asynq.TaskInfo) bool {
	if len(info.Result) == 0 {
		return false
	}
	rec, err := decodeRecord(info)
	return err == nil && rec.Worker != "" && rec.State != record.StateFailed
}

// endedRecordOf is endedRecord of a task info read with error err.
func endedRecordOf(info *asynq.TaskInfo, err error) (*record.Run, bool) {
	if err != nil {
		return nil, false
	}
	return endedRecord(info)
}

// withApproval applies the fate of rec's approval (applyApproval), when
// the store still holds it.
func (c *Client) withApproval(ctx context.Context, rec *record.Run) error {
	a, err := c.store.Get(ctx, rec.ApprovalID)
	if errors.Is(err, approve.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("airlock: approval %s: %w", rec.ApprovalID, err)
	}
	applyApproval(rec, a)
	return nil
}

// Locate returns the queue that holds task taskID (or the record of its
// refusal), looking in every queue as Result does: an error matching
// ErrNotFound when none does, and an error naming them when several do
// (task ids are unique per queue only).
func (c *Client) Locate(ctx context.Context, taskID string) (string, error) {
	queues, err := c.rdb.SMembers(ctx, asynqkey.Queues).Result()
	if err != nil {
		return "", fmt.Errorf("airlock: list queues: %w", err)
	}
	return c.LocateIn(ctx, taskID, queues)
}

// LocateIn is Locate among queues only (a caller bound to some queues
// looks nowhere else).
func (c *Client) LocateIn(ctx context.Context, taskID string, queues []string) (string, error) {
	// An EXISTS of the task's key in each queue, locateBatch to a round
	// trip (a pipeline, which a Cluster client splits by node), where
	// asynq's Inspector takes two round trips per queue; the batches bound
	// what a request holds whatever the number of queues. Only when no
	// queue holds the task are the refusals' records looked for, the same
	// way: a refused run's task is gone.
	found, err := c.locateBatches(ctx, taskID, queues, func(p redis.Pipeliner, q string) func() bool {
		exists := p.Exists(ctx, asynqkey.Task(q, taskID))
		return func() bool { return exists.Val() > 0 }
	})
	if err == nil && len(found) == 0 {
		found, err = c.locateBatches(ctx, taskID, queues, func(p redis.Pipeliner, q string) func() bool {
			wasRefused := refused.Exists(ctx, p, c.opts.Prefix, q, taskID)
			return func() bool { return refused.Found(wasRefused) }
		})
	}
	if err != nil {
		return "", err
	}
	switch len(found) {
	case 0:
		return "", &NotFoundError{TaskID: taskID, Err: asynq.ErrTaskNotFound}
	case 1:
		return found[0], nil
	}
	slices.Sort(found)
	return "", &ambiguousError{taskID: taskID, queues: found}
}

// locateBatches asks, locateBatch queues to a round trip, whether each of
// queues holds task taskID: ask queues the question and returns how to
// read its answer. It returns the queues that do.
func (c *Client) locateBatches(ctx context.Context, taskID string, queues []string, ask func(p redis.Pipeliner, q string) func() bool) ([]string, error) {
	var found []string
	for len(queues) > 0 {
		batch := queues[:min(len(queues), locateBatch)]
		queues = queues[len(batch):]
		answers := make([]func() bool, len(batch))
		_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, q := range batch {
				answers[i] = ask(p, q)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("airlock: look for task %s in %d queues: %w", taskID, len(batch), err)
		}
		for i, q := range batch {
			if answers[i]() {
				found = append(found, q)
			}
		}
	}
	return found, nil
}

// locateBatch is how many queues LocateIn asks about per round trip.
const locateBatch = 256

// ErrAmbiguous is matched (errors.Is) by the error of Locate and Result
// for a task id found in several queues (ids are unique per queue only):
// the caller must say which.
var ErrAmbiguous = errors.New("airlock: task id in several queues")

// ambiguousError is Locate's error for a task id found in several queues.
type ambiguousError struct {
	taskID string
	queues []string
}

func (e *ambiguousError) Error() string {
	return fmt.Sprintf("airlock: task %s is in queues %s: say which", e.taskID, strings.Join(e.queues, ", "))
}

func (e *ambiguousError) Is(target error) bool { return target == ErrAmbiguous }
