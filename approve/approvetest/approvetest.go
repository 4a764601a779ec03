// Package approvetest gives tests an approval store of their own in the
// test Redis (internal/testkit/redistest).
package approvetest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// Prefix returns a key prefix no other test uses: the name of a queue of
// redistest.Queue (whose asynq data is deleted when t ends) and a colon.
// Every key under the prefix is deleted when t ends. The queue is q.
func Prefix(t testing.TB) (prefix, q string) {
	t.Helper()
	q = redistest.Queue(t)
	prefix = q + ":"
	url := redistest.URL(t)
	t.Cleanup(func() {
		if err := DeleteKeys(url, prefix); err != nil {
			t.Errorf("approvetest: deleting the keys under %s: %v", prefix, err)
		}
	})
	return prefix, q
}

// Store returns a store under a fresh prefix (see Prefix), with opts
// (whose Prefix it sets), the client it uses and the prefix's queue.
func Store(t testing.TB, opts approve.Options) (*approve.Store, redis.UniversalClient, string) {
	t.Helper()
	prefix, q := Prefix(t)
	rdb := redistest.Client(t)
	opts.Prefix = prefix
	return approve.NewStore(rdb, opts), rdb, q
}

// DeleteKeys deletes every key under prefix (SCAN then DEL).
func DeleteKeys(url, prefix string) error {
	c, _, err := redisconn.Open(url)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return redistest.DeleteMatching(ctx, c, escape(prefix)+"*")
}

// escape quotes the glob characters of s for SCAN MATCH.
func escape(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
