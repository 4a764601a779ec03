package approve_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/events"
)

// TestDecideByNote checks that a decision's note is kept beside who
// decided (in the approval, its summary and its audit trail), never in
// its place; that the run's principal is in the approval, its summary
// and the run's event; and that a pending approval cannot carry a note.
func TestDecideByNote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, rdb, q := approvetest.Store(t, approve.Options{})
	a, data := sample("ap-note-1", q)
	a.Run.Principal = "agent-7"
	park(t, s, a, data)
	got, err := s.Decide(ctx, a.ID, approve.StateRejected, approve.Decision{By: "alice", ByNote: "security-officer-bob", Comment: "fraud"})
	if err != nil {
		t.Fatal(err)
	}
	if got.DecidedBy != "alice" || got.ByNote != "security-officer-bob" || got.Run.Principal != "agent-7" {
		t.Errorf("Decide: decided_by %q, by_note %q, principal %q", got.DecidedBy, got.ByNote, got.Run.Principal)
	}
	if g, err := s.Get(ctx, a.ID); err != nil || g.DecidedBy != "alice" || g.ByNote != "security-officer-bob" || g.Run.Principal != "agent-7" {
		t.Errorf("Get: %+v, %v", g, err)
	}
	list, err := s.List(ctx, approve.StateRejected, 10)
	if err != nil || len(list) != 1 || list[0].ByNote != "security-officer-bob" || list[0].Run.Principal != "agent-7" {
		t.Errorf("List: %+v, %v", list, err)
	}
	hist, err := s.History(ctx, a.ID)
	if err != nil || len(hist) != 2 || hist[1].By != "alice" || hist[1].ByNote != "security-officer-bob" {
		t.Errorf("History: %+v, %v", hist, err)
	}
	msgs, err := rdb.XRange(ctx, events.NewStream(rdb, s.Prefix()).Key(), "-", "+").Result()
	if err != nil || len(msgs) != 1 || msgs[0].Values["principal"] != "agent-7" || msgs[0].Values["state"] != "rejected" {
		t.Errorf("the run's events: %+v, %v; want one rejected event with principal agent-7", msgs, err)
	}

	// Without a note: none kept.
	b, data := sample("ap-note-2", q)
	park(t, s, b, data)
	if got, err := s.Accept(ctx, b.ID, "carol", ""); err != nil || got.ByNote != "" || got.DecidedBy != "carol" {
		t.Errorf("Accept without a note: %+v, %v", got, err)
	}
	c, data := sample("ap-note-3", q)
	c.ByNote = "someone"
	if _, _, err := s.Park(ctx, c, data); err == nil || !strings.Contains(err.Error(), "a pending approval has no decision") {
		t.Errorf("Park of a pending approval with a note: %v", err)
	}
	if _, err := s.Decide(ctx, b.ID, approve.StatePending, approve.Decision{By: "x"}); err == nil {
		t.Errorf("Decide to pending: no error")
	}
	if _, err := s.Decide(ctx, c.ID, approve.StateRejected, approve.Decision{By: "x"}); err == nil || !strings.Contains(err.Error(), "comment is required") {
		t.Errorf("Decide to rejected without a comment: %v", err)
	}
}
