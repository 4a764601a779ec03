package wake_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/redis/wake"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// evalCounter counts the EVAL and EVALSHA commands a client sends: asynq's
// dequeue polls among them.
type evalCounter struct{ n atomic.Int64 }

func (c *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// A real asynq server polling every 10 ms, with the Waiter in its Redis
// client: idle, it polls about once per MaxIdle instead of a hundred times
// a second; a task enqueued with a wake-up starts at once, one enqueued
// without waits at most MaxIdle; Stop releases a held poll so that the
// server shuts down without waiting for MaxIdle.
func TestWaiterHoldsIdlePolls(t *testing.T) {
	const maxIdle = 1500 * time.Millisecond
	ctx := context.Background()
	q := redistest.Queue(t)
	prefix := "wake-test:" + q + ":"
	rdb := redis.NewClient(mustOptions(t))
	defer rdb.Close()
	evals := &evalCounter{}
	rdb.AddHook(evals) // outermost: counts what reaches Redis and what the Waiter holds alike
	w := wake.New(rdb, prefix, []string{q}, maxIdle)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(w.Hook())
	srv, started := serve(t, rdb, q, time.Hour)
	stopped := false
	defer func() {
		if !stopped {
			w.Stop()
			srv.Shutdown()
		}
	}()
	time.Sleep(300 * time.Millisecond) // the first round finds nothing
	n0 := evals.n.Load()
	time.Sleep(2 * time.Second)
	if polls := evals.n.Load() - n0; polls > 3 {
		t.Errorf("%d dequeue polls in 2s idle: want about 2s/%s, not the 200 of a 10ms poll", polls, maxIdle)
	}

	client := asynq.NewClientFromRedisClient(rdb)
	enqueue := func(notify bool) time.Duration {
		t.Helper()
		t0 := time.Now()
		if _, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q)); err != nil {
			t.Fatal(err)
		}
		if notify {
			if err := wake.Notify(ctx, rdb, prefix, q); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case s := <-started:
			return s.Sub(t0)
		case <-time.After(5 * time.Second):
			t.Fatal("the task did not start within 5s")
			return 0
		}
	}
	time.Sleep(200 * time.Millisecond) // a poll is held
	if d := enqueue(true); d > 200*time.Millisecond {
		t.Errorf("with a wake-up the task started after %s", d)
	}
	time.Sleep(200 * time.Millisecond)
	if d := enqueue(false); d > maxIdle+500*time.Millisecond {
		t.Errorf("without a wake-up the task started after %s, past the idle wait %s", d, maxIdle)
	}
	if woken, _ := w.Counts(); woken < 1 {
		t.Errorf("no wait ended by a wake-up")
	}
	time.Sleep(300 * time.Millisecond) // idle again: a poll is held
	t0 := time.Now()
	w.Stop()
	srv.Shutdown()
	stopped = true
	if d := time.Since(t0); d > time.Second {
		t.Errorf("shutdown took %s with a poll held", d)
	}
}

// A Waiter released after its server's shutdown leaves the client to a
// later server (a worker started again in the same process): that
// server's polls reach Redis, where a stopped Waiter's hook would answer
// every one "empty".
func TestWaiterReleased(t *testing.T) {
	ctx := context.Background()
	q := redistest.Queue(t)
	rdb := redis.NewClient(mustOptions(t))
	defer rdb.Close()
	w := wake.New(rdb, "wake-test:"+q+":", []string{q}, time.Hour)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(w.Hook())
	first, _ := serve(t, rdb, q, time.Hour)
	time.Sleep(200 * time.Millisecond) // idle: a poll is held
	w.Stop()
	first.Shutdown()
	w.Release()

	second, started := serve(t, rdb, q, time.Hour)
	defer second.Shutdown()
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("t", nil), asynq.Queue(q)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(3 * time.Second):
		t.Fatal("a second server on the client did not start the task within 3s")
	}
}

// sent counts, by name, the commands that reach Redis below the Waiter's
// hook (added after it), and asynq's dequeue scripts apart.
type sent struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *sent) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *sent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *sent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if args := cmd.Args(); name == "evalsha" && len(args) > 3 && strings.HasSuffix(fmt.Sprint(args[3]), ":pending") {
			name = "dequeue"
		}
		c.mu.Lock()
		c.n[name]++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *sent) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

// Idle polls that no wake-up opened reach Redis as one LLEN per queue,
// not asynq's dequeue script (three commands); a queue the LLEN finds a
// task in is polled with the script, and the task starts within the idle
// wait; a woken round polls with the script at once.
func TestWaiterProbesIdlePolls(t *testing.T) {
	const maxIdle = 200 * time.Millisecond
	ctx := context.Background()
	q1, q2 := redistest.Queue(t), redistest.Queue(t)
	prefix := "wake-test:" + q1 + ":"
	rdb := redis.NewClient(mustOptions(t))
	defer rdb.Close()
	w := wake.New(rdb, prefix, []string{q1, q2}, maxIdle)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(w.Hook())
	below := &sent{n: map[string]int{}}
	rdb.AddHook(below)
	started := make(chan time.Time, 4)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 1, Queues: map[string]int{q1: 1, q2: 1}, TaskCheckInterval: 10 * time.Millisecond,
		DelayedTaskCheckInterval: time.Hour, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		started <- time.Now()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Stop(); srv.Shutdown() }()
	time.Sleep(300 * time.Millisecond) // the first rounds find nothing
	below.take()
	time.Sleep(2 * time.Second)
	idle := below.take()
	// About 2s/200ms = 10 rounds of 2 queues; a loaded machine makes fewer.
	if idle["dequeue"] != 0 || idle["llen"] < 4 || idle["llen"] > 24 {
		t.Errorf("idle 2s, 2 queues, idle wait %s: %d dequeue scripts and %d LLEN reached Redis; want none and one LLEN per queue per wait", maxIdle, idle["dequeue"], idle["llen"])
	}
	client := asynq.NewClientFromRedisClient(rdb)
	t0 := time.Now()
	if _, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q2)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-started:
		if d := s.Sub(t0); d > maxIdle+time.Second {
			t.Errorf("without a wake-up the task started after %s, past the idle wait %s", d, maxIdle)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a task enqueued without a wake-up did not start within 5s")
	}
	if n := below.take()["dequeue"]; n < 1 {
		t.Errorf("the task was taken without a dequeue script reaching Redis (%d)", n)
	}
	time.Sleep(300 * time.Millisecond) // idle again: a poll is held
	if _, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q1)); err != nil {
		t.Fatal(err)
	}
	below.take()
	t0 = time.Now()
	if err := wake.Notify(ctx, rdb, prefix, q1); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-started:
		if d := s.Sub(t0); d > maxIdle/2 {
			t.Errorf("with a wake-up the task started after %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a woken task did not start within 5s")
	}
	if got := below.take(); got["dequeue"] < 1 {
		t.Errorf("a woken round sent %v: want the dequeue script at once", got)
	}
}

// serve starts an asynq server on q polling every 10 ms, forwarding due
// tasks every delayed; started receives each task's start.
func serve(t *testing.T, rdb redis.UniversalClient, q string, delayed time.Duration) (*asynq.Server, chan time.Time) {
	t.Helper()
	started := make(chan time.Time, 4)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Concurrency: 1, Queues: map[string]int{q: 1}, TaskCheckInterval: 10 * time.Millisecond,
		DelayedTaskCheckInterval: delayed, LogLevel: asynq.FatalLevel,
	})
	if err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		started <- time.Now()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	return srv, started
}

// A task scheduled for later (a retry's delay, ProcessIn) starts once
// asynq's forwarder moves it to the queue, not at the end of a long idle
// wait: the forward is a wake-up too.
func TestWaiterWakesOnForward(t *testing.T) {
	const maxIdle = 10 * time.Second
	ctx := context.Background()
	q := redistest.Queue(t)
	rdb := redis.NewClient(mustOptions(t))
	defer rdb.Close()
	w := wake.New(rdb, "wake-test:"+q+":", []string{q}, maxIdle)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(w.Hook())
	srv, started := serve(t, rdb, q, 200*time.Millisecond)
	defer func() { w.Stop(); srv.Shutdown() }()
	time.Sleep(300 * time.Millisecond) // idle: a poll is held
	t0 := time.Now()
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.ProcessIn(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-started:
		if d := s.Sub(t0); d > 2*time.Second {
			t.Errorf("a task due in 500ms started after %s", d)
		}
	case <-time.After(maxIdle):
		t.Fatalf("a task due in 500ms did not start within the idle wait %s", maxIdle)
	}
}

// Another asynq server on the same Redis client, serving a queue that is
// not the Waiter's, keeps its own 10 ms polls: the hook holds only the
// polls of its worker's queues.
func TestWaiterLeavesOtherQueues(t *testing.T) {
	ctx := context.Background()
	mine, other := redistest.Queue(t), redistest.Queue(t)
	rdb := redis.NewClient(mustOptions(t))
	defer rdb.Close()
	w := wake.New(rdb, "wake-test:"+mine+":", []string{mine}, 10*time.Second)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rdb.AddHook(w.Hook())
	srv, started := serve(t, rdb, other, time.Hour)
	defer func() { w.Stop(); srv.Shutdown() }()
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	if _, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask("t", nil), asynq.Queue(other)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-started:
		if d := s.Sub(t0); d > time.Second {
			t.Errorf("a task of another queue started after %s: the hook held its polls", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a task of another queue did not start")
	}
}

// The empty prefix is the default one, on both sides.
func TestChannelDefaultPrefix(t *testing.T) {
	if wake.Channel("", "q") != wake.Channel("airlock:", "q") || wake.Channel("x:", "q") != "x:wake:q" {
		t.Errorf("channels: %q %q %q", wake.Channel("", "q"), wake.Channel("airlock:", "q"), wake.Channel("x:", "q"))
	}
}

func mustOptions(t *testing.T) *redis.Options {
	t.Helper()
	o, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	return o
}
