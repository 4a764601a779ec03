package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-run/airlock/record"
)

// NamePrincipalTasks counts finished attempts per principal: only the
// principals the policy's quotas: section names get a label of their own
// (bounded cardinality), every other under "*".
const NamePrincipalTasks = "airlock_principal_tasks_finished_total"

// otherPrincipals is the principal label of every principal the quotas:
// section does not name.
const otherPrincipals = "*"

// principalSet holds the principals with a label of their own.
type principalSet struct {
	named atomic.Pointer[map[string]bool]
	tasks *prometheus.CounterVec // queue, principal, verdict
}

func newPrincipalSet(reg *prometheus.Registry) *principalSet {
	p := &principalSet{tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: NamePrincipalTasks,
		Help: "Attempts of runs this worker finished, by queue, principal (those the policy's quotas: section names; \"*\" for every other) and verdict (pending_limit: a quota or the fleet's -max-pending-bytes refused to park).",
	}, []string{"queue", "principal", "verdict"})}
	reg.MustRegister(p.tasks)
	return p
}

// SetPrincipals names the principals that get a label of their own (the
// policy's quotas: section, "*" aside).
func (m *Metrics) SetPrincipals(names []string) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		if n != otherPrincipals {
			set[n] = true
		}
	}
	m.principals.named.Store(&set)
}

// run counts rec under queue and its principal's label.
func (p *principalSet) run(queue string, rec *record.Run) {
	label := otherPrincipals
	if set := p.named.Load(); set != nil && (*set)[rec.Principal] {
		label = rec.Principal
	}
	p.tasks.WithLabelValues(queue, label, string(rec.Verdict)).Inc()
}
