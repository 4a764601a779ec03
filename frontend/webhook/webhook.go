// Package webhook sends signed webhooks for Airlock's events: a pending
// approval (approval.pending) and a run's final state (run.final), to the
// endpoints the operator configured (-webhook, ParseFlag).
//
// A Dispatcher tails the events stream (<prefix>events) through a Redis
// consumer group, so that with several processes each event is dispatched
// once, and a dead one's entries are claimed by another. For each event of
// interest and each endpoint that wants it, it enqueues an asynq task
// (TypeDeliver, queue DefaultQueue) whose id is derived from the event and
// the endpoint; a Handler POSTs it, signed per the Standard Webhooks
// specification (webhook-id: the event id, the same on every retry;
// webhook-timestamp; webhook-signature: v1,HMAC-SHA256), retried with
// back-off until a 2xx (or a 410, which stops it). Delivery is at least
// once: a receiver dedupes by webhook-id. Receivers check a delivery with
// Verify.
//
// Endpoint URLs and secrets never reach Redis: a task names its endpoint
// by a hash, and the process that delivers it holds the configuration.
// Run wires the dispatcher and the delivery server together.
package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/redislog"
)

// Config configures Serve; zero values take the defaults. Redis and
// Endpoints are required.
type Config struct {
	Redis     redis.UniversalClient
	Prefix    string // Airlock's key prefix: the workers' -prefix (events.DefaultPrefix)
	Endpoints []Endpoint
	Log       zerolog.Logger

	// Queue is the asynq queue of the delivery tasks: DefaultQueue, or
	// "airlock-webhooks:P" under another prefix "P:", so that deployments
	// sharing a Redis keep their deliveries apart.
	Queue       string
	Group       string        // consumer group (DefaultGroup)
	Consumer    string        // this process's name in the group (host-pid-random)
	Concurrency int           // deliveries at once (10)
	Timeout     time.Duration // of one POST (DefaultTimeout)
	MaxRetry    int           // of a delivery (DefaultMaxRetry)
	// RetryDelay is the back-off of the n-th retry (RetryDelay); a
	// receiver's Retry-After takes precedence.
	RetryDelay func(n int) time.Duration
	Retention  time.Duration // of a delivered task (DefaultRetention)
	ClaimIdle  time.Duration // (DefaultClaimIdle)
	// Block is the longest blocking read of the stream, which bounds how
	// long a stop takes (1s).
	Block time.Duration
	// PollInterval is how often the idle delivery server looks for tasks,
	// and for retries that are due (200ms).
	PollInterval time.Duration
}

// Run dispatches the events of the stream under prefix to endpoints and
// delivers them, until ctx ends; then it stops taking deliveries, waits
// for those under way (up to 10s) and returns nil. It returns an error
// when the endpoints are not valid or the delivery server does not start.
// With no endpoints it returns nil at once. It is Serve with the defaults.
func Run(ctx context.Context, rdb redis.UniversalClient, prefix string, endpoints []Endpoint, log zerolog.Logger) error {
	return Serve(ctx, Config{Redis: rdb, Prefix: prefix, Endpoints: endpoints, Log: log})
}

// Serve is Run with every setting.
func Serve(ctx context.Context, c Config) error {
	if len(c.Endpoints) == 0 {
		return nil
	}
	if c.Redis == nil {
		return errors.New("webhook: no Redis client")
	}
	if c.Prefix == "" {
		c.Prefix = events.DefaultPrefix
	}
	if c.Queue == "" {
		c.Queue = defaultQueue(c.Prefix)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 10
	}
	if c.RetryDelay == nil {
		c.RetryDelay = RetryDelay
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 200 * time.Millisecond
	}
	h, err := NewHandler(c.Endpoints, c.Timeout, c.Log)
	if err != nil {
		return err
	}
	defer h.Close()
	d, err := NewDispatcher(c.Redis, c.Endpoints, DispatcherOptions{
		Prefix: c.Prefix, Queue: c.Queue, Group: c.Group, Consumer: c.Consumer, MaxRetry: c.MaxRetry,
		Retention: c.Retention, ClaimIdle: c.ClaimIdle, Block: c.Block, Log: c.Log,
	})
	if err != nil {
		return err
	}
	srv := asynq.NewServerFromRedisClient(c.Redis, asynq.Config{
		Queues:                   map[string]int{c.Queue: 1},
		Concurrency:              c.Concurrency,
		TaskCheckInterval:        c.PollInterval,
		DelayedTaskCheckInterval: c.PollInterval,
		RetryDelayFunc:           retryDelayFunc(c.RetryDelay),
		ShutdownTimeout:          10 * time.Second,
		Logger:                   redislog.Asynq(c.Log),
		LogLevel:                 asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Handle(TypeDeliver, h)
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("webhook: delivery server: %w", err)
	}
	defer srv.Shutdown()
	return d.Run(ctx)
}
