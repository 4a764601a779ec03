//go:build linux

package main

import (
	"context"
	"errors"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
)

// syncBuffer collects log lines its writers append concurrently.
type syncBuffer = logtest.Buffer

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestWaitForRedisRetriesThenAnswers(t *testing.T) {
	addr := freeAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	var logs syncBuffer
	log := zerolog.New(&logs)
	retries := 0
	done := make(chan error, 1)
	go func() {
		done <- waitForRedis(context.Background(), rdb, "redis://"+addr+"/0", log, func() { retries++ })
	}()
	warn := regexp.MustCompile(`"level":"warn".*"redis":"redis://` + regexp.QuoteMeta(addr) + `/0","attempt":3,"retry_in":"[0-9.]+m?s"`)
	deadline := time.Now().Add(10 * time.Second)
	for !warn.MatchString(logs.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("no third warning:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still waiting 10s after Redis came up:\n%s", logs.String())
	}
	if retries < 3 || !strings.Contains(logs.String(), `"message":"Redis answers"`) {
		t.Errorf("retries %d; logs:\n%s", retries, logs.String())
	}
}

func TestWaitForRedisBackoff(t *testing.T) {
	// The delays: drawn in [d/2, d], d from 250ms doubling to 30s.
	addr := freeAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	var logs syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := waitForRedis(ctx, rdb, addr, zerolog.New(&logs), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the context's", err)
	}
	var got []time.Duration
	for _, m := range regexp.MustCompile(`"retry_in":"([^"]+)"`).FindAllStringSubmatch(logs.String(), -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	if len(got) < 3 {
		t.Fatalf("%d retries in 2s: %v\n%s", len(got), got, logs.String())
	}
	d := redisRetryFirst
	for i, g := range got {
		if g < d/2-time.Millisecond || g > d+time.Millisecond {
			t.Errorf("delay %d: %v, want in [%v, %v]", i, g, d/2, d)
		}
		d = min(2*d, redisRetryMax)
	}
}

func TestWaitForRedisCanceled(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: freeAddr(t), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(300 * time.Millisecond); cancel() }()
	start := time.Now()
	if err := waitForRedis(ctx, rdb, "x", zerolog.Nop(), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned %v after the cancel", d)
	}
}

func TestReadinessStages(t *testing.T) {
	r := &readiness{m: metrics.New("test")}
	if err := r.check(context.Background()); err == nil || err.Error() != "starting" {
		t.Errorf("before anything: %v", err)
	}
	r.set("waiting for Redis at redis://127.0.0.1:1/0")
	if err := r.check(context.Background()); err == nil || !strings.HasPrefix(err.Error(), "waiting for Redis") {
		t.Errorf("while waiting: %v", err)
	}
}
