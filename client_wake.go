package airlock

import (
	"context"

	"github.com/airlock-run/airlock/internal/redis/wake"
)

// wake tells the idle workers of queue that a task waits there, so that
// they poll at once instead of at their next idle poll (wake.Notify: one
// PUBLISH). A failure costs latency only: the workers find the task within
// their idle wait (worker -idle-wait), so it is not reported.
func (c *Client) wake(ctx context.Context, queue string) {
	if queue == "" {
		queue = defaultQueue
	}
	_ = wake.Notify(ctx, c.rdb, c.opts.Prefix, queue)
}
