package airlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/asynqmsg"
	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/tasks"
)

// taskOpts are the asynq options of a run's task that prepare works out.
type taskOpts struct {
	maxRetry int
	// timeout is asynq's for the task: the spec's plus ClientOptions.Grace,
	// rounded up to a whole second.
	timeout time.Duration
}

// enqueueTask writes spec's task (payload, o) as task id and admits it
// against its principal's quota and share, in one script
// (fairshare.Enqueue): held in its principal's line until its share lets
// it in, or in the queue at once. A quota's refusal writes nothing and
// matches ErrQuota (a *QuotaError); a taken id matches
// fairshare.ErrExists.
func (c *Client) enqueueTask(ctx context.Context, spec *tasks.Spec, payload []byte, o taskOpts, id string) error {
	if err := c.addQueue(ctx, spec.Queue); err != nil {
		return fmt.Errorf("airlock: enqueueing run %s in queue %q: %w", spec.RunID, spec.Queue, err)
	}
	// The W3C trace context of ctx's span (traceparent, tracestate) goes
	// in the task's headers: the worker's spans of the run are children
	// of the caller's. The headers are not part of the payload: neither the
	// task's idempotent id nor its approval's id depends on them.
	msg := asynqmsg.Encode(asynqmsg.Message{
		Type: tasks.TypeRun, Payload: payload, Headers: tracing.Inject(ctx), ID: id, Queue: spec.Queue,
		Retry: o.maxRetry, Timeout: o.timeout, Group: fairshare.Group(spec.Principal), Retention: c.opts.Retention,
	})
	// Not the caller's context past this point: a caller gone mid-call
	// must not leave the run half known.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admitTimeout)
	defer cancel()
	err := fairshare.Enqueue(actx, c.rdb, c.opts.Prefix, spec.Queue, spec.Principal, id, msg, spec.Session != nil)
	if err != nil && !errors.Is(err, ErrQuota) && !errors.Is(err, fairshare.ErrExists) {
		return fmt.Errorf("airlock: enqueueing run %s in queue %q: %w", spec.RunID, spec.Queue, err)
	}
	return err
}

// addQueue adds queue to asynq's set of queues (its Inspector and the
// workers' sweeps find it there), once per Client and queue, as asynq's
// own client does: the set is in no queue's Cluster slot, so it is not in
// the enqueue script.
func (c *Client) addQueue(ctx context.Context, queue string) error {
	if _, ok := c.queuesAdded.Load(queue); ok {
		return nil
	}
	if err := c.rdb.SAdd(ctx, asynqkey.Queues, queue).Err(); err != nil {
		return err
	}
	c.queuesAdded.Store(queue, true)
	return nil
}
