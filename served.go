package airlock

import (
	"context"
	"time"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
)

// noteServed reads, alongside the enqueue (a goroutine, so that it adds
// no round trip to Enqueue's), whether a worker of queue has announced
// itself (queuepolicy.LoadWorkers: one Redis read), unless this client saw
// one within the last queuepolicy.AnnounceInterval: then it reads nothing.
// The func it returns waits for that read and sets e.NoWorker when none
// has, once Enqueue has enqueued (or found) a task (*err nil). A failed
// read sets nothing: the warning is advice, the task is enqueued. Enqueue
// defers the func.
func (c *Client) noteServed(ctx context.Context, queue string, e *Enqueued, err *error) func() {
	if until, ok := c.served.Load(queue); ok && time.Now().Before(until.(time.Time)) {
		return func() {}
	}
	served := make(chan bool, 1)
	go func() {
		now := time.Now()
		workers, lerr := queuepolicy.LoadWorkers(ctx, c.rdb, c.opts.Prefix, queue, now)
		if lerr == nil && len(workers) > 0 {
			c.served.Store(queue, now.Add(queuepolicy.AnnounceInterval))
		}
		served <- lerr != nil || len(workers) > 0
	}()
	return func() {
		ok := <-served
		if *err == nil && e.TaskID != "" {
			e.NoWorker = !ok
		}
	}
}
