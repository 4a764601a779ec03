//go:build linux

package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// f formats a figure with a precision that suits its size.
func f(v float64) string {
	switch a := max(v, -v); {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// span formats a Stat as "median [min–max]", or the median alone for one
// sample.
func span(s Stat) string {
	if len(s.Samples) <= 1 {
		return f(s.Median)
	}
	return fmt.Sprintf("%s [%s–%s]", f(s.Median), f(s.Min), f(s.Max))
}

// WriteTable writes the report as plain-text tables.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Airlock benchmark — %d cores, kernel %s, Redis %s, %s\n", m.Cores, m.Kernel, m.Redis, m.Go)
	fmt.Fprintf(&b, "isolation %s (%s)", m.Isolation, map[bool]string{true: "root", false: "not root"}[m.Root])
	if m.Quota != "" {
		fmt.Fprintf(&b, ", workspace quota: %s", m.Quota)
	}
	fmt.Fprintf(&b, "; n=%d, %d round(s); figures are median [min–max] over rounds\n", r.N, r.Rounds)
	if m.LoadStart != "" {
		fmt.Fprintf(&b, "load average at start %s, at end %s (the machine may be shared)\n", m.LoadStart, m.LoadEnd)
	}
	if r.CPULoop != nil {
		fmt.Fprintf(&b, "CPU-bound loop: %d iterations = %.1f ms CPU in a bare exec\n", r.CPULoop.Iterations, r.CPULoop.CPUMS)
	}
	tw := func() *tabwriter.Writer { return tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0) }

	if len(r.Throughput) > 0 {
		fmt.Fprintf(&b, "\nThroughput, tasks/s (each run: a fresh server process, a pre-filled queue, TaskCheckInterval %s)\n", TaskCheckInterval)
		fmt.Fprintln(&b, "CPU ms/task: median CPU time of the server's process tree (server, helpers, steps; not Redis) per task")
		t := tw()
		durable := false
		for _, row := range r.Throughput {
			durable = durable || row.Durable != nil
		}
		if durable {
			fmt.Fprintln(t, "workload\tconc\ttasks\tbaseline\tdurable\tairlock\tairlock/baseline\tairlock/durable\tCPU ms/task: baseline\tdurable\tairlock\t")
		} else {
			fmt.Fprintln(t, "workload\tconc\ttasks\tbaseline\tairlock\tairlock/baseline\tCPU ms/task: baseline\tairlock\t")
		}
		for _, row := range r.Throughput {
			name := row.Workload
			if row.Note != "" {
				name += " *"
			}
			if !durable {
				fmt.Fprintf(t, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", name, row.Concurrency, row.Tasks, span(row.Baseline), span(row.Airlock), span(row.Ratio),
					f(row.BaselineCPU.Median), f(row.AirlockCPU.Median))
				continue
			}
			d, dr, dc := "—", "—", "—"
			if row.Durable != nil {
				d, dr, dc = span(*row.Durable), span(*row.DurableRatio), f(row.DurableCPU.Median)
			}
			fmt.Fprintf(t, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, row.Concurrency, row.Tasks, span(row.Baseline), d, span(row.Airlock),
				span(row.Ratio), dr, f(row.BaselineCPU.Median), dc, f(row.AirlockCPU.Median))
		}
		t.Flush()
		if durable {
			fmt.Fprintln(&b, "  durable: the baseline that also writes each result to a file (temp file, fsync, rename, fsync of the directory); — where a workload has no result")
		}
		for _, row := range r.Throughput {
			if row.Note != "" {
				fmt.Fprintf(&b, "  * %s\n", row.Note)
				break
			}
		}
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "\nIdle latency, ms: enqueue → Wait returns (trivial task, concurrency %d, %d tasks per round)\n", latencyConcurrency, r.Latency[0].Tasks)
		t := tw()
		fmt.Fprintln(t, "system\tp50\tp90\tp99\tdone p50\tdone p99\t")
		for _, row := range r.Latency {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t\n", row.System, span(row.P50), span(row.P90), span(row.P99), span(row.DoneP50), span(row.DoneP99))
		}
		t.Flush()
		fmt.Fprintln(&b, "  done = enqueue → the record's finished_at (server side); Wait blocks on the events stream, which both servers append to")
	}
	if len(r.Start) > 0 {
		fmt.Fprintf(&b, "\nCold start, ms (a fresh server process, concurrency %d, one trivial task waiting in its queue; medians of %d starts per round)\n", r.Start[0].Concurrency, startRuns)
		t := tw()
		fmt.Fprintln(t, "system\tstart → ready\tready → first task done\t")
		for _, row := range r.Start {
			fmt.Fprintf(t, "%s\t%s\t%s\t\n", row.System, span(row.ReadyMS), span(row.FirstTaskMS))
		}
		t.Flush()
		fmt.Fprintln(&b, "  ready = the server's ready line: the worker prints it once it serves its queues (every slot helper up); first task done = its record's finished_at")
	}
	if r.Session != nil {
		b.WriteString(sessionTable(r.Session))
	}
	if r.API != nil {
		b.WriteString(apiTable(r.API))
	}
	if len(r.Idle) > 0 {
		b.WriteString(idleTable(r.Idle))
	}
	if r.Fetch != nil {
		b.WriteString(fetchTable(r.Fetch))
	}
	b.WriteString(fairnessTable(r.Fairness))
	b.WriteString(liveTable(r.Live))
	b.WriteString(redisTable(r.Redis))
	b.WriteString(ceilingTable(r.Ceiling))
	if len(r.Overhead) > 0 {
		fmt.Fprintf(&b, "\nPer-task overhead breakdown, µs per operation (in-process, sequential)\n")
		fmt.Fprintln(&b, "CPU µs: CPU time of every process involved (this one, the slot helper, the step), median")
		t := tw()
		fmt.Fprintln(t, "operation\tper\titer\tµs (wall)\tCPU µs\t")
		for _, row := range r.Overhead {
			cpu := ""
			if row.CPUMicros != nil {
				cpu = f(row.CPUMicros.Median)
			}
			fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\t\n", row.Name, row.Per, row.Iterations, span(row.Micros), cpu)
		}
		t.Flush()
	}
	if len(r.RSS) > 0 {
		fmt.Fprintf(&b, "\nServer RSS (VmRSS of the server process, MiB; trivial tasks)\n")
		t := tw()
		fmt.Fprintln(t, "system\tconc\ttasks\tstart\tafter warm-up\tafter all\tmax sampled\tVmHWM\ttasks/s\t")
		for _, row := range r.RSS {
			fmt.Fprintf(t, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t\n", row.System, row.Concurrency, row.Tasks,
				mib(row.StartKB), mib(row.BeforeKB), mib(row.AfterKB), mib(row.MaxKB), mib(row.HWMKB), row.TasksPerSec)
		}
		t.Flush()
		for _, row := range r.RSS {
			if row.HelpersKB > 0 {
				fmt.Fprintf(&b, "  the worker's %d slot helpers (separate processes, not in VmRSS above): %.1f MiB after warm-up, %.1f MiB after all\n",
					row.Concurrency, mib(row.HelpersBeforeKB), mib(row.HelpersKB))
			}
		}
	}
	if a := r.Approvals; a != nil {
		fmt.Fprintf(&b, "\nApprovals: %d pending (parked in %.0f ms)\n", a.Pending, a.ParkMS)
		fmt.Fprintf(&b, "  Store.List(pending): %s ms (%d listed)\n", span(a.ListMS), a.Listed)
		if a.CLIMS != nil {
			fmt.Fprintf(&b, "  approve list (CLI binary, prebuilt): %s ms\n", span(*a.CLIMS))
		}
		if a.Note != "" {
			fmt.Fprintf(&b, "  %s\n", a.Note)
		}
	}
	if r.Profile != "" {
		fmt.Fprintf(&b, "\nCPU profiles (go tool pprof -top FILE): trivial workload: worker %s, baseline %s.baseline; script workload: worker %s.script, durable baseline %s.script.durable\n", r.Profile, r.Profile, r.Profile, r.Profile)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(&b, "not measured: %s\n", s)
	}
	if r.Elapsed > 0 {
		fmt.Fprintf(&b, "\n(run took %.0f s)\n", r.Elapsed)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func mib(kb int64) float64 { return float64(kb) / 1024 }
