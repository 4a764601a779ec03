package approve_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
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

// zrangeCounter counts the ZRANGE commands a client sends: the prunes of
// the approval indexes.
type zrangeCounter struct{ n atomic.Int64 }

func (c *zrangeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *zrangeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *zrangeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "zrange" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// An idle sweeper prunes the approval indexes at its first sweep, then
// once a minute (every 6th sweep at 10s), not at every sweep; a prune
// that dropped entries is followed by another at the next sweep, and an
// entry of an approval Redis deleted is dropped.
func TestSweeperPrunesOncePerMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prefix, _ := approvetest.Prefix(t)
	o, err := redis.ParseURL(redistest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	zr := &zrangeCounter{}
	rdb.AddHook(zr)
	s := approve.NewStore(rdb, approve.Options{Prefix: prefix})
	sw := &approve.Sweeper{Store: s, Client: asynq.NewClientFromRedisClient(rdb), Interval: 10 * time.Second, Log: zerolog.Nop()}
	var pruned []int // the sweeps that pruned, from 1
	sweep := func(i int) {
		t.Helper()
		n0 := zr.n.Load()
		sw.Sweep(ctx)
		switch d := zr.n.Load() - n0; d {
		case 0:
		case 4: // the four indexes
			pruned = append(pruned, i)
		default:
			t.Fatalf("sweep %d sent %d ZRANGE", i, d)
		}
	}
	for i := 1; i <= 13; i++ {
		sweep(i)
	}
	if want := []int{1, 7, 13}; !slices.Equal(pruned, want) {
		t.Errorf("idle: the sweeps that pruned: %v, want %v", pruned, want)
	}
	// An index entry whose approval Redis deleted (Retention).
	all := prefix + "approvals:all"
	if err := rdb.ZAdd(ctx, all, redis.Z{Score: 1, Member: "ap-gone"}).Err(); err != nil {
		t.Fatal(err)
	}
	pruned = nil
	for i := 14; i <= 25; i++ { // 26 would prune
		sweep(i)
	}
	// Sweep 19 prunes (six after 13) and drops the entry, so 20 prunes
	// again, drops nothing, and the next is six sweeps on.
	if want := []int{19, 20}; !slices.Equal(pruned, want) {
		t.Errorf("after a deletion: the sweeps that pruned: %v, want %v", pruned, want)
	}
	if n, err := rdb.ZCard(ctx, all).Result(); err != nil || n != 0 {
		t.Errorf("%s holds %d entries (%v): the deleted approval's is not pruned", all, n, err)
	}
}
