package asynqkey_test

import (
	"context"
	"errors"
	"testing"
	"time"

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
	if got, ok := asynqkey.QueueOf(asynqkey.Pending(q)); !ok || got != q {
		t.Errorf("QueueOf(Pending(%s)) = %q, %v", q, got, ok)
	}
	if _, ok := asynqkey.QueueOf("airlock:wake:" + q); ok {
		t.Error("QueueOf of a key of no queue: ok")
	}
	if n, err := rdb.LLen(ctx, asynqkey.Pending(q)).Result(); err != nil || n != 1 {
		t.Errorf("Pending(%s): %d, %v", q, n, err)
	}
	if _, err := c.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.ZCard(ctx, asynqkey.Scheduled(q)).Result(); err != nil || n != 1 {
		t.Errorf("Scheduled(%s): %d, %v", q, n, err)
	}
	// Active, Lease and Retry: a task a server took and failed.
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Queues: map[string]int{q: 1}, Concurrency: 1, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour }})
	running, release := make(chan struct{}), make(chan struct{})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		close(running)
		<-release
		return errors.New("fail")
	})); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	<-running
	for key, read := range map[string]func() (int64, error){
		asynqkey.Active(q): rdb.LLen(ctx, asynqkey.Active(q)).Result,
		asynqkey.Lease(q):  rdb.ZCard(ctx, asynqkey.Lease(q)).Result,
	} {
		if n, err := read(); err != nil || n != 1 {
			t.Errorf("%s: %d, %v", key, n, err)
		}
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for n, _ := rdb.ZCard(ctx, asynqkey.Retry(q)).Result(); n != 1; n, _ = rdb.ZCard(ctx, asynqkey.Retry(q)).Result() {
		if time.Now().After(deadline) {
			t.Fatalf("Retry(%s) holds %d, want the failed task", q, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := asynq.NewInspectorFromRedisClient(rdb).PauseQueue(q); err != nil {
		t.Fatal(err)
	}
	if n, err := rdb.Exists(ctx, asynqkey.Paused(q)).Result(); err != nil || n != 1 {
		t.Errorf("Paused(%s): exists %d, %v", q, n, err)
	}
}
