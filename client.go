package airlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
	"github.com/google/uuid"
)

// defaultQueue is the queue of a spec that names none, as tasks.Prepare
// fills it in.
const defaultQueue = "default"

// Client enqueues specs and waits for their run records. It is safe for
// concurrent use.
type Client struct {
	rdb    redis.UniversalClient
	owned  bool // Dial opened rdb: Close closes it
	insp   *asynq.Inspector
	events *events.Stream
	store  *approve.Store
	// sessions is the wire of sessions (OpenSession, Session).
	sessions *session.Conn
	opts     ClientOptions
	// served holds, per queue, whether a worker serves it and until when
	// that holds (served.go): a long-lived client reads the announcements
	// once per queue and AnnounceInterval, not once per enqueue.
	served sync.Map
	// queuesAdded holds the queues this Client added to asynq's set of
	// queues (addQueue).
	queuesAdded sync.Map
}

// NewClient returns a Client that uses rdb, which the caller keeps and
// closes after the Client.
func NewClient(rdb redis.UniversalClient, opts ClientOptions) *Client {
	opts = opts.withDefaults()
	return &Client{
		rdb:      rdb,
		insp:     asynq.NewInspectorFromRedisClient(rdb),
		events:   events.NewStream(rdb, opts.Prefix),
		store:    approve.NewStore(rdb, approve.Options{Prefix: opts.Prefix}),
		sessions: session.NewConn(rdb, opts.Prefix),
		opts:     opts,
	}
}

// Dial returns a Client of the Redis at redisURL: one server
// ("redis://[user:password@]host:port/db", rediss:// for TLS, with
// tls_ca=, tls_cert=, tls_key=, tls_server_name= options), Sentinel
// ("redis+sentinel://host:port,host:port/master[/db]") or Cluster
// ("redis+cluster://host:port,host:port"); see docs/redis.md. It does not
// connect: the first call does.
func Dial(redisURL string, opts ClientOptions) (*Client, error) {
	rdb, _, err := redisconn.Open(redisURL)
	if err != nil {
		return nil, fmt.Errorf("airlock: %w", err)
	}
	c := NewClient(rdb, opts)
	c.owned = true
	return c, nil
}

// Close closes the Redis connection if Dial opened it; a Client from
// NewClient leaves the caller's connection open.
func (c *Client) Close() error {
	if c.owned {
		return c.rdb.Close()
	}
	return nil
}

// Enqueued is what Enqueue did with a spec.
type Enqueued struct {
	TaskID string // asynq task id
	Queue  string
	RunID  string // run_id of the task in the queue
	// Duplicate is true when the spec's idempotency_key matched a task
	// already in the queue: nothing was enqueued, and TaskID and RunID are
	// those of the existing task.
	Duplicate bool
	// NoWorker is true when no worker serves the queue: none has
	// announced itself there within queuepolicy.AnnounceTTL (30s;
	// workers refresh every 10s and withdraw on a clean stop). The task
	// waits until one starts. One Redis read, alongside the enqueue;
	// false when that read failed.
	NoWorker bool
}

// Enqueue checks spec and enqueues it as a task for a worker of its queue.
//
// The spec is prepared in place (tasks.Spec.Prepare) against the policy the
// queue's workers published, or limits.DefaultPolicy when none did: on
// return it has its run_id, queue, timeout, max_retry and limits filled in.
// A spec that breaks the policy or is larger than ClientOptions.MaxPayload
// gives a *tasks.FieldError naming the field (tasks.IsInvalid reports it).
//
// asynq's deadline for the task is the spec's timeout plus
// ClientOptions.Grace, rounded up to a whole second, which is what asynq
// stores. A spec with an idempotency_key gets a task id derived from its
// queue, principal and key (IdempotentTaskIDFor): when that task exists,
// Enqueue returns it with Duplicate set and a nil error. Two principals
// that send one key get two tasks.
//
// A call of an action ({"action": NAME, "params": ...}) is checked
// against the catalog its queue's workers published (queuepolicy.LoadActions): an
// action they do not have is a *tasks.FieldError on action, params that
// break the action's schema one on params or its member. Its deadline
// and retries are the action's.
//
// A spec that uses a secret its queue's workers do not grant it (their
// policy's secrets: section, as they published it) is refused too: a
// *tasks.FieldError on secrets[i], steps[i].env or inputs[i].headers.
//
// With ClientOptions.Principal set, the spec is stamped with it; a spec
// that names another principal is refused (a *tasks.FieldError on
// principal).
func (c *Client) Enqueue(ctx context.Context, spec *tasks.Spec) (e Enqueued, err error) {
	payload, o, err := c.prepare(ctx, spec)
	if err != nil {
		return Enqueued{}, err
	}
	defer c.noteServed(ctx, spec.Queue, &e, &err)() // served.go: Enqueued.NoWorker, read alongside
	if spec.IdempotencyKey == "" {
		id := uuid.NewString()
		if err := c.enqueueTask(ctx, spec, payload, o, id); err != nil {
			return Enqueued{}, err
		}
		return Enqueued{TaskID: id, Queue: spec.Queue, RunID: spec.RunID}, nil
	}
	return c.enqueueOnce(ctx, spec, payload, o)
}

// prepare stamps the principal, checks the spec against its queue's
// published limits and grants, and returns its payload and task options.
func (c *Client) prepare(ctx context.Context, spec *tasks.Spec) ([]byte, taskOpts, error) {
	if spec == nil {
		return nil, taskOpts{}, errors.New("airlock: Enqueue of a nil spec")
	}
	if p := c.opts.Principal; p != "" {
		if spec.Principal != "" && spec.Principal != p {
			return nil, taskOpts{}, &tasks.FieldError{Field: "principal",
				Msg:  fmt.Sprintf("%q: this client enqueues for %q only", spec.Principal, p),
				Hint: "leave principal out: the client stamps it"}
		}
		spec.Principal = p
	}
	queue := spec.Queue
	if queue == "" {
		queue = defaultQueue
	}
	p, err := c.loadPolicy(ctx, queue)
	if err != nil {
		return nil, taskOpts{}, err
	}
	if err := spec.Prepare(p); err != nil {
		return nil, taskOpts{}, err
	}
	if err := c.checkGrants(ctx, spec); err != nil {
		return nil, taskOpts{}, err
	}
	timeout, maxRetry, err := c.runBounds(ctx, spec, p)
	if err != nil {
		return nil, taskOpts{}, err
	}
	payload, err := spec.Encode(c.opts.MaxPayload)
	if err != nil {
		return nil, taskOpts{}, err
	}
	return payload, taskOpts{maxRetry: maxRetry, timeout: ceilSecond(timeout + c.opts.Grace)}, nil
}

// admit admits task id, a run held in its principal's line but never
// admitted (enqueued by an earlier client, which did it in two steps and
// may have lost Redis between them: enqueueOnce finds it so), against its
// principal's quota in its queue, and releases it into
// the queue when the principal's fair share allows (waking the queue's
// idle workers then): a quota's refusal deletes the task and is an error
// matching ErrQuota (a *QuotaError). A failure to admit leaves the task
// held, never released: the queue's workers withdraw it at a sweep.
func (c *Client) admit(ctx context.Context, spec *tasks.Spec, id string) error {
	// Not the caller's context: a caller gone between the enqueue and the
	// admission must not leave the run unchecked.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admitTimeout)
	defer cancel()
	err := fairshare.Admit(actx, c.rdb, c.opts.Prefix, spec.Queue, spec.Principal, id, spec.Session != nil)
	if err != nil && !errors.Is(err, ErrQuota) {
		return fmt.Errorf("airlock: run %s was not admitted into queue %q, and will not run (its workers withdraw it within %s): enqueue it again: %w",
			spec.RunID, spec.Queue, fairshare.Withdrawn+fairshare.SweepEvery, err)
	}
	return err
}

// admitTimeout bounds an admission (admit), whatever the caller's context.
const admitTimeout = 5 * time.Second

// enqueueOnce enqueues a spec that has an idempotency key under the task id
// derived from it, or reports the task that already has that id.
func (c *Client) enqueueOnce(ctx context.Context, spec *tasks.Spec, payload []byte, o taskOpts) (Enqueued, error) {
	id := IdempotentTaskIDFor(spec.Queue, spec.Principal, spec.IdempotencyKey)
	// The existing task may go (its retention ends) between the conflict
	// and the look-up; then enqueueing again is right.
	for attempt := 0; ; attempt++ {
		err := c.enqueueTask(ctx, spec, payload, o, id)
		if err == nil {
			return Enqueued{TaskID: id, Queue: spec.Queue, RunID: spec.RunID}, nil
		}
		if !errors.Is(err, fairshare.ErrExists) {
			return Enqueued{}, err
		}
		info, err := c.insp.GetTaskInfo(spec.Queue, id)
		if (errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound)) && attempt < 2 {
			continue
		}
		if err != nil {
			return Enqueued{}, fmt.Errorf("airlock: reading task %s, the earlier task with idempotency_key %q: %w", id, spec.IdempotencyKey, err)
		}
		if info.State == asynq.TaskStateAggregating {
			// Held in its principal's line (an enqueue of an earlier
			// version, or one that lost Redis before its admission):
			// admit it now (again: an admitted run is only given its
			// share).
			if err := c.admit(ctx, spec, id); err != nil {
				return Enqueued{}, err
			}
		}
		return Enqueued{TaskID: id, Queue: spec.Queue, RunID: payloadRunID(info.Payload), Duplicate: true}, nil
	}
}

// IdempotentTaskID is the task id of a spec with idempotency key key in
// queue that names no principal: "ik-" and 40 hex digits of the SHA-256
// of queue, NUL, key.
func IdempotentTaskID(queue, key string) string {
	return IdempotentTaskIDFor(queue, "", key)
}

// IdempotentTaskIDFor is the task id of a spec with idempotency key key in
// queue, asked for by principal: the key is scoped per principal, so that
// another caller's same key never reaches this caller's task. "ik-" and
// 40 hex digits of the SHA-256 of queue, NUL, principal, NUL, key; with no
// principal, of queue, NUL, key (IdempotentTaskID, the ids of specs
// enqueued before principals). Neither a queue nor a key holds a NUL
// (Prepare), so the two forms never share an input.
func IdempotentTaskIDFor(queue, principal, key string) string {
	in := queue + "\x00" + key
	if principal != "" {
		in = queue + "\x00" + principal + "\x00" + key
	}
	sum := sha256.Sum256([]byte(in))
	return "ik-" + hex.EncodeToString(sum[:])[:40]
}

// loadPolicy returns the policy the queue's workers published, or the
// default policy.
func (c *Client) loadPolicy(ctx context.Context, queue string) (limits.Policy, error) {
	p, ok, err := queuepolicy.Load(ctx, c.rdb, c.opts.Prefix, queue)
	if err != nil {
		return limits.Policy{}, fmt.Errorf("airlock: %w", err)
	}
	if !ok {
		return limits.DefaultPolicy(), nil
	}
	return p, nil
}

// ceilSecond rounds d up to a whole second: asynq v0.26 stores a task's
// timeout in whole seconds, dropping the fraction.
func ceilSecond(d time.Duration) time.Duration {
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

// payloadRunID returns the run_id of a task payload, "" when it has none.
func payloadRunID(payload []byte) string {
	var s struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(payload, &s)
	return s.RunID
}
