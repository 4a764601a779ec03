package metrics

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// QueueInspector is what the depth of the queues is read from: an
// *asynq.Inspector on the worker's Redis.
type QueueInspector interface {
	// Queues lists the queues asynq knows (those a task was ever
	// enqueued into).
	Queues() ([]string, error)
	// GetQueueInfo reads one queue's counts.
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
}

// DepthTimeout bounds the read of the queues' depth at a scrape.
const DepthTimeout = 2 * time.Second

// Queue states, the values of the state label of NameQueueTasks.
var depthStates = [...]string{"pending", "active", "scheduled", "retry"}

// depthCollector exposes NameQueueTasks{queue, state} for the worker's
// queues, read at each scrape and only then: one Queues and one
// GetQueueInfo per queue (a few Redis commands each), never a poll of its
// own, so that an idle worker that is not scraped costs Redis nothing
// more. The read is bounded by timeout; at most one is in flight (a
// scrape while an earlier read still waits on Redis does not start
// another). On any error, timeout or read in flight, the scrape exposes
// no depth at all, rather than some queues' or stale values, and errs
// counts it.
type depthCollector struct {
	desc    *prometheus.Desc
	queues  []string // the worker's, sorted
	timeout time.Duration
	errs    prometheus.Counter
	insp    atomic.Pointer[QueueInspector]
	busy    atomic.Bool // a read in flight
}

func newDepthCollector(queues []string, errs prometheus.Counter) *depthCollector {
	return &depthCollector{
		desc: prometheus.NewDesc(NameQueueTasks,
			"Tasks in the worker's queues (-queues), by state: pending (waiting for a slot), active (running), scheduled (to run later), retry (waiting to be retried); read from asynq at each scrape, absent when Redis did not answer within 2s.",
			[]string{"queue", "state"}, nil),
		queues: queues, timeout: DepthTimeout, errs: errs,
	}
}

// SetQueueInspector gives the depth gauges (NameQueueTasks) their source,
// read at each scrape; until it is called they expose nothing.
func (m *Metrics) SetQueueInspector(i QueueInspector) { m.depth.insp.Store(&i) }

// Describe implements prometheus.Collector.
func (c *depthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *depthCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.insp.Load()
	if p == nil || len(c.queues) == 0 {
		return
	}
	if !c.busy.CompareAndSwap(false, true) {
		c.errs.Inc() // the last read still waits on Redis
		return
	}
	done := make(chan [][len(depthStates)]int, 1)
	go func() {
		defer c.busy.Store(false)
		d, err := c.read(*p)
		if err != nil {
			d = nil
		}
		done <- d
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
// c.queues and depthStates; a queue asynq does not know yet is empty.
func (c *depthCollector) read(insp QueueInspector) ([][len(depthStates)]int, error) {
	known, err := insp.Queues()
	if err != nil {
		return nil, err
	}
	out := make([][len(depthStates)]int, len(c.queues))
	for i, q := range c.queues {
		found := false
		for _, k := range known {
			if k == q {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		info, err := insp.GetQueueInfo(q)
		if err == nil && info == nil {
			err = fmt.Errorf("queue %s: no info", q)
		}
		if err != nil {
			return nil, err
		}
		out[i] = [len(depthStates)]int{info.Pending, info.Active, info.Scheduled, info.Retry}
	}
	return out, nil
}
