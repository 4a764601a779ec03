// Package metrics is the worker's Prometheus metrics, in a registry of its
// own (never the global one), and its health endpoints: /healthz,
// /readyz and /metrics, served by `worker -http ADDR`.
//
// The worker reports to Metrics through the small interface
// worker.Observer: once per finished attempt (RunEnded, from the one place
// that reports a run's record), once per promotion task, and once per
// Redis error it does not otherwise surface. RunEnded allocates nothing
// once a (queue, state, verdict) triple has been seen: it is on every
// task's path.
//
// The queue label of the task metrics takes the worker's own queues only
// (-queues, given to New): its cardinality is the operator's, never a
// spec's. Every labelled counter starts at 0 for its known label values
// (queues, the (state, verdict) pairs a record can end with, results,
// operations), so that increase() counts the first events. The depth of
// the queues (NameQueueTasks) is read from asynq at scrape time (depth.go).
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
	NameFilesBytes    = "airlock_files_bytes_total"
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
	NameQueueTasks    = "airlock_queue_tasks"
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
	OpQueues = "queues" // the read of the queues' depth at a scrape (NameQueueTasks)
)

// Metrics holds the worker's collectors. The zero value is not usable:
// create it with New.
type Metrics struct {
	reg *prometheus.Registry

	tasks      *prometheus.CounterVec   // queue, state, verdict
	taskDur    *prometheus.HistogramVec // queue
	stepDur    *prometheus.HistogramVec // queue
	inputBytes *prometheus.CounterVec   // queue
	filesBytes *prometheus.CounterVec   // queue
	egress     *prometheus.CounterVec   // queue, direction
	queues     map[string]*queueSet     // the worker's queues, fixed by New: read without a lock
	otherMu    sync.Mutex
	other      atomic.Pointer[queueSet] // queue "": a record of no queue of the worker's (none in practice)
	depth      *depthCollector
	promotions *prometheus.CounterVec // result
	published  prometheus.Counter     // promotions{result="published"}
	redisErrs  *prometheus.CounterVec // op
	startRetry prometheus.Counter
	readyFail  prometheus.Counter
	principals *principalSet // per principal (principals.go)

	slots        atomic.Pointer[func() (busy, total int)]
	pending      atomic.Pointer[func() (int64, error)]
	pendingBytes atomic.Pointer[func() (int64, error)]
	restarts     atomic.Pointer[func() int64]
}

// New returns the worker's metrics, registered in a registry of their own
// with Go's runtime and process collectors; version is the worker's
// (airlock_build_info's version label), queues the queues it serves
// (-queues): the values of the queue label, each with its counters at 0.
func New(version string, queues ...string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), queues: map[string]*queueSet{}}
	m.principals = newPrincipalSet(m.reg)
	m.tasks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameTasks,
		Help: "Attempts of runs this worker finished (the \"task end\" log line), by queue and the record's state and verdict.",
	}, []string{"queue", "state", "verdict"})
	m.taskDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameTaskDuration,
		Help:    "Duration of an attempt of a run, from the worker taking it to its record (fetch, steps, checks, parking or promotion), by queue.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800},
	}, []string{"queue"})
	m.stepDur = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    NameStepDuration,
		Help:    "Wall-clock duration of one step, by queue.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	}, []string{"queue"})
	m.inputBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameInputBytes,
		Help: "Bytes of the specs' inputs the worker downloaded into workspaces (failed downloads included, up to where they stopped), by queue.",
	}, []string{"queue"})
	m.filesBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameFilesBytes,
		Help: "Bytes of the specs' inline files the worker wrote into workspaces, by queue.",
	}, []string{"queue"})
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameEgressBytes,
		Help: "Bytes networked runs moved through the worker's egress proxy, by queue and direction (up: from the step).",
	}, []string{"queue", "direction"})
	m.promotions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NamePromotions,
		Help: "Promotions of accepted outputs to the store, by result (published, already, refused, failed); a run the policy accepted and the worker published at once counts as published.",
	}, []string{"result"})
	for _, r := range []string{Published, Already, Refused, Failed} {
		m.promotions.WithLabelValues(r)
	}
	m.published = m.promotions.WithLabelValues(Published)
	m.redisErrs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NameRedisErrors,
		Help: "Redis errors the worker met outside a run's own verdict, by operation (result, events, ping, queues).",
	}, []string{"op"})
	for _, op := range []string{OpResult, OpEvents, OpPing, OpQueues} {
		m.redisErrs.WithLabelValues(op)
	}
	for _, q := range queues {
		if m.queues[q] == nil {
			m.queues[q] = m.newQueueSet(q)
		}
	}
	m.depth = newDepthCollector(sortedKeys(m.queues), m.redisErrs.WithLabelValues(OpQueues))
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
		m.tasks, m.taskDur, m.stepDur, m.inputBytes, m.filesBytes, m.egress, m.promotions, m.redisErrs, m.startRetry, m.readyFail,
		m.depth,
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

// RunEnded counts one finished attempt from its record, under its queue:
// state and verdict, durations, the bytes of its downloaded inputs
// (rec.Inputs) and of its inline files (rec.Workspace.InputBytes), egress
// bytes, and a promotion when the run published its output itself. A
// queue New was not given counts under queue "". It does not keep rec.
func (m *Metrics) RunEnded(rec *record.Run) {
	q := m.queueOf(rec.Queue)
	q.task(rec.State, rec.Verdict).Inc()
	queue := rec.Queue
	if _, ok := m.queues[queue]; !ok {
		queue = "" // as queueOf: a queue of no label of its own
	}
	m.principals.run(queue, rec)
	q.taskDur.Observe(rec.DurationMS / 1000)
	for i := range rec.Steps {
		q.stepDur.Observe(rec.Steps[i].DurationMS / 1000)
	}
	var in int64
	for i := range rec.Inputs {
		in += rec.Inputs[i].Bytes
	}
	if in > 0 {
		q.inputBytes.Add(float64(in))
	}
	if rec.Workspace.InputBytes > 0 {
		q.filesBytes.Add(float64(rec.Workspace.InputBytes))
	}
	var up, down int64
	for i := range rec.Egress {
		up += rec.Egress[i].BytesUp
		down += rec.Egress[i].BytesDown
	}
	if up > 0 {
		q.egressUp.Add(float64(up))
	}
	if down > 0 {
		q.egressDown.Add(float64(down))
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

// Promotion counts one promotion task's result: Published, Already,
// Refused or Failed.
func (m *Metrics) Promotion(result string) { m.promotions.WithLabelValues(result).Inc() }

// RedisError counts a Redis error of an operation: OpResult, OpEvents,
// OpPing.
func (m *Metrics) RedisError(op string) { m.redisErrs.WithLabelValues(op).Inc() }

// StartRetry counts a failed attempt to reach Redis at start.
func (m *Metrics) StartRetry() { m.startRetry.Inc() }
