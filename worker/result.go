//go:build linux

package worker

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
)

// resultRetryFor bounds how long storeRecord tries to store a record.
const resultRetryFor = 10 * time.Second

// taskKey is where asynq (v0.26, base.TaskKey) keeps a task: a hash whose
// "result" field is the task's result, which its ResultWriter sets with
// one HSET. The worker sets the field itself so that the run's event goes
// in the same round trip; TestStoreRecordWhereAsynqReadsIt checks that
// asynq's Inspector reads it back.
func taskKey(queue, taskID string) string { return "asynq:{" + queue + "}:t:" + taskID }

// storeRecord stores a run's record as its task's result and, when ev is
// not nil, appends the run's event after it, in one round trip with the
// index and audit updates of its approval (after, when not nil), queued
// before the record. Redis may fail for a moment (a restart: connections
// refused, then LOADING while it reads its AOF back; a failover): the
// write is tried again, for up to resultRetryFor and as long as ctx
// lasts, before the error is returned (report then has asynq run the task
// again rather than end it without a record). A retry sends the event and
// the approval's updates again: like an event, an audit entry may then
// appear twice; index updates are idempotent. evErr is the event's own
// failure once the record is stored: the record stays the source of
// truth, and Wait reads the task anyway.
func (w *Worker) storeRecord(ctx context.Context, queue, taskID string, b []byte, ev *events.Event, after approve.Ops) (evErr, err error) {
	deadline := time.Now().Add(resultRetryFor)
	delay := 100 * time.Millisecond
	key := taskKey(queue, taskID)
	for {
		var hset *redis.IntCmd
		var xadd *redis.StringCmd
		cmds, _ := w.cfg.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
			if after != nil {
				after(ctx, p)
			}
			hset = p.HSet(ctx, key, "result", b)
			if ev != nil {
				xadd = w.events.AppendOp(ctx, p, *ev)
			}
			return nil
		})
		err = hset.Err()
		if err == nil {
			if xadd != nil {
				evErr = xadd.Err()
			}
			for _, c := range cmds {
				if c != hset && c != xadd && c.Err() != nil {
					// Stale indexes, not wrong ones: readers re-check the
					// approval's hash, and a promotion of it repairs them
					// (approve.Store.Reindex).
					w.log.Warn().Err(c.Err()).Str("task_id", taskID).Msg("approval indexes not updated")
					break
				}
			}
			return evErr, nil
		}
		if ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}
