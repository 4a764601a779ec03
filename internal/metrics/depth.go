package metrics

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
)

// DepthTimeout bounds the read of the queues' depth at a scrape.
const DepthTimeout = 2 * time.Second

// Queue states, the values of the state label of NameQueueTasks.
var depthStates = [...]string{"pending", "active", "scheduled", "retry", "held"}

// heldScript counts the runs held in their principals' lines of a queue
// (internal/redis/fairshare: asynq's groups). KEYS: the queue's groups
// set. ARGV: the prefix of its groups' keys.
var heldScript = redis.NewScript(`
local n = 0
for _, g in ipairs(redis.call("SMEMBERS", KEYS[1])) do
  n = n + redis.call("ZCARD", ARGV[1] .. g)
end
return n
`)

// depthCollector exposes NameQueueTasks{queue, state} for the worker's
// queues, read at each scrape and only then: one pipelined round trip of
// four counts per queue (LLEN of pending and active, ZCARD of scheduled
// and retry, asynq's own keys), never a poll of its own, so that an idle
// worker that is not scraped costs Redis nothing more. (Held runs are
// counted by a script per queue, in the same round trip.) The read is bounded
// by timeout (go-redis bounds a read by the client's read timeout, not by
// a context's deadline: the read runs on a goroutine of its own); at most
// one is in flight (a scrape while an earlier read still waits on Redis
// does not start another). On any error, timeout or read in flight, the
// scrape exposes no depth at all, rather than some queues' or stale
// values, and errs counts it.
type depthCollector struct {
	desc    *prometheus.Desc
	queues  []string // the worker's, sorted
	timeout time.Duration
	errs    prometheus.Counter
	rdb     atomic.Pointer[redis.UniversalClient]
	busy    atomic.Bool // a read in flight
}

func newDepthCollector(queues []string, errs prometheus.Counter) *depthCollector {
	return &depthCollector{
		desc: prometheus.NewDesc(NameQueueTasks,
			"Tasks in the worker's queues (-queues), by state: pending (waiting for a slot), active (running), scheduled (to run later), retry (waiting to be retried), held (waiting in their principal's line: fair share); read from asynq at each scrape, absent when Redis did not answer within 2s.",
			[]string{"queue", "state"}, nil),
		queues: queues, timeout: DepthTimeout, errs: errs,
	}
}

// SetRedis gives the depth gauges (NameQueueTasks) the Redis their
// queues are read from at each scrape; until it is called they expose
// nothing.
func (m *Metrics) SetRedis(rdb redis.UniversalClient) { m.depth.rdb.Store(&rdb) }

// Describe implements prometheus.Collector.
func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.rdb.Load()
	if p == nil || len(c.queues) == 0 {
		return
	}
	if !c.busy.CompareAndSwap(false, true) {
		c.errs.Inc() // the last read still waits on Redis
		return
	}
	done := make(chan [][len(depthStates)]int, 1)
	go func() {
		d, err := c.read(*p)
		if err != nil {
			d = nil
		}
		// Free before the answer: the next scrape, which may start as
		// soon as this one has it, must not find this read in flight.
		c.busy.Store(false)
		done <- d // buffered: never blocks, even once the scrape gave up
	}()
	t := time.NewTimer(c.timeout)
	defer t.Stop()
	var depth [][len(depthStates)]int
	select {
	case depth = <-done:
	case <-t.C:
	}
	if depth == nil {
		c.errs.Inc()
		return
	}
	for i, q := range c.queues {
		for j, st := range depthStates {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(depth[i][j]), q, st)
		}
	}
}

// read reads the depth of each of the worker's queues, in the order of
// c.queues and depthStates, in one round trip; a queue asynq does not
// know yet is empty.
func (c *depthCollector) read(rdb redis.UniversalClient) ([][len(depthStates)]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	counts := make([][len(depthStates) - 1]*redis.IntCmd, len(c.queues))
	held := make([]*redis.Cmd, len(c.queues))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range c.queues {
			counts[i] = [len(depthStates) - 1]*redis.IntCmd{ // as depthStates, held aside
				p.LLen(ctx, asynqkey.Pending(q)), p.LLen(ctx, asynqkey.Active(q)),
				p.ZCard(ctx, asynqkey.Scheduled(q)), p.ZCard(ctx, asynqkey.Retry(q)),
			}
			held[i] = heldScript.Eval(ctx, p, []string{asynqkey.Prefix(q) + "groups"}, asynqkey.Prefix(q)+"g:")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([][len(depthStates)]int, len(c.queues))
	for i := range counts {
		for j, cmd := range counts[i] {
			out[i][j] = int(cmd.Val())
		}
		n, _ := held[i].Int64()
		out[i][len(depthStates)-1] = int(n)
	}
	return out, nil
}
