package approve_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
)

// pendingBytes reads the store's count, failing the test on error.
func pendingBytes(t *testing.T, s *approve.Store) int64 {
	t.Helper()
	n, err := s.PendingBytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMaxPendingBytes: the staged bytes of all approvals that hold them
// are counted; a park past the bound fails with ErrPendingFull and leaves
// nothing of its own, nor evicts anything of another's; each way an
// approval drops its bytes (reject, expire, promote) gives them back.
func TestMaxPendingBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock()
	// One approval's size, from a store without a bound: its artifacts'
	// bytes and its whole hash.
	probe, _, q0 := approvetest.Store(t, approve.Options{MaxPendingBytes: -1})
	a0, d0 := sample("ap-pend-9", q0)
	size := park(t, probe, a0, d0).StagedBytes
	if size <= int64(len(a0.Result)+len(d0["out/report.csv"])) {
		t.Fatalf("StagedBytes %d counts less than the result and the artifacts", size)
	}
	s, rdb, q := approvetest.Store(t, approve.Options{Now: clk.Now, TTL: time.Hour, MaxPendingBytes: 3 * size})
	var ids []string
	for i := range 3 {
		a, data := sample(fmt.Sprintf("ap-pend-%d", i), q)
		got := park(t, s, a, data)
		if got.StagedBytes != size {
			t.Fatalf("StagedBytes %d, want %d", got.StagedBytes, size)
		}
		ids = append(ids, a.ID)
	}
	if n := pendingBytes(t, s); n != 3*size {
		t.Fatalf("pending %d bytes, want %d", n, 3*size)
	}
	full, data := sample("ap-pend-full", q)
	_, created, err := s.Park(ctx, full, data)
	if !errors.Is(err, approve.ErrPendingFull) || created {
		t.Fatalf("a park past the bound: created %v, %v; want ErrPendingFull", created, err)
	}
	if n, _ := rdb.Exists(ctx, s.Keys(full.ID)...).Result(); n != 0 {
		t.Errorf("the refused approval left %d keys", n)
	}
	for _, id := range ids {
		if _, err := s.Data(ctx, id, "out/report.csv"); err != nil {
			t.Errorf("%s lost its staged bytes: %v", id, err)
		}
	}
	if n := pendingBytes(t, s); n != 3*size {
		t.Fatalf("pending %d bytes after the refusal, want %d", n, 3*size)
	}
	// A retried park of an approval that exists counts nothing more.
	again, data := sample(ids[0], q)
	if _, created, err := s.Park(ctx, again, data); err != nil || created {
		t.Fatalf("park again: created %v, %v", created, err)
	}
	if n := pendingBytes(t, s); n != 3*size {
		t.Errorf("pending %d bytes after a park again, want %d", n, 3*size)
	}
	// Reject, promote, expire: each gives its bytes back.
	if _, err := s.Reject(ctx, ids[0], "alice", "no"); err != nil {
		t.Fatal(err)
	}
	if n := pendingBytes(t, s); n != 2*size {
		t.Errorf("pending %d bytes after a rejection, want %d", n, 2*size)
	}
	if _, err := s.Accept(ctx, ids[1], "alice", ""); err != nil {
		t.Fatal(err)
	}
	if n := pendingBytes(t, s); n != 2*size {
		t.Errorf("pending %d bytes after an acceptance (bytes still staged), want %d", n, 2*size)
	}
	if err := s.MarkPromoted(ctx, ids[1], time.Time{}, "dir"); err != nil {
		t.Fatal(err)
	}
	if n := pendingBytes(t, s); n != size {
		t.Errorf("pending %d bytes after a promotion, want %d", n, size)
	}
	// Promoting it again gives nothing back twice.
	if err := s.MarkPromoted(ctx, ids[1], time.Time{}, "dir"); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour)
	if n, err := s.ExpireDue(ctx); n != 1 || err != nil {
		t.Fatalf("ExpireDue = %d, %v", n, err)
	}
	if n := pendingBytes(t, s); n != 0 {
		t.Errorf("pending %d bytes after the last expired, want 0", n)
	}
	// Room again: the refused output parks now.
	fullSize := park(t, s, full, data).StagedBytes
	if n := pendingBytes(t, s); n != fullSize {
		t.Fatalf("pending %d bytes, want %d", n, fullSize)
	}
	// A round trip of updates sent twice (a retried record write) gives
	// the bytes back once.
	if _, err := s.Accept(ctx, full.ID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	ops, err := s.MarkPromotedOps(ctx, full.ID, time.Time{}, "dir")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Apply(ctx, full.ID, ops); err != nil {
			t.Fatal(err)
		}
	}
	if n := pendingBytes(t, s); n != 0 {
		t.Errorf("pending %d bytes after updates sent twice, want 0", n)
	}
}

// TestPrincipalMaxPendingBytes: a principal past its own bound fails with
// ErrPrincipalPendingFull, leaving nothing; another principal still parks;
// a rejection gives the principal its bytes back.
func TestPrincipalMaxPendingBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	probe, _, q0 := approvetest.Store(t, approve.Options{MaxPendingBytes: -1})
	a0, d0 := sample("ap-ppend-9", q0)
	a0.Run.Principal = "agent" // its size counts the principal's name
	size := park(t, probe, a0, d0).StagedBytes
	bound := func(p string) int64 {
		if p == "agent" {
			return 2 * size
		}
		return 0
	}
	s, rdb, q := approvetest.Store(t, approve.Options{TTL: time.Hour, MaxPendingBytes: 100 * size, PrincipalMaxPendingBytes: bound})
	by := func(id, principal string) (*approve.Approval, map[string][]byte) {
		a, data := sample(id, q)
		a.Run.Principal = principal
		return a, data
	}
	for i := range 2 {
		a, data := by(fmt.Sprintf("ap-ppend-%d", i), "agent")
		park(t, s, a, data)
	}
	full, data := by("ap-ppend-f", "agent")
	if _, created, err := s.Park(ctx, full, data); !errors.Is(err, approve.ErrPrincipalPendingFull) || created {
		t.Fatalf("agent past its bound: created %v, %v; want ErrPrincipalPendingFull", created, err)
	}
	if n, _ := rdb.Exists(ctx, s.Keys(full.ID)...).Result(); n != 0 {
		t.Errorf("the refused approval left %d keys", n)
	}
	other, data := by("ap-ppend-o", "agent2")
	park(t, s, other, data)
	if n, err := s.PrincipalPendingBytes(ctx, "agent"); err != nil || n != 2*size {
		t.Fatalf("agent holds %d, %v; want %d", n, err, 2*size)
	}
	if _, err := s.Reject(ctx, "ap-ppend-0", "alice", "no"); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.PrincipalPendingBytes(ctx, "agent"); n != size {
		t.Errorf("agent holds %d after a rejection, want %d", n, size)
	}
	again, data := by("ap-ppend-2", "agent")
	park(t, s, again, data)
	if n, _ := s.PrincipalPendingBytes(ctx, "agent"); n != 2*size {
		t.Errorf("agent holds %d after parking again, want %d", n, 2*size)
	}
}

// TestLostPromotionOpsReleaseStagedBytes: a promotion whose index and
// audit updates were never sent (its worker died after the mark, and its
// task is not run again) leaves the approval in the accepted-not-promoted
// index with its staged bytes counted; the sweeper's ListAccepted drops it
// from the index and gives the bytes back.
func TestLostPromotionOpsReleaseStagedBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, q := approvetest.Store(t, approve.Options{})
	a, data := sample("ap-lost-ops", q)
	a.State, a.DecidedBy = approve.StateAccepted, "policy:default"
	got := park(t, s, a, data)
	if got.StagedBytes <= 0 || pendingBytes(t, s) != got.StagedBytes {
		t.Fatalf("parked: staged %d, pending %d", got.StagedBytes, pendingBytes(t, s))
	}
	if _, err := s.MarkPromotedOps(ctx, a.ID, time.Time{}, "/store/run"); err != nil { // ops never sent
		t.Fatal(err)
	}
	ids, err := s.ListAccepted(ctx, time.Time{})
	if err != nil || len(ids) != 0 {
		t.Fatalf("ListAccepted = %q, %v; want none", ids, err)
	}
	if n := pendingBytes(t, s); n != 0 {
		t.Errorf("pending %d bytes after the sweep, want 0", n)
	}
}
