package redistest

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// DeleteMatching unlinks every key matching the SCAN pattern, on every
// master of a cluster, one key per command (a cluster refuses multi-key
// commands across slots).
func DeleteMatching(ctx context.Context, rdb redis.UniversalClient, pattern string) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var first error
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := deleteMatching(ctx, c, pattern, 1); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			return err
		}
		return first
	}
	return deleteMatching(ctx, rdb, pattern, 1000)
}

func deleteMatching(ctx context.Context, c redis.Cmdable, pattern string, batch int) error {
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) >= batch {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) > 0 {
		return c.Unlink(ctx, keys...).Err()
	}
	return nil
}
