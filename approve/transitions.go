package approve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Park stores a new approval a, pending or accepted (auto-promotion by
// policy, DecidedBy set), with the staged bytes of its artifacts (data, by
// Artifact.Name). a.ID must be set: when that id exists already, Park
// returns the stored approval and created false, changing nothing (and
// repairing its index entries), when it is the same task's; an id that
// holds another task's approval is ErrIDTaken. Pending approvals get CreatedAt now and
// ExpiresAt now+TTL when zero; accepted ones DecidedAt now when zero. An
// artifact's SHA256 and Bytes are filled in from its data when SHA256 is
// empty, and checked against it otherwise. Park returns ErrTooLarge, having
// stored nothing, when the data is above MaxStagedBytes. The returned
// approval is as Get would return it (times in UTC, to the microsecond).
//
// When Park stored the approval but could not update the indexes, it
// returns it with created true and an error: parking it again repairs them.
func (s *Store) Park(ctx context.Context, a *Approval, data map[string][]byte) (*Approval, bool, error) {
	p, err := s.prepare(a, data)
	if err != nil {
		return nil, false, err
	}
	// The staged bytes are counted (reserveScript) in the round trip of
	// the park itself, before it: past the bound the reservation fails,
	// and a park it refused is undone at once.
	n := p.a.StagedBytes
	var reserved *redis.Cmd
	var park *redis.Cmd
	_, err = s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if n > 0 {
			reserved = reserveScript.Eval(ctx, pipe, []string{s.stagedKey()}, p.a.ID, n, s.maxPending, p.a.Run.Principal, s.principalBound(p.a.Run.Principal))
		}
		park = parkScript.Eval(ctx, pipe, s.Keys(p.a.ID), p.args...)
		return nil
	})
	created, perr := park.Int()
	var total int64
	var rerr error
	if reserved != nil {
		total, rerr = reserved.Int64()
	}
	if err != nil || perr != nil || rerr != nil {
		if reserved != nil && rerr == nil && total >= 0 && created == 1 {
			s.undoPark(ctx, p.a.ID) // stored, but this call fails: leave nothing
		} else if reserved != nil && rerr == nil && total >= 0 {
			_ = s.release(ctx, p.a.ID)
		}
		return nil, false, fmt.Errorf("approve: park %s: %w", p.a.ID, errors.Join(err, perr, rerr))
	}
	if created == 0 {
		if total >= 0 && reserved != nil {
			// The approval was there before this call, and not counted
			// (parked by a worker without the bound): neither is it now.
			_ = s.release(ctx, p.a.ID)
		}
		old, err := s.Get(ctx, p.a.ID)
		if err != nil {
			return nil, false, err
		}
		if old.TaskID != p.a.TaskID {
			return nil, false, fmt.Errorf("approve: park %s for task %s: %w (it holds task %s)", p.a.ID, p.a.TaskID, ErrIDTaken, old.TaskID)
		}
		return old, false, s.after(ctx, old, nil)
	}
	if reserved != nil && total == reserveFull {
		err := s.undoPark(ctx, p.a.ID)
		held, _ := s.PendingBytes(ctx)
		return nil, false, errors.Join(fmt.Errorf("approve: park %s: %d bytes to stage while approvals hold %d, bound %d: %w",
			p.a.ID, n, held, s.maxPending, ErrPendingFull), err)
	}
	if reserved != nil && total == reservePrincipalFull {
		err := s.undoPark(ctx, p.a.ID)
		held, _ := s.PrincipalPendingBytes(ctx, p.a.Run.Principal)
		return nil, false, errors.Join(fmt.Errorf("approve: park %s: %d bytes to stage while principal %q's approvals hold %d, its quota max_pending_bytes %d: %w",
			p.a.ID, n, p.a.Run.Principal, held, s.principalBound(p.a.Run.Principal), ErrPrincipalPendingFull), err)
	}
	return p.a, true, s.Apply(ctx, p.a.ID, s.freshOps(p.a, p.event))
}

// principalBound is the bytes principal's pending approvals may hold
// (Options.PrincipalMaxPendingBytes), 0 for no bound.
func (s *Store) principalBound(principal string) int64 {
	if s.principalMax == nil {
		return 0
	}
	return max(0, s.principalMax(principal))
}

// PrincipalPendingBytes returns the staged bytes principal's approvals
// not yet decided or published hold in Redis.
func (s *Store) PrincipalPendingBytes(ctx context.Context, principal string) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.stagedKey(), "#p:"+principal).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// undoPark deletes approval id's keys, just stored by a park that fails.
func (s *Store) undoPark(ctx context.Context, id string) error {
	if err := s.rdb.Del(ctx, s.Keys(id)...).Err(); err != nil {
		return fmt.Errorf("approve: undoing park %s: %w", id, err)
	}
	return nil
}

// release gives approval id's staged bytes back to the pending total.
func (s *Store) release(ctx context.Context, id string) error {
	return releaseScript.Run(ctx, s.rdb, []string{s.stagedKey()}, id).Err()
}

// PendingBytes returns the staged bytes (results and artifacts) that
// approvals not yet decided or published hold in Redis together, as
// counted against MaxPendingBytes.
func (s *Store) PendingBytes(ctx context.Context) (int64, error) {
	n, err := s.rdb.HGet(ctx, s.stagedKey(), stagedTotal).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("approve: pending bytes: %w", err)
	}
	return max(n, 0), nil
}

// parking is a checked approval, ready for parkScript.
type parking struct {
	a     *Approval // as stored
	args  []any     // of parkScript
	event Event
}

// prepare checks a and data and returns the approval as it will be stored
// and the arguments of parkScript.
func (s *Store) prepare(a *Approval, data map[string][]byte) (*parking, error) {
	if a == nil {
		return nil, errors.New("approve: park: nil approval")
	}
	if !ValidID(a.ID) {
		return nil, fmt.Errorf("approve: park: invalid id %q (want 1-128 of [A-Za-z0-9._:-])", a.ID)
	}
	c := *a
	c.Artifacts = slices.Clone(a.Artifacts)
	now := s.now()
	if c.CreatedAt.IsZero() {
		c.CreatedAt = now
	}
	var at time.Time
	switch c.State {
	case StatePending:
		if c.DecidedBy != "" || c.ByNote != "" || !c.DecidedAt.IsZero() || c.Comment != "" || !c.PromotedAt.IsZero() {
			return nil, fmt.Errorf("approve: park %s: a pending approval has no decision", c.ID)
		}
		if c.ExpiresAt.IsZero() {
			c.ExpiresAt = now.Add(s.ttl)
		}
		at = c.CreatedAt
	case StateAccepted:
		if c.DecidedBy == "" {
			return nil, fmt.Errorf("approve: park %s: an accepted approval needs DecidedBy (e.g. policy:default)", c.ID)
		}
		if !c.PromotedAt.IsZero() {
			return nil, fmt.Errorf("approve: park %s: PromotedAt is set by MarkPromoted", c.ID)
		}
		if c.DecidedAt.IsZero() {
			c.DecidedAt = now
		}
		at = c.DecidedAt
	default:
		return nil, fmt.Errorf("approve: park %s: state %q: want %s or %s", c.ID, c.State, StatePending, StateAccepted)
	}
	dataArgs, staged, err := s.checkData(&c, data)
	if err != nil {
		return nil, err
	}
	c.StagedBytes = 0
	rec, err := encode(&c)
	if err != nil {
		return nil, fmt.Errorf("approve: park %s: %w", c.ID, err)
	}
	// What counts against MaxPendingBytes: the artifacts' bytes and the
	// whole approval hash (result, run summary, names), as stored.
	c.StagedBytes = staged
	for _, v := range rec {
		if str, ok := v.(string); ok {
			c.StagedBytes += int64(len(str))
		}
	}
	rec = append(rec, fStaged, strconv.FormatInt(c.StagedBytes, 10))
	stored, err := decodePairs(rec) // as Get will read it
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 5+len(rec)+len(dataArgs))
	args = append(args, string(c.State), c.DecidedBy, c.Comment, micros(at), len(rec))
	args = append(append(args, rec...), dataArgs...)
	return &parking{a: stored, args: args,
		event: Event{At: normTime(at), To: c.State, By: c.DecidedBy, Comment: c.Comment}}, nil
}

// checkData checks data against c's artifacts and the cap, fills in
// missing sizes and digests, and returns the data as name, bytes pairs
// and its size.
func (s *Store) checkData(c *Approval, data map[string][]byte) ([]any, int64, error) {
	idx := make(map[string]int, len(c.Artifacts))
	for i, art := range c.Artifacts {
		if _, dup := idx[art.Name]; dup {
			return nil, 0, fmt.Errorf("approve: park %s: artifact %q listed twice", c.ID, art.Name)
		}
		idx[art.Name] = i
	}
	var total int64
	names := make([]string, 0, len(data))
	for name, b := range data {
		if _, ok := idx[name]; !ok {
			return nil, 0, fmt.Errorf("approve: park %s: data for %q, which is not one of its artifacts", c.ID, name)
		}
		total += int64(len(b))
		names = append(names, name)
	}
	if total > s.maxStaged {
		return nil, 0, fmt.Errorf("approve: park %s: %d bytes of artifacts, cap %d: %w", c.ID, total, s.maxStaged, ErrTooLarge)
	}
	slices.Sort(names)
	args := make([]any, 0, 2*len(names))
	for _, name := range names {
		b := data[name]
		art := &c.Artifacts[idx[name]]
		sum := sha256.Sum256(b)
		digest := hex.EncodeToString(sum[:])
		switch {
		case art.SHA256 == "":
			art.SHA256, art.Bytes = digest, int64(len(b))
		case !strings.EqualFold(art.SHA256, digest) || art.Bytes != int64(len(b)):
			return nil, 0, fmt.Errorf("approve: park %s: artifact %q: data of %d bytes, sha256 %s does not match the artifact's %d bytes, sha256 %s",
				c.ID, name, len(b), digest, art.Bytes, art.SHA256)
		}
		args = append(args, name, b)
	}
	return args, total, nil
}

// Get returns approval id, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (*Approval, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, s.Keys(id)[0]).Result()
	if err != nil {
		return nil, fmt.Errorf("approve: get %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	a := &Approval{}
	for name, v := range m {
		if err := setField(a, name, v); err != nil {
			return nil, fmt.Errorf("approve: get %s: %w", id, err)
		}
	}
	return a, nil
}

// Data returns the staged bytes of artifact name of approval id, or
// ErrNotFound when the approval or those bytes are gone (never staged, or
// dropped at rejection, expiry or promotion).
func (s *Store) Data(ctx context.Context, id, name string) ([]byte, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	b, err := s.rdb.HGet(ctx, s.Keys(id)[1], name).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %s has no staged bytes of %q (dropped, or never staged)", ErrNotFound, id, name)
	}
	if err != nil {
		return nil, fmt.Errorf("approve: data of %s: %w", id, err)
	}
	return b, nil
}

// Accept accepts pending approval id for by. It returns the accepted
// approval; ErrNotFound; or a *DecidedError (matching ErrAlreadyDecided)
// when it was decided already or its expiry has passed (it is then
// expired, atomically). Only one of concurrent deciders wins.
//
// When the approval was accepted but the indexes could not be updated,
// Accept returns it together with an error.
func (s *Store) Accept(ctx context.Context, id, by, comment string) (*Approval, error) {
	return s.Decide(ctx, id, StateAccepted, Decision{By: by, Comment: comment})
}

// Reject rejects pending approval id for by, who must say why (comment),
// and drops its staged bytes. Errors as Accept's.
func (s *Store) Reject(ctx context.Context, id, by, comment string) (*Approval, error) {
	return s.Decide(ctx, id, StateRejected, Decision{By: by, Comment: comment})
}

// Decision is who decides an approval, and why.
type Decision struct {
	// By is who decides, recorded as decided_by: the one accountable (a
	// login, an API token's name). Required.
	By string
	// ByNote is an optional display note kept beside By (Approval.ByNote),
	// such as a name the decider's front end was given but cannot vouch
	// for; it never stands for By.
	ByNote string
	// Comment says why: optional to accept, required to reject.
	Comment string
}

// Decide accepts (to StateAccepted) or rejects (StateRejected) pending
// approval id for d.By, as Accept and Reject do, keeping d.ByNote beside
// d.By in the approval and its audit trail.
func (s *Store) Decide(ctx context.Context, id string, to State, d Decision) (*Approval, error) {
	if to != StateAccepted && to != StateRejected {
		return nil, fmt.Errorf("approve: decide %s: state %q: want %s or %s", id, to, StateAccepted, StateRejected)
	}
	if to == StateRejected && strings.TrimSpace(d.Comment) == "" {
		return nil, fmt.Errorf("approve: reject %s: %w", id, ErrCommentRequired)
	}
	start := time.Now()
	a, err := s.decide(ctx, id, to, d)
	s.traceDecision(ctx, start, to, a)
	return a, err
}

func (s *Store) decide(ctx context.Context, id string, to State, d Decision) (*Approval, error) {
	by, comment := d.By, d.Comment
	if err := checkID(id); err != nil {
		return nil, err
	}
	if strings.TrimSpace(by) == "" {
		return nil, fmt.Errorf("approve: %s %s: who decides (by) is required", strings.TrimSuffix(string(to), "ed"), id)
	}
	now := s.now()
	if to == StateAccepted {
		// Write-ahead: an accepted approval is in the unpromoted index
		// before it is accepted, so that the worker finds it (ListAccepted)
		// even when this process dies right after the script. A stale entry
		// is dropped below, or by ListAccepted.
		err := s.rdb.ZAdd(ctx, s.index(idxUnpromoted), redis.Z{Score: float64(now.UnixMicro()), Member: id}).Err()
		if err != nil {
			return nil, fmt.Errorf("approve: accept %s: %w", id, err)
		}
	}
	v, err := decideScript.Run(ctx, s.rdb, s.Keys(id), string(to), by, comment, micros(now), s.retentionMS(), "1", d.ByNote).Result()
	if err != nil {
		return nil, fmt.Errorf("approve: %s %s: %w", to, id, err)
	}
	status, a, err := scriptReply(v)
	if err != nil {
		return nil, err
	}
	switch status {
	case "notfound":
		if to == StateAccepted {
			_ = s.rdb.ZRem(ctx, s.index(idxUnpromoted), id).Err() // best effort: ListAccepted drops it too
		}
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case "ok":
		return a, s.after(ctx, a, &Event{At: a.DecidedAt, From: StatePending, To: to, By: by, ByNote: d.ByNote, Comment: comment})
	case "expired":
		err := s.after(ctx, a, &Event{At: a.DecidedAt, From: StatePending, To: StateExpired})
		return nil, joinErr(&DecidedError{ID: id, State: StateExpired, At: a.DecidedAt}, err)
	case "decided":
		err := s.after(ctx, a, nil) // repairs what a crash may have left
		return nil, joinErr(&DecidedError{ID: id, State: a.State, By: a.DecidedBy, At: a.DecidedAt}, err)
	}
	return nil, fmt.Errorf("approve: %s %s: unexpected status %q", to, id, status)
}

// joinErr returns e, joined with err when err is not nil.
func joinErr(e *DecidedError, err error) error {
	if err != nil {
		return errors.Join(e, err)
	}
	return e
}

// MarkPromoted records that accepted approval id was published, at where
// (a directory, a URL: for readers of the result), at at (now
// when zero): it sets PromotedAt, removes it from the accepted-not-promoted
// index, drops its staged bytes and appends a "promoted" audit event. It is
// idempotent: an approval promoted already is left as it is.
func (s *Store) MarkPromoted(ctx context.Context, id string, at time.Time, where string) error {
	ops, err := s.MarkPromotedOps(ctx, id, at, where)
	if err != nil {
		return err
	}
	return s.Apply(ctx, id, ops)
}

// Ops are index and audit updates that a transition left for its caller
// to send, in a pipeline of the caller's own.
type Ops func(ctx context.Context, p redis.Pipeliner)

// MarkPromotedOps is MarkPromoted without the round trip of the index and
// audit updates: it returns them for the caller to queue with its own
// writes (the worker sends them with the run's record) or to send
// (Apply). Until they are
// sent, the approval is promoted but still indexed as accepted and not
// promoted: a promotion of it then only repairs the indexes (Reindex).
func (s *Store) MarkPromotedOps(ctx context.Context, id string, at time.Time, where string) (Ops, error) {
	return s.markPromotedOps(ctx, id, at, where, nil)
}

// markPromotedOps is MarkPromotedOps; fresh, when not nil, is the
// approval as the caller's own park just created it (Park's created
// true, its index updates sent): the script then returns no view, and
// the updates are only what the promotion changes (promotedFreshOps).
func (s *Store) markPromotedOps(ctx context.Context, id string, at time.Time, where string, fresh *Approval) (Ops, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if at.IsZero() {
		at = s.now()
	}
	view := "0"
	if fresh != nil {
		view = "-"
	}
	v, err := promoteScript.Run(ctx, s.rdb, s.Keys(id), micros(at), s.retentionMS(), view, where).Result()
	if err != nil {
		return nil, fmt.Errorf("approve: mark %s promoted: %w", id, err)
	}
	status, a, err := scriptReply(v)
	if err != nil {
		return nil, err
	}
	switch status {
	case "notfound":
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	case "notaccepted":
		return nil, fmt.Errorf("approval %s is %s: %w", id, a.State, ErrNotAccepted)
	case "already":
		return s.afterOps(a, nil), nil
	case "ok":
		e := Event{At: at.UTC().Truncate(time.Microsecond), From: StateAccepted, To: EventPromoted}
		if fresh != nil {
			done := *fresh
			done.PromotedAt = e.At
			return s.promotedFreshOps(&done, e), nil
		}
		e.At = a.PromotedAt
		return s.afterOps(a, &e), nil
	}
	return nil, fmt.Errorf("approve: mark %s promoted: unexpected status %q", id, status)
}

// Reindex sets the indexes of a, an approval as the store holds it, to
// match its state: it repairs what a transition whose index updates were
// lost (a crash, a failed round trip) left.
func (s *Store) Reindex(ctx context.Context, a *Approval) error {
	return s.after(ctx, a, nil)
}

// expireBatch is how many approvals ExpireDue handles per round trip.
const expireBatch = 100

// ExpireDue expires every pending approval whose ExpiresAt has passed,
// dropping its staged bytes, and returns how many it expired. It is the
// sweeper's step; it also drops index entries of approvals Redis has
// deleted (Retention), as pruneIndexes does.
func (s *Store) ExpireDue(ctx context.Context) (int, error) {
	n, err := s.expireDue(ctx)
	if err != nil {
		return n, err
	}
	_, err = s.pruneIndexes(ctx)
	return n, err
}

// expireDue is ExpireDue without the pruning of the indexes.
func (s *Store) expireDue(ctx context.Context) (int, error) {
	now := s.now()
	n := 0
	for {
		ids, err := s.rdb.ZRangeByScore(ctx, s.index(idxExpiry), &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now.UnixMicro(), 10), Count: expireBatch,
		}).Result()
		if err != nil {
			return n, fmt.Errorf("approve: expire: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		cmds := make([]*redis.Cmd, len(ids))
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				cmds[i] = decideScript.Eval(ctx, p, s.Keys(id), "expire", "", "", micros(now), s.retentionMS(), "0", "")
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("approve: expire: %w", err)
		}
		_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range ids {
				status, a, err := scriptReply(cmds[i].Val())
				if err != nil {
					return err
				}
				switch status {
				case "notfound":
					p.ZRem(ctx, s.index(idxPending), id)
					p.ZRem(ctx, s.index(idxExpiry), id)
				case "expired":
					n++
					s.indexOps(ctx, p, a)
					e := Event{At: a.DecidedAt, From: StatePending, To: StateExpired}
					s.auditOp(ctx, p, id, e)
					s.runEventOp(ctx, p, a, e)
					s.unstageOp(ctx, p, a)
				default: // decided, or not due (a stale score): reindex
					s.indexOps(ctx, p, a)
				}
			}
			return nil
		})
		if err != nil {
			return n, fmt.Errorf("approve: expire: updating the indexes: %w", err)
		}
	}
	return n, nil
}

// pruneBatch is how many of the oldest entries of each index one prune
// looks at.
const pruneBatch = 100

// pruneIndexes drops, among the pruneBatch oldest entries of each index
// of decided approvals (and of all), those whose approval Redis has
// deleted (Retention), and returns how many it dropped.
func (s *Store) pruneIndexes(ctx context.Context) (int, error) {
	n := 0
	for _, idx := range []string{idxAll, idxAccepted, idxRejected, idxExpired} {
		k, err := s.prune(ctx, s.index(idx), pruneBatch)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// prune drops, among the count oldest entries of index key, those whose
// approval Redis has deleted, and returns how many.
func (s *Store) prune(ctx context.Context, key string, count int64) (int, error) {
	ids, err := s.rdb.ZRange(ctx, key, 0, count-1).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	exists := make([]*redis.IntCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			exists[i] = p.Exists(ctx, s.Keys(id)[0])
		}
		return nil
	}); err != nil {
		return 0, fmt.Errorf("approve: pruning %s: %w", key, err)
	}
	var gone []any
	for i, c := range exists {
		if c.Val() == 0 {
			gone = append(gone, ids[i])
		}
	}
	if len(gone) > 0 {
		if err := s.rdb.ZRem(ctx, key, gone...).Err(); err != nil {
			return 0, err
		}
	}
	return len(gone), nil
}
