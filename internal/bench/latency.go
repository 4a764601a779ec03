//go:build linux

package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/airlock-run/airlock/record"
)

// latencyConcurrency is the concurrency of the idle-latency servers (the
// worker's default).
const latencyConcurrency = 2

// latencyWarmup tasks run before the measured ones.
const latencyWarmup = 3

// latencyRound is one round's samples of one system, in milliseconds.
type latencyRound struct {
	wait, done, start []float64 // sorted
}

// latency enqueues single trivial tasks on an idle queue, one at a time,
// and times each from the call to Enqueue to the return of Wait (and to the
// record's finished_at). A random pause of 15-25 ms between tasks lets the
// server fall back to idle polling, at a random phase of its poll.
func (h *harness) latency(ctx context.Context, sys string, round int) (latencyRound, error) {
	q := h.queue("lat-" + sys)
	srv, root, err := h.startServer(ctx, sys, latencyConcurrency, q)
	if err != nil {
		return latencyRound{}, err
	}
	defer h.forget(srv, root)
	lr, err := h.timeTasks(ctx, srv, sys, q, h.sz.Latency)
	if err != nil {
		return lr, err
	}
	if err := srv.stop(); err != nil {
		return lr, err
	}
	h.logf("  latency    %-8s: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms (done p50 %.1f ms; %d tasks)", sys,
		percentile(lr.wait, 50), percentile(lr.wait, 90), percentile(lr.wait, 99), percentile(lr.done, 50), len(lr.wait))
	return lr, nil
}

// timeTasks runs n single trivial tasks on q, served by srv, one at a
// time after a warm-up, with a random pause of 15-25 ms before each so that
// the server is back to idle polling, at a random phase of its poll.
func (h *harness) timeTasks(ctx context.Context, srv *child, sys, q string, n int) (latencyRound, error) {
	var lr latencyRound
	one := func(i int) (wait, done, start float64, err error) {
		spec := trivialSpec(q, fmt.Sprintf("%s-%d", q, i))
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		t0 := time.Now()
		e, err := h.client.Enqueue(wctx, spec)
		if err != nil {
			return 0, 0, 0, err
		}
		rec, err := h.client.Wait(wctx, e.Queue, e.TaskID)
		t1 := time.Now()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%w\n%s", err, srv.logs.String())
		}
		if rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK {
			return 0, 0, 0, fmt.Errorf("task %s: state %s verdict %s: %s", e.TaskID, rec.State, rec.Verdict, rec.Error)
		}
		if sys == systemAirlock && h.rep.Machine.Tiers == nil {
			h.rep.Machine.Tiers, h.rep.Machine.Quota = rec.Isolation, rec.Isolation.Quota
		}
		return ms(t1.Sub(t0)), ms(rec.FinishedAt.Sub(t0)), ms(rec.StartedAt.Sub(t0)), nil
	}
	for i := range latencyWarmup {
		if _, _, _, err := one(-1 - i); err != nil {
			return lr, fmt.Errorf("warm-up: %w", err)
		}
	}
	for i := range n {
		select {
		case <-ctx.Done():
			return lr, ctx.Err()
		case <-time.After(15*time.Millisecond + rand.N(10*time.Millisecond)):
		}
		w, d, st, err := one(i)
		if err != nil {
			return lr, err
		}
		lr.wait = append(lr.wait, w)
		lr.done = append(lr.done, max(d, 0))
		lr.start = append(lr.start, max(st, 0))
	}
	slices.Sort(lr.wait)
	slices.Sort(lr.done)
	slices.Sort(lr.start)
	return lr, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// latencyAcc gathers the rounds of one system.
type latencyAcc struct {
	p50, p90, p99, d50, d99 []float64
}

func (a *latencyAcc) add(r latencyRound) {
	a.p50 = append(a.p50, percentile(r.wait, 50))
	a.p90 = append(a.p90, percentile(r.wait, 90))
	a.p99 = append(a.p99, percentile(r.wait, 99))
	a.d50 = append(a.d50, percentile(r.done, 50))
	a.d99 = append(a.d99, percentile(r.done, 99))
}

func (a *latencyAcc) row(sys string, n int) LatencyRow {
	return LatencyRow{System: sys, Tasks: n, P50: newStat(a.p50), P90: newStat(a.p90), P99: newStat(a.p99),
		DoneP50: newStat(a.d50), DoneP99: newStat(a.d99)}
}
