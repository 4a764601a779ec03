package airlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
	"github.com/redis/go-redis/v9"
)

// WaitFinal waits like Wait, then, for a run whose output is parked or
// accepted, through the approval: until the output is promoted, rejected
// or expired. The returned record's state (and decided_by, decided_at,
// published_to where known) says which. It follows the events stream and
// re-reads the approval at least once a second, so a missed event only
// delays it.
func (c *Client) WaitFinal(ctx context.Context, queue, taskID string) (*record.Run, error) {
	from, err := events.Last(ctx, c.rdb)
	if err != nil {
		return nil, fmt.Errorf("airlock: events: %w", err)
	}
	rec, err := c.Wait(ctx, queue, taskID)
	if err != nil || record.Final(rec.State) || rec.ApprovalID == "" {
		return rec, err
	}
	store := approve.NewStore(c.rdb, approve.Options{})
	for {
		a, err := store.Get(ctx, rec.ApprovalID)
		if err != nil && !errors.Is(err, approve.ErrNotFound) {
			return nil, fmt.Errorf("airlock: approval %s: %w", rec.ApprovalID, err)
		}
		if err == nil && applyApproval(rec, a) {
			return rec, nil
		}
		// Block until an event comes (or a second passes), then look again.
		res, err := c.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{events.Key, from}, Count: 100, Block: time.Second}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("airlock: waiting for approval %s (state %s): %w", rec.ApprovalID, rec.State, ctx.Err())
			}
			return nil, fmt.Errorf("airlock: events: %w", err)
		}
		for _, st := range res {
			if n := len(st.Messages); n > 0 {
				from = st.Messages[n-1].ID
			}
		}
	}
}

// applyApproval copies an approval's fate into rec and reports whether it
// is final.
func applyApproval(rec *record.Run, a *approve.Approval) bool {
	if !a.DecidedAt.IsZero() {
		at := a.DecidedAt
		rec.DecidedBy, rec.DecidedAt = a.DecidedBy, &at
	}
	switch {
	case a.State == approve.StatePending:
		rec.State = record.StateParked
	case a.State == approve.StateAccepted && a.PromotedAt.IsZero():
		rec.State = record.StateAccepted
	case a.State == approve.StateAccepted:
		rec.State = record.StatePromoted
	default:
		rec.State = a.State // rejected | expired
	}
	return record.Final(rec.State)
}
