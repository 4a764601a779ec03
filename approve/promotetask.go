package approve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-run/airlock/internal/redis/wake"
	"time"

	"github.com/hibiken/asynq"
)

// TypePromote is the asynq task type of a promotion.
const TypePromote = "airlock:promote"

// Payload is the promote task's payload.
type Payload struct {
	ApprovalID string `json:"approval_id"`
}

// TaskID is the promote task's id for an approval: enqueuing it twice (a
// double accept, a sweeper catching up) never makes a second task.
func TaskID(approvalID string) string { return "promote-" + approvalID }

// Enqueue asks a worker serving queue to promote an accepted approval. It
// is idempotent: an existing task for the same approval counts as success.
func Enqueue(ctx context.Context, c *asynq.Client, queue, approvalID string) error {
	payload, _ := json.Marshal(Payload{ApprovalID: approvalID})
	_, err := c.EnqueueContext(ctx, asynq.NewTask(TypePromote, payload),
		asynq.Queue(queue), asynq.TaskID(TaskID(approvalID)), asynq.MaxRetry(10),
		asynq.Timeout(10*time.Minute), asynq.Retention(24*time.Hour))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("enqueue promotion of %s: %w", approvalID, err)
	}
	return nil
}

// Wake tells the idle workers of queue that a task waits there (a
// promotion just queued), so that they poll at once rather than at the end
// of their idle wait (worker -idle-wait; internal/redis/wake). A failure
// costs latency only, so it is not reported.
func (s *Store) Wake(ctx context.Context, queue string) {
	if queue == "" {
		queue = DefaultQueue
	}
	_ = wake.Notify(ctx, s.rdb, s.prefix, queue)
}
