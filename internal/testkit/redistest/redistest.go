// Package redistest gives tests a Redis to run asynq against.
//
// URL picks, once per test binary, the first of: the server named by
// $REDIS_URL; a redis-server found on $PATH, started on a free loopback port
// without persistence; an embedded miniredis. Every test of a binary shares
// that one server and database.
//
// Tests isolate themselves by queue name, not by database: asynq namespaces
// all of a queue's keys by the queue ("asynq:{q}:..."), and the published
// policy of a queue lives at queuepolicy.Key(q). A test that takes its queue
// from Queue gets a name no other test uses, and that queue's data is
// deleted when the test ends, so tests may run in parallel, in several
// packages at once, against a Redis other programs use.
package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// Sources of the Redis used by a test binary, as Source reports them.
const (
	SourceEnv         = "REDIS_URL"
	SourceRedisServer = "redis-server"
	SourceMiniredis   = "miniredis"
)

var shared struct {
	once   sync.Once
	url    string
	source string
	err    error
}

func start() {
	if u := os.Getenv("REDIS_URL"); u != "" {
		shared.url, shared.source = u, SourceEnv
		return
	}
	if path, ok := findRedisServer(); ok {
		shared.url, shared.err = startRedisServer(path)
		shared.source = SourceRedisServer
		return
	}
	shared.url, shared.err = startMiniredis()
	shared.source = SourceMiniredis
}

// URL returns the URL of the Redis shared by the tests of this binary,
// starting it on first use. It fails t when that Redis cannot be started.
func URL(t testing.TB) string {
	t.Helper()
	shared.once.Do(start)
	if shared.err != nil {
		t.Fatalf("redistest: no Redis from %s: %v", shared.source, shared.err)
	}
	return shared.url
}

// Source reports where the Redis of URL comes from: SourceEnv,
// SourceRedisServer or SourceMiniredis.
func Source(t testing.TB) string {
	t.Helper()
	URL(t)
	return shared.source
}

// Client returns a client of the shared Redis, closed when t ends.
func Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	c, _, err := redisconn.Open(URL(t))
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Queue returns a queue name no other test uses ("t-" and 12 random hex
// digits). When t ends, the queue's asynq data and published policy are
// deleted; a task still active in the queue then fails t, since it means
// the test left an asynq server running.
func Queue(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	q := "t-" + hex.EncodeToString(b[:])
	url := URL(t)
	t.Cleanup(func() {
		if err := deleteQueue(url, q); err != nil {
			t.Errorf("redistest: cleaning up queue %s: %v", q, err)
		}
	})
	return q
}
