package queuepolicy

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// WorkersKey is the Redis key where the workers serving queue announce
// themselves: <prefix>workers:<queue>, with prefix "" meaning "airlock:".
// It is a hash: one field per worker (its name, host/pid), whose value is
// its Announcement as JSON. Unlike the policy, it does not outlive the
// workers: each refreshes its entry (Announce) every AnnounceInterval, an
// entry is stale past its Until, and the key expires AnnounceTTL after the
// last refresh of any entry.
func WorkersKey(prefix, queue string) string { return keyOf(prefix, "workers", queue) }

// Timing of announcements: a worker refreshes its entry every
// AnnounceInterval; an entry not refreshed within AnnounceTTL is stale
// (a worker killed without a clean stop stops counting then).
const (
	AnnounceInterval = 10 * time.Second
	AnnounceTTL      = 30 * time.Second
)

// Bounds of what LoadWorkers reads: entries of one queue, and the bytes
// of one entry (a longer one is skipped: no worker writes it).
const (
	maxWorkers          = 1024
	maxAnnouncementSize = 8 << 10
)

// Announcement is what a worker says of itself for each queue it serves.
type Announcement struct {
	// Worker is the worker's name (host/pid), the hash field.
	Worker string `json:"-"`
	// Store is where the worker publishes promoted outputs: its -store
	// directory, absolute, or its s3://bucket/prefix URL; "" when it
	// does not say.
	Store string `json:"store,omitempty"`
	// Version is the worker's airlock.Version.
	Version string `json:"version,omitempty"`
	// Until is when the entry is stale unless refreshed (Unix ms).
	Until int64 `json:"until"`
}

// Announce stores a as the entry of worker a.Worker for each queue, valid
// for AnnounceTTL from now, and removes the entries of the queues' other
// workers that are stale. One round trip to write and read the entries
// (per node on a Cluster, where the keys are in different slots), one more
// to prune when an entry is stale.
func Announce(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, a Announcement, now time.Time) error {
	return announce(ctx, rdb, prefix, queues, a, now, true)
}

// Refresh is Announce without the removal of stale entries: one round
// trip of two writes per queue (HSET, PEXPIRE), no read. Readers skip
// stale entries (LoadWorkers): a worker refreshes its entry with Refresh
// and prunes with Announce now and then.
func Refresh(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, a Announcement, now time.Time) error {
	return announce(ctx, rdb, prefix, queues, a, now, false)
}

func announce(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, a Announcement, now time.Time, prune bool) error {
	if a.Worker == "" {
		return fmt.Errorf("queuepolicy: an announcement without the worker's name")
	}
	a.Until = now.Add(AnnounceTTL).UnixMilli()
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("queuepolicy: encoding the announcement: %w", err)
	}
	if len(b) > maxAnnouncementSize {
		return fmt.Errorf("queuepolicy: the announcement is %d bytes encoded, more than readers take (%d): a shorter -store", len(b), maxAnnouncementSize)
	}
	var all []*redis.ScanCmd
	_, err = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, q := range queues {
			k := WorkersKey(prefix, q)
			pipe.HSet(ctx, k, a.Worker, b)
			pipe.PExpire(ctx, k, AnnounceTTL)
			if prune {
				all = append(all, pipe.HScan(ctx, k, 0, "", maxWorkers))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queuepolicy: announcing the worker for %d queue(s): %w", len(queues), err)
	}
	if !prune {
		return nil
	}
	stale := map[string][]string{}
	for i, q := range queues {
		kv, _ := all[i].Val()
		for j := 0; j+1 < len(kv); j += 2 {
			var e Announcement
			if json.Unmarshal([]byte(kv[j+1]), &e) != nil || e.Until < now.UnixMilli() {
				stale[q] = append(stale[q], kv[j])
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	_, err = rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for q, names := range stale {
			pipe.HDel(ctx, WorkersKey(prefix, q), names...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queuepolicy: removing stale workers of %d queue(s): %w", len(stale), err)
	}
	return nil
}

// Withdraw removes the entry of worker for each queue: a clean stop.
func Withdraw(ctx context.Context, rdb redis.UniversalClient, prefix string, queues []string, worker string) error {
	_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, q := range queues {
			pipe.HDel(ctx, WorkersKey(prefix, q), worker)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queuepolicy: withdrawing the worker from %d queue(s): %w", len(queues), err)
	}
	return nil
}

// LoadWorkers returns the workers that serve queue now, by name: the
// entries not stale at now (at most 1024, of at most 8 KiB each; others
// are skipped). None (a nil slice and a nil error) means no worker has
// announced itself for the queue within AnnounceTTL. One Redis read
// (HSCAN, bounded).
func LoadWorkers(ctx context.Context, rdb redis.UniversalClient, prefix, queue string, now time.Time) ([]Announcement, error) {
	kv, _, err := rdb.HScan(ctx, WorkersKey(prefix, queue), 0, "", maxWorkers).Result()
	if err != nil {
		return nil, fmt.Errorf("queuepolicy: loading the workers of queue %q: %w", queue, err)
	}
	var out []Announcement
	for i := 0; i+1 < len(kv) && len(out) < maxWorkers; i += 2 {
		if len(kv[i+1]) > maxAnnouncementSize {
			continue
		}
		var a Announcement
		if json.Unmarshal([]byte(kv[i+1]), &a) != nil || a.Until < now.UnixMilli() {
			continue
		}
		a.Worker = kv[i]
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Announcement) int { return cmp.Compare(a.Worker, b.Worker) })
	return out, nil
}

// Stores returns the distinct stores the workers announced, sorted.
func Stores(workers []Announcement) []string {
	var out []string
	for _, w := range workers {
		// Only what a worker writes: an s3:// URL, or a clean absolute
		// directory other than the root. An entry anyone with write access
		// to Redis forged otherwise leads a reader nowhere.
		abs := filepath.IsAbs(w.Store) && filepath.Clean(w.Store) == w.Store && w.Store != "/"
		if !abs && !strings.HasPrefix(w.Store, "s3://") {
			continue
		}
		if !slices.Contains(out, w.Store) {
			out = append(out, w.Store)
		}
	}
	slices.Sort(out)
	return out
}
