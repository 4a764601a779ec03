package metrics

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// fakeInspector answers from its fields; block, when not nil, holds
// GetQueueInfo until it is closed.
type fakeInspector struct {
	known []string
	infos map[string]*asynq.QueueInfo
	err   error
	block chan struct{}
	calls atomic.Int64 // GetQueueInfo calls
}

func (f *fakeInspector) Queues() ([]string, error) { return f.known, f.err }

func (f *fakeInspector) GetQueueInfo(q string) (*asynq.QueueInfo, error) {
	f.calls.Add(1)
	if f.block != nil {
		<-f.block
	}
	return f.infos[q], nil
}

var depthLine = regexp.MustCompile(`(?m)^` + NameQueueTasks + `\{.*$`)

func depthLines(body string) string { return strings.Join(depthLine.FindAllString(body, -1), "\n") }

func TestDepth(t *testing.T) {
	m := New("v", "b", "a")
	if got := depthLines(scrape(t, m)); got != "" {
		t.Errorf("depth before SetQueueInspector:\n%s", got)
	}
	f := &fakeInspector{
		known: []string{"a", "elsewhere"},
		infos: map[string]*asynq.QueueInfo{"a": {Pending: 3, Active: 1, Scheduled: 2, Retry: 4, Archived: 9}},
	}
	m.SetQueueInspector(f)
	want := strings.Join([]string{
		NameQueueTasks + `{queue="a",state="active"} 1`,
		NameQueueTasks + `{queue="a",state="pending"} 3`,
		NameQueueTasks + `{queue="a",state="retry"} 4`,
		NameQueueTasks + `{queue="a",state="scheduled"} 2`,
		NameQueueTasks + `{queue="b",state="active"} 0`, // not known to asynq yet: empty
		NameQueueTasks + `{queue="b",state="pending"} 0`,
		NameQueueTasks + `{queue="b",state="retry"} 0`,
		NameQueueTasks + `{queue="b",state="scheduled"} 0`,
	}, "\n")
	if got := depthLines(scrape(t, m)); got != want {
		t.Errorf("depth:\n%s\nwant:\n%s", got, want)
	}
	if n := f.calls.Load(); n != 1 {
		t.Errorf("GetQueueInfo called %d times for one scrape of one known queue, want 1", n)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 0 {
		t.Errorf("errors: %v", n)
	}

	// An error: no depth at all for that scrape, and one error counted.
	f.err = errors.New("redis: connection refused")
	if got := depthLines(scrape(t, m)); got != "" {
		t.Errorf("depth when Redis fails:\n%s", got)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 1 {
		t.Errorf("errors after a failed read: %v, want 1", n)
	}
}

// A read that hangs is bounded by the timeout; while it hangs no other
// read starts; once it returns, the next scrape reads again.
func TestDepthTimeout(t *testing.T) {
	m := New("v", "a")
	m.depth.timeout = 100 * time.Millisecond
	f := &fakeInspector{known: []string{"a"}, infos: map[string]*asynq.QueueInfo{"a": {Pending: 5}}, block: make(chan struct{})}
	m.SetQueueInspector(f)
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
	if n := f.calls.Load(); n != 1 {
		t.Errorf("GetQueueInfo called %d times while the first hung, want 1", n)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 2 {
		t.Errorf("errors: %v, want 2", n)
	}
	close(f.block)
	if !waitFor(2*time.Second, func() bool { return !m.depth.busy.Load() }) {
		t.Fatal("the hung read did not end once released")
	}
	if got := depthLines(scrape(t, m)); !strings.Contains(got, NameQueueTasks+`{queue="a",state="pending"} 5`) {
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

// commandCounter counts the commands a Redis client sends.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(int64(len(cmds))); return next(ctx, cmds) }
}

// The depth of real asynq queues, read through a real Inspector at scrape
// time only: nothing between scrapes, a few commands per queue at one.
func TestDepthRedis(t *testing.T) {
	q1, q2 := redistest.Queue(t), redistest.Queue(t)
	rdb := redistest.Client(t)
	cl := asynq.NewClientFromRedisClient(rdb)
	for _, opt := range [][]asynq.Option{{asynq.Queue(q1)}, {asynq.Queue(q1)}, {asynq.Queue(q1), asynq.ProcessIn(time.Hour)}} {
		if _, err := cl.Enqueue(asynq.NewTask("t", nil), opt...); err != nil {
			t.Fatal(err)
		}
	}
	insp := redistest.Client(t)
	var cc commandCounter
	insp.AddHook(&cc)
	m := New("v", q1, q2)
	m.SetQueueInspector(asynq.NewInspectorFromRedisClient(insp))
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
	first := cc.n.Load()
	scrape(t, m)
	per := cc.n.Load() - first
	t.Logf("Redis commands: %d at the first scrape (connection set up, scripts loaded), %d at the next (2 queues, 1 known to asynq)", first, per)
	// SMEMBERS, then for the known queue SISMEMBER and two scripts
	// (EVALSHA; EVAL the first time).
	if per > 4 {
		t.Errorf("%d Redis commands per scrape, want at most 4", per)
	}
	if n := testutil.ToFloat64(m.redisErrs.WithLabelValues(OpQueues)); n != 0 {
		t.Errorf("errors: %v", n)
	}
}
