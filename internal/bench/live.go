//go:build linux

package bench

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
)

// SecLive is the live-output section: what live output (worker
// -live-output, on by default) costs a run nobody listens to, the trivial
// and script workloads through one Airlock worker with it off and on,
// side by side in interleaved rounds.
const SecLive = "live"

// LiveRow is one workload's figures with live output off and on.
type LiveRow struct {
	Workload    string `json:"workload"`
	Concurrency int    `json:"concurrency"`
	Tasks       int    `json:"tasks_per_round"`
	// OffPerSec and OnPerSec are tasks/s, OffCPUMS and OnCPUMS the
	// worker's CPU ms per task, over rounds.
	OffPerSec Stat `json:"off_tasks_per_s"`
	OnPerSec  Stat `json:"on_tasks_per_s"`
	OffCPUMS  Stat `json:"off_cpu_ms"`
	OnCPUMS   Stat `json:"on_cpu_ms"`
}

// liveConc is the worker's slots in the live section.
const liveConc = 2

// liveCost measures wl with live output off and on, round by round.
func (h *harness) liveCost(ctx context.Context, wl workload) (LiveRow, error) {
	n := h.tasksFor(wl)
	row := LiveRow{Workload: wl.name, Concurrency: liveConc, Tasks: n}
	var offPS, onPS, offCPU, onCPU []float64
	for round := range h.opt.Rounds {
		for _, on := range []bool{false, true} {
			q := h.queue(fmt.Sprintf("live-%s-%v-%d", wl.name, on, round))
			v, err := h.timedRun(ctx, systemAirlock, wl, liveConc, q, n, []string{fmt.Sprintf("-live-output=%v", on)})
			if err != nil {
				return row, err
			}
			h.logf("  live %-7s output %-5v: %7.1f tasks/s, %.2f ms CPU/task", wl.name, on, v.perSec, v.cpuMS)
			if on {
				onPS, onCPU = append(onPS, v.perSec), append(onCPU, v.cpuMS)
			} else {
				offPS, offCPU = append(offPS, v.perSec), append(offCPU, v.cpuMS)
			}
		}
	}
	row.OffPerSec, row.OnPerSec, row.OffCPUMS, row.OnCPUMS = newStat(offPS), newStat(onPS), newStat(offCPU), newStat(onCPU)
	return row, nil
}

// liveTable is the live section's table.
func liveTable(rows []LiveRow) string {
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nLive output with nobody listening: one Airlock worker of %d slots, -live-output off and on, interleaved rounds (medians)\n", rows[0].Concurrency)
	t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "workload\ttasks\toff tasks/s\ton tasks/s\ton/off\toff CPU ms/task\ton CPU ms/task\t")
	for _, r := range rows {
		ratio := 0.0
		if r.OffPerSec.Median > 0 {
			ratio = r.OnPerSec.Median / r.OffPerSec.Median
		}
		fmt.Fprintf(t, "%s\t%d\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t\n", r.Workload, r.Tasks, r.OffPerSec.Median, r.OnPerSec.Median, ratio, r.OffCPUMS.Median, r.OnCPUMS.Median)
	}
	_ = t.Flush()
	return b.String()
}
