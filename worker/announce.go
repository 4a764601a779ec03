//go:build linux

package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
)

// announcePruneEvery is how many refreshes of the worker's announcement
// go from one removal of other workers' stale entries to the next: once
// a minute. The refreshes between write the entry only
// (queuepolicy.Refresh), two commands per queue instead of three; readers
// skip stale entries meanwhile.
const announcePruneEvery = max(1, int(time.Minute/queuepolicy.AnnounceInterval))

// announce says, for each of queues, that this worker serves it and where
// it publishes promoted outputs (queuepolicy.Announce), then says it again
// every queuepolicy.AnnounceInterval until ctx ends: enqueuers tell from
// it that a queue has a worker, and readers of results where the store
// is. The func it returns stops the refresh and withdraws the worker's
// entries (a clean stop). A failed refresh is logged, not fatal: the
// entry goes stale and enqueuers warn, the runs go on.
func (w *Worker) announce(ctx context.Context, queues []string) (withdraw func(), err error) {
	a := queuepolicy.Announcement{Worker: w.name, Store: w.cfg.Store, Version: airlock.Version}
	if err := queuepolicy.Announce(ctx, w.cfg.Redis, w.cfg.Prefix, queues, a, time.Now()); err != nil {
		return nil, fmt.Errorf("worker: announce the worker: %w", err)
	}
	if w.cfg.Store != "" {
		w.log.Info().Str("store", w.cfg.Store).Msg("promoted outputs are published to the store")
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(queuepolicy.AnnounceInterval)
		defer t.Stop()
		for n := 1; ; n++ {
			select {
			case <-actx.Done():
				return
			case now := <-t.C:
				refresh := queuepolicy.Refresh
				if n%announcePruneEvery == 0 {
					refresh = queuepolicy.Announce
				}
				if err := refresh(actx, w.cfg.Redis, w.cfg.Prefix, queues, a, now); err != nil && actx.Err() == nil {
					w.log.Warn().Err(err).Msg("refreshing the worker's announcement (enqueuers warn that no worker serves its queues once it is stale)")
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
		wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer wcancel()
		if err := queuepolicy.Withdraw(wctx, w.cfg.Redis, w.cfg.Prefix, queues, w.name); err != nil {
			w.log.Warn().Err(err).Msg("withdrawing the worker's announcement (it goes stale within 30s)")
		}
	}, nil
}
