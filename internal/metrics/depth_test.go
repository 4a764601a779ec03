package metrics

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

var depthLine = regexp.MustCompile(`(?m)^` + NameQueueTasks + `\{.*$`)

func depthLines(body string) string { return strings.Join(depthLine.FindAllString(body, -1), "\n") }

// TestDepth: the depth of the worker's queues, read from asynq's keys at
// a scrape; a queue never enqueued into is empty; a Redis that fails gives
// no depth at all for that scrape, and one error counted.
func TestDepth(t *testing.T) {
	ctx := context.Background()
	a, b := redistest.Queue(t), redistest.Queue(t)
	m := New("v", b, a)
	if got := depthLines(scrape(t, m)); got != "" {
		t.Errorf("depth before SetRedis:\n%s", got)
	}
	rdb := redistest.Client(t)
	for key, n := range map[string]int{asynqkey.Pending(a): 3, asynqkey.Active(a): 1} {
		for i := range n {
			rdb.RPush(ctx, key, fmt.Sprint(i))
		}
	}
	for key, n := range map[string]int{asynqkey.Scheduled(a): 2, asynqkey.Retry(a): 4} {
		for i := range n {
			rdb.ZAdd(ctx, key, redis.Z{Score: float64(i), Member: i})
		}
	}
	// Runs held in two principals' lines (fairshare: asynq groups).
	for g, n := range map[string]int{"p:x": 2, "p:": 1} {
		rdb.SAdd(ctx, asynqkey.Prefix(a)+"groups", g)
		for i := range n {
			rdb.ZAdd(ctx, asynqkey.Prefix(a)+"g:"+g, redis.Z{Score: float64(i), Member: i})
		}
	}
	m.SetRedis(rdb)
	var want []string
	for _, l := range []struct {
		q, state string
		n        int
	}{{a, "active", 1}, {a, "held", 3}, {a, "pending", 3}, {a, "retry", 4}, {a, "scheduled", 2}, {b, "active", 0}, {b, "held", 0}, {b, "pending", 0}, {b, "retry", 0}, {b, "scheduled", 0}} {
		want = append(want, fmt.Sprintf(`%s{queue="%s",state="%s"} %d`, NameQueueTasks, l.q, l.state, l.n))
	}
	slices.Sort(want)
	if got := depthLines(scrape(t, m)); got != strings.Join(want, "\n") {
		t.Errorf("depth:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 0 {
		t.Errorf("errors: %v", n)
	}

	// An error: no depth at all for that scrape, and one error counted.
	closed := redistest.Client(t)
	closed.Close()
	m.SetRedis(closed)
	if got := depthLines(scrape(t, m)); got != "" {
		t.Errorf("depth when Redis fails:\n%s", got)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 1 {
		t.Errorf("errors after a failed read: %v, want 1", n)
	}
}

// A read that hangs (a Redis that accepts and never answers) is bounded
// by the timeout; while it hangs no other read starts; once it ends, the
// next scrape reads again.
func TestDepthTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	silent := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: time.Minute, Protocol: 2, DisableIdentity: true})
	defer silent.Close()
	m := New("v", "a")
	m.depth.timeout = 100 * time.Millisecond
	m.SetRedis(silent)
	start := time.Now()
	if got := depthLines(scrape(t, m)); got != "" {
		t.Errorf("depth of a read that timed out:\n%s", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("scrape took %v with a 100ms bound", d)
	}
	if got := depthLines(scrape(t, m)); got != "" {
		t.Errorf("depth while the last read hangs:\n%s", got)
	}
	mu.Lock()
	n := len(conns)
	mu.Unlock()
	if n != 1 {
		t.Errorf("%d connections while the first read hung, want 1 (no second read)", n)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 2 {
		t.Errorf("errors: %v, want 2", n)
	}
	ln.Close()
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	if !waitFor(5*time.Second, func() bool { return !m.depth.busy.Load() }) {
		t.Fatal("the hung read did not end once its connection closed")
	}
	m.SetRedis(redistest.Client(t))
	if got := depthLines(scrape(t, m)); !strings.Contains(got, NameQueueTasks+`{queue="a",state="pending"} `) {
		t.Errorf("depth once Redis answers again:\n%s", got)
	}
}

func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// commandCounter counts the commands a Redis client sends, and its
// pipelines.
type commandCounter struct{ n, pipelines atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		c.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// The depth of real asynq queues, at scrape time only: no command
// between scrapes, one round trip of four per queue at one.
func TestDepthRedis(t *testing.T) {
	q1, q2 := redistest.Queue(t), redistest.Queue(t)
	rdb := redistest.Client(t)
	cl := asynq.NewClientFromRedisClient(rdb)
	for _, opt := range [][]asynq.Option{{asynq.Queue(q1)}, {asynq.Queue(q1)}, {asynq.Queue(q1), asynq.ProcessIn(time.Hour)}} {
		if _, err := cl.Enqueue(asynq.NewTask("t", nil), opt...); err != nil {
			t.Fatal(err)
		}
	}
	reader := redistest.Client(t)
	var cc commandCounter
	reader.AddHook(&cc)
	m := New("v", q1, q2)
	m.SetRedis(reader)
	time.Sleep(200 * time.Millisecond)
	if n := cc.n.Load(); n != 0 {
		t.Errorf("%d Redis commands before any scrape, want 0", n)
	}
	body := depthLines(scrape(t, m))
	for _, want := range []string{
		NameQueueTasks + `{queue="` + q1 + `",state="pending"} 2`,
		NameQueueTasks + `{queue="` + q1 + `",state="scheduled"} 1`,
		NameQueueTasks + `{queue="` + q1 + `",state="active"} 0`,
		NameQueueTasks + `{queue="` + q2 + `",state="pending"} 0`, // never enqueued into
	} {
		if !strings.Contains(body, want) {
			t.Errorf("depth lacks %q:\n%s", want, body)
		}
	}
	first, firstPipes := cc.n.Load(), cc.pipelines.Load()
	scrape(t, m)
	if per, pipes := cc.n.Load()-first, cc.pipelines.Load()-firstPipes; per != 10 || pipes != 1 {
		t.Errorf("a scrape of 2 queues: %d Redis commands in %d pipelines, want 10 in one (4 counts and the held runs' script per queue)", per, pipes)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 0 {
		t.Errorf("errors: %v", n)
	}
}
