package approve

import (
	"context"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
)

// Sweeper is the approval lifecycle's clock, a component a worker starts
// beside its task server (as asynq starts its own: Start, then Stop):
// every Interval it expires pending approvals past their deadline
// (ExpireDue, dropping their staged bytes) and queues the promotion of
// accepted approvals that have none running, which catches up after an
// approver's front end or a worker died between the accept and the
// promote task (those accepted at least one interval ago: a policy's
// acceptance is promoted inline by the worker that made it, within
// milliseconds, and queuing a promotion for it too would only race it).
// It also drops the index entries of approvals Redis has deleted
// (Retention): at its first sweep, then once a minute (pruneInterval), and at
// every sweep while the last one found entries to drop. An idle sweep
// costs Redis two reads.
//
// Store should not be quiet (Store.Quiet): an expiry is the run's event.
type Sweeper struct {
	Store    *Store
	Client   *asynq.Client // where promotions are queued (Store.QueuePromotion)
	Interval time.Duration // > 0
	Log      zerolog.Logger

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	// skip is how many sweeps go before the next prune of the indexes
	// (0: this one prunes, as the first does).
	skip int
}

// pruneInterval is how often a Sweeper prunes the indexes of approvals
// while there is nothing to prune (every pruneInterval/Interval sweeps,
// rounded up): four reads (ZRANGE) that an idle worker would otherwise
// send at every sweep. Index entries of deleted approvals are only
// skipped by readers meanwhile.
const pruneInterval = time.Minute

// pruneDue reports whether this sweep prunes the indexes, and counts it.
func (s *Sweeper) pruneDue() bool {
	if s.skip > 0 {
		s.skip--
		return false
	}
	return true
}

// pruned sets when the next prune comes: at the next sweep when this one
// dropped entries (there may be more) or failed, else pruneInterval on.
func (s *Sweeper) pruned(dropped int, err error) {
	s.skip = 0
	if dropped == 0 && err == nil && s.Interval > 0 {
		s.skip = max(1, int((pruneInterval+s.Interval-1)/s.Interval)) - 1
	}
}

// Start sweeps at once, then every Interval, in a goroutine of its own,
// until ctx ends or Stop is called. It is called once.
func (s *Sweeper) Start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.Interval)
		defer t.Stop()
		for {
			s.Sweep(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the sweeps and waits for the one in progress to return. It
// does nothing when the Sweeper was not started, and may be called more
// than once.
func (s *Sweeper) Stop() {
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
}

// Sweep is one sweep: the expiry of pending approvals past their
// deadline, the pruning of the indexes when it is due, then the catch-up
// of promotions. Failures are logged (and not when ctx ended); the next
// sweep tries again. Sweeps of one Sweeper must not run concurrently.
func (s *Sweeper) Sweep(ctx context.Context) {
	n, err := s.Store.expireDue(ctx)
	if err != nil && ctx.Err() == nil {
		s.Log.Warn().Err(err).Msg("approval sweeper: expire")
	} else if n > 0 {
		s.Log.Info().Int("expired", n).Msg("approval sweeper: expired pending approvals")
	}
	if err == nil && s.pruneDue() {
		dropped, err := s.Store.pruneIndexes(ctx)
		if err != nil && ctx.Err() == nil {
			s.Log.Warn().Err(err).Msg("approval sweeper: prune the indexes")
		}
		s.pruned(dropped, err)
	}
	// Not those accepted in the last interval (see Sweeper): a promotion
	// that a crash left undone is caught up one interval later.
	// Measured by the store's clock, the one that stamped the decisions.
	ids, err := s.Store.ListAccepted(ctx, s.Store.Now().Add(-s.Interval))
	if err != nil {
		if ctx.Err() == nil {
			s.Log.Warn().Err(err).Msg("approval sweeper: list accepted")
		}
		return
	}
	for _, id := range ids {
		a, err := s.Store.Get(ctx, id)
		if err != nil {
			continue
		}
		if err := s.Store.QueuePromotion(ctx, s.Client, a.Run.Queue, a.ID); err != nil && ctx.Err() == nil {
			s.Log.Warn().Err(err).Str("approval_id", id).Msg("approval sweeper: queue promotion")
		}
	}
}
