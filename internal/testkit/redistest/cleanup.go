package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// deleteQueue removes what a test left of queue q: the asynq queue (force,
// which fails while a task is active), the keys asynq.Inspector.DeleteQueue
// leaves behind (completed tasks, daily counters: all under "asynq:{q}:"),
// and the queue's published policy, grants, actions' catalog and workers'
// announcements.
func deleteQueue(url, q string) error {
	c, _, err := redisconn.Open(url)
	if err != nil {
		return err
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insp := asynq.NewInspectorFromRedisClient(c)
	if err := insp.DeleteQueue(q, true); err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		// A task of a SIGKILLed worker stays active until its lease
		// expires: its keys go below, and the queue from the list.
		if !strings.Contains(err.Error(), "active tasks") {
			return fmt.Errorf("deleting the asynq queue: %w", err)
		}
		if err := c.SRem(ctx, "asynq:queues", q).Err(); err != nil {
			return fmt.Errorf("deleting the asynq queue: %w", err)
		}
	}
	if err := c.Del(ctx, queuepolicy.Key("", q), queuepolicy.GrantsKey("", q), queuepolicy.ActionsKey("", q), queuepolicy.WorkersKey("", q), fairshare.QuotasKey("", q)).Err(); err != nil {
		return fmt.Errorf("deleting the queue's policy: %w", err)
	}
	for _, pattern := range []string{"asynq:{" + q + "}:*", "airlock:fair:{" + q + "}:*"} {
		if err := DeleteMatching(ctx, c, pattern); err != nil {
			return fmt.Errorf("deleting the queue's keys: %w", err)
		}
	}
	return nil
}
