package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/airlock-run/airlock/record"
)

// TestPrincipalLabels: a principal the quotas: section names gets a label
// of its own, every other (and none) counts under "*": the label's values
// are bounded by the policy, not by callers.
func TestPrincipalLabels(t *testing.T) {
	m := New("test", "q")
	m.SetPrincipals([]string{"agent", "*"})
	for _, p := range []string{"agent", "agent", "stranger-1", "stranger-2", ""} {
		m.RunEnded(&record.Run{Queue: "q", Principal: p, State: record.StateCompleted, Verdict: record.VerdictOK})
	}
	if got := testutil.ToFloat64(m.principals.tasks.WithLabelValues("q", "agent", "ok")); got != 2 {
		t.Errorf("agent: %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.principals.tasks.WithLabelValues("q", "*", "ok")); got != 3 {
		t.Errorf("\"*\": %v, want 3", got)
	}
	if n := testutil.CollectAndCount(m.principals.tasks); n != 2 {
		t.Errorf("%d series, want 2 (agent and \"*\")", n)
	}
}
