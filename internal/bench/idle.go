//go:build linux

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SecIdle measures what asynq's task check interval trades: the CPU an
// idle worker (and Redis) spends polling the queue, against the latency of
// a task that arrives on an idle queue.
const SecIdle = "idle"

// DefaultCheckIntervals are the intervals the idle section compares.
var DefaultCheckIntervals = []time.Duration{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond}

// IdleRow is one check interval.
type IdleRow struct {
	Interval string `json:"check_interval"`
	// WorkerCPU and RedisCPU are the percent of one core each spent over
	// Window with no task: the worker's process tree and the Redis server.
	WorkerCPU float64 `json:"worker_idle_cpu_percent"`
	RedisCPU  float64 `json:"redis_idle_cpu_percent"`
	Window    float64 `json:"window_s"`
	// Tasks trivial tasks then timed from Enqueue to Wait's return.
	Tasks int     `json:"tasks"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
}

// idle measures each check interval with a fresh worker.
func (h *harness) idle(ctx context.Context) ([]IdleRow, error) {
	window := time.Duration(max(h.opt.N/100, 2)) * time.Second
	var rows []IdleRow
	for _, iv := range h.opt.CheckIntervals {
		q := h.queue("idle")
		srv, root, err := h.startServer(ctx, systemAirlock, latencyConcurrency, q, "-check-interval", iv.String())
		if err != nil {
			return nil, err
		}
		select { // let the start settle
		case <-ctx.Done():
			h.forget(srv, root)
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
		c0, r0, t0 := treeCPU(srv.cmd.Process.Pid), h.redisCPU(ctx), time.Now()
		select {
		case <-ctx.Done():
			h.forget(srv, root)
			return nil, ctx.Err()
		case <-time.After(window):
		}
		c1, r1, el := treeCPU(srv.cmd.Process.Pid), h.redisCPU(ctx), time.Since(t0)
		lr, err := h.timeTasks(ctx, srv, systemAirlock, q, h.sz.Latency)
		if err != nil {
			h.forget(srv, root)
			return nil, err
		}
		if err := srv.stop(); err != nil {
			return nil, err
		}
		row := IdleRow{
			Interval: iv.String(), Window: el.Seconds(),
			WorkerCPU: 100 * (c1 - c0).Seconds() / el.Seconds(),
			RedisCPU:  100 * (r1 - r0) / el.Seconds(),
			Tasks:     len(lr.wait), P50: percentile(lr.wait, 50), P90: percentile(lr.wait, 90), P99: percentile(lr.wait, 99),
		}
		h.logf("  idle %-6s: worker %.2f%% of a core, Redis %.2f%%; enqueue→Wait p50 %.1f ms, p99 %.1f ms", row.Interval,
			row.WorkerCPU, row.RedisCPU, row.P50, row.P99)
		rows = append(rows, row)
	}
	return rows, nil
}

// redisCPU is the CPU seconds the Redis server has used (INFO cpu), 0
// when it does not say.
func (h *harness) redisCPU(ctx context.Context) float64 {
	info, err := h.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// idleTable formats the idle rows.
func idleTable(rows []IdleRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nIdle worker: CPU while no task comes, and enqueue → Wait latency, by task check interval (one worker, concurrency %d)\n", latencyConcurrency)
	fmt.Fprintf(&b, "%-10s  %-18s  %-17s  %-6s  %-8s  %-8s  %-8s\n", "interval", "worker CPU (core)", "Redis CPU (core)", "tasks", "p50 ms", "p90 ms", "p99 ms")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-10s  %-18s  %-17s  %-6d  %-8.2f  %-8.2f  %-8.2f\n", r.Interval,
			fmt.Sprintf("%.2f%%", r.WorkerCPU), fmt.Sprintf("%.2f%%", r.RedisCPU), r.Tasks, r.P50, r.P90, r.P99)
	}
	return b.String()
}
