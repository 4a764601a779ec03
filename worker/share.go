//go:build linux

package worker

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/record"
)

// shareStarted releases the next held run of the principal whose run just
// started on queue (internal/redis/fairshare): its place among the runs
// waiting in the queue is free. A failure costs fairness nothing but
// latency: the sweep releases what it missed.
func (w *Worker) shareStarted(ctx context.Context, queue, principal, taskID string) {
	if _, err := fairshare.Started(ctx, w.cfg.Redis, w.cfg.Prefix, queue, principal, taskID); err != nil {
		w.log.Warn().Err(err).Str("queue", queue).Msg("release the principal's next run (the sweep will)")
	}
}

// shareEnded releases the next held run of a principal under max_active
// once one of its runs ended for good (err, the handler's error, is nil,
// asynq.SkipRetry, or its last retry's: asynq will not run it again): it
// no longer counts against the quota.
func (w *Worker) shareEnded(ctx context.Context, rec *record.Run, err error) {
	if rec.Queue == "" {
		return
	}
	if errors.Is(err, errHandedBack) {
		return // asynq requeues it: it still counts
	}
	if err != nil && !errors.Is(err, asynq.SkipRetry) {
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		if retried < maxRetry {
			return // asynq runs it again: it still counts
		}
	}
	if w.cfg.RiskPolicy.QuotaOf(rec.Principal).MaxActive == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := fairshare.Ended(ctx, w.cfg.Redis, w.cfg.Prefix, rec.Queue, rec.Principal, rec.TaskID); err != nil {
		w.log.Warn().Err(err).Str("queue", rec.Queue).Str("task_id", rec.TaskID).Msg("release the principal's next run (the sweep will)")
	}
}

// publishQuotas publishes the risk policy's quotas for queues, so that
// every front end and worker of the queues enforces them, and its slots as
// the queues' fair-share window.
func (w *Worker) publishQuotas(ctx context.Context, queues []string) error {
	return fairshare.PublishQuotas(ctx, w.cfg.Redis, w.cfg.Prefix, queues, w.cfg.RiskPolicy.Quotas(), w.cfg.Concurrency)
}

// sweepShares releases, every fairshare.SweepEvery until ctx ends, what
// the principals holding runs in queues may have waiting (fairshare.Sweep):
// what a crash, a cancel or a deleted task left held.
func (w *Worker) sweepShares(ctx context.Context, queues []string) {
	t := time.NewTicker(fairshare.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, q := range queues {
			if err := fairshare.Sweep(ctx, w.cfg.Redis, w.cfg.Prefix, q); err != nil && ctx.Err() == nil {
				w.log.Warn().Err(err).Str("queue", q).Msg("fair share sweep")
			}
		}
	}
}
