//go:build linux

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// runTiny runs the harness's sections (every one when nil) at a tiny size
// (20 tasks, one round) on a real Redis, within d, logging its progress
// and its table; it returns the report and the table.
func runTiny(t *testing.T, d time.Duration, sections []string) (*Report, string) {
	t.Helper()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	rep, err := Run(ctx, Options{RedisURL: redistest.URL(t), N: 20, Rounds: 1, Sections: sections, Progress: &progress})
	t.Log("progress:\n" + progress.String())
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Log("report:\n" + table.String())
	return rep, table.String()
}

// TestHarnessTiny runs the whole harness at a tiny size, so that it cannot
// rot: it asserts no speed, only that every figure was produced and is
// positive, and that every task ended ok (Run fails otherwise). Without
// root the worker runs with best-effort isolation.
func TestHarnessTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real worker and baseline processes for ~30s; not with -short")
	}
	// Every section but the ceiling, which TestCeilingSection runs.
	var sections []string
	for _, s := range AllSections {
		if s != SecCeiling {
			sections = append(sections, s)
		}
	}
	rep, table := runTiny(t, 5*time.Minute, sections)

	m := rep.Machine
	if m.Cores < 1 || m.Kernel == "" || m.Redis == "" || m.Isolation == "" || m.Tiers == nil {
		t.Errorf("machine: %+v", m)
	}
	if rep.CPULoop == nil || rep.CPULoop.Iterations <= 0 || rep.CPULoop.CPUMS <= 0 {
		t.Errorf("cpu loop: %+v", rep.CPULoop)
	}
	positive := func(what string, s Stat) {
		t.Helper()
		if len(s.Samples) == 0 || s.Median <= 0 || s.Min <= 0 || s.Max < s.Min {
			t.Errorf("%s: %+v, want positive samples", what, s)
		}
	}
	if got, want := len(rep.Throughput), len(AllWorkloads)*2; got != want {
		t.Errorf("%d throughput rows, want %d", got, want)
	}
	for _, r := range rep.Throughput {
		positive(r.Workload+" baseline", r.Baseline)
		positive(r.Workload+" airlock", r.Airlock)
		positive(r.Workload+" ratio", r.Ratio)
		positive(r.Workload+" baseline CPU/task", r.BaselineCPU)
		positive(r.Workload+" airlock CPU/task", r.AirlockCPU)
	}
	if len(rep.Latency) != 2 {
		t.Errorf("%d latency rows, want 2", len(rep.Latency))
	}
	for _, r := range rep.Latency {
		for name, s := range map[string]Stat{"p50": r.P50, "p90": r.P90, "p99": r.P99, "done p50": r.DoneP50, "done p99": r.DoneP99} {
			positive(r.System+" "+name, s)
		}
	}
	keys := len(overheadItems)
	if !outputSupport {
		keys -= 4
	}
	if len(rep.Overhead) != keys {
		t.Errorf("%d overhead rows, want %d", len(rep.Overhead), keys)
	}
	for _, r := range rep.Overhead {
		positive(r.Name, r.Micros)
	}
	if len(rep.RSS) != 2 {
		t.Errorf("%d RSS rows, want 2", len(rep.RSS))
	}
	for _, r := range rep.RSS {
		if r.StartKB <= 0 || r.BeforeKB <= 0 || r.AfterKB <= 0 || r.MaxKB <= 0 || r.HWMKB <= 0 || r.TasksPerSec <= 0 || r.Tasks <= 0 {
			t.Errorf("rss: %+v", r)
		}
	}
	if outputSupport {
		a := rep.Approvals
		if a == nil || a.Pending != 200 || a.Listed != a.Pending {
			t.Fatalf("approvals: %+v", a)
		}
		positive("approvals list", a.ListMS)
		if a.CLIMS != nil {
			positive("approve CLI", *a.CLIMS)
		}
	}
	if r := rep.Redis; r == nil {
		if !slices.ContainsFunc(rep.Skipped, func(s string) bool { return strings.Contains(s, "redis") }) {
			t.Error("redis: no report, and not skipped")
		}
	} else {
		for _, row := range r.Rows {
			// A run costs Redis at least asynq's enqueue, dequeue and
			// completion scripts, and sends at least those three.
			if row.Executed.Raw < 10 || row.Sent.Raw < 3 || row.Sent.Raw > row.Executed.Raw || row.CPUUS.Raw <= 0 {
				t.Errorf("redis %s: %+v", row.Path, row)
			}
		}
		if len(r.Rows) < 6 {
			t.Errorf("redis: %d rows, want bare asynq and Airlock's five paths", len(r.Rows))
		}
	}
	if s := rep.Session; s == nil || len(s.Paths) != 2 { // TestSessionSection checks its figures
		t.Errorf("session: %+v", s)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil || !json.Valid(js.Bytes()) {
		t.Errorf("WriteJSON: %v", err)
	}
	if strings.Contains(table, "NaN") || strings.Contains(table, "Inf") {
		t.Errorf("table holds NaN or Inf")
	}
}

func TestResultMatchesSchema(t *testing.T) {
	if n := len(ResultJSON); n < 1000 || n > 1100 {
		t.Errorf("result is %d bytes, want about 1 KiB", n)
	}
	if !outputSupport {
		t.Skip("no contract package")
	}
	s, err := contract.Compile([]byte(ResultSchema))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := s.Validate([]byte(ResultJSON))
	if err != nil || len(vs) > 0 {
		t.Fatalf("Validate: %v %v", err, vs)
	}
}

func TestStat(t *testing.T) {
	s := newStat([]float64{3, 1, 2})
	if s.Median != 2 || s.Min != 1 || s.Max != 3 {
		t.Errorf("odd: %+v", s)
	}
	if s := newStat([]float64{4, 1, 3, 2}); s.Median != 2.5 {
		t.Errorf("even: %+v", s)
	}
	xs := make([]float64, 200)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	for p, want := range map[float64]float64{50: 100, 90: 180, 99: 198, 100: 200} {
		if got := percentile(xs, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
}

func TestSizes(t *testing.T) {
	full := sizesFor(FullN, 0)
	if full.RSS != 100000 || full.Latency != 200 || full.Approvals != 10000 || full.Throughput != 1000 {
		t.Errorf("full: %+v", full)
	}
	if s := sizesFor(50, 0); s.RSS >= 1000 || s.Latency < 20 {
		t.Errorf("-n 50: %+v", s)
	}
}
