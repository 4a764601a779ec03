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
// deadline, then the catch-up of promotions. Failures are logged (and
// not when ctx ended); the next sweep tries again.
func (s *Sweeper) Sweep(ctx context.Context) {
	n, err := s.Store.ExpireDue(ctx)
	if err != nil && ctx.Err() == nil {
		s.Log.Warn().Err(err).Msg("approval sweeper: expire")
	} else if n > 0 {
		s.Log.Info().Int("expired", n).Msg("approval sweeper: expired pending approvals")
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
