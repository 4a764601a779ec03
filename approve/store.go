package approve

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-run/airlock/events"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultPrefix         = "airlock:"
	DefaultTTL            = 72 * time.Hour
	DefaultMaxStagedBytes = 32 << 20
	DefaultRetention      = 30 * 24 * time.Hour
)

// EventPromoted is the To of the audit event MarkPromoted appends: an
// accepted approval whose output has been published. It is not a state (the
// state stays accepted; PromotedAt is set).
const EventPromoted = "promoted"

// StateAll lists every approval in List, whatever its state.
const StateAll = "all"

// auditMaxLen bounds the global audit stream (approximately: MAXLEN ~).
const auditMaxLen = 100000

// More errors matched with errors.Is.
var (
	ErrCommentRequired = errors.New("a comment is required to reject")
	ErrNotAccepted     = errors.New("approval not accepted")
)

// Options configure a Store. Zero values take the defaults.
type Options struct {
	Prefix         string        // key prefix, default "airlock:"; must not hold '{' or '}'
	TTL            time.Duration // pending approvals expire after this; default 72h
	MaxStagedBytes int64         // cap of staged artifact bytes per approval; default 32 MiB
	// Retention is how long a finished approval (rejected, expired or
	// promoted) is kept, with its audit trail, before Redis deletes it;
	// default 30 days, negative keeps it forever. Accepted approvals not
	// yet promoted and pending ones are never deleted.
	Retention time.Duration
	Now       func() time.Time
}

// Event is one entry of an approval's audit trail.
type Event struct {
	At      time.Time `json:"at"`
	From    string    `json:"from"` // "" when the approval was parked
	To      string    `json:"to"`   // a state, or EventPromoted
	By      string    `json:"by,omitempty"`
	Comment string    `json:"comment,omitempty"`
}

// Store keeps approvals in Redis.
//
// Key layout, with P the prefix and ID an approval id:
//
//	P approval:{ID}          hash: the approval (source of truth)
//	P approval:{ID}:data     hash: artifact name → staged bytes
//	P approval:{ID}:audit    stream: from, to, by, comment, at (µs)
//	P approvals:pending      zset: pending, by created_at
//	P approvals:expiry       zset: pending, by expires_at
//	P approvals:accepted     zset: accepted (promoted or not), by decided_at
//	P approvals:unpromoted   zset: accepted, not yet promoted, by decided_at
//	P approvals:rejected     zset: by decided_at
//	P approvals:expired      zset: by decided_at (= expires_at)
//	P approvals:all          zset: every approval, by created_at
//	P audit                  stream: every transition (id, from, to, by, comment, at), MAXLEN ~ 100000
//
// The three keys of one approval share the hash tag {ID}, hence one Redis
// Cluster slot: every transition is one Lua script on that slot. The
// indexes live in other slots and are updated after the script; they may be
// stale (readers re-check the approval's hash and drop stale entries) but,
// once a call returned without error, are never missing an entry.
// Times are stored as Unix microseconds.
type Store struct {
	rdb        redis.UniversalClient
	prefix     string
	ttl        time.Duration
	maxStaged  int64
	retention  time.Duration
	now        func() time.Time
	watchBlock time.Duration
}

// NewStore returns a Store over rdb. It panics when opts.Prefix holds a
// brace, which would break the hash tags.
func NewStore(rdb redis.UniversalClient, opts Options) *Store {
	s := &Store{
		rdb: rdb, prefix: opts.Prefix, ttl: opts.TTL, maxStaged: opts.MaxStagedBytes,
		retention: opts.Retention, now: opts.Now, watchBlock: 500 * time.Millisecond,
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if strings.ContainsAny(s.prefix, "{}") {
		panic(fmt.Sprintf("approve: prefix %q holds a brace", s.prefix))
	}
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.maxStaged <= 0 {
		s.maxStaged = DefaultMaxStagedBytes
	}
	if s.retention == 0 {
		s.retention = DefaultRetention
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Prefix returns the store's key prefix.
func (s *Store) Prefix() string { return s.prefix }

// Keys returns the keys of approval id: its hash, staged data and audit
// stream, which share one cluster slot.
func (s *Store) Keys(id string) []string {
	k := s.hashKey(id)
	return []string{k, k + ":data", k + ":audit"}
}

// hashKey is the key of approval id's hash, Keys(id)[0].
func (s *Store) hashKey(id string) string { return s.prefix + "approval:{" + id + "}" }

func (s *Store) index(name string) string { return s.prefix + "approvals:" + name }
func (s *Store) auditKey() string         { return s.prefix + "audit" }

// Index names.
const (
	idxPending    = "pending"
	idxExpiry     = "expiry"
	idxAccepted   = "accepted"
	idxUnpromoted = "unpromoted"
	idxRejected   = "rejected"
	idxExpired    = "expired"
	idxAll        = "all"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// ValidID reports whether id may name an approval: 1 to 128 of
// [A-Za-z0-9._:-].
func ValidID(id string) bool { return idPattern.MatchString(id) }

func checkID(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%w: invalid id %q (want 1-128 of [A-Za-z0-9._:-])", ErrNotFound, id)
	}
	return nil
}

// Hash fields of an approval.
const (
	fID        = "id"
	fTaskID    = "task_id"
	fRunID     = "run_id"
	fState     = "state"
	fCreatedAt = "created_at"
	fExpiresAt = "expires_at"
	fReasons   = "reasons"
	fResult    = "result"
	fArtifacts = "artifacts"
	fRun       = "run"
	fQueue     = "queue"
	fDecidedBy = "decided_by"
	fDecidedAt = "decided_at"
	fComment   = "comment"
	fPromoted  = "promoted_at"
	fResultSHA = "result_sha256"
)

// summaryFields are what List reads: neither the result, the artifacts nor
// the run summary (except its queue).
var summaryFields = []string{fID, fTaskID, fRunID, fState, fCreatedAt, fExpiresAt, fReasons,
	fQueue, fDecidedBy, fDecidedAt, fComment, fPromoted}

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func parseMicros(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	return time.UnixMicro(n).UTC(), nil
}

// normTime is t as it reads back from Redis.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return time.UnixMicro(t.UnixMicro()).UTC()
}

// encode returns the hash fields of a as name, value pairs.
func encode(a *Approval) ([]any, error) {
	reasons, err := json.Marshal(a.Reasons)
	if err != nil {
		return nil, err
	}
	arts, err := json.Marshal(a.Artifacts)
	if err != nil {
		return nil, err
	}
	run, err := json.Marshal(a.Run)
	if err != nil {
		return nil, fmt.Errorf("run summary: %w", err)
	}
	p := []any{fID, a.ID, fTaskID, a.TaskID, fRunID, a.RunID, fState, a.State,
		fReasons, string(reasons), fArtifacts, string(arts), fRun, string(run), fQueue, a.Run.Queue}
	if len(a.Result) > 0 {
		p = append(p, fResult, string(a.Result))
	}
	for _, f := range []struct {
		name string
		t    time.Time
	}{{fCreatedAt, a.CreatedAt}, {fExpiresAt, a.ExpiresAt}, {fDecidedAt, a.DecidedAt}, {fPromoted, a.PromotedAt}} {
		if !f.t.IsZero() {
			p = append(p, f.name, micros(f.t))
		}
	}
	if a.DecidedBy != "" {
		p = append(p, fDecidedBy, a.DecidedBy)
	}
	if a.ResultSHA256 != "" {
		p = append(p, fResultSHA, a.ResultSHA256)
	}
	if a.Comment != "" {
		p = append(p, fComment, a.Comment)
	}
	return p, nil
}

// setField decodes one hash field into a.
func setField(a *Approval, name, v string) error {
	var err error
	switch name {
	case fID:
		a.ID = v
	case fTaskID:
		a.TaskID = v
	case fRunID:
		a.RunID = v
	case fState:
		a.State = v
	case fCreatedAt:
		a.CreatedAt, err = parseMicros(v)
	case fExpiresAt:
		a.ExpiresAt, err = parseMicros(v)
	case fDecidedAt:
		a.DecidedAt, err = parseMicros(v)
	case fPromoted:
		a.PromotedAt, err = parseMicros(v)
	case fReasons:
		var ok bool
		if a.Reasons, ok = plainStrings(v); !ok {
			err = json.Unmarshal([]byte(v), &a.Reasons)
		}
	case fArtifacts:
		err = json.Unmarshal([]byte(v), &a.Artifacts)
	case fRun:
		q := a.Run.Queue
		err = json.Unmarshal([]byte(v), &a.Run)
		if q != "" {
			a.Run.Queue = q
		}
	case fQueue:
		a.Run.Queue = v
	case fResult:
		a.Result = []byte(v)
	case fDecidedBy:
		a.DecidedBy = v
	case fComment:
		a.Comment = v
	case fResultSHA:
		a.ResultSHA256 = v
	}
	if err != nil {
		return fmt.Errorf("field %s: %w", name, err)
	}
	return nil
}

// plainStrings decodes a JSON array of strings without escapes, as
// json.Marshal writes a []string of plain text, without copying them (List
// decodes thousands); ok is false for anything else.
func plainStrings(v string) (out []string, ok bool) {
	switch v {
	case "null":
		return nil, true
	case "[]":
		return []string{}, true
	}
	if len(v) < 4 || v[0] != '[' || v[len(v)-1] != ']' || strings.IndexByte(v, '\\') >= 0 {
		return nil, false
	}
	out = make([]string, 0, strings.Count(v, `","`)+1)
	rest := v[1 : len(v)-1]
	for {
		if len(rest) < 2 || rest[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(rest[1:], '"') + 1
		if end == 0 {
			return nil, false
		}
		out = append(out, rest[1:end])
		rest = rest[end+1:]
		if rest == "" {
			return out, true
		}
		if rest[0] != ',' {
			return nil, false
		}
		rest = rest[1:]
	}
}

// decodePairs decodes a flat list of field, value pairs (HGETALL or a
// script's view).
func decodePairs(v any) (*Approval, error) {
	l, ok := v.([]any)
	if !ok || len(l)%2 != 0 {
		return nil, fmt.Errorf("approve: unexpected reply %T", v)
	}
	a := &Approval{}
	for i := 0; i < len(l); i += 2 {
		name, _ := l[i].(string)
		val, _ := l[i+1].(string)
		if err := setField(a, name, val); err != nil {
			return nil, fmt.Errorf("approve: decoding approval: %w", err)
		}
	}
	return a, nil
}

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
var parkScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local n = tonumber(ARGV[5])
for i = 6, 5 + n, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
for i = 6 + n, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i+1]) end
redis.call('XADD', KEYS[3], '*', 'from', '', 'to', ARGV[1], 'by', ARGV[2], 'comment', ARGV[3], 'at', ARGV[4])
return 1
`)

// decideScript is the compare-and-set of a decision.
// KEYS: hash, data, audit. ARGV: to (accepted, rejected, or "expire" for
// the sweeper), by, comment, now, retention ms (0: none), full view ("1").
// Returns {status, view}: status notfound, decided (not pending), expired
// (it just expired), notdue (expire only) or ok.
var decideScript = redis.NewScript(luaView(6) + `
local st = redis.call('HMGET', KEYS[1], 'state', 'expires_at')
if not st[1] then return {'notfound', {}} end
if st[1] ~= 'pending' then return {'decided', view()} end
local exp = tonumber(st[2])
if exp and tonumber(ARGV[4]) >= exp then
  redis.call('HSET', KEYS[1], 'state', 'expired', 'decided_at', st[2])
  redis.call('HDEL', KEYS[1], 'decided_by', 'comment')
  redis.call('DEL', KEYS[2])
  redis.call('XADD', KEYS[3], '*', 'from', 'pending', 'to', 'expired', 'by', '', 'comment', '', 'at', st[2])
  finish(ARGV[5])
  return {'expired', view()}
end
if ARGV[1] == 'expire' then return {'notdue', view()} end
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'decided_by', ARGV[2], 'decided_at', ARGV[4], 'comment', ARGV[3])
redis.call('XADD', KEYS[3], '*', 'from', 'pending', 'to', ARGV[1], 'by', ARGV[2], 'comment', ARGV[3], 'at', ARGV[4])
if ARGV[1] == 'rejected' then
  redis.call('DEL', KEYS[2])
  finish(ARGV[5])
end
return {'ok', view()}
`)

// promoteScript marks an accepted approval promoted.
// KEYS: hash, data, audit. ARGV: at, retention ms, full view ("0").
// Returns {status, view}: notfound, notaccepted, already or ok.
var promoteScript = redis.NewScript(luaView(3) + `
local st = redis.call('HMGET', KEYS[1], 'state', 'promoted_at')
if not st[1] then return {'notfound', {}} end
if st[1] ~= 'accepted' then return {'notaccepted', view()} end
if st[2] then return {'already', view()} end
redis.call('HSET', KEYS[1], 'promoted_at', ARGV[1])
redis.call('DEL', KEYS[2])
redis.call('XADD', KEYS[3], '*', 'from', 'accepted', 'to', 'promoted', 'by', '', 'comment', '', 'at', ARGV[1])
finish(ARGV[2])
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
		p.ZAdd(ctx, s.index(a.State), z(a.DecidedAt))
	}
	if a.State == StateAccepted && a.PromotedAt.IsZero() {
		p.ZAdd(ctx, s.index(idxUnpromoted), z(a.DecidedAt))
	} else {
		p.ZRem(ctx, s.index(idxUnpromoted), id)
	}
}

// auditOp queues the global audit entry of a transition.
func (s *Store) auditOp(ctx context.Context, p redis.Pipeliner, id string, e Event) {
	p.XAdd(ctx, &redis.XAddArgs{
		Stream: s.auditKey(), MaxLen: auditMaxLen, Approx: true,
		Values: []any{"id", id, "from", e.From, "to", e.To, "by", e.By, "comment", e.Comment, "at", micros(e.At)},
	})
}

// runEventOp queues the run's state change, for transitions that change
// the run's state, on the events stream (see package events; its key is
// the store's prefix + "events", "airlock:events" by default).
func (s *Store) runEventOp(ctx context.Context, p redis.Pipeliner, a *Approval, e Event) {
	switch e.To {
	case StateAccepted, StateRejected, StateExpired, EventPromoted:
	default:
		return // pending: the worker's own "parked" event says it
	}
	p.XAdd(ctx, &redis.XAddArgs{
		Stream: s.prefix + "events", MaxLen: events.MaxLen, Approx: true,
		Values: []any{"run_id", a.RunID, "task_id", a.TaskID, "state", e.To, "verdict", "ok",
			"approval_id", a.ID, "time", e.At.UTC().Format(time.RFC3339Nano)},
	})
}

// after updates the indexes to match a (when not nil) and appends e (when
// not nil) to the global audit stream, in one round trip.
func (s *Store) after(ctx context.Context, a *Approval, e *Event) error {
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if a != nil {
			s.indexOps(ctx, p, a)
		}
		if e != nil {
			s.auditOp(ctx, p, a.ID, *e)
			s.runEventOp(ctx, p, a, *e)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("approve: %s: the transition is stored but updating the indexes failed: %w", a.ID, err)
	}
	return nil
}

// Park stores a new approval a, pending or accepted (auto-promotion by
// policy, DecidedBy set), with the staged bytes of its artifacts (data, by
// Artifact.Name). a.ID must be set: when that id exists already, Park
// returns the stored approval and created false, changing nothing (and
// repairing its index entries). Pending approvals get CreatedAt now and
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
	created, err := parkScript.Run(ctx, s.rdb, s.Keys(p.a.ID), p.args...).Int()
	if err != nil {
		return nil, false, fmt.Errorf("approve: park %s: %w", p.a.ID, err)
	}
	if created == 0 {
		old, err := s.Get(ctx, p.a.ID)
		if err != nil {
			return nil, false, err
		}
		return old, false, s.after(ctx, old, nil)
	}
	return p.a, true, s.after(ctx, p.a, &p.event)
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
		if c.DecidedBy != "" || !c.DecidedAt.IsZero() || c.Comment != "" || !c.PromotedAt.IsZero() {
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
	dataArgs, err := s.checkData(&c, data)
	if err != nil {
		return nil, err
	}
	rec, err := encode(&c)
	if err != nil {
		return nil, fmt.Errorf("approve: park %s: %w", c.ID, err)
	}
	stored, err := decodePairs(rec) // as Get will read it
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, 5+len(rec)+len(dataArgs))
	args = append(args, c.State, c.DecidedBy, c.Comment, micros(at), len(rec))
	args = append(append(args, rec...), dataArgs...)
	return &parking{a: stored, args: args,
		event: Event{At: normTime(at), To: c.State, By: c.DecidedBy, Comment: c.Comment}}, nil
}

// checkData checks data against c's artifacts and the cap, fills in
// missing sizes and digests, and returns the data as name, bytes pairs.
func (s *Store) checkData(c *Approval, data map[string][]byte) ([]any, error) {
	idx := make(map[string]int, len(c.Artifacts))
	for i, art := range c.Artifacts {
		if _, dup := idx[art.Name]; dup {
			return nil, fmt.Errorf("approve: park %s: artifact %q listed twice", c.ID, art.Name)
		}
		idx[art.Name] = i
	}
	var total int64
	names := make([]string, 0, len(data))
	for name, b := range data {
		if _, ok := idx[name]; !ok {
			return nil, fmt.Errorf("approve: park %s: data for %q, which is not one of its artifacts", c.ID, name)
		}
		total += int64(len(b))
		names = append(names, name)
	}
	if total > s.maxStaged {
		return nil, fmt.Errorf("approve: park %s: %d bytes of artifacts, cap %d: %w", c.ID, total, s.maxStaged, ErrTooLarge)
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
			return nil, fmt.Errorf("approve: park %s: artifact %q: data of %d bytes, sha256 %s does not match the artifact's %d bytes, sha256 %s",
				c.ID, name, len(b), digest, art.Bytes, art.SHA256)
		}
		args = append(args, name, b)
	}
	return args, nil
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
	return s.decide(ctx, id, StateAccepted, by, comment)
}

// Reject rejects pending approval id for by, who must say why (comment),
// and drops its staged bytes. Errors as Accept's.
func (s *Store) Reject(ctx context.Context, id, by, comment string) (*Approval, error) {
	if strings.TrimSpace(comment) == "" {
		return nil, fmt.Errorf("approve: reject %s: %w", id, ErrCommentRequired)
	}
	return s.decide(ctx, id, StateRejected, by, comment)
}

func (s *Store) decide(ctx context.Context, id, to, by, comment string) (*Approval, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if strings.TrimSpace(by) == "" {
		return nil, fmt.Errorf("approve: %s %s: who decides (by) is required", strings.TrimSuffix(to, "ed"), id)
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
	v, err := decideScript.Run(ctx, s.rdb, s.Keys(id), to, by, comment, micros(now), s.retentionMS(), "1").Result()
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
		return a, s.after(ctx, a, &Event{At: a.DecidedAt, From: StatePending, To: to, By: by, Comment: comment})
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

// MarkPromoted records that accepted approval id was published at at (now
// when zero): it sets PromotedAt, removes it from the accepted-not-promoted
// index, drops its staged bytes and appends a "promoted" audit event. It is
// idempotent: an approval promoted already is left as it is.
func (s *Store) MarkPromoted(ctx context.Context, id string, at time.Time) error {
	if err := checkID(id); err != nil {
		return err
	}
	if at.IsZero() {
		at = s.now()
	}
	v, err := promoteScript.Run(ctx, s.rdb, s.Keys(id), micros(at), s.retentionMS(), "0").Result()
	if err != nil {
		return fmt.Errorf("approve: mark %s promoted: %w", id, err)
	}
	status, a, err := scriptReply(v)
	if err != nil {
		return err
	}
	switch status {
	case "notfound":
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	case "notaccepted":
		return fmt.Errorf("approval %s is %s: %w", id, a.State, ErrNotAccepted)
	case "already":
		return s.after(ctx, a, nil)
	case "ok":
		return s.after(ctx, a, &Event{At: a.PromotedAt, From: StateAccepted, To: EventPromoted})
	}
	return fmt.Errorf("approve: mark %s promoted: unexpected status %q", id, status)
}

// expireBatch is how many approvals ExpireDue handles per round trip.
const expireBatch = 100

// ExpireDue expires every pending approval whose ExpiresAt has passed,
// dropping its staged bytes, and returns how many it expired. It is the
// sweeper's step; it also drops index entries of approvals Redis has
// deleted (Retention).
func (s *Store) ExpireDue(ctx context.Context) (int, error) {
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
				cmds[i] = decideScript.Eval(ctx, p, s.Keys(id), "expire", "", "", micros(now), s.retentionMS(), "0")
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
	for _, idx := range []string{idxAll, idxAccepted, idxRejected, idxExpired} {
		if err := s.prune(ctx, s.index(idx), 100); err != nil {
			return n, err
		}
	}
	return n, nil
}

// prune drops, among the count oldest entries of index key, those whose
// approval Redis has deleted.
func (s *Store) prune(ctx context.Context, key string, count int64) error {
	ids, err := s.rdb.ZRange(ctx, key, 0, count-1).Result()
	if err != nil || len(ids) == 0 {
		return err
	}
	exists := make([]*redis.IntCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			exists[i] = p.Exists(ctx, s.Keys(id)[0])
		}
		return nil
	}); err != nil {
		return fmt.Errorf("approve: pruning %s: %w", key, err)
	}
	var gone []any
	for i, c := range exists {
		if c.Val() == 0 {
			gone = append(gone, ids[i])
		}
	}
	if len(gone) > 0 {
		return s.rdb.ZRem(ctx, key, gone...).Err()
	}
	return nil
}

// ListAccepted returns the ids of the approvals accepted but not yet
// promoted, oldest decision first: the worker re-enqueues their promote
// tasks after a crash.
func (s *Store) ListAccepted(ctx context.Context) ([]string, error) {
	key := s.index(idxUnpromoted)
	ids, err := s.rdb.ZRange(ctx, key, 0, -1).Result()
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
		state, _ := v[0].(string)
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
		if err := s.rdb.ZRem(ctx, key, stale...).Err(); err != nil {
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
func (s *Store) List(ctx context.Context, state string, limit int) ([]*Approval, error) {
	if state == "" {
		state = StatePending
	}
	switch state {
	case StatePending, StateAccepted, StateRejected, StateExpired, StateAll:
	default:
		return nil, fmt.Errorf("approve: list: unknown state %q (want %s, %s, %s, %s or %s)",
			state, StatePending, StateAccepted, StateRejected, StateExpired, StateAll)
	}
	key := s.index(state)
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
	return Event{At: at, From: str("from"), To: str("to"), By: str("by"), Comment: str("comment")}, err
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
				if m.Values["to"] != StatePending || m.Values["from"] != "" {
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
