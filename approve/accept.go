package approve

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// DefaultQueue is where a promotion goes when the approval's run summary
// names no queue (asynq's default queue).
const DefaultQueue = "default"

// Accept accepts pending approval id for by (with an optional comment) and
// queues its promotion in the run's queue: what `approve accept` does, for
// every front end that accepts (the CLI, the HTTP API). Exactly one of
// concurrent deciders wins (Store.Accept); the others get a
// *DecidedError saying who decided what and when. When the
// approval was accepted already and its output is not published yet, the
// promotion is queued again (idempotent: one task per approval), and the
// error says so.
//
// It returns the accepted approval. warn is not nil when the approval was
// accepted but the store's indexes could not be updated (Store.Accept's
// own warning): the decision stands. err is not nil when nothing was
// accepted, or when the promotion could not be queued after the accept
// (the approval is then returned with err: accepting again queues it, and
// a worker re-queues it when it starts).
func Accept(ctx context.Context, st *Store, ac *asynq.Client, id, by, comment string) (a *Approval, warn, err error) {
	return AcceptDecision(ctx, st, ac, id, Decision{By: by, Comment: comment})
}

// AcceptDecision is Accept of decision d: d.By decides, and d.ByNote is
// kept beside it as a display note (Store.Decide).
func AcceptDecision(ctx context.Context, st *Store, ac *asynq.Client, id string, d Decision) (a *Approval, warn, err error) {
	a, err = st.Decide(ctx, id, StateAccepted, d)
	if a == nil {
		var de *DecidedError
		if errors.As(err, &de) && de.State == StateAccepted {
			// Accepted by someone else (or by an earlier try that could
			// not queue the promotion): queuing it is idempotent.
			if cur, gerr := st.Get(ctx, id); gerr == nil && cur.PromotedAt.IsZero() {
				if qerr := st.QueuePromotion(ctx, ac, cur.Run.Queue, cur.ID); qerr == nil {
					return nil, nil, fmt.Errorf("%w; its promotion is queued", err)
				}
			}
		}
		return nil, nil, err
	}
	warn = err // accepted, but the indexes are stale
	if err := st.QueuePromotion(ctx, ac, a.Run.Queue, a.ID); err != nil {
		return a, warn, fmt.Errorf("accepted %s, but queuing its promotion failed: %w (accept %s again to queue it; a worker re-queues it when it starts)", id, err, id)
	}
	return a, warn, nil
}
