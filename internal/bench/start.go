//go:build linux

package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-run/airlock/record"
)

// startRuns is how many cold starts each system makes per round.
const startRuns = 5

// StartRow is a server's cold start: from starting its process to its
// ready line (the worker prints it once it serves its queues: every slot's
// helper is up and asynq polls), and from that line to the end of a
// trivial task that was waiting in its queue.
type StartRow struct {
	System      string `json:"system"`
	Concurrency int    `json:"concurrency"`
	Starts      int    `json:"starts"`
	ReadyMS     Stat   `json:"start_to_ready_ms"`
	FirstTaskMS Stat   `json:"ready_to_first_task_done_ms"` // the record's finished_at
}

// coldStart starts a fresh server of sys at concurrency conc, startRuns
// times, each with one trivial task already in its queue, and returns the
// medians of this round.
func (h *harness) coldStart(ctx context.Context, sys string, conc int) (ready, first float64, err error) {
	var readies, firsts []float64
	for i := range startRuns {
		q := h.queue(fmt.Sprintf("start-%s-%d", sys, i))
		e, err := h.client.Enqueue(ctx, trivialSpec(q, q+"-first"))
		if err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		srv, root, err := h.startServer(ctx, sys, conc, q)
		if err != nil {
			return 0, 0, err
		}
		tReady := time.Now()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		rec, err := h.client.Wait(wctx, e.Queue, e.TaskID)
		cancel()
		if err == nil && (rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK) {
			err = fmt.Errorf("task %s: state %s verdict %s: %s", e.TaskID, rec.State, rec.Verdict, rec.Error)
		}
		if err != nil {
			h.forget(srv, root)
			return 0, 0, fmt.Errorf("%w\n%s", err, srv.logs.String())
		}
		if err := srv.stop(); err != nil {
			return 0, 0, err
		}
		readies = append(readies, ms(tReady.Sub(t0)))
		// Negative when the task was done before the ready line was read.
		firsts = append(firsts, ms(rec.FinishedAt.Sub(tReady)))
	}
	slices.Sort(readies)
	slices.Sort(firsts)
	ready, first = percentile(readies, 50), percentile(firsts, 50)
	h.logf("  start      %-8s c=%d: ready %.1f ms after start, first task done %.1f ms after ready (medians of %d)", sys, conc, ready, first, startRuns)
	return ready, first, nil
}

// startAcc gathers the rounds of one system's cold starts.
type startAcc struct{ ready, first []float64 }

func (a *startAcc) row(sys string, conc, rounds int) StartRow {
	return StartRow{System: sys, Concurrency: conc, Starts: startRuns * rounds, ReadyMS: newStat(a.ready), FirstTaskMS: newStat(a.first)}
}
