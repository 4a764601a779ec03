//go:build linux

package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-run/airlock/internal/redis/wake"
)

// SecIdle measures what an idle worker costs against how fast it starts a
// task that arrives on its idle queue: bare asynq polling every 10 ms,
// Airlock polling at each -check-intervals value without waiting
// (-idle-wait 0), and Airlock with its wake-up (-idle-wait 2s: a poll of
// empty queues waits for the enqueuer's PUBLISH, internal/redis/wake).
const SecIdle = "idle"

// DefaultCheckIntervals are the poll intervals the idle section compares
// for Airlock without its wake-up.
var DefaultCheckIntervals = []time.Duration{10 * time.Millisecond}

// idleWaitOn is the -idle-wait of the row with the wake-up.
const idleWaitOn = wake.DefaultMaxIdle

// IdleRow is one server configuration.
type IdleRow struct {
	System   string `json:"system"`
	Interval string `json:"check_interval"`
	IdleWait string `json:"idle_wait,omitempty"` // Airlock's -idle-wait; "0": polls only
	// WorkerCPU and RedisCPU are the percent of one core each spent over
	// Window with no task: the worker's process tree and the Redis server.
	WorkerCPU float64 `json:"worker_idle_cpu_percent"`
	RedisCPU  float64 `json:"redis_idle_cpu_percent"`
	// RedisCmds is the commands per second Redis processed over Window
	// (INFO stats), the bench's own two reads taken out.
	RedisCmds float64 `json:"redis_idle_commands_per_s"`
	Window    float64 `json:"window_s"`
	// Tasks trivial tasks then timed from Enqueue to their start (the
	// record's started_at) and to Wait's return.
	Tasks   int     `json:"tasks"`
	Start50 float64 `json:"start_p50_ms"`
	Start99 float64 `json:"start_p99_ms"`
	P50     float64 `json:"p50_ms"`
	P90     float64 `json:"p90_ms"`
	P99     float64 `json:"p99_ms"`
}

// idleConfig is one row's server.
type idleConfig struct {
	system   string
	interval time.Duration
	idleWait time.Duration // Airlock only; 0: -idle-wait 0
}

// idle measures each configuration with a fresh server.
func (h *harness) idle(ctx context.Context) ([]IdleRow, error) {
	window := time.Duration(max(h.opt.N/100, 5)) * time.Second
	configs := []idleConfig{{systemBaseline, TaskCheckInterval, 0}}
	for _, iv := range h.opt.CheckIntervals {
		configs = append(configs, idleConfig{systemAirlock, iv, 0})
	}
	configs = append(configs, idleConfig{systemAirlock, TaskCheckInterval, idleWaitOn})
	var rows []IdleRow
	for _, c := range configs {
		row, err := h.idleRow(ctx, c, window)
		if err != nil {
			return nil, err
		}
		h.logf("  idle %-8s %-6s wait %-4s: worker %.2f%% of a core, Redis %.2f%%, %.1f commands/s; enqueue→start p50 %.1f ms, p99 %.1f ms; →Wait p50 %.1f ms",
			row.System, row.Interval, row.IdleWait, row.WorkerCPU, row.RedisCPU, row.RedisCmds, row.Start50, row.Start99, row.P50)
		rows = append(rows, row)
	}
	return rows, nil
}

func (h *harness) idleRow(ctx context.Context, c idleConfig, window time.Duration) (IdleRow, error) {
	q := h.queue("idle")
	extra := []string{"-check-interval", c.interval.String()}
	row := IdleRow{System: c.system, Interval: c.interval.String()}
	if c.system == systemAirlock {
		extra = append(extra, "-idle-wait", c.idleWait.String())
		row.IdleWait = c.idleWait.String()
	}
	srv, root, err := h.startServer(ctx, c.system, latencyConcurrency, q, extra...)
	if err != nil {
		return row, err
	}
	select { // let the start settle
	case <-ctx.Done():
		h.forget(srv, root)
		return row, ctx.Err()
	case <-time.After(time.Second):
	}
	c0, r0, n0, t0 := treeCPU(srv.cmd.Process.Pid), h.redisCPU(ctx), h.redisCommands(ctx), time.Now()
	select {
	case <-ctx.Done():
		h.forget(srv, root)
		return row, ctx.Err()
	case <-time.After(window):
	}
	c1, r1, n1, el := treeCPU(srv.cmd.Process.Pid), h.redisCPU(ctx), h.redisCommands(ctx), time.Since(t0)
	lr, err := h.timeTasks(ctx, srv, c.system, q, h.sz.Latency)
	if err != nil {
		h.forget(srv, root)
		return row, err
	}
	if err := srv.stop(); err != nil {
		return row, err
	}
	row.Window = el.Seconds()
	row.WorkerCPU = 100 * (c1 - c0).Seconds() / el.Seconds()
	row.RedisCPU = 100 * (r1 - r0) / el.Seconds()
	row.RedisCmds = float64(n1-n0-2) / el.Seconds() // the two INFO stats
	row.Tasks = len(lr.wait)
	row.Start50, row.Start99 = percentile(lr.start, 50), percentile(lr.start, 99)
	row.P50, row.P90, row.P99 = percentile(lr.wait, 50), percentile(lr.wait, 90), percentile(lr.wait, 99)
	return row, nil
}

// redisCommands is the commands the Redis server has processed (INFO
// stats), 0 when it does not say. Whatever else uses that Redis counts
// too: run the idle section on a Redis of its own.
func (h *harness) redisCommands(ctx context.Context) int64 {
	info, err := h.rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
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
	fmt.Fprintf(&b, "\nIdle worker: what it costs while no task comes, and how fast a task on its idle queue starts (one worker, concurrency %d)\n", latencyConcurrency)
	fmt.Fprintf(&b, "%-8s  %-8s  %-9s  %-11s  %-10s  %-10s  %-6s  %-9s  %-9s  %-9s  %-9s\n",
		"system", "interval", "idle-wait", "worker CPU", "Redis CPU", "Redis cmd/s", "tasks", "start p50", "start p99", "Wait p50", "Wait p99")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-8s  %-8s  %-9s  %-11s  %-10s  %-10.1f  %-6d  %-9.2f  %-9.2f  %-9.2f  %-9.2f\n", r.System, r.Interval, r.IdleWait,
			fmt.Sprintf("%.2f%%", r.WorkerCPU), fmt.Sprintf("%.2f%%", r.RedisCPU), r.RedisCmds, r.Tasks, r.Start50, r.Start99, r.P50, r.P99)
	}
	return b.String()
}
