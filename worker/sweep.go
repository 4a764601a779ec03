//go:build linux

package worker

import (
	"context"
	"time"

	"github.com/airlock-run/airlock/approve"
)

// sweep runs every SweepInterval until ctx ends: it expires pending
// approvals past their deadline (dropping their staged bytes) and queues
// the promotion of accepted approvals that have none running, which
// catches up after an approver's CLI or a worker died between the two
// (those accepted at least one interval ago).
func (w *Worker) sweep(ctx context.Context) {
	t := time.NewTicker(w.cfg.SweepInterval)
	defer t.Stop()
	for {
		w.sweepOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) sweepOnce(ctx context.Context) {
	n, err := w.approvals.ExpireDue(ctx)
	if err != nil && ctx.Err() == nil {
		w.log.Warn().Err(err).Msg("approval sweeper: expire")
	} else if n > 0 {
		w.log.Info().Int("expired", n).Msg("approval sweeper: expired pending approvals")
	}
	// Not those accepted in the last interval: a policy's acceptance is
	// promoted inline by the worker that made it, within milliseconds;
	// queueing a promotion for it too would only race it (harmlessly,
	// but as one more task). A promotion that a crash left undone is
	// caught up one interval later.
	ids, err := w.approvals.ListAccepted(ctx, time.Now().Add(-w.cfg.SweepInterval))
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn().Err(err).Msg("approval sweeper: list accepted")
		}
		return
	}
	for _, id := range ids {
		a, err := w.approvals.Get(ctx, id)
		if err != nil {
			continue
		}
		if err := approve.Enqueue(ctx, w.asynq, a.Run.Queue, id); err != nil && ctx.Err() == nil {
			w.log.Warn().Err(err).Str("approval_id", id).Msg("approval sweeper: queue promotion")
		}
	}
}
