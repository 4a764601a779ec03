package airlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-run/airlock/live"
	"time"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/asynqmsg"
	"github.com/airlock-run/airlock/record"
	"github.com/hibiken/asynq"
)

// pollEvery is how often Wait reads the task when no event tells it to:
// a fallback for an event that was lost (a worker that died between its
// record and its event), never the usual path.
const pollEvery = time.Second

// Wait blocks until the task's run is done, and returns its run record:
//
//   - the record the worker stored, once the worker says the run is done
//     (its event: completed, failed, parked, accepted or promoted) or
//     asynq says the task is completed or archived;
//   - for a task archived without a record (the worker died, or never ran
//     it), a record with state "failed", verdict "error" and asynq's last
//     error.
//
// It blocks on the events stream (XREAD BLOCK), so it returns within about
// a millisecond of the worker's event; it also reads the task once a
// second, in case an event was lost. Pending, active, scheduled and
// retrying tasks are waited for until ctx is done, which gives ctx's error.
// A run its worker refused without running it gives the refusal's record
// (its task is gone: package refused). A task that is not in the queue
// gives an error matching ErrNotFound; a Redis error ends the wait.
func (c *Client) Wait(ctx context.Context, queue, taskID string) (*record.Run, error) {
	// The position comes first: an event after it is never missed.
	from, err := c.events.Last(ctx)
	if err != nil {
		return nil, fmt.Errorf("airlock: waiting for task %s in queue %q: %w", taskID, queue, err)
	}
	return c.waitFrom(ctx, queue, taskID, from, false)
}

// WaitWith is Wait, or WaitFinal when final, for a caller that must see
// the run before it waits (the HTTP API checks that its token may read
// it): read is handed the run as Status gives it, once, before any wait,
// and an error it returns ends the call with that error. The run is read
// once where Status then Wait read it twice.
func (c *Client) WaitWith(ctx context.Context, queue, taskID string, final bool, read func(*record.Run) error) (*record.Run, error) {
	from, err := c.events.Last(ctx)
	if err != nil {
		return nil, fmt.Errorf("airlock: waiting for task %s in queue %q: %w", taskID, queue, err)
	}
	rec, done, err := c.status(ctx, queue, taskID)
	if err != nil {
		return nil, err
	}
	if err := read(rec); err != nil {
		return nil, err
	}
	if done {
		// What Wait would return (Status read the approval of a parked
		// run, which Wait leaves to WaitFinal).
		if !final || record.Final(rec.State) || rec.ApprovalID == "" {
			return rec, nil
		}
		return c.waitApproval(ctx, taskID, from, rec)
	}
	if rec, err = c.waitFrom(ctx, queue, taskID, from, true); err != nil || record.Final(rec.State) || rec.ApprovalID == "" {
		return rec, err
	}
	if final {
		return c.waitApproval(ctx, taskID, from, rec)
	}
	// Done, through its approval as far as it went: as Status gives it,
	// whether the run ended before the first read or during the wait.
	if err := c.withApproval(ctx, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// WaitOutput is Wait with the steps' output reaching f while they run
// (package live: what the record keeps, secrets redacted, in order, each
// piece once), and all of it before it returns.
func (c *Client) WaitOutput(ctx context.Context, queue, taskID string, f func(live.Output)) (*record.Run, error) {
	defer c.followOutput(ctx, taskID, f)()
	return c.Wait(ctx, queue, taskID)
}

// waitFrom is Wait with the events followed from position from, taken by
// a caller before it did what ends the run (a session's close), or before
// it read the task itself and found it not done (looked: the task is not
// read again before an event or the poll).
func (c *Client) waitFrom(ctx context.Context, queue, taskID, from string, looked bool) (*record.Run, error) {
	var err error
	var rec *record.Run
	var last asynq.TaskState
	look := func(eventSaysDone bool) (bool, error) {
		// One read of the task's hash (peek) decides a run that ended
		// with its record, or one that is not done; the Inspector (four
		// commands) only a task that is gone or archived without one.
		info, err := c.peek(ctx, queue, taskID)
		if err == nil && info == nil {
			info, err = c.insp.GetTaskInfo(queue, taskID)
		}
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			// A refused run's task is gone: its record is the refusal's.
			r, err := c.refusedRecord(ctx, queue, taskID, err)
			if err != nil {
				return false, err
			}
			rec = r
			return true, nil
		}
		if err != nil {
			return false, fmt.Errorf("airlock: waiting for task %s in queue %q: %w", taskID, queue, err)
		}
		last = info.State
		switch {
		case info.State == asynq.TaskStateCompleted,
			info.State == asynq.TaskStateArchived && len(info.Result) > 0,
			// The worker's event comes once the record is stored, just
			// before asynq marks the task completed.
			eventSaysDone && len(info.Result) > 0:
			rec, err = decodeRecord(info)
			return true, err
		case info.State == asynq.TaskStateArchived:
			rec = archivedRecord(info)
			return true, nil
		case info.State == asynq.TaskStateRetry && mayHaveEnded(info):
			// A record of a run that ended, while asynq retries: maybe
			// one that ended as a cancel reached it (endedRecord), which
			// the attempt count tells (the Inspector: a rare state).
			full, err := c.insp.GetTaskInfo(queue, taskID)
			if r, ended := endedRecordOf(full, err); ended {
				rec = r
				return true, nil
			}
		}
		return false, nil
	}
	if !looked {
		if done, err := look(false); done || err != nil {
			return rec, err
		}
	}
	err = c.events.Follow(ctx, from, pollEvery,
		func() (bool, error) { return look(false) },
		func(e events.Event) (bool, error) {
			if e.TaskID != taskID {
				return false, nil
			}
			return look(true)
		})
	if err == nil {
		return rec, nil
	}
	if ctx.Err() != nil {
		if last == 0 {
			return nil, fmt.Errorf("airlock: waiting for task %s in queue %q: %w", taskID, queue, ctx.Err())
		}
		return nil, fmt.Errorf("airlock: waiting for task %s in queue %q, still %s (is a worker serving the queue?): %w", taskID, queue, last, ctx.Err())
	}
	return nil, err
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

// peek reads task id's state and result (its run record) from its hash
// in asynq's keys, in one command: a TaskInfo with only those, or nil
// when they do not decide a wait (the hash is gone, holds a state asynq
// v0.26 does not name, or is archived without a record: the Inspector
// then reads the rest).
func (c *Client) peek(ctx context.Context, queue, id string) (*asynq.TaskInfo, error) {
	v, err := c.rdb.HMGet(ctx, asynqkey.Task(queue, id), "state", "result").Result()
	if err != nil {
		return nil, err
	}
	st, _ := v[0].(string)
	res, _ := v[1].(string)
	state := taskStates[st]
	if state == 0 || state == asynq.TaskStateArchived && res == "" {
		return nil, nil
	}
	info := &asynq.TaskInfo{ID: id, Queue: queue, State: state}
	if res != "" {
		info.Result = []byte(res)
	}
	return info, nil
}

// taskInfo reads task id of queue as asynq's Inspector.GetTaskInfo does,
// the fields a run's status needs (state, result, payload, retries, last
// error), in one command where the Inspector takes four: an error
// matching asynq.ErrTaskNotFound when the task is not there.
func (c *Client) taskInfo(ctx context.Context, queue, id string) (*asynq.TaskInfo, error) {
	v, err := c.rdb.HMGet(ctx, asynqkey.Task(queue, id), "state", "result", "msg").Result()
	if err != nil {
		return nil, err
	}
	st, _ := v[0].(string)
	res, _ := v[1].(string)
	msg, _ := v[2].(string)
	state := taskStates[st]
	if state == 0 || msg == "" {
		return nil, fmt.Errorf("%w: task %s in queue %q", asynq.ErrTaskNotFound, id, queue)
	}
	m, err := asynqmsg.Decode([]byte(msg))
	if err != nil {
		return nil, fmt.Errorf("airlock: task %s in queue %q: its asynq message: %w", id, queue, err)
	}
	info := &asynq.TaskInfo{ID: id, Queue: queue, Type: m.Type, Payload: m.Payload, State: state,
		MaxRetry: m.Retry, Retried: m.Retried, LastErr: m.ErrorMsg, Timeout: m.Timeout, Retention: m.Retention, Group: m.Group}
	if res != "" {
		info.Result = []byte(res)
	}
	return info, nil
}

// taskStates are asynq's task states by the name its hashes hold.
var taskStates = func() map[string]asynq.TaskState {
	m := map[string]asynq.TaskState{}
	for s := asynq.TaskStateActive; s <= asynq.TaskStateAggregating; s++ {
		m[s.String()] = s
	}
	return m
}()

// archivedRecord is the record of a task archived without one: who asked
// for it (principal, action) as its payload says, so that it stays its
// principal's to read.
func archivedRecord(info *asynq.TaskInfo) *record.Run {
	msg := info.LastErr
	if msg == "" {
		msg = "the task was archived without a run record"
	}
	f := payloadFacts(info.Payload)
	return &record.Run{
		TaskID:    info.ID,
		RunID:     f.RunID,
		Queue:     info.Queue,
		Principal: f.Principal,
		Action:    f.Action,
		State:     record.StateFailed,
		Verdict:   record.VerdictError,
		Error:     msg,
		Attempt:   info.Retried + 1,
		MaxRetry:  info.MaxRetry,
	}
}
