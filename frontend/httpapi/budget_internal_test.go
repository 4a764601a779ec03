package httpapi

import "testing"

// TestBudgetShares: one token holds at most its share of the bytes in
// flight (half, or the largest body when that is more), every token
// together at most the whole; bytes given back make room again.
func TestBudgetShares(t *testing.T) {
	b := newBudget(64, 4)
	if b.share != 32 {
		t.Fatalf("share %d, want half of 64", b.share)
	}
	for i := range 4 {
		if all, share := b.take("a", 8); all || share {
			t.Fatalf("a's body %d: refused (all %v, share %v)", i, all, share)
		}
	}
	if all, share := b.take("a", 1); all || !share {
		t.Fatalf("a past its share: all %v, share %v; want its share", all, share)
	}
	if all, share := b.take("b", 32); all || share {
		t.Fatal("b's 32: refused")
	}
	if all, _ := b.take("c", 1); !all {
		t.Fatal("a third token past the whole: not refused")
	}
	b.give("a", 8)
	if all, share := b.take("c", 8); all || share {
		t.Fatal("room given back by a: still refused")
	}
	if small := newBudget(8, 6); small.share != 6 {
		t.Errorf("share of 8 with a largest body of 6: %d, want 6 (every body fits)", small.share)
	}
}
