// Package events is the stream of run state changes: every time a run
// becomes completed, failed, parked, accepted, promoted, rejected or
// expired, an entry is appended to one Redis stream, so that a backend can
// follow its runs without polling.
//
// Stream key: "airlock:events" (capped at about 100,000 entries). Each entry
// has the fields run_id, task_id, state, verdict, approval_id (may be empty)
// and time (RFC 3339, UTC, nanoseconds).
package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key is the stream's key.
const Key = "airlock:events"

// MaxLen is the approximate cap of the stream.
const MaxLen = 100000

// Event is one state change of a run.
type Event struct {
	ID         string    `json:"id"` // the stream entry id
	RunID      string    `json:"run_id"`
	TaskID     string    `json:"task_id"`
	State      string    `json:"state"`
	Verdict    string    `json:"verdict"`
	ApprovalID string    `json:"approval_id,omitempty"`
	Time       time.Time `json:"time"`
}

// Append adds e to the stream (Time defaults to now).
func Append(ctx context.Context, rdb redis.UniversalClient, e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	err := rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: Key, MaxLen: MaxLen, Approx: true,
		Values: []any{"run_id", e.RunID, "task_id", e.TaskID, "state", e.State, "verdict", e.Verdict,
			"approval_id", e.ApprovalID, "time", e.Time.UTC().Format(time.RFC3339Nano)},
	}).Err()
	if err != nil {
		return fmt.Errorf("events: append %s %s: %w", e.RunID, e.State, err)
	}
	return nil
}

// Last returns the id of the newest entry, "0" for an empty stream: a
// position to Follow from without missing what comes after.
func Last(ctx context.Context, rdb redis.UniversalClient) (string, error) {
	msgs, err := rdb.XRevRangeN(ctx, Key, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 {
		return "0", nil
	}
	return msgs[0].ID, nil
}

// Follow calls fn for every entry after position from (an id, or "0" for
// all), blocking for new ones until fn returns done or an error, or ctx ends.
func Follow(ctx context.Context, rdb redis.UniversalClient, from string, fn func(Event) (done bool, err error)) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{Key, from}, Count: 100, Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("events: read: %w", err)
		}
		for _, st := range res {
			for _, m := range st.Messages {
				from = m.ID
				done, err := fn(parse(m))
				if err != nil || done {
					return err
				}
			}
		}
	}
}

func parse(m redis.XMessage) Event {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	t, _ := time.Parse(time.RFC3339Nano, s("time"))
	return Event{ID: m.ID, RunID: s("run_id"), TaskID: s("task_id"), State: s("state"),
		Verdict: s("verdict"), ApprovalID: s("approval_id"), Time: t}
}
