package approve

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
)

// luaView returns the approval's fields as a flat list: all of them when
// ARGV[full] is "1", else the summary fields.
func luaView(full int) string {
	q := make([]string, len(summaryFields))
	for i, f := range summaryFields {
		q[i] = "'" + f + "'"
	}
	return `
local function view()
  if ARGV[` + strconv.Itoa(full) + `] == '1' then return redis.call('HGETALL', KEYS[1]) end
  local f = {` + strings.Join(q, ", ") + `}
  local v = redis.call('HMGET', KEYS[1], unpack(f))
  local out = {}
  for i = 1, #f do
    if v[i] then out[#out+1] = f[i]; out[#out+1] = v[i] end
  end
  return out
end
local function finish(ms)
  local r = tonumber(ms)
  if r > 0 then
    for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], r) end
  end
end
`
}

// parkScript stores a new approval unless its id exists.
// KEYS: hash, data, audit. ARGV: to, by, comment, at, n, then n record
// arguments (field, value pairs), then data arguments (name, bytes pairs).
// Each hash is written with one HSET (Lua's unpack takes a few thousand
// values at most: past maxUnpack, the data goes in batches).
var parkScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local n = tonumber(ARGV[5])
if n > 0 then redis.call('HSET', KEYS[1], unpack(ARGV, 6, 5 + n)) end
local i = 6 + n
while i <= #ARGV do
  local j = math.min(#ARGV, i + ` + strconv.Itoa(maxUnpack) + ` - 1)
  redis.call('HSET', KEYS[2], unpack(ARGV, i, j))
  i = j + 1
end
redis.call('XADD', KEYS[3], '*', 'from', '', 'to', ARGV[1], 'by', ARGV[2], 'comment', ARGV[3], 'at', ARGV[4])
return 1
`)

// maxUnpack is how many values parkScript passes one HSET (even: pairs).
const maxUnpack = 1000

// decideScript is the compare-and-set of a decision.
// KEYS: hash, data, audit. ARGV: to (accepted, rejected, or "expire" for
// the sweeper), by, comment, now, retention ms (0: none), full view ("1"),
// by_note ("": none).
// Returns {status, view}: status notfound, decided (not pending), expired
// (it just expired), notdue (expire only) or ok.
var decideScript = redis.NewScript(luaView(6) + `
local st = redis.call('HMGET', KEYS[1], 'state', 'expires_at')
if not st[1] then return {'notfound', {}} end
if st[1] ~= 'pending' then return {'decided', view()} end
local exp = tonumber(st[2])
if exp and tonumber(ARGV[4]) >= exp then
  redis.call('HSET', KEYS[1], 'state', 'expired', 'decided_at', st[2])
  redis.call('HDEL', KEYS[1], 'decided_by', 'comment', 'by_note')
  redis.call('DEL', KEYS[2])
  redis.call('XADD', KEYS[3], '*', 'from', 'pending', 'to', 'expired', 'by', '', 'comment', '', 'at', st[2])
  finish(ARGV[5])
  return {'expired', view()}
end
if ARGV[1] == 'expire' then return {'notdue', view()} end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'decided_by', ARGV[2], 'decided_at', ARGV[4], 'comment', ARGV[3])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'by_note', ARGV[7]) end
redis.call('XADD', KEYS[3], '*', 'from', 'pending', 'to', ARGV[1], 'by', ARGV[2], 'by_note', ARGV[7], 'comment', ARGV[3], 'at', ARGV[4])
if ARGV[1] == 'rejected' then
  redis.call('DEL', KEYS[2])
  finish(ARGV[5])
end
return {'ok', view()}
`)

// promoteScript marks an accepted approval promoted.
// KEYS: hash, data, audit. ARGV: at, retention ms, view ("0": the
// summary, "-": none), where.
// Returns {status, view}: notfound, notaccepted, already or ok.
var promoteScript = redis.NewScript(luaView(3) + `
local st = redis.call('HMGET', KEYS[1], 'state', 'promoted_at')
if not st[1] then return {'notfound', {}} end
if st[1] ~= 'accepted' then return {'notaccepted', view()} end
if st[2] then return {'already', view()} end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'promoted_at', ARGV[1], 'published_to', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'promoted_at', ARGV[1])
end
redis.call('DEL', KEYS[2])
redis.call('XADD', KEYS[3], '*', 'from', 'accepted', 'to', 'promoted', 'by', '', 'comment', '', 'at', ARGV[1])
local r = tonumber(ARGV[2])
if r > 0 then
  redis.call('PEXPIRE', KEYS[1], r)
  redis.call('PEXPIRE', KEYS[3], r)
end
if ARGV[3] == '-' then return {'ok', {}} end
return {'ok', view()}
`)

func (s *Store) retentionMS() int64 {
	if s.retention < 0 {
		return 0
	}
	return max(s.retention.Milliseconds(), 1)
}

// scriptReply splits a script's {status, view} reply.
func scriptReply(v any) (string, *Approval, error) {
	l, ok := v.([]any)
	if !ok || len(l) != 2 {
		return "", nil, fmt.Errorf("approve: unexpected script reply %v", v)
	}
	status, _ := l[0].(string)
	a, err := decodePairs(l[1])
	return status, a, err
}

// indexOps queues the index updates that match a's state.
func (s *Store) indexOps(ctx context.Context, p redis.Pipeliner, a *Approval) {
	id := a.ID
	z := func(t time.Time) redis.Z { return redis.Z{Score: float64(t.UnixMicro()), Member: id} }
	if !a.CreatedAt.IsZero() {
		p.ZAdd(ctx, s.index(idxAll), z(a.CreatedAt))
	}
	if a.State == StatePending {
		p.ZAdd(ctx, s.index(idxPending), z(a.CreatedAt))
		if a.ExpiresAt.IsZero() {
			p.ZRem(ctx, s.index(idxExpiry), id)
		} else {
			p.ZAdd(ctx, s.index(idxExpiry), z(a.ExpiresAt))
		}
		return
	}
	p.ZRem(ctx, s.index(idxPending), id)
	p.ZRem(ctx, s.index(idxExpiry), id)
	switch a.State {
	case StateAccepted, StateRejected, StateExpired:
		p.ZAdd(ctx, s.index(string(a.State)), z(a.DecidedAt))
	}
	if a.State == StateAccepted && a.PromotedAt.IsZero() {
		p.ZAdd(ctx, s.index(idxUnpromoted), z(a.DecidedAt))
	} else {
		p.ZRem(ctx, s.index(idxUnpromoted), id)
	}
}

// freshOps are the index updates and audit entry of a, an approval a park
// just created (pending or accepted): only what can be set, since no
// index holds it yet.
func (s *Store) freshOps(a *Approval, e Event) Ops {
	return func(ctx context.Context, p redis.Pipeliner) {
		z := func(t time.Time) redis.Z { return redis.Z{Score: float64(t.UnixMicro()), Member: a.ID} }
		p.ZAdd(ctx, s.index(idxAll), z(a.CreatedAt))
		switch a.State {
		case StatePending:
			p.ZAdd(ctx, s.index(idxPending), z(a.CreatedAt))
			if !a.ExpiresAt.IsZero() {
				p.ZAdd(ctx, s.index(idxExpiry), z(a.ExpiresAt))
			}
		case StateAccepted:
			p.ZAdd(ctx, s.index(idxAccepted), z(a.DecidedAt))
			p.ZAdd(ctx, s.index(idxUnpromoted), z(a.DecidedAt))
		default:
			s.indexOps(ctx, p, a)
		}
		s.auditOp(ctx, p, a.ID, e)
		s.runEventOp(ctx, p, a, e)
	}
}

// promotedFreshOps are the index updates and audit entry of a's promotion
// where a park of this caller's created a (freshOps sent) and promoted it
// at once: it leaves the accepted-not-promoted index, and its staged
// bytes are given back.
func (s *Store) promotedFreshOps(a *Approval, e Event) Ops {
	return func(ctx context.Context, p redis.Pipeliner) {
		p.ZRem(ctx, s.index(idxUnpromoted), a.ID)
		s.auditOp(ctx, p, a.ID, e)
		s.runEventOp(ctx, p, a, e)
		s.unstageOp(ctx, p, a)
	}
}

// auditOp queues the global audit entry of a transition.
func (s *Store) auditOp(ctx context.Context, p redis.Pipeliner, id string, e Event) {
	p.XAdd(ctx, &redis.XAddArgs{
		Stream: s.auditKey(), MaxLen: auditMaxLen, Approx: true,
		Values: []any{"id", id, "from", string(e.From), "to", string(e.To), "by", e.By, "by_note", e.ByNote, "comment", e.Comment, "at", micros(e.At)},
	})
}

// runEventOp queues the run's state change, for transitions that change
// the run's state, on the events stream of the store's prefix, in the
// same round trip as the audit entry.
func (s *Store) runEventOp(ctx context.Context, p redis.Pipeliner, a *Approval, e Event) {
	if s.quiet {
		return
	}
	switch e.To {
	case StateAccepted, StateRejected, StateExpired, EventPromoted:
	default:
		return // pending: the worker's own "parked" event says it
	}
	s.events.AppendOp(ctx, p, events.Event{RunID: a.RunID, TaskID: a.TaskID, State: e.To.Run(),
		Verdict: record.VerdictOK, ApprovalID: a.ID, Principal: a.Run.Principal, Time: e.At})
}

// afterOps are the index updates that match a (when not nil) and the
// append of e (when not nil) to the global audit stream.
func (s *Store) afterOps(a *Approval, e *Event) Ops {
	return func(ctx context.Context, p redis.Pipeliner) {
		if a != nil {
			s.indexOps(ctx, p, a)
		}
		if e != nil {
			s.auditOp(ctx, p, a.ID, *e)
			s.runEventOp(ctx, p, a, *e)
		}
		if a != nil {
			s.unstageOp(ctx, p, a)
		}
	}
}

// unstageOp queues the release of a's staged bytes from the pending
// total when a no longer holds them (rejected, expired, promoted). It is
// queued with every update of such an approval, repairs included
// (releaseScript releases once), so that a lost round trip never leaves
// bytes counted for good.
func (s *Store) unstageOp(ctx context.Context, p redis.Pipeliner, a *Approval) {
	if a.StagedBytes <= 0 {
		return
	}
	if a.State == StateRejected || a.State == StateExpired || !a.PromotedAt.IsZero() {
		releaseScript.Eval(ctx, p, []string{s.stagedKey()}, a.ID)
	}
}

// The pending total is one hash (one key, hence one Cluster slot): a field
// per approval that holds staged bytes (its id: its size), and the total
// in stagedTotal. Counting an approval twice, or releasing it twice (a
// retried round trip sends its updates again), changes nothing.
const stagedTotal = "#total"

// reserveFull is reserveScript's answer when the bound would be passed,
// reservePrincipalFull when the principal's would.
const (
	reserveFull          = -1
	reservePrincipalFull = -3
)

// reserveScript counts an approval's staged bytes unless it is counted,
// in the total and in its principal's (field "#p:" and the principal; the
// approval's principal in field ID "#p").
// KEYS: the pending hash. ARGV: id, bytes, bound (<= 0: none), principal,
// the principal's bound (<= 0: none). Returns the new total; reserveFull
// past the bound, reservePrincipalFull past the principal's (nothing
// counted); -2 when the id was counted already.
var reserveScript = redis.NewScript(`
local pk = '#p:' .. ARGV[4]
local v = redis.call('HMGET', KEYS[1], ARGV[1], '` + stagedTotal + `', pk)
if v[1] then return -2 end
local n = tonumber(ARGV[2])
local t = tonumber(v[2] or '0') + n
local max = tonumber(ARGV[3])
if max > 0 and t > max then return -1 end
local pt = tonumber(v[3] or '0') + n
local pmax = tonumber(ARGV[5])
if pmax > 0 and pt > pmax then return -3 end
redis.call('HSET', KEYS[1], ARGV[1], n, '` + stagedTotal + `', t, pk, pt, ARGV[1] .. '#p', ARGV[4])
return t
`)

// releaseScript gives an approval's counted bytes back, once, to the total
// and to its principal's.
// KEYS: the pending hash. ARGV: id. It uses only the commands of the ACL
// docs/redis.md lists.
var releaseScript = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[1] .. '#p', '` + stagedTotal + `')
if not v[1] then return 0 end
local n = tonumber(v[1])
local t = tonumber(v[3] or '0') - n
if not v[2] then
  redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '#p')
  redis.call('HSET', KEYS[1], '` + stagedTotal + `', t)
  return t
end
local pk = '#p:' .. v[2]
local pt = tonumber(redis.call('HGET', KEYS[1], pk) or '0') - n
if pt > 0 then
  redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '#p')
  redis.call('HSET', KEYS[1], '` + stagedTotal + `', t, pk, pt)
else
  redis.call('HDEL', KEYS[1], ARGV[1], ARGV[1] .. '#p', pk)
  redis.call('HSET', KEYS[1], '` + stagedTotal + `', t)
end
return t
`)

// after updates the indexes to match a (when not nil) and appends e (when
// not nil) to the global audit stream, in one round trip.
func (s *Store) after(ctx context.Context, a *Approval, e *Event) error {
	return s.Apply(ctx, a.ID, s.afterOps(a, e))
}

// Apply sends ops, the index and audit updates of approval id's
// transition, in one round trip.
func (s *Store) Apply(ctx context.Context, id string, ops Ops) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		ops(ctx, p)
		return nil
	})
	if err != nil {
		return fmt.Errorf("approve: %s: the transition is stored but updating the indexes failed: %w", id, err)
	}
	return nil
}
