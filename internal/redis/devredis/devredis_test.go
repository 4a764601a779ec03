package devredis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/redis/devredis"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T) *devredis.Server {
	t.Helper()
	s, err := devredis.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func client(t *testing.T, s *devredis.Server) redis.UniversalClient {
	t.Helper()
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestURL(t *testing.T) {
	s := start(t)
	if want := "redis://" + s.Addr() + "/0"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
	if strings.HasSuffix(s.Addr(), ":0") {
		t.Errorf("Addr() = %q, want the port picked", s.Addr())
	}
}

func TestAddrInUse(t *testing.T) {
	s := start(t)
	_, err := devredis.Start(s.Addr())
	if !errors.Is(err, devredis.ErrAddrInUse) {
		t.Fatalf("Start(%s) on a taken address: err = %v, want ErrAddrInUse", s.Addr(), err)
	}
	if !strings.Contains(err.Error(), s.Addr()) {
		t.Errorf("error %q does not name the address", err)
	}
}

// TestExpiry checks that keys expire against the wall clock, which miniredis
// does not do by default.
func TestExpiry(t *testing.T) {
	c := client(t, start(t))
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS k after its TTL = %d, %v; want 0", n, err)
	}
}

// TestAsynq runs a task through asynq v0.26 on the development Redis: the
// enqueue, the server's dequeue and completion (Lua scripts), the result
// written by the handler and its retention, as a worker and enqueuer do.
func TestAsynq(t *testing.T) {
	c := client(t, start(t))
	const queue = "dev"

	cl := asynq.NewClientFromRedisClient(c)
	info, err := cl.EnqueueContext(context.Background(), asynq.NewTask("test:echo", []byte("hi")),
		asynq.Queue(queue), asynq.Retention(time.Hour), asynq.MaxRetry(0))
	if err != nil {
		t.Fatal(err)
	}

	srv := asynq.NewServerFromRedisClient(c, asynq.Config{
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: 10 * time.Millisecond,
		LogLevel:          asynq.ErrorLevel,
	})
	err = srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		_, err := task.ResultWriter().Write(append([]byte("echo:"), task.Payload()...))
		return err
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	insp := asynq.NewInspectorFromRedisClient(c)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := insp.GetTaskInfo(queue, info.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == asynq.TaskStateCompleted {
			if string(got.Result) != "echo:hi" {
				t.Errorf("Result = %q, want %q", got.Result, "echo:hi")
			}
			if got.Retention != time.Hour {
				t.Errorf("Retention = %v, want 1h", got.Retention)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task still %v after 10s (last error %q)", got.State, got.LastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
