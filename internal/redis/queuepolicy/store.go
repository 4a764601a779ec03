package queuepolicy

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
)

// keyOf is the key of what workers publish of a kind for queue:
// <prefix><kind>:<queue>, with prefix "" meaning "airlock:".
func keyOf(prefix, kind, queue string) string {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return prefix + kind + ":" + queue
}

// setAll stores each key's value (SET, no expiry) in one round trip.
func setAll(ctx context.Context, rdb redis.UniversalClient, vals map[string][]byte) error {
	_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for k, b := range vals {
			pipe.Set(ctx, k, b, 0)
		}
		return nil
	})
	return err
}

// loadBounded reads key's value, at most max bytes (GETRANGE bounds the
// read), and false when it is absent: a missing key reads as "", which no
// worker publishes. A longer value is an error naming the key.
func loadBounded(ctx context.Context, rdb redis.UniversalClient, key string, max int) ([]byte, bool, error) {
	b, err := rdb.GetRange(ctx, key, 0, int64(max)).Bytes()
	if err != nil {
		return nil, false, err
	}
	if len(b) == 0 {
		return nil, false, nil
	}
	if len(b) > max {
		return nil, false, fmt.Errorf("key %s holds more than %d bytes (delete it, then restart the queue's workers)", key, max)
	}
	return b, true, nil
}
