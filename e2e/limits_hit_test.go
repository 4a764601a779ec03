//go:build linux

package e2e

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// A step that needs more processes than its limit allows ends with the
// limit named in limits_hit, and, when it then waits until its deadline,
// an error that says which limit it hit; a step within its limits names
// none.
func TestLimitsHit(t *testing.T) {
	b := setup(t)
	if m := b.run(`{"version":1,"steps":[{"run":["true"]}]}`).Isolation.Memory; m == "" || strings.HasPrefix(m, "off") {
		t.Skip("no cgroup")
	}
	rec := b.run(`{"version":1,"limits":{"processes":16},"steps":[
		{"name":"ok","run":["sh","-c","sleep 0.1 & wait"]},
		{"name":"forks","run":["sh","-c","(for i in $(seq 40); do sleep 30 & done) 2>/dev/null; sleep 30"],"timeout":"2s"}]}`)
	ok, forks := stepOf(t, rec, 0), stepOf(t, rec, 1)
	if len(ok.LimitsHit) != 0 {
		t.Errorf("a step within its limits: limits_hit %v", ok.LimitsHit)
	}
	if !slices.Contains(forks.LimitsHit, record.LimitProcesses) || forks.PidsRefused == 0 {
		t.Fatalf("a step past processes=16: limits_hit %v, pids_refused %d:\n%s", forks.LimitsHit, forks.PidsRefused, mustJSON(t, rec))
	}
	if forks.Verdict != record.VerdictTimeout || !strings.Contains(forks.Error, "hit processes=16") {
		t.Errorf("verdict %s, error %q: want a timeout naming the limit", forks.Verdict, forks.Error)
	}
	// When: the forks are refused at once, long before the 2 s deadline.
	m := regexp.MustCompile(`forks? refused, the first by ([0-9.]+) s\)`).FindStringSubmatch(forks.Error)
	if m == nil {
		t.Fatalf("error %q: want when the limit was first hit", forks.Error)
	}
	if by, _ := strconv.ParseFloat(m[1], 64); by <= 0 || by > 1.5 {
		t.Errorf("error %q: first hit by %v s, want within the first 1.5 s of a step that forks at once", forks.Error, by)
	}
	t.Logf("error: %s", forks.Error)
}
