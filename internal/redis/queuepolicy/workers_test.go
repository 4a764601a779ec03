package queuepolicy_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestAnnounce: a worker's announcement names it and its store per queue;
// a stale one (past AnnounceTTL) no longer counts and the next announce of
// another worker removes it; a withdrawn one is gone at once; the key
// expires with the last refresh.
func TestAnnounce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q1, q2, none := redistest.Queue(t), redistest.Queue(t), redistest.Queue(t)
	now := time.Now()
	a := queuepolicy.Announcement{Worker: "host-a/1", Store: "/var/lib/airlock/store", Version: "9.9.9"}
	b := queuepolicy.Announcement{Worker: "host-b/2", Store: "s3://bucket/out"}
	if err := queuepolicy.Announce(ctx, rdb, "", []string{q1, q2}, a, now); err != nil {
		t.Fatal(err)
	}
	if err := queuepolicy.Announce(ctx, rdb, "", []string{q1}, b, now); err != nil {
		t.Fatal(err)
	}
	names := func(q string, at time.Time) []string {
		t.Helper()
		ws, err := queuepolicy.LoadWorkers(ctx, rdb, "", q, at)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, w := range ws {
			out = append(out, w.Worker+" "+w.Store+" "+w.Version)
		}
		return out
	}
	if got, want := names(q1, now), []string{"host-a/1 /var/lib/airlock/store 9.9.9", "host-b/2 s3://bucket/out "}; !slices.Equal(got, want) {
		t.Errorf("workers of q1: %q, want %q", got, want)
	}
	if got := names(none, now); got != nil {
		t.Errorf("workers of a queue nobody serves: %q", got)
	}
	ws, _ := queuepolicy.LoadWorkers(ctx, rdb, "", q1, now)
	if got := queuepolicy.Stores(append(ws, ws...)); !slices.Equal(got, []string{"/var/lib/airlock/store", "s3://bucket/out"}) {
		t.Errorf("Stores: %q", got)
	}
	if ttl := rdb.PTTL(ctx, queuepolicy.WorkersKey("", q1)).Val(); ttl <= 0 || ttl > queuepolicy.AnnounceTTL {
		t.Errorf("TTL of %s: %s, want at most %s", queuepolicy.WorkersKey("", q1), ttl, queuepolicy.AnnounceTTL)
	}
	// Past the TTL without a refresh, a worker no longer serves.
	later := now.Add(queuepolicy.AnnounceTTL + time.Second)
	if got := names(q2, later); got != nil {
		t.Errorf("q2 after a's TTL: %q", got)
	}
	// b refreshes; a, stale, is removed from q1's hash.
	if err := queuepolicy.Announce(ctx, rdb, "", []string{q1}, b, later); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, queuepolicy.WorkersKey("", q1)).Val(); n != 1 {
		t.Errorf("q1 holds %d entries after b's refresh, want b's alone", n)
	}
	if err := queuepolicy.Withdraw(ctx, rdb, "", []string{q1, q2}, "host-b/2"); err != nil {
		t.Fatal(err)
	}
	if got := names(q1, later); got != nil {
		t.Errorf("q1 after b withdrew: %q", got)
	}
	if err := queuepolicy.Announce(ctx, rdb, "", []string{q1}, queuepolicy.Announcement{}, now); err == nil {
		t.Error("an announcement without a name was taken")
	}
}

// TestRefresh: Refresh writes the worker's entry and the key's TTL as
// Announce does, and leaves another worker's stale entry, which readers
// skip, to the next Announce.
func TestRefresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	key := queuepolicy.WorkersKey("", q)
	now := time.Now()
	a := queuepolicy.Announcement{Worker: "host-a/1", Store: "/var/lib/airlock/store"}
	b := queuepolicy.Announcement{Worker: "host-b/2", Store: "/var/lib/airlock/store"}
	if err := queuepolicy.Announce(ctx, rdb, "", []string{q}, a, now); err != nil {
		t.Fatal(err)
	}
	later := now.Add(queuepolicy.AnnounceTTL + time.Second) // a is stale
	if err := queuepolicy.Refresh(ctx, rdb, "", []string{q}, b, later); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, key).Val(); n != 2 {
		t.Errorf("%s holds %d entries after b's Refresh, want a's (stale) and b's", key, n)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > queuepolicy.AnnounceTTL {
		t.Errorf("TTL of %s after a Refresh: %s", key, ttl)
	}
	ws, err := queuepolicy.LoadWorkers(ctx, rdb, "", q, later)
	if err != nil || len(ws) != 1 || ws[0].Worker != b.Worker {
		t.Errorf("workers after b's Refresh: %+v, %v; want b alone", ws, err)
	}
	if err := queuepolicy.Announce(ctx, rdb, "", []string{q}, b, later); err != nil {
		t.Fatal(err)
	}
	if n := rdb.HLen(ctx, key).Val(); n != 1 {
		t.Errorf("%s holds %d entries after b's Announce, want b's alone", key, n)
	}
	if err := queuepolicy.Refresh(ctx, rdb, "", []string{q}, queuepolicy.Announcement{}, now); err == nil {
		t.Error("a refresh without a name was taken")
	}
}

// Stores keeps only what a worker writes: a clean absolute directory
// other than the root, or an s3:// URL; a forged entry leads nowhere.
func TestStoresRefusesForged(t *testing.T) {
	var ws []queuepolicy.Announcement
	for _, s := range []string{"/", "relative/dir", "/srv/../etc", "/srv/store/", "ftp://x", "/srv/store", "s3://b/p"} {
		ws = append(ws, queuepolicy.Announcement{Worker: "w-" + s, Store: s})
	}
	if got := queuepolicy.Stores(ws); !slices.Equal(got, []string{"/srv/store", "s3://b/p"}) {
		t.Errorf("Stores: %q, want only /srv/store and s3://b/p", got)
	}
}
