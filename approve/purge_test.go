package approve_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
)

// TestPurge checks that Purge deletes the approvals of the runs it names,
// their index and audit entries and their staged bytes' count, and leaves
// another run's approval whole.
func TestPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb, q := approvetest.Store(t, approve.Options{})
	start := time.Now()
	var mine []string
	for _, id := range []string{"ap-pg-1", "ap-pg-2"} {
		a, data := sample(id, q)
		park(t, s, a, data)
		mine = append(mine, id)
	}
	if _, err := s.Reject(ctx, "ap-pg-2", "alice", "no"); err != nil {
		t.Fatal(err)
	}
	keep, data := sample("ap-keep", q)
	kept := park(t, s, keep, data)
	if n, err := s.Purge(ctx, "", start); err == nil || n != 0 {
		t.Fatalf("Purge with no prefix = %d, %v; want an error", n, err)
	}
	n, err := s.Purge(ctx, "run-ap-pg", start)
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2 approvals", n, err)
	}
	for _, id := range mine {
		if c, _ := rdb.Exists(ctx, s.Keys(id)...).Result(); c != 0 {
			t.Errorf("%s: %d keys left", id, c)
		}
	}
	if got := pendingBytes(t, s); got != kept.StagedBytes {
		t.Errorf("pending bytes %d after the purge, want the kept approval's %d", got, kept.StagedBytes)
	}
	for _, st := range []approve.State{approve.StatePending, approve.StateRejected, approve.StateAll} {
		list, err := s.List(ctx, st, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			if a.ID != "ap-keep" {
				t.Errorf("List(%s) still holds %s", st, a.ID)
			}
		}
	}
	audit, err := rdb.XRange(ctx, s.Prefix()+"audit", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	keptAudit := 0
	for _, m := range audit {
		switch m.Values["id"] {
		case "ap-keep":
			keptAudit++
		case "ap-pg-1", "ap-pg-2":
			t.Errorf("audit entry %v of a purged approval left", m.Values)
		}
	}
	if keptAudit == 0 {
		t.Error("the kept approval lost its audit entries")
	}
	if _, err := s.Get(ctx, "ap-keep"); err != nil {
		t.Errorf("the kept approval: %v", err)
	}
}
