package httpapi

import "testing"

// TestBudgetShares: one token holds at most its share of the bytes in
// flight (half, or the largest body when that is more), every token
// together at most the whole; bytes given back make room again.
func TestBudgetShares(t *testing.T) {
	b := newBodies(64, 4)
	if b.share != 32 {
		t.Fatalf("share %d, want half of 64", b.share)
	}
	for i := range 4 {
		if why := b.take("a", 8, 0); why != shareOK {
			t.Fatalf("a's body %d: refused (%d)", i, why)
		}
	}
	if why := b.take("a", 1, 0); why != shareToken {
		t.Fatalf("a past its share: %d; want its share", why)
	}
	if why := b.take("b", 32, 0); why != shareOK {
		t.Fatal("b's 32: refused")
	}
	if why := b.take("c", 1, 0); why != shareAll {
		t.Fatal("a third token past the whole: not refused")
	}
	b.give("a", 8)
	if why := b.take("c", 8, 0); why != shareOK {
		t.Fatal("room given back by a: still refused")
	}
	if small := newBodies(8, 6); small.share != 6 {
		t.Errorf("share of 8 with a largest body of 6: %d, want 6 (every body fits)", small.share)
	}
}

// TestWaiterShares: a token holds at most its quota's max_waiters, and
// whatever its quota, at most a quarter of the server's ceiling; every
// token together at most the ceiling; a waiter given back makes room.
func TestWaiterShares(t *testing.T) {
	ws := newWaiters(8)
	if ws.share != 2 {
		t.Fatalf("share %d, want a quarter of 8", ws.share)
	}
	if got := ws.take("a", 1, 1); got != shareOK {
		t.Fatalf("a's first: %d", got)
	}
	if got := ws.take("a", 1, 1); got != shareLimit {
		t.Errorf("a past its quota 1: %d, want shareLimit", got)
	}
	if got := ws.take("b", 1, 0); got != shareOK {
		t.Fatalf("b's first: %d", got)
	}
	ws.take("b", 1, 0)
	if got := ws.take("b", 1, 100); got != shareToken {
		t.Errorf("b past its share (quota 100): %d, want shareToken", got)
	}
	for _, tok := range []string{"c", "c", "d", "d", "e"} {
		if got := ws.take(tok, 1, 0); got != shareOK {
			t.Fatalf("%s: %d", tok, got)
		}
	}
	if got := ws.take("f", 1, 0); got != shareAll {
		t.Errorf("past the ceiling: %d, want shareAll", got)
	}
	ws.give("e", 1)
	if got := ws.take("f", 1, 0); got != shareOK {
		t.Errorf("after a give: %d", got)
	}
	if newWaiters(1).share != 1 {
		t.Error("a ceiling of 1: no share")
	}
}
