package airlock

import (
	"context"
	"fmt"

	"github.com/airlock-run/airlock/internal/redis/refused"
	"github.com/airlock-run/airlock/record"
)

// refusedRecord is the record of task taskID of queue, which asynq does
// not have (its error was err): the record of its refusal, when a worker
// refused it without running it (a session's open past -max-sessions, a
// spec it rejected, a quota) and asynq deleted it, payload and all
// (package refused); else an error matching ErrNotFound.
func (c *Client) refusedRecord(ctx context.Context, queue, taskID string, err error) (*record.Run, error) {
	rec, ok, rerr := refused.Get(ctx, c.rdb, c.opts.Prefix, queue, taskID)
	switch {
	case rerr != nil:
		return nil, fmt.Errorf("airlock: task %s in queue %q: read its refusal: %w", taskID, queue, rerr)
	case !ok:
		return nil, &NotFoundError{Queue: queue, TaskID: taskID, Err: err}
	}
	return rec, nil
}
