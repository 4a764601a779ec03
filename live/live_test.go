package live_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/live"
)

// TestFollow: a follower gets what is appended after it started, in
// order, once; a second one that comes back after the first piece's seq
// gets the rest and nothing twice; Listened says a listener came.
func TestFollow(t *testing.T) {
	rdb := redistest.Client(t)
	c := live.NewConn(rdb, "t-"+redistest.Queue(t)+":")
	ctx := context.Background()
	id := "run-1"
	if c.Listened(ctx, id) {
		t.Fatal("listened before anyone listens")
	}
	if err := c.Append(ctx, id, []live.Output{{Step: "s", Stream: "stdout", Data: "before\n"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []live.Output
	stop := c.Follow(ctx, id, "", func(o live.Output) { mu.Lock(); got = append(got, o); mu.Unlock() })
	if !c.Listened(ctx, id) {
		t.Error("a follower does not say it listens")
	}
	for _, d := range []string{"one\n", "two\n", "three\n"} {
		if err := c.Append(ctx, id, []live.Output{{Step: "s", Stream: "stdout", Data: d}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	stop() // twice is fine
	if len(got) != 3 || got[0].Data != "one\n" || got[2].Data != "three\n" || !live.ValidSeq(got[0].Seq) {
		t.Fatalf("followed %+v", got)
	}
	var again []live.Output
	c.Follow(ctx, id, got[0].Seq, func(o live.Output) { again = append(again, o) })()
	if len(again) != 2 || again[0].Data != "two\n" || again[1].Seq != got[2].Seq {
		t.Errorf("resumed after %s: %+v", got[0].Seq, again)
	}
	for _, bad := range []string{"", "x", "1-", "-1", "1-2-3", "1-a"} {
		if live.ValidSeq(bad) {
			t.Errorf("ValidSeq(%q)", bad)
		}
	}
}
