package approve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Count returns how many approvals are in state (the index's size: the
// pending count is what the worker's metrics report).
func (s *Store) Count(ctx context.Context, state State) (int64, error) {
	return s.rdb.ZCard(ctx, s.index(string(state))).Result()
}

// ListAccepted returns the ids of the approvals accepted but not yet
// promoted, oldest decision first: the worker re-enqueues their promote
// tasks after a crash. With decidedBefore not zero, only those decided
// before it: an approval accepted a moment ago is most likely being
// promoted by the worker that accepted it (a policy's inline promotion).
func (s *Store) ListAccepted(ctx context.Context, decidedBefore time.Time) ([]string, error) {
	key := s.index(idxUnpromoted)
	max := "+inf"
	if !decidedBefore.IsZero() {
		max = "(" + strconv.FormatInt(decidedBefore.UnixMicro(), 10)
	}
	ids, err := s.rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: max}).Result()
	if err != nil {
		return nil, fmt.Errorf("approve: list accepted: %w", err)
	}
	cmds := make([]*redis.SliceCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, s.Keys(id)[0], fState, fPromoted)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("approve: list accepted: %w", err)
	}
	out := []string{}
	var stale []any
	for i, c := range cmds {
		v := c.Val()
		raw, _ := v[0].(string)
		state := State(raw)
		promoted, _ := v[1].(string)
		switch {
		case state == StateAccepted && promoted == "":
			out = append(out, ids[i])
		case state == StatePending: // an Accept in flight (write-ahead): keep
		default:
			stale = append(stale, ids[i])
		}
	}
	if len(stale) > 0 {
		// Promoted (or gone) since: what a lost round trip of its
		// promotion left, its staged bytes too (released once).
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, key, stale...)
			for _, id := range stale {
				releaseScript.Eval(ctx, p, []string{s.stagedKey()}, id)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("approve: list accepted: %w", err)
		}
	}
	return out, nil
}

// List returns up to limit approvals in state (StatePending when "", or
// StateAll), newest first (by creation; by decision for decided states);
// limit <= 0 lists them all. A pending approval past its expiry is left
// out of the pending list (ExpireDue records its expiry). The approvals
// hold the summary fields only: no Result, Artifacts or Run (but
// Run.Queue). List is not a snapshot: approvals decided meanwhile may be
// missed.
func (s *Store) List(ctx context.Context, state State, limit int) ([]*Approval, error) {
	if state == "" {
		state = StatePending
	}
	switch state {
	case StatePending, StateAccepted, StateRejected, StateExpired, StateAll:
	default:
		return nil, fmt.Errorf("approve: list: unknown state %q (want %s, %s, %s, %s or %s)",
			state, StatePending, StateAccepted, StateRejected, StateExpired, StateAll)
	}
	key := s.index(string(state))
	now := s.now()
	out := []*Approval{}
	seen := map[string]bool{}
	for start := int64(0); ; {
		stop := int64(-1)
		if limit > 0 {
			stop = start + int64(limit-len(out)) - 1
		}
		ids, err := s.rdb.ZRevRange(ctx, key, start, stop).Result()
		if err != nil {
			return nil, fmt.Errorf("approve: list: %w", err)
		}
		as, err := s.summaries(ctx, ids)
		if err != nil {
			return nil, err
		}
		var stale []any
		for i, a := range as {
			switch {
			case a.ID == "" || (state != StateAll && a.State != state):
				stale = append(stale, ids[i])
			case seen[a.ID]:
			case a.State == StatePending && state == StatePending && !a.ExpiresAt.IsZero() && !now.Before(a.ExpiresAt):
			default:
				seen[a.ID] = true
				out = append(out, a)
			}
		}
		if len(stale) > 0 {
			if err := s.rdb.ZRem(ctx, key, stale...).Err(); err != nil {
				return nil, fmt.Errorf("approve: list: %w", err)
			}
		}
		if limit <= 0 || len(out) >= limit || int64(len(ids)) < stop-start+1 {
			return out, nil
		}
		start += int64(len(ids) - len(stale))
	}
}

// summaryChunk is how many approvals one pipeline of summaries reads;
// summaryWorkers how many such pipelines run at once, so that decoding one
// overlaps Redis answering the next.
const (
	summaryChunk   = 1000
	summaryWorkers = 4
)

// summaries reads the summary fields of approvals ids. An approval that
// does not exist has an empty ID.
func (s *Store) summaries(ctx context.Context, ids []string) ([]*Approval, error) {
	out := make([]*Approval, len(ids))
	chunks := make(chan int)
	errs := make(chan error, summaryWorkers)
	workers := min(summaryWorkers, (len(ids)+summaryChunk-1)/summaryChunk)
	for range workers {
		go func() {
			var err error
			for lo := range chunks {
				if err == nil {
					err = s.summaryChunk(ctx, ids[lo:min(lo+summaryChunk, len(ids))], out[lo:])
				}
			}
			errs <- err
		}()
	}
	for lo := 0; lo < len(ids); lo += summaryChunk {
		chunks <- lo
	}
	close(chunks)
	var err error
	for range workers {
		err = cmp.Or(err, <-errs)
	}
	return out, err
}

// hmgetSummary is HMGET of the summary fields, its key left to fill in
// (index 1): copying it saves boxing every field name of every command.
var hmgetSummary = func() []any {
	args := []any{"hmget", ""}
	for _, f := range summaryFields {
		args = append(args, f)
	}
	return args
}()

func (s *Store) summaryChunk(ctx context.Context, ids []string, out []*Approval) error {
	cmds := make([]*redis.Cmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			args := slices.Clone(hmgetSummary)
			args[1] = s.hashKey(id)
			cmds[i] = p.Do(ctx, args...)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("approve: list: %w", err)
	}
	for i, c := range cmds {
		vals, err := c.Slice()
		if err != nil {
			return fmt.Errorf("approve: list: approval %s: %w", ids[i], err)
		}
		a := &Approval{}
		for j, v := range vals {
			if str, ok := v.(string); ok {
				if err := setField(a, summaryFields[j], str); err != nil {
					return fmt.Errorf("approve: list: approval %s: %w", ids[i], err)
				}
			}
		}
		out[i] = a
	}
	return nil
}

// History returns the audit trail of approval id, oldest first, or
// ErrNotFound.
func (s *Store) History(ctx context.Context, id string) ([]Event, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	msgs, err := s.rdb.XRange(ctx, s.Keys(id)[2], "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("approve: history of %s: %w", id, err)
	}
	if len(msgs) == 0 {
		n, err := s.rdb.Exists(ctx, s.Keys(id)[0]).Result()
		if err != nil {
			return nil, fmt.Errorf("approve: history of %s: %w", id, err)
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
	}
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		e, err := eventOf(m.Values)
		if err != nil {
			return nil, fmt.Errorf("approve: history of %s: %w", id, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func eventOf(v map[string]any) (Event, error) {
	str := func(k string) string { s, _ := v[k].(string); return s }
	at, err := parseMicros(str("at"))
	return Event{At: at, From: State(str("from")), To: State(str("to")), By: str("by"), ByNote: str("by_note"), Comment: str("comment")}, err
}

// Watch calls fn with each new pending approval as it is parked, in order,
// until ctx ends (it then returns ctx's error) or fn returns an error. It
// reads the global audit stream from after entry since (a stream id), or
// from now when since is "" or "$". It sees what was parked while the
// global stream is written, which is after the approval is stored: an
// approval parked by a process that died in between is not seen.
func (s *Store) Watch(ctx context.Context, since string, fn func(*Approval) error) error {
	last := since
	if last == "" || last == "$" {
		msgs, err := s.rdb.XRevRangeN(ctx, s.auditKey(), "+", "-", 1).Result()
		if err != nil {
			return fmt.Errorf("approve: watch: %w", err)
		}
		last = "0-0"
		if len(msgs) > 0 {
			last = msgs[0].ID
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		streams, err := s.rdb.XRead(ctx, &redis.XReadArgs{
			Streams: []string{s.auditKey(), last}, Count: 100, Block: s.watchBlock,
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("approve: watch: %w", err)
		}
		for _, st := range streams {
			for _, m := range st.Messages {
				last = m.ID
				id, _ := m.Values["id"].(string)
				if m.Values["to"] != string(StatePending) || m.Values["from"] != "" {
					continue
				}
				a, err := s.Get(ctx, id)
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if err := fn(a); err != nil {
					return err
				}
			}
		}
	}
}

// Scan reads the approvals in state (as List: newest first, summary
// fields only) from position start of its index, and returns up to limit
// of them that keep accepts (keep nil accepts all), having looked at no
// more than maxScan entries (at least limit). next is the position to
// scan from for the rest, -1 when the index has no more. Positions move
// as approvals come and go: a page read from next may repeat or miss one
// that changed meanwhile.
func (s *Store) Scan(ctx context.Context, state State, start int64, limit, maxScan int, keep func(*Approval) bool) (out []*Approval, next int64, err error) {
	key := s.index(string(state))
	now := s.now()
	maxScan = max(maxScan, limit)
	pos, scanned := max(start, 0), 0
	for {
		window := int64(min(summaryChunk, maxScan-scanned))
		ids, err := s.rdb.ZRevRange(ctx, key, pos, pos+window-1).Result()
		if err != nil {
			return nil, 0, fmt.Errorf("approve: list: %w", err)
		}
		as, err := s.summaries(ctx, ids)
		if err != nil {
			return nil, 0, err
		}
		var stale []any
		full := false
		for i, a := range as {
			if full {
				break
			}
			scanned++
			if a.ID == "" || (state != StateAll && a.State != state) {
				stale = append(stale, ids[i]) // leaves the index: later ones move up
				continue
			}
			pos++
			expired := a.State == StatePending && state == StatePending && !a.ExpiresAt.IsZero() && !now.Before(a.ExpiresAt)
			if !expired && (keep == nil || keep(a)) {
				out = append(out, a)
				full = len(out) >= limit
			}
		}
		if len(stale) > 0 {
			if err := s.rdb.ZRem(ctx, key, stale...).Err(); err != nil {
				return nil, 0, fmt.Errorf("approve: list: %w", err)
			}
		}
		switch {
		case int64(len(ids)) < window && !full:
			return out, -1, nil
		case full || scanned >= maxScan:
			if n, err := s.rdb.ZCard(ctx, key).Result(); err == nil && pos >= n {
				return out, -1, nil
			}
			return out, pos, nil
		}
	}
}

// Queue returns the queue of approval id's run ("" for none recorded), or
// ErrNotFound.
func (s *Store) Queue(ctx context.Context, id string) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	v, err := s.rdb.HMGet(ctx, s.hashKey(id), fID, fQueue).Result()
	if err != nil {
		return "", fmt.Errorf("approve: queue of %s: %w", id, err)
	}
	if v[0] == nil {
		return "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	q, _ := v[1].(string)
	return q, nil
}
