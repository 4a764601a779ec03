package redistest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/internal/queuepolicy"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// deleteQueue removes what a test left of queue q: the asynq queue (force,
// which fails while a task is active), the keys asynq.Inspector.DeleteQueue
// leaves behind (completed tasks, daily counters: all under "asynq:{q}:"),
// and the queue's published policy.
func deleteQueue(url, q string) error {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	c := redis.NewClient(opt)
	defer c.Close()

	insp := asynq.NewInspectorFromRedisClient(c)
	if err := insp.DeleteQueue(q, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("deleting the asynq queue: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := []string{queuepolicy.Key("", q)}
	iter := c.Scan(ctx, 0, "asynq:{"+q+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("listing the queue's keys: %w", err)
	}
	if err := c.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("deleting the queue's keys: %w", err)
	}
	return nil
}
