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

// QueuePromotion queues the promotion of accepted approval id in queue
// (DefaultQueue when ""), as Enqueue does, then wakes the queue's idle
// workers so that one takes it at once rather than at the end of its idle
// wait (worker -idle-wait; internal/redis/wake). Every front end and the
// worker queue promotions through it. A failed wake-up costs latency only,
// so it is not reported.
func (s *Store) QueuePromotion(ctx context.Context, ac *asynq.Client, queue, id string) error {
	if queue == "" {
		queue = DefaultQueue
	}
	if err := Enqueue(ctx, ac, queue, id); err != nil {
		return err
	}
	_ = wake.Notify(ctx, s.rdb, s.prefix, queue)
	return nil
}
