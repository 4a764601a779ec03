// Package events is the stream of run state changes: every time a run
// becomes completed, failed, parked, accepted, promoted, rejected, expired
// or canceled, an entry is appended to one Redis stream, so that a backend
// can follow its runs without polling. It owns the stream's key and
// encoding; the worker, the approval store and the client that cancels a
// waiting run append through it.
//
// Stream key: <prefix>events, "airlock:events" with the default prefix
// (capped at about 100,000 entries). Each entry has the fields run_id,
// task_id, state, verdict, approval_id (may be empty), error (may be
// empty) and time (RFC 3339, UTC, nanoseconds); and principal, who asked
// for the run (the API token's name, the MCP server's -principal), when
// the run names one.
package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/record"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix of every key Airlock keeps in Redis
// (asynq's own aside).
const DefaultPrefix = "airlock:"

// Key is the stream's key with the default prefix.
const Key = DefaultPrefix + "events"

// MaxLen is the approximate cap of the stream.
const MaxLen = 100000

// Event is one state change of a run.
type Event struct {
	ID         string         `json:"id"` // the stream entry id
	RunID      string         `json:"run_id"`
	TaskID     string         `json:"task_id"`
	State      record.State   `json:"state"`
	Verdict    record.Verdict `json:"verdict"`
	ApprovalID string         `json:"approval_id,omitempty"`
	Error      string         `json:"error,omitempty"`
	// Principal is who asked for the run (record.Run.Principal); empty
	// when it names nobody.
	Principal string `json:"principal,omitempty"`
	// Step names the step of a "step" event: a session's step that ended
	// (state active, the step's verdict); empty for a change of state.
	Step string    `json:"step,omitempty"`
	Time time.Time `json:"time"`
}

// Stream is the events stream of one key prefix.
type Stream struct {
	rdb redis.UniversalClient
	key string
}

// NewStream returns the stream <prefix>events of rdb; prefix "" is
// DefaultPrefix.
func NewStream(rdb redis.UniversalClient, prefix string) *Stream {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return &Stream{rdb: rdb, key: prefix + "events"}
}

// Key returns the stream's key.
func (s *Stream) Key() string { return s.key }

// maxError bounds the error text an event carries.
const maxError = 512

// args is the XADD of e (Time defaults to now).
func (s *Stream) args(e Event) *redis.XAddArgs {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if len(e.Error) > maxError {
		e.Error = e.Error[:maxError]
	}
	v := []any{"run_id", e.RunID, "task_id", e.TaskID, "state", string(e.State), "verdict", string(e.Verdict),
		"approval_id", e.ApprovalID, "error", e.Error, "time", e.Time.UTC().Format(time.RFC3339Nano)}
	if e.Principal != "" {
		v = append(v, "principal", e.Principal)
	}
	if e.Step != "" {
		v = append(v, "step", e.Step)
	}
	return &redis.XAddArgs{Stream: s.key, MaxLen: MaxLen, Approx: true, Values: v}
}

// Append adds e to the stream.
func (s *Stream) Append(ctx context.Context, e Event) error {
	if err := s.rdb.XAdd(ctx, s.args(e)).Err(); err != nil {
		return fmt.Errorf("events: append %s %s: %w", e.RunID, e.State, err)
	}
	return nil
}

// AppendOp queues the append of e in a pipeline or transaction, for a
// caller that writes the change it reports in the same round trip.
func (s *Stream) AppendOp(ctx context.Context, p redis.Pipeliner, e Event) *redis.StringCmd {
	return p.XAdd(ctx, s.args(e))
}

// Last returns the id of the newest entry, "0" for an empty stream: a
// position to Follow from without missing what comes after.
func (s *Stream) Last(ctx context.Context) (string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.key, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 {
		return "0", nil
	}
	return msgs[0].ID, nil
}

// Follow calls fn for every entry after position from (an id, or "0" for
// all), blocking for new ones until fn returns done or an error, or ctx
// ends. Every block is at most block long (default 1s); after each, tick
// (when not nil) is called, so that a caller can look elsewhere too, and
// may end the follow.
func (s *Stream) Follow(ctx context.Context, from string, block time.Duration, tick func() (done bool, err error), fn func(Event) (done bool, err error)) error {
	if block <= 0 {
		block = time.Second
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		b := block
		if d, ok := ctx.Deadline(); ok {
			// A blocked read does not end with ctx: never block past it.
			b = max(min(b, time.Until(d)), time.Millisecond)
		}
		res, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{s.key, from}, Count: 100, Block: b}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
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
		if tick != nil {
			if done, err := tick(); err != nil || done {
				return err
			}
		}
	}
}

func parse(m redis.XMessage) Event {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	t, _ := time.Parse(time.RFC3339Nano, s("time"))
	return Event{ID: m.ID, RunID: s("run_id"), TaskID: s("task_id"), State: record.State(s("state")),
		Verdict: record.Verdict(s("verdict")), ApprovalID: s("approval_id"), Error: s("error"), Principal: s("principal"), Step: s("step"), Time: t}
}
