package asynqkey_test

import (
	"context"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestNamesAreAsynqs: a task asynq enqueued is at Task, and its queue in
// Queues.
func TestNamesAreAsynqs(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	c := asynq.NewClientFromRedisClient(rdb)
	info, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, asynqkey.Task(q, info.ID)).Result(); err != nil || n != 1 {
		t.Errorf("Task(%s, %s): exists %d, %v", q, info.ID, n, err)
	}
	if st, err := rdb.HGet(ctx, asynqkey.Task(q, info.ID), "state").Result(); err != nil || st != "pending" {
		t.Errorf("state field: %q, %v", st, err)
	}
	if ok, err := rdb.SIsMember(ctx, asynqkey.Queues, q).Result(); err != nil || !ok {
		t.Errorf("%s holds %s: %v, %v", asynqkey.Queues, q, ok, err)
	}
}
