//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/worker"
)

// Back-off of the worker's first contact with Redis: 250ms doubling to
// 30s, each delay drawn in [d/2, d] so that workers restarted together do
// not knock together.
const (
	redisRetryFirst  = 250 * time.Millisecond
	redisRetryMax    = 30 * time.Second
	redisPingTimeout = 5 * time.Second
	readyPingTimeout = time.Second // /readyz's PING
)

// waitForRedis pings Redis until it answers, retrying with back-off; each
// failure is logged at warn with where (the URL without its passwords)
// and the next delay, and counted by onRetry (may be nil). It returns nil
// once Redis answers, ctx.Err() when ctx ends first (SIGTERM while Redis
// is down: a clean stop).
func waitForRedis(ctx context.Context, rdb redis.UniversalClient, where string, log zerolog.Logger, onRetry func()) error {
	delay := redisRetryFirst
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, redisPingTimeout)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info().Str("redis", where).Int("attempts", attempt).Msg("Redis answers")
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		wait := delay/2 + rand.N(delay/2+1)
		log.Warn().Err(err).Str("redis", where).Int("attempt", attempt).
			Str("retry_in", wait.Round(time.Millisecond).String()).
			Msg("cannot reach Redis; retrying (the worker starts once it answers)")
		if onRetry != nil {
			onRetry()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, redisRetryMax)
	}
}

// startRetries is waitForRedis's onRetry: m's counter, or nothing.
func startRetries(m *metrics.Metrics) func() {
	if m == nil {
		return nil
	}
	return m.StartRetry
}

// readiness is what /readyz checks: the worker is built and serves its
// queues, and Redis answers a PING within readyPingTimeout.
type readiness struct {
	stage  atomic.Pointer[string] // what the worker does before it serves
	worker atomic.Pointer[worker.Worker]
	rdb    atomic.Pointer[redis.UniversalClient]
	m      *metrics.Metrics
}

func (r *readiness) set(stage string) { r.stage.Store(&stage) }

func (r *readiness) check(ctx context.Context) error {
	w := r.worker.Load()
	if w == nil {
		if s := r.stage.Load(); s != nil {
			return errors.New(*s)
		}
		return errors.New("starting")
	}
	if err := w.Ready(); err != nil {
		return err
	}
	rdb := r.rdb.Load()
	if rdb == nil {
		return errors.New("no Redis client")
	}
	ctx, cancel := context.WithTimeout(ctx, readyPingTimeout)
	defer cancel()
	if err := (*rdb).Ping(ctx).Err(); err != nil {
		r.m.RedisError(metrics.OpPing)
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// serveHTTP starts the health and metrics endpoints on addr.
func serveHTTP(addr string, m *metrics.Metrics, r *readiness, log zerolog.Logger) (*metrics.Server, error) {
	errLog := stdlog.New(zerologWriter{log}, "", 0)
	srv, err := metrics.Listen(addr, metrics.Handler(m, r.check), errLog)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	log.Info().Str("addr", srv.Addr()).Msg("health and metrics endpoints: /healthz, /readyz, /metrics")
	return srv, nil
}

// zerologWriter sends the HTTP server's own error lines to the log.
type zerologWriter struct{ l zerolog.Logger }

func (z zerologWriter) Write(p []byte) (int, error) {
	z.l.Debug().Str("from", "http").Msg(string(p))
	return len(p), nil
}
