//go:build linux

package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	refusedrec "github.com/airlock-run/airlock/internal/redis/refused"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/record"
)

// completer owns the persistence of a run's end, as river's job completer
// owns a job's: report hands it the record, and it stores the record as
// its task's result, the run's event and its approval's index and audit
// updates (approve.Ops) in one round trip, tried again while Redis comes
// back, then logs the run's end and tells the Observer. It is the only
// writer of a run's record.
type completer struct {
	rdb    redis.UniversalClient
	prefix string // the keys' (Config.Prefix)
	events *events.Stream
	log    zerolog.Logger
	obs    Observer // nil: none
}

// newCompleter returns the completer of a worker with cfg.
func newCompleter(cfg *Config, log zerolog.Logger) *completer {
	return &completer{rdb: cfg.Redis, prefix: cfg.Prefix, events: events.NewStream(cfg.Redis, cfg.Prefix), log: log, obs: cfg.Observer}
}

// complete completes and stores the record, with the run's event when
// final and its approval's updates (one round trip: store), and logs it: at info for a run that was carried
// out, warn for a run that failed, error for the worker's own failure. The
// record of a refused run (refuse.go) is stored for its refusal too, which
// outlives its task. It returns the error of storing the record; the
// event's is logged, not fatal: the record stays the source of truth.
func (c *completer) complete(ctx context.Context, rec *record.Run, workerFailed, final, refused bool, after approve.Ops) error {
	rec.FinishedAt = time.Now().UTC()
	rec.DurationMS = ms(rec.FinishedAt.Sub(rec.StartedAt))
	var ev *events.Event
	if final {
		e := runEvent(rec)
		ev = &e
	}
	queue, ok := asynq.GetQueueName(ctx)
	if !ok {
		queue = rec.Queue
	}
	if o := c.obs; o != nil {
		// Counted before the record is visible: whoever saw the record
		// (Wait, then a scrape) finds the attempt counted.
		o.RunEnded(rec)
	}
	b, err := json.Marshal(rec)
	var compact []byte
	if err == nil && refused {
		compact, err = refusedrec.Encode(rec)
	}
	var evErr error
	if err == nil {
		evErr, err = c.store(ctx, queue, rec.TaskID, b, compact, ev, after)
	}
	var le *zerolog.Event
	switch {
	case err != nil:
		le = c.log.Error().AnErr("result_error", err)
	case workerFailed:
		le = c.log.Error()
	case rec.State == record.StateFailed:
		le = c.log.Warn()
	default:
		le = c.log.Info()
	}
	le.Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Str("run_id", rec.RunID).Int("attempt", rec.Attempt).
		Str("state", string(rec.State)).Str("verdict", string(rec.Verdict)).Str("error", rec.Error).
		Float64("duration_ms", rec.DurationMS).Int64("bytes_written", rec.Workspace.UsedBytes).
		Int64("input_bytes", rec.Workspace.InputBytes).Int("steps", len(rec.Steps)).Msg("task end")
	if evErr != nil {
		c.eventFailed(rec, evErr)
	}
	if o := c.obs; o != nil && err != nil {
		o.RedisError("result")
	}
	return err
}

// runEvent is the event of a run's final state.
func runEvent(rec *record.Run) events.Event {
	return events.Event{RunID: rec.RunID, TaskID: rec.TaskID, State: rec.State, Verdict: rec.Verdict,
		ApprovalID: rec.ApprovalID, Error: rec.Error, Principal: rec.Principal}
}

// eventFailed reports a run's event that could not be appended.
func (c *completer) eventFailed(rec *record.Run, err error) {
	c.log.Warn().Err(err).Str("task_id", rec.TaskID).Str("trace_id", rec.TraceID).Msg("events")
	if o := c.obs; o != nil {
		o.RedisError("events")
	}
}

// resultRetryFor bounds how long store tries to store a record.
const resultRetryFor = 10 * time.Second

// store stores a run's record as its task's result and, when ev is
// not nil, appends the run's event after it, in one round trip with the
// index and audit updates of its approval (after, when not nil), queued
// before the record, and with the compact record of a refused run
// (refused, when not nil: package refused), which asynq's deletion of
// the task leaves. Redis may fail for a moment (a restart: connections
// refused, then LOADING while it reads its AOF back; a failover): the
// write is tried again, for up to resultRetryFor and as long as ctx
// lasts, before the error is returned (report then has asynq run the task
// again rather than end it without a record). A retry sends the event and
// the approval's updates again: like an event, an audit entry may then
// appear twice; index updates are idempotent. evErr is the event's own
// failure once the record is stored: the record stays the source of
// truth, and Wait reads the task anyway.
func (c *completer) store(ctx context.Context, queue, taskID string, b, refused []byte, ev *events.Event, after approve.Ops) (evErr, err error) {
	deadline := time.Now().Add(resultRetryFor)
	delay := 100 * time.Millisecond
	key := asynqkey.Task(queue, taskID)
	for {
		var hset *redis.IntCmd
		var xadd *redis.StringCmd
		var kept *redis.Cmd
		cmds, _ := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			if after != nil {
				after(ctx, p)
			}
			hset = p.HSet(ctx, key, "result", b)
			if refused != nil {
				kept = refusedrec.Store(ctx, p, c.prefix, queue, taskID, refused)
			}
			if ev != nil {
				xadd = c.events.AppendOp(ctx, p, *ev)
			}
			return nil
		})
		err = hset.Err()
		if err == nil && kept != nil {
			err = kept.Err()
		}
		if err == nil {
			if xadd != nil {
				evErr = xadd.Err()
			}
			for _, cmd := range cmds {
				if cmd != hset && cmd != xadd && cmd != kept && cmd.Err() != nil {
					// Stale indexes, not wrong ones: readers re-check the
					// approval's hash, and a promotion of it repairs them
					// (approve.Store.Reindex).
					c.log.Warn().Err(cmd.Err()).Str("task_id", taskID).Str("trace_id", tracing.TraceID(ctx)).Msg("approval indexes not updated")
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
