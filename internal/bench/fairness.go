//go:build linux

package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	airlock "github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// SecFairness is the fair-share section: how long one principal's single
// run waits behind another's backlog.
const SecFairness = "fairness"

// Fairness's shape: principal A queues fairBacklog runs of fairRunTime
// each on a worker of fairSlots slots, then principal B enqueues one short
// run every fairEvery while A's backlog drains, one at a time.
const (
	fairBacklog = 200
	fairRunTime = 200 * time.Millisecond
	fairSlots   = 2
	fairEvery   = 500 * time.Millisecond
)

// FairnessRow is the fair-share measure of one system: B's run's wait,
// from its enqueue to its start (its record's started_at), while A's
// backlog waits in the same queue.
type FairnessRow struct {
	System      string  `json:"system"`
	Concurrency int     `json:"concurrency"`
	Backlog     int     `json:"a_backlog"`
	RunMS       float64 `json:"a_run_ms"`
	Samples     int     `json:"b_runs"`
	// BStartMS is B's enqueue → start, ms: median, min and max; P99 its
	// 99th percentile over every sample.
	BStartMS  Stat    `json:"b_start_ms"`
	BStartP99 float64 `json:"b_start_p99_ms"`
	// DrainS is how long A's backlog took, from its first enqueue to its
	// last run's end, s.
	DrainS float64 `json:"a_drain_s"`
}

// fairness measures sys: Airlock (a worker, its principals' fair share)
// or the baseline (a bare asynq server: one FIFO queue).
func (h *harness) fairness(ctx context.Context, sys string) (FairnessRow, error) {
	row := FairnessRow{System: sys, Concurrency: fairSlots, Backlog: fairBacklog, RunMS: ms(fairRunTime)}
	q := h.queue("fair-" + sys)
	srv, root, err := h.startServer(ctx, sys, fairSlots, q)
	if err != nil {
		return row, err
	}
	defer h.forget(srv, root)
	a := airlock.NewClient(h.rdb, airlock.ClientOptions{Retention: 2 * time.Hour, Principal: "tenant-a"})
	b := airlock.NewClient(h.rdb, airlock.ClientOptions{Retention: 2 * time.Hour, Principal: "tenant-b"})
	sleep := fmt.Sprintf("%.3f", fairRunTime.Seconds())
	t0 := time.Now()
	var last airlock.Enqueued
	for i := range fairBacklog {
		spec := &tasks.Spec{Version: 1, RunID: fmt.Sprintf("%s-a-%d", q, i), Queue: q,
			Steps: []tasks.Step{{Name: "sleep", Run: []string{"/bin/sleep", sleep}}}}
		if sys != systemAirlock {
			// A bare asynq client: the queue is one line.
			spec.Principal = "tenant-a"
			if err := h.enqueue(ctx, sys, spec); err != nil {
				return row, err
			}
			continue
		}
		if last, err = a.Enqueue(ctx, spec); err != nil {
			return row, err
		}
	}
	var waits []float64
	for i := 0; ; i++ {
		n, err := h.insp.GetQueueInfo(q)
		if err != nil {
			return row, err
		}
		if n.Pending+n.Aggregating == 0 && i > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-time.After(fairEvery):
		}
		spec := &tasks.Spec{Version: 1, RunID: fmt.Sprintf("%s-b-%d", q, i), Queue: q, Steps: []tasks.Step{{Name: "true", Run: []string{"/bin/true"}}}}
		t1 := time.Now()
		e, err := b.Enqueue(ctx, spec)
		if err != nil {
			return row, err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		rec, err := b.Wait(wctx, e.Queue, e.TaskID)
		cancel()
		if err != nil {
			return row, fmt.Errorf("B's run %s: %w\n%s", e.TaskID, err, srv.logs.String())
		}
		if rec.State != record.StateCompleted {
			return row, fmt.Errorf("B's run %s: %s %s: %s", e.TaskID, rec.State, rec.Verdict, rec.Error)
		}
		waits = append(waits, max(0, ms(rec.StartedAt.Sub(t1))))
		if sys != systemAirlock {
			break // one sample: B waited for the whole backlog
		}
	}
	if sys == systemAirlock {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		rec, err := a.Wait(wctx, last.Queue, last.TaskID)
		cancel()
		if err != nil {
			return row, fmt.Errorf("A's last run: %w", err)
		}
		row.DrainS = rec.FinishedAt.Sub(t0).Seconds()
	} else {
		row.DrainS = time.Since(t0).Seconds()
	}
	if err := srv.stop(); err != nil {
		return row, err
	}
	slices.Sort(waits)
	row.Samples, row.BStartMS, row.BStartP99 = len(waits), newStat(waits), percentile(waits, 99)
	h.logf("  fairness   %-8s: B starts p50 %.0f ms, p99 %.0f ms after its enqueue (%d runs), behind A's %d runs of %s (drained in %.1f s)",
		sys, percentile(waits, 50), row.BStartP99, len(waits), fairBacklog, fairRunTime, row.DrainS)
	return row, nil
}

func fairnessTable(rows []FairnessRow) string {
	var b strings.Builder
	if len(rows) == 0 {
		return ""
	}
	fmt.Fprintf(&b, "\nFair share: principal A queues %d runs of %.0f ms on a %d-slot server, then principal B enqueues one run every %s, one at a time; B's enqueue → start, ms\n",
		rows[0].Backlog, rows[0].RunMS, rows[0].Concurrency, fairEvery)
	fmt.Fprintln(&b, "baseline: a bare asynq server, one FIFO queue (one B run: it waits for the whole backlog); airlock: each principal's own line, at most a window (the worker's slots, here 2) of its runs in the queue")
	t := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(t, "system\tB runs\tB start p50\tp99\tmax\tA drained, s\t")
	for _, r := range rows {
		fmt.Fprintf(t, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t\n", r.System, r.Samples, r.BStartMS.Median, r.BStartP99, r.BStartMS.Max, r.DrainS)
	}
	_ = t.Flush()
	return b.String()
}
