package actions

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
)

// Key is the Redis key that holds the catalog published for queue:
// <prefix>actions:<queue>, with prefix "" meaning "airlock:".
func Key(prefix, queue string) string {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return prefix + "actions:" + queue
}

// maxPublished bounds what Load reads of a published catalog.
const maxPublished = 16 << 20

// Publish stores infos (JSON, SET, no expiry) as the catalog of each
// queue, replacing what an earlier worker published: the last worker to
// start wins. A worker without a catalog publishes an empty one, so that
// callers do not see actions no worker of the queue runs.
func Publish(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, infos []Info) error {
	if infos == nil {
		infos = []Info{}
	}
	b, err := json.Marshal(infos)
	if err != nil {
		return fmt.Errorf("actions: encoding the catalog: %w", err)
	}
	if len(b) > maxPublished {
		return fmt.Errorf("actions: the catalog is %d bytes encoded, more than callers read (%d): define fewer or smaller actions", len(b), maxPublished)
	}
	_, err = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, q := range queues {
			pipe.Set(ctx, Key(prefix, q), b, 0)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("actions: publishing the catalog of %d queue(s): %w", len(queues), err)
	}
	return nil
}

// Load returns the catalog published for queue, and false (with a nil
// error) when no worker published one.
func Load(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) ([]Info, bool, error) {
	key := Key(prefix, queue)
	// GETRANGE bounds the read; a missing key reads as "", which no
	// worker publishes (an empty catalog is "[]").
	b, err := rdb.GetRange(ctx, key, 0, maxPublished).Bytes()
	if err != nil {
		return nil, false, fmt.Errorf("actions: loading the catalog of queue %q: %w", queue, err)
	}
	if len(b) == 0 {
		return nil, false, nil
	}
	if len(b) > maxPublished {
		return nil, false, fmt.Errorf("actions: key %s holds more than %d bytes, more than a catalog (delete it, then restart the queue's workers)", key, maxPublished)
	}
	var infos []Info
	if err := json.Unmarshal(b, &infos); err != nil {
		return nil, false, fmt.Errorf("actions: key %s does not hold a catalog: %w (delete it, then restart the queue's workers)", key, err)
	}
	return infos, true, nil
}

// Find returns the action called name in infos.
func Find(infos []Info, name string) (Info, bool) {
	for _, i := range infos {
		if i.Name == name {
			return i, true
		}
	}
	return Info{}, false
}
