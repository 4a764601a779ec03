package approve

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/tracing"
)

// Defaults of Options.
const (
	DefaultPrefix         = events.DefaultPrefix
	DefaultTTL            = 72 * time.Hour
	DefaultMaxStagedBytes = 32 << 20
	DefaultRetention      = 30 * 24 * time.Hour
	// DefaultMaxPendingBytes bounds the bytes all approvals not yet
	// decided or published hold in Redis together (Options.MaxPendingBytes).
	DefaultMaxPendingBytes = 256 << 20
)

// EventPromoted is the To of the audit event MarkPromoted appends: an
// accepted approval whose output has been published. It is not a state (the
// state stays accepted; PromotedAt is set).
const EventPromoted State = "promoted"

// StateAll lists every approval in List, whatever its state.
const StateAll State = "all"

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
	// MaxPendingBytes bounds the staged bytes (artifacts and result) of
	// all approvals that still hold them (pending, or accepted and not
	// yet published) together: past it Park fails with ErrPendingFull,
	// and nothing staged by another run is ever evicted. 0 takes
	// DefaultMaxPendingBytes; negative sets no bound (the total is still
	// counted, for PendingBytes).
	MaxPendingBytes int64
	// PrincipalMaxPendingBytes returns the bytes one principal's
	// approvals may hold together (its quota's max_pending_bytes), 0 for
	// no bound beyond MaxPendingBytes; nil: none.
	PrincipalMaxPendingBytes func(principal string) int64
	// Retention is how long a finished approval (rejected, expired or
	// promoted) is kept, with its audit trail, before Redis deletes it;
	// default 30 days, negative keeps it forever. Accepted approvals not
	// yet promoted and pending ones are never deleted.
	Retention time.Duration
	Now       func() time.Time
	// TracerProvider makes the spans of decisions and promotions
	// (package tracing); nil: the global provider.
	TracerProvider trace.TracerProvider
}

// Event is one entry of an approval's audit trail.
type Event struct {
	At   time.Time `json:"at"`
	From State     `json:"from"` // "" when the approval was parked
	To   State     `json:"to"`   // a state, or EventPromoted
	By   string    `json:"by,omitempty"`
	// ByNote is the decision's display note beside By (Approval.ByNote).
	ByNote  string `json:"by_note,omitempty"`
	Comment string `json:"comment,omitempty"`
}

// Store keeps approvals in Redis.
//
// Key layout, with P the prefix and ID an approval id:
//
//	P approval:{ID}          hash: the approval (source of truth)
//	P approval:{ID}:data     hash: artifact name → staged bytes
//	P approval:{ID}:audit    stream: from, to, by, by_note, comment, at (µs)
//	P approvals:pending      zset: pending, by created_at
//	P approvals:expiry       zset: pending, by expires_at
//	P approvals:accepted     zset: accepted (promoted or not), by decided_at
//	P approvals:unpromoted   zset: accepted, not yet promoted, by decided_at
//	P approvals:rejected     zset: by decided_at
//	P approvals:expired      zset: by decided_at (= expires_at)
//	P approvals:all          zset: every approval, by created_at
//	P audit                  stream: every transition (id, from, to, by, by_note, comment, at), MAXLEN ~ 100000
//	P staged                 hash: ID → staged bytes of every approval that holds them, and their total (MaxPendingBytes);
//	                         ID#p → its principal, #p:PRINCIPAL → that principal's total (PrincipalMaxPendingBytes)
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
	events     *events.Stream
	quiet      bool // no run event for transitions (Quiet)
	ttl        time.Duration
	maxStaged  int64
	maxPending int64 // <= 0: no bound
	// principalMax is Options.PrincipalMaxPendingBytes.
	principalMax func(principal string) int64
	retention    time.Duration
	now          func() time.Time
	watchBlock   time.Duration
	tracer       trace.Tracer
}

// Quiet returns the same store, whose transitions append no run event to
// the events stream (their audit entries stay): for a worker that reports
// the run's state itself once its record is stored.
func (s *Store) Quiet() *Store {
	q := *s
	q.quiet = true
	return &q
}

// NewStore returns a Store over rdb. It panics when opts.Prefix holds a
// brace, which would break the hash tags.
func NewStore(rdb redis.UniversalClient, opts Options) *Store {
	s := &Store{
		rdb: rdb, prefix: opts.Prefix, ttl: opts.TTL, maxStaged: opts.MaxStagedBytes, maxPending: opts.MaxPendingBytes, principalMax: opts.PrincipalMaxPendingBytes,
		retention: opts.Retention, now: opts.Now, watchBlock: 500 * time.Millisecond,
		tracer: tracing.Tracer(opts.TracerProvider),
	}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if strings.ContainsAny(s.prefix, "{}") {
		panic(fmt.Sprintf("approve: prefix %q holds a brace", s.prefix))
	}
	s.events = events.NewStream(rdb, s.prefix)
	if s.ttl <= 0 {
		s.ttl = DefaultTTL
	}
	if s.maxStaged <= 0 {
		s.maxStaged = DefaultMaxStagedBytes
	}
	if s.maxPending == 0 {
		s.maxPending = DefaultMaxPendingBytes
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

// Now is the store's clock (Options.Now): the time its decisions are
// stamped with, and what the sweeper measures their age by.
func (s *Store) Now() time.Time { return s.now() }

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
func (s *Store) stagedKey() string        { return s.prefix + "staged" }

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
	fPublished = "published_to"
	fResultSHA = "result_sha256"
	fStaged    = "staged_bytes"
	fByNote    = "by_note"
	fPrincipal = "principal" // the run summary's, kept apart as the queue is (List reads it)
	fAction    = "action"    // the run summary's too
	fChecked   = "checked"
	fTrace     = "trace_parent"
)

// summaryFields are what List reads: neither the result, the artifacts nor
// the run summary (except its queue).
var summaryFields = []string{fID, fTaskID, fRunID, fState, fCreatedAt, fExpiresAt, fReasons,
	fQueue, fDecidedBy, fDecidedAt, fComment, fPromoted, fStaged, fByNote, fPrincipal, fAction}
