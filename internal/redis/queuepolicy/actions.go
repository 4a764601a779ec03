package queuepolicy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/actions"
)

// ActionsKey is the Redis key that holds the actions' catalog published
// for queue: <prefix>actions:<queue>, with prefix "" meaning "airlock:".
func ActionsKey(prefix, queue string) string { return keyOf(prefix, "actions", queue) }

// maxActionsBytes bounds a published catalog, as it is written and read.
const maxActionsBytes = 16 << 20

// PublishActions stores infos (a worker's actions.Catalog.Infos) as the
// catalog of each queue: what callers need of it (never a definition's
// spec). A worker without a catalog publishes an empty one, so that
// callers do not see actions no worker of the queue runs. As with
// Publish, the last worker to start wins.
func PublishActions(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, infos []actions.Info) error {
	if infos == nil {
		infos = []actions.Info{}
	}
	b, err := json.Marshal(infos)
	if err != nil {
		return fmt.Errorf("queuepolicy: encoding the actions' catalog: %w", err)
	}
	if len(b) > maxActionsBytes {
		return fmt.Errorf("queuepolicy: the actions' catalog is %d bytes encoded, more than callers read (%d): define fewer or smaller actions", len(b), maxActionsBytes)
	}
	vals := make(map[string][]byte, len(queues))
	for _, q := range queues {
		vals[ActionsKey(prefix, q)] = b
	}
	if err := setAll(ctx, rdb, vals); err != nil {
		return fmt.Errorf("queuepolicy: publishing the actions' catalog of %d queue(s): %w", len(queues), err)
	}
	return nil
}

// LoadActions returns the catalog published for queue, and false (with a
// nil error) when no worker published one.
func LoadActions(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) ([]actions.Info, bool, error) {
	key := ActionsKey(prefix, queue)
	b, ok, err := loadBounded(ctx, rdb, key, maxActionsBytes)
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("queuepolicy: loading the actions' catalog of queue %q: %w", queue, err)
		}
		return nil, false, err
	}
	var infos []actions.Info
	if err := json.Unmarshal(b, &infos); err != nil {
		return nil, false, fmt.Errorf("queuepolicy: key %s does not hold an actions' catalog: %w (delete it, then restart the queue's workers)", key, err)
	}
	return infos, true, nil
}
