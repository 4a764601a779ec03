// Package metrics is the worker's Prometheus metrics, in a registry of its
// own (never the global one), and its health endpoints: /healthz,
// /readyz and /metrics, served by `worker -http ADDR`.
//
// The worker reports to Metrics through the small interface
// worker.Observer: once per finished attempt (RunEnded, from the one place
// that reports a run's record), once per promotion task, and once per
// Redis error it does not otherwise surface. RunEnded allocates nothing
// once a (state, verdict) pair has been seen: it is on every task's path.
package metrics

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/airlock-run/airlock/record"
)

// Metric names, as docs/deployment.md lists them.
const (
	NameTasks         = "airlock_tasks_finished_total"
	NameTaskDuration  = "airlock_task_duration_seconds"
	NameStepDuration  = "airlock_step_duration_seconds"
	NameInputBytes    = "airlock_input_bytes_total"
	NameEgressBytes   = "airlock_egress_bytes_total"
	NamePromotions    = "airlock_promotions_total"
	NameSlots         = "airlock_slots"
	NameSlotsBusy     = "airlock_slots_busy"
	NameRedisErrors   = "airlock_redis_errors_total"
	NameRedisRetries  = "airlock_redis_start_retries_total"
	NameReadyzFailure = "airlock_readyz_failures_total"
	NameBuildInfo     = "airlock_build_info"
	NamePending       = "airlock_approvals_pending"
	NamePendingBytes  = "airlock_approvals_pending_bytes"
	NameHelperRestart = "airlock_helper_restarts_total"
)

// Promotion results, the values of the result label of NamePromotions.
const (
	Published = "published" // this promotion published the output
	Already   = "already"   // it had been published before: nothing changed
	Refused   = "refused"   // the staged output did not match what was approved
	Failed    = "failed"    // a transient failure: asynq retries it
)

// Redis operations, the values of the op label of NameRedisErrors.
const (
	OpResult = "result" // storing a run's record as its task's result
	OpEvents = "events" // appending to the events stream
	OpPing   = "ping"   // the PING of /readyz
)

// Metrics holds the worker's collectors. The zero value is not usable:
// create it with New.
type Metrics struct {
	reg *prometheus.Registry

	tasks      *prometheus.CounterVec // state, verdict
	taskMu     sync.RWMutex
	taskCache  map[taskKey]prometheus.Counter
	taskDur    prometheus.Histogram
	stepDur    prometheus.Histogram
	inputBytes prometheus.Counter
	egressUp   prometheus.Counter
	egressDown prometheus.Counter
	promotions *prometheus.CounterVec // result
	published  prometheus.Counter     // promotions{result="published"}
	redisErrs  *prometheus.CounterVec // op
	startRetry prometheus.Counter
	readyFail  prometheus.Counter

	slots        atomic.Pointer[func() (busy, total int)]
	pending      atomic.Pointer[func() (int64, error)]
	pendingBytes atomic.Pointer[func() (int64, error)]
	restarts     atomic.Pointer[func() int64]
}

type taskKey struct {
	state   record.State
	verdict record.Verdict
}

// New returns the worker's metrics, registered in a registry of their own
// with Go's runtime and process collectors; version is the worker's
// (airlock_build_info's version label).
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), taskCache: map[taskKey]prometheus.Counter{}}
	m.tasks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameTasks,
		Help: "Attempts of runs this worker finished (the \"task end\" log line), by the record's state and verdict.",
	}, []string{"state", "verdict"})
	m.taskDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    NameTaskDuration,
		Help:    "Duration of an attempt of a run, from the worker taking it to its record (fetch, steps, checks, parking or promotion).",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	})
	m.stepDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    NameStepDuration,
		Help:    "Wall-clock duration of one step.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
	m.inputBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameInputBytes,
		Help: "Bytes of inputs downloaded into workspaces.",
	})
	egress := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameEgressBytes,
		Help: "Bytes networked runs moved through the worker's egress proxy, by direction (up: from the step).",
	}, []string{"direction"})
	m.egressUp, m.egressDown = egress.WithLabelValues("up"), egress.WithLabelValues("down")
	m.promotions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NamePromotions,
		Help: "Promotions of accepted outputs to the store, by result (published, already, refused, failed); a run the policy accepted and the worker published at once counts as published.",
	}, []string{"result"})
	m.published = m.promotions.WithLabelValues(Published)
	m.redisErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRedisErrors,
		Help: "Redis errors the worker met outside a run's own verdict, by operation (result, events, ping).",
	}, []string{"op"})
	m.startRetry = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameRedisRetries,
		Help: "Failed attempts to reach Redis at start (each is followed by a retry).",
	})
	m.readyFail = prometheus.NewCounter(prometheus.CounterOpts{
		Name: NameReadyzFailure,
		Help: "Requests to /readyz that answered 503.",
	})
	slotsOf := func(busy bool) func() float64 {
		return func() float64 {
			f := m.slots.Load()
			if f == nil {
				return 0
			}
			b, t := (*f)()
			if busy {
				return float64(b)
			}
			return float64(t)
		}
	}
	m.reg.MustRegister(
		m.tasks, m.taskDur, m.stepDur, m.inputBytes, egress, m.promotions, m.redisErrs, m.startRetry, m.readyFail,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: NameSlots, Help: "Slots of the worker (-concurrency); 0 until they are up."}, slotsOf(false)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: NameSlotsBusy, Help: "Slots running a task now."}, slotsOf(true)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: NamePending, Help: "Approvals waiting for a human (the deployment's, under the worker's -prefix; -1 when Redis did not answer).",
		}, gaugeOf(&m.pending)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: NamePendingBytes, Help: "Bytes (results and artifacts) that approvals not yet decided or published hold in Redis, counted against the worker's -max-pending-bytes (-1 when Redis did not answer); runs refused past it end with verdict pending_limit.",
		}, gaugeOf(&m.pendingBytes)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: NameHelperRestart, Help: "Slot helpers started again after a slot's first (a helper died, or a step changed its limits or scheduling).",
		}, func() float64 {
			if f := m.restarts.Load(); f != nil {
				return float64((*f)())
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: NameBuildInfo, Help: "Always 1; the labels say which worker this is.",
			ConstLabels: prometheus.Labels{"version": version, "go_version": runtime.Version()},
		}, func() float64 { return 1 }),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the registry the metrics are in.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetPending gives the pending-approvals gauge its source, called at each
// scrape (with a bound of its own: it reads Redis).
func (m *Metrics) SetPending(f func() (int64, error)) { m.pending.Store(&f) }

// SetHelperRestarts gives the helper-restarts counter its source.
func (m *Metrics) SetHelperRestarts(f func() int64) { m.restarts.Store(&f) }

// SetSlots gives the busy and total slot counts to the slot gauges; f is
// called at each scrape.
func (m *Metrics) SetSlots(f func() (busy, total int)) { m.slots.Store(&f) }

// RunEnded counts one finished attempt from its record: state and
// verdict, durations, input and egress bytes, and a promotion when the
// run published its output itself. It does not keep rec.
func (m *Metrics) RunEnded(rec *record.Run) {
	m.taskCounter(rec.State, rec.Verdict).Inc()
	m.taskDur.Observe(rec.DurationMS / 1000)
	for i := range rec.Steps {
		m.stepDur.Observe(rec.Steps[i].DurationMS / 1000)
	}
	if rec.Workspace.InputBytes > 0 {
		m.inputBytes.Add(float64(rec.Workspace.InputBytes))
	}
	var up, down int64
	for i := range rec.Egress {
		up += rec.Egress[i].BytesUp
		down += rec.Egress[i].BytesDown
	}
	if up > 0 {
		m.egressUp.Add(float64(up))
	}
	if down > 0 {
		m.egressDown.Add(float64(down))
	}
	if rec.State == record.StatePromoted {
		m.published.Inc()
	}
}

// gaugeOf reads a gauge from the function f holds: 0 before it is set,
// -1 when it fails.
func gaugeOf(f *atomic.Pointer[func() (int64, error)]) func() float64 {
	return func() float64 {
		g := f.Load()
		if g == nil {
			return 0
		}
		n, err := (*g)()
		if err != nil {
			return -1
		}
		return float64(n)
	}
}

// SetPendingBytes sets the function the pending-bytes gauge reads
// (approve.Store.PendingBytes).
func (m *Metrics) SetPendingBytes(f func() (int64, error)) { m.pendingBytes.Store(&f) }

// taskCounter returns the counter of a (state, verdict) pair, created on
// first use and then found without allocating.
func (m *Metrics) taskCounter(s record.State, v record.Verdict) prometheus.Counter {
	k := taskKey{s, v}
	m.taskMu.RLock()
	c, ok := m.taskCache[k]
	m.taskMu.RUnlock()
	if ok {
		return c
	}
	m.taskMu.Lock()
	defer m.taskMu.Unlock()
	if c, ok = m.taskCache[k]; !ok {
		c = m.tasks.WithLabelValues(string(s), string(v))
		m.taskCache[k] = c
	}
	return c
}

// Promotion counts one promotion task's result: Published, Already,
// Refused or Failed.
func (m *Metrics) Promotion(result string) { m.promotions.WithLabelValues(result).Inc() }

// RedisError counts a Redis error of an operation: OpResult, OpEvents,
// OpPing.
func (m *Metrics) RedisError(op string) { m.redisErrs.WithLabelValues(op).Inc() }

// StartRetry counts a failed attempt to reach Redis at start.
func (m *Metrics) StartRetry() { m.startRetry.Inc() }
