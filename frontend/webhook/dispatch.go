package webhook

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
)

// Dispatcher defaults.
const (
	// DefaultGroup is the consumer group of the events stream that the
	// dispatchers share.
	DefaultGroup = "airlock-webhooks"
	// DefaultClaimIdle: an entry read but not acknowledged for this long
	// (its dispatcher died, or could not enqueue) is claimed by another.
	DefaultClaimIdle = 30 * time.Second
	// DefaultRetention keeps a delivered task's id this long, so that a
	// re-dispatched event is not delivered twice.
	DefaultRetention = 24 * time.Hour
	// consumerIdleGone: a consumer of the group with nothing pending and
	// idle this long (its process is gone) is deleted.
	consumerIdleGone = 24 * time.Hour
	// batch is how many entries one read takes.
	batch = 100
	// handleTimeout bounds the handling of one entry (Redis round trips).
	handleTimeout = 10 * time.Second
	// degradeAfter: an entry delivered more often than this (about 5
	// minutes of claims) is sent without an approval it cannot read.
	degradeAfter = 10
	// taskTimeout is asynq's bound of one delivery attempt, above any
	// sensible POST timeout (the handler's own bound).
	taskTimeout = 2 * time.Minute
)

// Dispatcher turns the events stream into delivery tasks. Dispatchers
// share one consumer group of the stream (XREADGROUP): each entry is read
// by one of them, which enqueues a TypeDeliver task per interested
// endpoint and then acknowledges it (XACK). An entry a dispatcher read but
// did not acknowledge (it died, or Redis failed) is claimed by another
// after ClaimIdle (XAUTOCLAIM). A task's id is derived from the event and
// the endpoint, so an entry handled twice enqueues nothing new.
type Dispatcher struct {
	rdb       redis.UniversalClient
	stream    string
	prefix    string
	group     string
	consumer  string
	endpoints []Endpoint
	approvals *approve.Store
	client    *asynq.Client
	queue     string
	maxRetry  int
	retention time.Duration
	claimIdle time.Duration
	block     time.Duration
	log       zerolog.Logger
}

// DispatcherOptions configure a Dispatcher; zero values take the
// defaults.
type DispatcherOptions struct {
	Prefix    string        // Airlock's key prefix (events.DefaultPrefix)
	Queue     string        // of the delivery tasks (DefaultQueue; see Config.Queue)
	Group     string        // consumer group (DefaultGroup)
	Consumer  string        // this dispatcher's name in the group (host-pid-random)
	MaxRetry  int           // of a delivery task (DefaultMaxRetry)
	Retention time.Duration // of a delivered task (DefaultRetention)
	ClaimIdle time.Duration // (DefaultClaimIdle)
	Block     time.Duration // longest blocking read; bounds the stop (1s)
	Log       zerolog.Logger
}

// NewDispatcher returns a dispatcher of the events stream of rdb to
// endpoints.
func NewDispatcher(rdb redis.UniversalClient, endpoints []Endpoint, o DispatcherOptions) (*Dispatcher, error) {
	if err := checkEndpoints(endpoints); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = events.DefaultPrefix
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return nil, fmt.Errorf("webhook: prefix %q holds a brace", o.Prefix)
	}
	if o.Queue == "" {
		o.Queue = defaultQueue(o.Prefix)
	}
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	if o.Consumer == "" {
		o.Consumer = consumerName()
	}
	if o.MaxRetry <= 0 {
		o.MaxRetry = DefaultMaxRetry
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.ClaimIdle <= 0 {
		o.ClaimIdle = DefaultClaimIdle
	}
	if o.Block <= 0 {
		o.Block = time.Second
	}
	return &Dispatcher{
		rdb: rdb, stream: events.NewStream(rdb, o.Prefix).Key(), prefix: o.Prefix,
		group: o.Group, consumer: o.Consumer, endpoints: endpoints,
		approvals: approve.NewStore(rdb, approve.Options{Prefix: o.Prefix}),
		client:    asynq.NewClientFromRedisClient(rdb),
		queue:     o.Queue, maxRetry: o.MaxRetry, retention: o.Retention,
		claimIdle: o.ClaimIdle, block: o.Block,
		log: o.Log.With().Str("consumer", o.Consumer).Logger(),
	}, nil
}

// defaultQueue is DefaultQueue, followed by ":" and the prefix (without
// its last colon) when it is not the default: deployments that share a
// Redis under different prefixes do not take each other's deliveries.
func defaultQueue(prefix string) string {
	if prefix == "" || prefix == events.DefaultPrefix {
		return DefaultQueue
	}
	return DefaultQueue + ":" + strings.TrimSuffix(prefix, ":")
}

func consumerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Run dispatches until ctx ends, then returns nil (after deleting its
// consumer from the group when it has nothing pending). It creates the
// group at the stream's end when it does not exist (MKSTREAM): events
// appended before the first dispatcher ever ran are not sent; those
// appended while every dispatcher was down are, once one is back. A Redis
// error is logged and retried with back-off; only a refused group
// creation at start is returned.
func (d *Dispatcher) Run(ctx context.Context) error {
	if err := d.createGroup(ctx, "$"); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	d.log.Info().Str("stream", d.stream).Str("group", d.group).Int("endpoints", len(d.endpoints)).Msg("webhook dispatcher started")
	defer d.leave()
	var nextClaim time.Time
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			sleep(ctx, backoff)
		}
		if time.Now().After(nextClaim) {
			if err := d.claim(ctx); err != nil && ctx.Err() == nil {
				d.log.Warn().Err(err).Msg("webhook dispatcher: claiming pending entries")
			}
			nextClaim = time.Now().Add(d.claimIdle / 2)
		}
		res, err := d.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: d.group, Consumer: d.consumer, Streams: []string{d.stream, ">"}, Count: batch, Block: d.block,
		}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			backoff = 0
			continue
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"):
			// The stream was deleted (and the group with it): what is
			// appended from now on is new.
			d.log.Warn().Msg("webhook dispatcher: the events stream lost its group; creating it again")
			if err := d.createGroup(ctx, "0"); err != nil {
				d.log.Warn().Err(err).Msg("webhook dispatcher")
				backoff = nextBackoff(backoff)
			}
			continue
		case err != nil:
			backoff = nextBackoff(backoff)
			d.log.Warn().Err(err).Dur("retry_in", backoff).Msg("webhook dispatcher: reading the events stream")
			continue
		}
		backoff = 0
		for _, st := range res {
			d.handleAll(ctx, st.Messages, nil)
		}
	}
	return nil
}

func nextBackoff(b time.Duration) time.Duration {
	return min(max(2*b, 100*time.Millisecond), 30*time.Second)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// createGroup creates the group at start ("$": the end; "0": the
// beginning), and the stream if missing; an existing group is kept as it
// is.
func (d *Dispatcher) createGroup(ctx context.Context, start string) error {
	err := d.rdb.XGroupCreateMkStream(ctx, d.stream, d.group, start).Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("webhook: creating group %s of %s: %w", d.group, d.stream, err)
	}
	return nil
}

// claim takes over the entries pending for longer than claimIdle (this
// dispatcher's own too) and handles them, then deletes the consumers of
// processes long gone.
func (d *Dispatcher) claim(ctx context.Context) error {
	start := "0-0"
	for ctx.Err() == nil {
		msgs, next, err := d.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: d.stream, Group: d.group, Consumer: d.consumer, MinIdle: d.claimIdle, Start: start, Count: batch,
		}).Result()
		if err != nil {
			return err
		}
		if len(msgs) > 0 {
			d.log.Info().Int("entries", len(msgs)).Msg("webhook dispatcher: claimed entries left pending")
			d.handleAll(ctx, msgs, d.deliveries(ctx, msgs))
		}
		if next == "0-0" || next == "" {
			break
		}
		start = next
	}
	consumers, err := d.rdb.XInfoConsumers(ctx, d.stream, d.group).Result()
	if err != nil {
		return err
	}
	for _, c := range consumers {
		if c.Name != d.consumer && c.Pending == 0 && c.Idle > consumerIdleGone {
			if err := d.rdb.XGroupDelConsumer(ctx, d.stream, d.group, c.Name).Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// leave deletes this dispatcher's consumer from the group when nothing is
// pending for it (deleting it would drop its pending entries).
func (d *Dispatcher) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pending, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: d.stream, Group: d.group, Start: "-", End: "+", Count: 1, Consumer: d.consumer,
	}).Result()
	if err == nil && len(pending) == 0 {
		err = d.rdb.XGroupDelConsumer(ctx, d.stream, d.group, d.consumer).Err()
	}
	if err != nil {
		d.log.Debug().Err(err).Msg("webhook dispatcher: leaving the group")
	}
	d.log.Info().Msg("webhook dispatcher stopped")
}

// deliveries returns how many times each of msgs was delivered (read or
// claimed) in the group, as XPENDING counts them; nil when unknown.
func (d *Dispatcher) deliveries(ctx context.Context, msgs []redis.XMessage) map[string]int64 {
	pending, err := d.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: d.stream, Group: d.group, Start: msgs[0].ID, End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)),
		Consumer: d.consumer,
	}).Result()
	if err != nil {
		return nil
	}
	n := make(map[string]int64, len(pending))
	for _, p := range pending {
		n[p.ID] = p.RetryCount
	}
	return n
}

// handleAll handles entries read, each acknowledged once its tasks are
// enqueued. An entry read goes on being handled when ctx ends (it is
// pending for this dispatcher until acknowledged), within handleTimeout.
// deliveries (when not nil) counts how often each entry was delivered: one
// delivered more than degradeAfter times is handled without its approval
// when reading it fails (a damaged hash), rather than never.
func (d *Dispatcher) handleAll(ctx context.Context, msgs []redis.XMessage, deliveries map[string]int64) {
	for _, m := range msgs {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handleTimeout)
		err := d.handle(hctx, m, deliveries[m.ID] > degradeAfter)
		if err == nil {
			err = d.rdb.XAck(hctx, d.stream, d.group, m.ID).Err()
		}
		cancel()
		if err != nil {
			// Left pending: claimed again after claimIdle.
			d.log.Warn().Err(err).Str("event_id", m.ID).Msg("webhook dispatcher: entry left pending")
		}
	}
}

// handle enqueues the deliveries of entry m; nil when there is nothing to
// deliver. When degraded, an approval that cannot be read is left out.
func (d *Dispatcher) handle(ctx context.Context, m redis.XMessage, degraded bool) error {
	if m.Values == nil { // trimmed from the stream while pending
		return nil
	}
	e := parseEntry(m)
	typ := classify(e)
	if typ == "" {
		return nil
	}
	var targets []Endpoint
	for _, ep := range d.endpoints {
		if ep.Wants(typ) {
			targets = append(targets, ep)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	var a *approve.Approval
	if e.ApprovalID != "" {
		var err error
		a, err = d.approvals.Get(ctx, e.ApprovalID)
		switch {
		case errors.Is(err, approve.ErrNotFound):
			a = nil
		case err != nil && degraded:
			d.log.Error().Err(err).Str("event_id", e.ID).Msg("webhook dispatcher: sending the event without its approval, which cannot be read")
			a = nil
		case err != nil:
			return err
		}
	}
	at := e.Time
	if at.IsZero() {
		at = time.Now()
	}
	var data any
	if typ == EventApprovalPending {
		data = pendingData(e, a, d.prefix)
	} else {
		data = finalData(e, a)
	}
	for _, ep := range targets {
		var body []byte
		var err error
		switch {
		case ep.format() == FormatSlack && typ == EventApprovalPending:
			body, err = slackPending(data.(Pending))
		case ep.format() == FormatSlack:
			body, err = slackFinal(data.(Final))
		default:
			body, err = standardBody(typ, at, data)
		}
		if err != nil {
			return err
		}
		if err := d.enqueue(ctx, ep, payload{Endpoint: ep.key(), ID: e.ID, Type: typ, Body: body}); err != nil {
			return err
		}
	}
	return nil
}

// TaskID is the id of the delivery task of event eventID (a stream entry
// id) to endpoint e: enqueuing it again while asynq keeps the task
// (Retention after success; archived after its last failure) is a no-op.
func TaskID(eventID string, e Endpoint) string {
	return "webhook:" + eventID + ":" + e.key()
}

func (d *Dispatcher) enqueue(ctx context.Context, ep Endpoint, p payload) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = d.client.EnqueueContext(ctx, asynq.NewTask(TypeDeliver, b),
		asynq.Queue(d.queue), asynq.TaskID(TaskID(p.ID, ep)), asynq.MaxRetry(d.maxRetry),
		asynq.Timeout(taskTimeout), asynq.Retention(d.retention))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("webhook: enqueue %s to %s: %w", p.ID, ep, err)
	}
	return nil
}
