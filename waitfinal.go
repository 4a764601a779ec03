package airlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
)

// WaitFinal waits like Wait, then, for a run whose output is parked or
// accepted, through the approval: until the output is promoted, rejected
// or expired. The returned record's state (and decided_by, decided_at,
// published_to where known) says which. It follows the events stream and
// re-reads the approval at least once a second, so a missed event only
// delays it.
func (c *Client) WaitFinal(ctx context.Context, queue, taskID string) (*record.Run, error) {
	from, err := c.events.Last(ctx)
	if err != nil {
		return nil, fmt.Errorf("airlock: events: %w", err)
	}
	rec, err := c.waitFrom(ctx, queue, taskID, from, false)
	if err != nil || record.Final(rec.State) || rec.ApprovalID == "" {
		return rec, err
	}
	return c.waitApproval(ctx, taskID, from, rec)
}

// waitApproval waits through the approval of rec, the record of a run
// that is done but not final, following the events from position from.
func (c *Client) waitApproval(ctx context.Context, taskID, from string, rec *record.Run) (*record.Run, error) {
	look := func() (bool, error) {
		a, err := c.store.Get(ctx, rec.ApprovalID)
		if errors.Is(err, approve.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("airlock: approval %s: %w", rec.ApprovalID, err)
		}
		return applyApproval(rec, a), nil
	}
	if done, err := look(); done || err != nil {
		return rec, err
	}
	err := c.events.Follow(ctx, from, pollEvery, look, func(e events.Event) (bool, error) {
		if e.TaskID != taskID && e.ApprovalID != rec.ApprovalID {
			return false, nil
		}
		return look()
	})
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("airlock: waiting for approval %s (state %s): %w", rec.ApprovalID, rec.State, ctx.Err())
	}
	return rec, err
}

// applyApproval copies an approval's fate into rec (its state, who
// decided and when, where it was published) and reports whether it is
// final.
func applyApproval(rec *record.Run, a *approve.Approval) bool {
	if !a.DecidedAt.IsZero() {
		at := a.DecidedAt
		rec.DecidedBy, rec.DecidedAt = a.DecidedBy, &at
	}
	rec.State = a.State.Run()
	if a.State == approve.StateAccepted && !a.PromotedAt.IsZero() {
		rec.State = record.StatePromoted
	}
	if rec.PublishedTo == "" {
		rec.PublishedTo = a.PublishedTo
	}
	return record.Final(rec.State)
}
