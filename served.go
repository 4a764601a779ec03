package airlock

import (
	"context"
	"time"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
)

// servedEntry is what this client last learnt of a queue's workers, and
// until when it holds.
type servedEntry struct {
	until  time.Time
	served bool
}

// noteServed reads, alongside the enqueue (a goroutine, so that it adds
// no round trip to Enqueue's), whether a worker of queue has announced
// itself (queuepolicy.LoadWorkers: one Redis read), unless this client
// learnt it within the last queuepolicy.AnnounceInterval, served or not:
// then it reads nothing. The func it returns waits for that read and sets
// e.NoWorker when none has, once Enqueue has enqueued (or found) a task
// (*err nil). A failed read sets nothing and is not kept: the warning is
// advice, the task is enqueued. Enqueue defers the func.
func (c *Client) noteServed(ctx context.Context, queue string, e *Enqueued, err *error) func() {
	set := func(served bool) {
		if *err == nil && e.TaskID != "" {
			e.NoWorker = !served
		}
	}
	if v, ok := c.served.Load(queue); ok && time.Now().Before(v.(servedEntry).until) {
		return func() { set(v.(servedEntry).served) }
	}
	served := make(chan bool, 1)
	go func() {
		now := time.Now()
		workers, lerr := queuepolicy.LoadWorkers(ctx, c.rdb, c.opts.Prefix, queue, now)
		if lerr == nil {
			c.served.Store(queue, servedEntry{until: now.Add(queuepolicy.AnnounceInterval), served: len(workers) > 0})
		}
		served <- lerr != nil || len(workers) > 0
	}()
	return func() { set(<-served) }
}
