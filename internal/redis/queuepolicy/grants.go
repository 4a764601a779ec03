package queuepolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/policy"
)

// GrantsKey is the Redis key that holds the secret grants published for
// queue: <prefix>grants:<queue>, with prefix "" meaning "airlock:".
func GrantsKey(prefix, queue string) string { return keyOf(prefix, "grants", queue) }

// Grants is what a queue's workers grant a free-form spec on that queue:
// the secrets whose grant names the queue, each with its env and hosts
// (policy.Grant without actions and queues). Never a value: workers hold
// those.
type Grants struct {
	Secrets []policy.Grant `json:"secrets"`
}

// Grant returns the grant of the secret name.
func (g Grants) Grant(name string) (policy.Grant, bool) {
	for _, s := range g.Secrets {
		if s.Name == name {
			return s, true
		}
	}
	return policy.Grant{}, false
}

// maxGrantsBytes bounds a published Grants value as it is read.
const maxGrantsBytes = 256 << 10

// PublishGrants stores, for each queue, the grants of all (a worker's
// policy.Policy.Grants) that name the queue: an empty list when none does,
// so that an enqueuer knows the queue grants nothing. Like Publish, the
// last worker to start wins, and it is advice for enqueuers: each worker
// enforces its own policy.
func PublishGrants(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, all []policy.Grant) error {
	if len(queues) == 0 {
		return errors.New("queuepolicy: no queue to publish the grants for")
	}
	vals := make(map[string][]byte, len(queues))
	for _, q := range queues {
		g := Grants{Secrets: []policy.Grant{}}
		for _, s := range all {
			if slices.Contains(s.Queues, q) {
				g.Secrets = append(g.Secrets, policy.Grant{Name: s.Name, Hosts: s.Hosts, Env: s.Env})
			}
		}
		b, err := json.Marshal(g)
		if err != nil {
			return fmt.Errorf("queuepolicy: encoding the grants: %w", err)
		}
		if len(b) > maxGrantsBytes {
			return fmt.Errorf("queuepolicy: the grants of queue %q take %d bytes, above %d", q, len(b), maxGrantsBytes)
		}
		vals[GrantsKey(prefix, q)] = b
	}
	err := setAll(ctx, rdb, vals)
	if err != nil {
		return fmt.Errorf("queuepolicy: publishing the grants of %d queue(s): %w", len(queues), err)
	}
	return nil
}

// LoadGrants returns the grants published for queue, and false (with a nil
// error) when no worker published any. A published value that is not
// Grants, or larger than a worker publishes, is an error naming its key.
func LoadGrants(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) (Grants, bool, error) {
	key := GrantsKey(prefix, queue)
	b, ok, err := loadBounded(ctx, rdb, key, maxGrantsBytes)
	if err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("queuepolicy: loading the grants of queue %q: %w", queue, err)
		}
		return Grants{}, false, err
	}
	var g Grants
	if err := json.Unmarshal(b, &g); err != nil || g.Secrets == nil {
		if err == nil {
			err = errors.New(`no "secrets" list`)
		}
		return Grants{}, false, fmt.Errorf("queuepolicy: key %s does not hold grants: %v (delete it, then restart the queue's workers)", key, err)
	}
	return g, true, nil
}
