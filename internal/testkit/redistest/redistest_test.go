package redistest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/limits"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

func TestSource(t *testing.T) {
	src := redistest.Source(t)
	t.Logf("Redis from %s at %s", src, redistest.URL(t))
	if !slices.Contains([]string{redistest.SourceEnv, redistest.SourceRedisServer, redistest.SourceMiniredis}, src) {
		t.Errorf("Source = %q", src)
	}
	if err := redistest.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

func TestQueueNames(t *testing.T) {
	a, b := redistest.Queue(t), redistest.Queue(t)
	if a == b || !strings.HasPrefix(a, "t-") || len(a) != 14 {
		t.Errorf("Queue gave %q and %q, want two distinct t-<12 hex digits>", a, b)
	}
}

// TestQueueCleanup checks that what a test leaves in its queue (a pending
// task, a completed one with its counters, a published policy) is gone
// after the test.
func TestQueueCleanup(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	var q string
	t.Run("use", func(t *testing.T) {
		q = redistest.Queue(t)
		done := make(chan struct{})
		redistest.Serve(t, q, func(context.Context, *asynq.Task) error { close(done); return nil })
		c := asynq.NewClientFromRedisClient(rdb)
		if _, err := c.Enqueue(asynq.NewTask("test", nil), asynq.Queue(q), asynq.Retention(time.Hour)); err != nil {
			t.Fatal(err)
		}
		<-done
		insp := asynq.NewInspectorFromRedisClient(rdb)
		for {
			info, err := insp.GetQueueInfo(q)
			if err != nil {
				t.Fatal(err)
			}
			if info.Completed == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, err := c.Enqueue(asynq.NewTask("test", nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := queuepolicy.Publish(ctx, rdb, "", []string{q}, limits.DefaultPolicy()); err != nil {
			t.Fatal(err)
		}
	})
	keys, err := rdb.Keys(ctx, "*"+q+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("keys left after the test: %q", keys)
	}
	queues, err := asynq.NewInspectorFromRedisClient(rdb).Queues()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(queues, q) {
		t.Errorf("queue %s still listed", q)
	}
}
