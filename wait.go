package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/record"
	"github.com/hibiken/asynq"
)

// Polling intervals of Wait: the first poll comes soon after the call, and
// the interval doubles up to the maximum.
const (
	waitFirstPoll = 2 * time.Millisecond
	waitMaxPoll   = 50 * time.Millisecond
)

// Wait polls the task until it reaches a final state, and returns its run
// record:
//
//   - completed: the record the worker stored;
//   - archived (failed for good: its retries are spent, or the worker gave
//     up on it): the record the worker stored, or, when there is none (the
//     worker died or never ran it), a record with state "failed", verdict
//     "error" and asynq's last error.
//
// Pending, active, scheduled and retrying tasks are waited for until ctx is
// done, which gives ctx's error. A task that is not in the queue gives an
// error matching ErrNotFound. Each poll reads Redis once; a Redis error
// ends the wait.
func (c *Client) Wait(ctx context.Context, queue, taskID string) (*record.Run, error) {
	interval := waitFirstPoll
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last asynq.TaskState
	for {
		select {
		case <-ctx.Done():
			if last == 0 {
				return nil, fmt.Errorf("airlock: waiting for task %s in queue %q: %w", taskID, queue, ctx.Err())
			}
			return nil, fmt.Errorf("airlock: waiting for task %s in queue %q, still %s (is a worker serving the queue?): %w", taskID, queue, last, ctx.Err())
		case <-timer.C:
		}
		info, err := c.insp.GetTaskInfo(queue, taskID)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			return nil, &NotFoundError{Queue: queue, TaskID: taskID, Err: err}
		}
		if err != nil {
			return nil, fmt.Errorf("airlock: waiting for task %s in queue %q: %w", taskID, queue, err)
		}
		switch info.State {
		case asynq.TaskStateCompleted:
			return decodeRecord(info)
		case asynq.TaskStateArchived:
			if len(info.Result) > 0 {
				return decodeRecord(info)
			}
			return archivedRecord(info), nil
		}
		last = info.State
		timer.Reset(interval)
		interval = min(2*interval, waitMaxPoll)
	}
}

// decodeRecord decodes the run record a worker stored as the task's result.
func decodeRecord(info *asynq.TaskInfo) (*record.Run, error) {
	if len(info.Result) == 0 {
		return nil, fmt.Errorf("airlock: task %s in queue %q is %s without a run record (was it run by an Airlock worker?)", info.ID, info.Queue, info.State)
	}
	var r record.Run
	if err := json.Unmarshal(info.Result, &r); err != nil {
		return nil, fmt.Errorf("airlock: task %s in queue %q: its result is not a run record: %w", info.ID, info.Queue, err)
	}
	return &r, nil
}

// archivedRecord is the record of a task archived without one.
func archivedRecord(info *asynq.TaskInfo) *record.Run {
	msg := info.LastErr
	if msg == "" {
		msg = "the task was archived without a run record"
	}
	return &record.Run{
		TaskID:   info.ID,
		RunID:    payloadRunID(info.Payload),
		Queue:    info.Queue,
		State:    record.StateFailed,
		Verdict:  record.VerdictError,
		Error:    msg,
		Attempt:  info.Retried + 1,
		MaxRetry: info.MaxRetry,
	}
}
