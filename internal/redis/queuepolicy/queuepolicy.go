// Package queuepolicy is where workers publish their limits.Policy, and the
// secret grants of their risk policy (PublishGrants), one key per queue,
// so that an enqueuer can reject a spec before it reaches a worker; and
// where each worker announces itself while it serves a queue, with where
// it publishes promoted outputs (Announce), so that an enqueuer can tell
// that no worker serves a queue and a reader where to read.
//
// A published policy is advice for enqueuers, not enforcement: every worker
// checks each spec again against its own policy. A policy is stored without
// expiry, so it outlives the worker that published it, and when several
// workers serve one queue with different policies the last one to start
// wins. Operators who run mixed workers on a queue should give them the same
// policy, or use separate queues.
package queuepolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/limits"
)

// Key is the Redis key that holds the policy published for queue:
// <prefix>policy:<queue>, with prefix "" meaning "airlock:".
func Key(prefix, queue string) string { return keyOf(prefix, "policy", queue) }

// Publish stores p as the policy of each queue (JSON, SET, no expiry),
// replacing what an earlier worker published: the last worker to start
// wins. It fails without writing anything when p is incoherent
// (limits.Policy.Check).
func Publish(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, p limits.Policy) error {
	if len(queues) == 0 {
		return errors.New("queuepolicy: no queue to publish the policy for")
	}
	if err := p.Check(); err != nil {
		return fmt.Errorf("queuepolicy: not publishing an incoherent policy: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("queuepolicy: encoding the policy: %w", err)
	}
	vals := make(map[string][]byte, len(queues))
	for _, q := range queues {
		vals[Key(prefix, q)] = b
	}
	if err := setAll(ctx, rdb, vals); err != nil {
		return fmt.Errorf("queuepolicy: publishing the policy of %d queue(s): %w", len(queues), err)
	}
	return nil
}

// Load returns the policy published for queue, and false (with a nil error)
// when no worker published one. A published value that is not a coherent
// policy is an error naming its key.
func Load(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (limits.Policy, bool, error) {
	b, err := rdb.Get(ctx, Key(prefix, queue)).Bytes()
	if errors.Is(err, redis.Nil) {
		return limits.Policy{}, false, nil
	}
	if err != nil {
		return limits.Policy{}, false, fmt.Errorf("queuepolicy: loading the policy of queue %q: %w", queue, err)
	}
	var p limits.Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return limits.Policy{}, false, fmt.Errorf("queuepolicy: key %s does not hold a policy: %w (delete it, then restart the queue's workers)", Key(prefix, queue), err)
	}
	if err := p.Check(); err != nil {
		return limits.Policy{}, false, fmt.Errorf("queuepolicy: key %s holds an incoherent policy: %w (delete it, then restart the queue's workers)", Key(prefix, queue), err)
	}
	return p, true, nil
}
