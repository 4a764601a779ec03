//go:build linux

package bench

// The report of a run: its figures over rounds and its tables' rows, as
// report.go prints them and -json/-o write them.

import (
	"math"
	"slices"
)

// Stat is a figure over rounds.
type Stat struct {
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples"`
}

func newStat(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Median: m, Min: s[0], Max: s[len(s)-1], Samples: xs}
}

// percentile of sorted xs, nearest rank.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Report is everything a run measured.
type Report struct {
	Machine    Machine         `json:"machine"`
	Command    string          `json:"command"`
	N          int             `json:"n"`
	Rounds     int             `json:"rounds"`
	Sizes      sizes           `json:"sizes"`
	CPULoop    *CPULoop        `json:"cpu_loop,omitempty"`
	Throughput []ThroughputRow `json:"throughput,omitempty"`
	Latency    []LatencyRow    `json:"latency,omitempty"`
	Idle       []IdleRow       `json:"idle,omitempty"`
	Overhead   []OverheadRow   `json:"overhead,omitempty"`
	RSS        []RSSRow        `json:"rss,omitempty"`
	Approvals  *ApprovalsRow   `json:"approvals,omitempty"`
	Fetch      *FetchRow       `json:"fetch,omitempty"`
	Fairness   []FairnessRow   `json:"fairness,omitempty"`
	Live       []LiveRow       `json:"live,omitempty"`
	Start      []StartRow      `json:"start,omitempty"`
	Session    *SessionReport  `json:"session,omitempty"`
	API        *APIReport      `json:"api,omitempty"`
	Redis      *RedisReport    `json:"redis,omitempty"`
	Ceiling    *CeilingReport  `json:"ceiling,omitempty"`
	Profile    string          `json:"cpu_profile,omitempty"`
	Notes      []string        `json:"notes,omitempty"`
	Skipped    []string        `json:"skipped,omitempty"`
	Elapsed    float64         `json:"elapsed_s"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores     int    `json:"cores"`
	Kernel    string `json:"kernel"`
	Redis     string `json:"redis_version"`
	Go        string `json:"go"`
	Root      bool   `json:"root"`
	Isolation string `json:"isolation"`       // strict or best-effort
	Tiers     any    `json:"tiers,omitempty"` // the isolation a run record reported
	Quota     string `json:"quota,omitempty"` // workspace quota mechanism
	Output    bool   `json:"output_contract"` // whether the script workload validates and promotes
	Hostname  string `json:"hostname,omitempty"`
	Date      string `json:"date"`
	// Load averages (1, 5, 15 min) at the start and end of the run: the
	// machine may be shared.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
}

// CPULoop is the calibration of the CPU-bound workload.
type CPULoop struct {
	Iterations int     `json:"iterations"`
	CPUMS      float64 `json:"cpu_ms"` // CPU time of one bare run after calibration
}

// ThroughputRow is one workload at one concurrency.
type ThroughputRow struct {
	Workload    string `json:"workload"`
	Concurrency int    `json:"concurrency"`
	Tasks       int    `json:"tasks"`
	Baseline    Stat   `json:"baseline_tasks_per_s"`
	Airlock     Stat   `json:"airlock_tasks_per_s"`
	Ratio       Stat   `json:"ratio"` // airlock/baseline of each round
	// CPU milliseconds per task of each server's whole process tree
	// (server, helpers, steps), from wait4's rusage and /proc.
	BaselineCPU Stat `json:"baseline_cpu_ms_per_task"`
	AirlockCPU  Stat `json:"airlock_cpu_ms_per_task"`
	// The durable baseline, for workloads with a result: the bare one
	// that also writes the result to a file (fsync, rename, fsync of the
	// directory). Nil for the others.
	Durable      *Stat  `json:"durable_tasks_per_s,omitempty"`
	DurableRatio *Stat  `json:"durable_ratio,omitempty"` // airlock/durable of each round
	DurableCPU   *Stat  `json:"durable_cpu_ms_per_task,omitempty"`
	Note         string `json:"note,omitempty"`
}

// LatencyRow is the idle latency of one system, in milliseconds.
type LatencyRow struct {
	System string `json:"system"`
	Tasks  int    `json:"tasks_per_round"`
	// Enqueue → Wait returns (what a client sees; includes Wait's polling).
	P50 Stat `json:"p50_ms"`
	P90 Stat `json:"p90_ms"`
	P99 Stat `json:"p99_ms"`
	// Enqueue → the record's finished_at (the server's side of it).
	DoneP50 Stat `json:"done_p50_ms"`
	DoneP99 Stat `json:"done_p99_ms"`
}

// OverheadRow is one cost of the hot path, in microseconds per operation.
type OverheadRow struct {
	Name       string `json:"name"`
	Per        string `json:"per"` // task, step, slot...
	Iterations int    `json:"iterations"`
	Micros     Stat   `json:"us"`
	// CPUMicros is the CPU time per operation of every process involved
	// (for steps: this process, the helper and the step), where measured.
	CPUMicros *Stat  `json:"cpu_us,omitempty"`
	Bound     string `json:"bound"`
}

// RSSRow is the resident memory of one server process over a long run.
type RSSRow struct {
	System      string `json:"system"`
	Concurrency int    `json:"concurrency"`
	Tasks       int    `json:"tasks"`
	StartKB     int64  `json:"start_kb"`       // right after start
	BeforeKB    int64  `json:"before_kb"`      // after the warm-up tasks
	AfterKB     int64  `json:"after_kb"`       // after all tasks
	MaxKB       int64  `json:"max_sampled_kb"` // highest VmRSS sampled during the run
	HWMKB       int64  `json:"hwm_kb"`         // VmHWM at the end
	// The worker's slot helpers (separate processes), summed: after the
	// warm-up and after all tasks.
	HelpersBeforeKB int64   `json:"helpers_before_kb,omitempty"`
	HelpersKB       int64   `json:"helpers_after_kb,omitempty"`
	Seconds         float64 `json:"seconds"`
	TasksPerSec     float64 `json:"tasks_per_s"`
	SamplesKB       []int64 `json:"samples_kb,omitempty"` // VmRSS every 5% of the tasks
	// HelperSamplesKB is the helpers' summed VmRSS at the same points.
	HelperSamplesKB []int64 `json:"helper_samples_kb,omitempty"`
}

// ApprovalsRow is the approval-listing figure.
type ApprovalsRow struct {
	Pending int     `json:"pending"`
	ParkMS  float64 `json:"park_total_ms"`
	ListMS  Stat    `json:"list_ms"`
	Listed  int     `json:"listed"`
	CLIMS   *Stat   `json:"cli_ms,omitempty"`
	Note    string  `json:"note,omitempty"`
}
