package approve_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
)

// TestSweeper starts a Sweeper and checks that it expires a pending
// approval past its deadline, queues the promotion of an approval accepted
// before the last interval (and not of one accepted within it), and stops.
func TestSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newClock() // the store's and so the sweeper's: never the wall clock's
	s, rdb, q := approvetest.Store(t, approve.Options{Now: clk.Now, TTL: time.Hour})
	for _, id := range []string{"ap-sw-due", "ap-sw-old"} {
		a, data := sample(id, q)
		park(t, s, a, data)
	}
	if _, err := s.Accept(ctx, "ap-sw-old", "alice", ""); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Hour) // ap-sw-due is past its deadline, ap-sw-old's acceptance two hours old
	a, data := sample("ap-sw-new", q)
	park(t, s, a, data)
	if _, err := s.Accept(ctx, "ap-sw-new", "bob", ""); err != nil {
		t.Fatal(err)
	}

	sw := &approve.Sweeper{Store: s, Client: asynq.NewClientFromRedisClient(rdb), Interval: time.Hour, Log: zerolog.Nop()}
	sw.Start(ctx)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(10 * time.Second)
	for {
		due, err := s.Get(ctx, "ap-sw-due")
		_, qerr := insp.GetTaskInfo(q, approve.TaskID("ap-sw-old"))
		if err == nil && due.State == approve.StateExpired && qerr == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: ap-sw-due %+v (%v); promotion of ap-sw-old: %v", due, err, qerr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	sw.Stop()
	sw.Stop() // a second Stop does nothing
	if _, err := insp.GetTaskInfo(q, approve.TaskID("ap-sw-new")); err == nil {
		t.Error("the sweeper queued the promotion of an approval accepted within its interval")
	}
	var idle approve.Sweeper
	idle.Stop() // never started: nothing to stop
}
