package metrics

import (
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-run/airlock/record"
)

// queueSet is the series of one value of the queue label: looked up once
// per record, then used without allocating.
type queueSet struct {
	name       string
	m          *Metrics
	taskDur    prometheus.Observer
	stepDur    prometheus.Observer
	inputBytes prometheus.Counter
	filesBytes prometheus.Counter
	egressUp   prometheus.Counter
	egressDown prometheus.Counter

	mu    sync.RWMutex
	tasks map[taskKey]prometheus.Counter // every pair of outcomes at 0; others on first use
}

type taskKey struct {
	state   record.State
	verdict record.Verdict
}

// failVerdicts are the verdicts a failed record can carry: every verdict
// but ok (TestOutcomesCoverRecord checks the list against package record).
var failVerdicts = []record.Verdict{
	record.VerdictExit, record.VerdictSignal, record.VerdictTimeout, record.VerdictCPUTime,
	record.VerdictFileSize, record.VerdictWorkspaceQuota, record.VerdictMemory, record.VerdictExecError,
	record.VerdictCanceled, record.VerdictOutputLimit, record.VerdictError, record.VerdictSchema,
	record.VerdictOutput, record.VerdictFetch, record.VerdictPendingLimit, record.VerdictSessionLimit,
}

// outcomes are the (state, verdict) pairs the worker ends an attempt's
// record with, each counted from 0 on every queue: completed ok; failed
// with any verdict but ok; an output parked, accepted, promoted, or found
// rejected or expired by an earlier attempt's approver, ok; a session
// past its timeout, expired timeout; a canceled run, canceled. A pair not
// listed still counts, from its first event.
func outcomes() []taskKey {
	out := []taskKey{
		{record.StateCompleted, record.VerdictOK}, {record.StateParked, record.VerdictOK},
		{record.StateAccepted, record.VerdictOK}, {record.StatePromoted, record.VerdictOK},
		{record.StateRejected, record.VerdictOK}, {record.StateExpired, record.VerdictOK},
		{record.StateExpired, record.VerdictTimeout}, {record.StateCanceled, record.VerdictCanceled},
	}
	for _, v := range failVerdicts {
		out = append(out, taskKey{record.StateFailed, v})
	}
	return out
}

// newQueueSet creates the series of queue q, every counter at 0.
func (m *Metrics) newQueueSet(q string) *queueSet {
	s := &queueSet{
		name: q, m: m,
		taskDur: m.taskDur.WithLabelValues(q), stepDur: m.stepDur.WithLabelValues(q),
		inputBytes: m.inputBytes.WithLabelValues(q), filesBytes: m.filesBytes.WithLabelValues(q),
		egressUp: m.egress.WithLabelValues(q, "up"), egressDown: m.egress.WithLabelValues(q, "down"),
		tasks: map[taskKey]prometheus.Counter{},
	}
	for _, k := range outcomes() {
		s.tasks[k] = m.tasks.WithLabelValues(q, string(k.state), string(k.verdict))
	}
	return s
}

// queueOf returns the series of queue q: one of New's queues, else those
// of queue "" (created on first use: the label never takes a value the
// operator did not give).
func (m *Metrics) queueOf(q string) *queueSet {
	if s, ok := m.queues[q]; ok {
		return s
	}
	if s := m.other.Load(); s != nil {
		return s
	}
	m.otherMu.Lock()
	defer m.otherMu.Unlock()
	if s := m.other.Load(); s != nil {
		return s
	}
	s := m.newQueueSet("")
	m.other.Store(s)
	return s
}

// task returns the counter of a (state, verdict) pair, created on first
// use when it is not one of the outcomes, then found without allocating.
func (s *queueSet) task(st record.State, v record.Verdict) prometheus.Counter {
	k := taskKey{st, v}
	s.mu.RLock()
	c, ok := s.tasks[k]
	s.mu.RUnlock()
	if ok {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok = s.tasks[k]; !ok {
		c = s.m.tasks.WithLabelValues(s.name, string(st), string(v))
		s.tasks[k] = c
	}
	return c
}

// sortedKeys returns the names of the queues, sorted.
func sortedKeys(m map[string]*queueSet) []string {
	out := make([]string, 0, len(m))
	for q := range m {
		out = append(out, q)
	}
	slices.Sort(out)
	return out
}
