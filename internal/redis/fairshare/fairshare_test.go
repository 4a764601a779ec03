package fairshare_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/asynqmsg"
	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// fixture is a queue of the shared Redis, its tasks enqueued as the
// client does: held in their principal's group, then admitted.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	c     *asynq.Client
	queue string
	n     int
	// twoSteps enqueues as an earlier client did (enqueue).
	twoSteps bool
}

func newFixture(t *testing.T, quotas map[string]policy.Quota) *fixture {
	rdb := redistest.Client(t)
	f := &fixture{t: t, ctx: context.Background(), rdb: rdb, c: asynq.NewClientFromRedisClient(rdb), queue: redistest.Queue(t)}
	t.Cleanup(func() { _ = f.c.Close() })
	if err := fairshare.PublishQuotas(f.ctx, rdb, "", []string{f.queue}, quotas, 0); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(f.ctx, asynqkey.Queues, f.queue).Err(); err != nil { // as the client does, once
		t.Fatal(err)
	}
	return f
}

// enqueue enqueues and admits a run of principal as the client does
// (Enqueue): its task id, and the admission's error. With f.twoSteps, as
// an enqueuer of an earlier version did: asynq's AddToGroup, then Admit.
func (f *fixture) enqueue(principal string, session bool) (string, error) {
	f.t.Helper()
	f.n++
	id := fmt.Sprintf("%s-%d", principal, f.n)
	if !f.twoSteps {
		msg := asynqmsg.Encode(asynqmsg.Message{Type: "run", ID: id, Queue: f.queue, Group: fairshare.Group(principal)})
		return id, fairshare.Enqueue(f.ctx, f.rdb, "", f.queue, principal, id, msg, session)
	}
	_, err := f.c.EnqueueContext(f.ctx, asynq.NewTask("run", nil), asynq.Queue(f.queue), asynq.TaskID(id), asynq.Group(fairshare.Group(principal)))
	if err != nil {
		f.t.Fatal(err)
	}
	return id, fairshare.Admit(f.ctx, f.rdb, "", f.queue, principal, id, session)
}

// pending lists the queue's pending tasks, oldest (next to run) first.
func (f *fixture) pending() []string {
	f.t.Helper()
	ids, err := f.rdb.LRange(f.ctx, asynqkey.Pending(f.queue), 0, -1).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Reverse(ids)
	return ids
}

// take moves the next pending task to active as a worker's dequeue does,
// and returns it.
func (f *fixture) take() string {
	f.t.Helper()
	id, err := f.rdb.RPopLPush(f.ctx, asynqkey.Pending(f.queue), asynqkey.Active(f.queue)).Result()
	if err != nil {
		f.t.Fatal(err)
	}
	f.setState(id, "active")
	return id
}

func (f *fixture) setState(id, state string) {
	f.t.Helper()
	if err := f.rdb.HSet(f.ctx, asynqkey.Task(f.queue, id), "state", state).Err(); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) release(principal, done string) int {
	f.t.Helper()
	var n int
	var err error
	if done == "" {
		n, err = fairshare.Release(f.ctx, f.rdb, "", f.queue, principal)
	} else {
		n, err = fairshare.Ended(f.ctx, f.rdb, "", f.queue, principal, done)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// TestBacklogWaitsInItsOwnLine: 20 runs of a, then one of b: b's is in
// the queue behind two of a's, not twenty; as a's runs start, a's next
// ones come in, in order. So too with runs enqueued as an earlier client
// did (asynq's AddToGroup, then Admit).
func TestBacklogWaitsInItsOwnLine(t *testing.T) {
	for _, twoSteps := range []bool{false, true} {
		t.Run(fmt.Sprintf("twoSteps=%v", twoSteps), func(t *testing.T) {
			f := newFixture(t, nil)
			f.twoSteps = twoSteps
			testBacklog(t, f)
		})
	}
}

func testBacklog(t *testing.T, f *fixture) {
	for range 20 {
		if _, err := f.enqueue("a", false); err != nil {
			t.Fatal(err)
		}
	}
	b, err := f.enqueue("b", false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.pending(), []string{"a-1", "a-2", b}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	if got := f.take(); got != "a-1" {
		t.Fatalf("took %s first", got)
	}
	if n := f.release("a", ""); n != 1 {
		t.Errorf("a's run started: %d released, want 1", n)
	}
	if got, want := f.pending(), []string{"a-2", b, "a-3"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	if st, _ := f.rdb.HGet(f.ctx, asynqkey.Task(f.queue, "a-3"), "state").Result(); st != "pending" {
		t.Errorf("released task's state %q", st)
	}
	held, _ := f.rdb.ZCard(f.ctx, asynqkey.Prefix(f.queue)+"g:"+fairshare.Group("a")).Result()
	if held != 17 {
		t.Errorf("a holds %d runs, want 17", held)
	}
	if ok, _ := f.rdb.SIsMember(f.ctx, asynqkey.Prefix(f.queue)+"groups", fairshare.Group("b")).Result(); ok {
		t.Error("b holds nothing, yet its group is listed")
	}
}

// TestMaxActive: under max_active 1, one run of a is released at a time,
// the next only once it ended for good; b is not bound by a's quota.
func TestMaxActive(t *testing.T) {
	f := newFixture(t, map[string]policy.Quota{"a": {MaxActive: 1}})
	for range 3 {
		if _, err := f.enqueue("a", false); err != nil {
			t.Fatal(err)
		}
	}
	f.enqueue("b", false)
	f.enqueue("b", false)
	if got, want := f.pending(), []string{"a-1", "b-4", "b-5"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
	id := f.take()
	if n := f.release("a", ""); n != 0 {
		t.Errorf("a's run started under max_active 1: %d released, want 0", n)
	}
	// A retry of the run still counts: it will run again.
	f.setState(id, "retry")
	if n := f.release("a", ""); n != 0 {
		t.Errorf("a's run waits for a retry: %d released, want 0", n)
	}
	f.setState(id, "active")
	if n := f.release("a", id); n != 1 {
		t.Errorf("a's run ended: %d released, want 1", n)
	}
	if got, want := f.pending(), []string{"b-4", "b-5", "a-2"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}

// TestStartedKeepsMaxActive: a run's start (Started, as every worker
// calls it) never lets a principal past its published max_active, and
// with none it lets the next run in.
func TestStartedKeepsMaxActive(t *testing.T) {
	f := newFixture(t, map[string]policy.Quota{"a": {MaxActive: 1}})
	for range 4 {
		if _, err := f.enqueue("a", false); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		if len(f.pending()) == 0 {
			break
		}
		id := f.take()
		if _, err := fairshare.Started(f.ctx, f.rdb, "", f.queue, "a", id); err != nil {
			t.Fatal(err)
		}
	}
	active, err := f.rdb.LLen(f.ctx, asynqkey.Active(f.queue)).Result()
	if err != nil || active != 1 {
		t.Errorf("a's runs active at once under max_active 1: %d, %v", active, err)
	}

	g := newFixture(t, nil)
	for range 3 {
		if _, err := g.enqueue("a", false); err != nil {
			t.Fatal(err)
		}
	}
	id := g.take()
	if n, err := fairshare.Started(g.ctx, g.rdb, "", g.queue, "a", id); err != nil || n != 1 {
		t.Errorf("a's run started, no max_active: %d released, %v; want 1", n, err)
	}
}

// TestRefusals: each admission quota refuses past its value, names itself,
// and leaves nothing of the refused run; another principal is not bound.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		quota   policy.Quota
		name    string
		session bool
		admits  int
	}{
		{policy.Quota{MaxQueued: 3}, policy.QuotaMaxQueued, false, 3},
		{policy.Quota{RunsPerMinute: 2}, policy.QuotaRunsPerMinute, false, 2},
		{policy.Quota{MaxSessions: 1}, policy.QuotaMaxSessions, true, 1},
	} {
		for _, twoSteps := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/twoSteps=%v", tc.name, twoSteps), func(t *testing.T) {
				f := newFixture(t, map[string]policy.Quota{"a": tc.quota, policy.AnyPrincipal: {MaxQueued: 100}})
				f.twoSteps = twoSteps
				for i := range tc.admits {
					if _, err := f.enqueue("a", tc.session); err != nil {
						t.Fatalf("admission %d: %v", i+1, err)
					}
				}
				id, err := f.enqueue("a", tc.session)
				var qe *fairshare.QuotaError
				if !errors.As(err, &qe) || !errors.Is(err, fairshare.ErrQuota) {
					t.Fatalf("admission past the quota: %v, want a *QuotaError", err)
				}
				if qe.Quota != tc.name || qe.Principal != "a" || qe.Queue != f.queue || qe.RetryAfter <= 0 || qe.RetryAfter > 2*time.Minute {
					t.Errorf("refusal %+v", qe)
				}
				if n, _ := f.rdb.Exists(f.ctx, asynqkey.Task(f.queue, id)).Result(); n != 0 {
					t.Error("the refused run's task is still in Redis")
				}
				if _, err := f.enqueue("b", tc.session); err != nil {
					t.Errorf("b (under \"*\"): %v", err)
				}
			})
		}
	}
}

// TestMaxSessionsCountsOpenOnes: a session that ended no longer counts.
func TestMaxSessionsCountsOpenOnes(t *testing.T) {
	f := newFixture(t, map[string]policy.Quota{policy.AnyPrincipal: {MaxSessions: 1}})
	id, err := f.enqueue("", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.enqueue("", true); !errors.Is(err, fairshare.ErrQuota) {
		t.Fatalf("second open session: %v", err)
	}
	f.setState(id, "completed")
	if _, err := f.enqueue("", true); err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
}

// TestSweepReleasesWhatACancelFreed: a released run deleted while it waits
// frees its principal's place at the next sweep.
func TestSweepReleasesWhatACancelFreed(t *testing.T) {
	f := newFixture(t, nil)
	for range 3 {
		f.enqueue("a", false)
	}
	insp := asynq.NewInspectorFromRedisClient(f.rdb)
	t.Cleanup(func() { _ = insp.Close() })
	if err := insp.DeleteTask(f.queue, "a-1"); err != nil {
		t.Fatal(err)
	}
	if err := fairshare.Sweep(f.ctx, f.rdb, "", f.queue); err != nil {
		t.Fatal(err)
	}
	if got, want := f.pending(), []string{"a-2", "a-3"}; !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}

// TestUnreadableQuota: a quota that is not JSON refuses, naming its key.
func TestUnreadableQuota(t *testing.T) {
	f := newFixture(t, nil)
	if err := f.rdb.HSet(f.ctx, fairshare.QuotasKey("", f.queue), "*", "{").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := f.enqueue("a", false)
	if err == nil || errors.Is(err, fairshare.ErrQuota) {
		t.Fatalf("admission under an unreadable quota: %v", err)
	}
	if _, err := fairshare.LoadQuota(f.ctx, f.rdb, "", f.queue, "a"); err == nil {
		t.Error("LoadQuota of an unreadable quota: no error")
	}
}

// TestLoadQuota: a principal's own quota, else "*"'s, else none.
func TestLoadQuota(t *testing.T) {
	f := newFixture(t, map[string]policy.Quota{"a": {MaxWaiters: 3}, policy.AnyPrincipal: {MaxWaiters: 1}})
	for p, want := range map[string]int64{"a": 3, "b": 1, "": 1} {
		q, err := fairshare.LoadQuota(f.ctx, f.rdb, "", f.queue, p)
		if err != nil || q.MaxWaiters != want {
			t.Errorf("LoadQuota(%q) = %+v, %v; want max_waiters %d", p, q, err, want)
		}
	}
	other := redistest.Queue(t)
	if q, err := fairshare.LoadQuota(f.ctx, f.rdb, "", other, "a"); err != nil || !q.IsZero() {
		t.Errorf("a queue without quotas: %+v, %v", q, err)
	}
}

// TestLineKeepsOrder: a principal's runs reach the queue in the order it
// sent them, within one second too (asynq scores a group by the second);
// a released run has no group left, so that a retry of it goes back to
// the queue, not to the line.
func TestLineKeepsOrder(t *testing.T) {
	f := newFixture(t, nil)
	var sent []string
	for range 12 {
		id, err := f.enqueue("a", false)
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, id)
	}
	var taken []string
	for range 12 {
		id := f.take()
		taken = append(taken, id)
		if g, _ := f.rdb.HGet(f.ctx, asynqkey.Task(f.queue, id), "group").Result(); g != "" {
			t.Errorf("released run %s keeps group %q", id, g)
		}
		if _, err := fairshare.Started(f.ctx, f.rdb, "", f.queue, "a", id); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(taken, sent) {
		t.Errorf("taken in the order %v, sent %v", taken, sent)
	}
	if n, _ := f.rdb.Exists(f.ctx, asynqkey.Prefix(f.queue)+"g:"+fairshare.Group("a")).Result(); n != 0 {
		t.Error("a's line is empty, yet its key stays")
	}
	if ok, _ := f.rdb.SIsMember(f.ctx, asynqkey.Prefix(f.queue)+"groups", fairshare.Group("a")).Result(); ok {
		t.Error("a holds nothing, yet its group is listed")
	}
}

// TestOnlyAdmittedRunsRelease: a run enqueued whose admission never came
// (its enqueuer crashed, or lost Redis) is never released by another
// run's admission, nor by a worker; the sweep withdraws it once it is
// Withdrawn old; admitting a run again checks nothing more and never
// deletes it.
func TestOnlyAdmittedRunsRelease(t *testing.T) {
	f := newFixture(t, map[string]policy.Quota{"a": {MaxQueued: 5}})
	_, err := f.c.EnqueueContext(f.ctx, asynq.NewTask("run", nil), asynq.Queue(f.queue), asynq.TaskID("lost"), asynq.Group(fairshare.Group("a")))
	if err != nil {
		t.Fatal(err)
	}
	id, err := f.enqueue("a", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.pending(); !slices.Equal(got, []string{id}) {
		t.Fatalf("pending %v, want only the admitted %s", got, id)
	}
	if err := fairshare.Admit(f.ctx, f.rdb, "", f.queue, "a", id, false); err != nil {
		t.Fatalf("admitting a released run again: %v", err)
	}
	if n, _ := f.rdb.Exists(f.ctx, asynqkey.Task(f.queue, id)).Result(); n != 1 {
		t.Fatal("admitting a released run again deleted it")
	}
	f.take()
	if n := f.release("a", ""); n != 0 {
		t.Errorf("the unadmitted run was released (%d)", n)
	}
	group := asynqkey.Prefix(f.queue) + "g:" + fairshare.Group("a")
	if err := fairshare.Sweep(f.ctx, f.rdb, "", f.queue); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.rdb.Exists(f.ctx, asynqkey.Task(f.queue, "lost")).Result(); n != 1 {
		t.Fatal("the sweep withdrew a run younger than Withdrawn")
	}
	old := float64(time.Now().Add(-fairshare.Withdrawn - time.Second).Unix())
	if err := f.rdb.ZAdd(f.ctx, group, redis.Z{Score: old, Member: "lost"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := fairshare.Sweep(f.ctx, f.rdb, "", f.queue); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.rdb.Exists(f.ctx, asynqkey.Task(f.queue, "lost"), group).Result(); n != 0 {
		t.Errorf("the sweep left %d of the unadmitted run and its line", n)
	}
	if got := f.pending(); len(got) != 0 {
		t.Errorf("pending %v after the sweep", got)
	}
}

// TestQuotaOfWrongTypeRefuses: a quota field that is not a whole number
// of at least 0 fails the admission (closed), in the scripts as in
// LoadQuota; so does null.
func TestQuotaOfWrongTypeRefuses(t *testing.T) {
	for _, raw := range []string{`{"max_queued": true}`, `{"max_queued": -5}`, `{"max_active": 1.5}`, `{"max_queued": 1e999}`, `[]`, `null`, `{"max_waiters": "x"}`, `{"max_waiters": null}`, `{"max_qeued": 1}`} {
		f := newFixture(t, nil)
		if err := f.rdb.HSet(f.ctx, fairshare.QuotasKey("", f.queue), "*", raw).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := f.enqueue("a", false); err == nil || errors.Is(err, fairshare.ErrQuota) {
			t.Errorf("%s: admission %v, want an error", raw, err)
		}
		if _, err := fairshare.LoadQuota(f.ctx, f.rdb, "", f.queue, "a"); err == nil {
			t.Errorf("%s: LoadQuota read it", raw)
		}
	}
}

// TestSweepGoesOnPastABadQuota: one principal's unreadable quota fails its
// own release, not the sweep of the others' lines.
func TestSweepGoesOnPastABadQuota(t *testing.T) {
	f := newFixture(t, nil)
	for _, p := range []string{"a", "b"} {
		if _, err := f.c.EnqueueContext(f.ctx, asynq.NewTask("run", nil), asynq.Queue(f.queue), asynq.TaskID("lost-"+p), asynq.Group(fairshare.Group(p))); err != nil {
			t.Fatal(err)
		}
		old := float64(time.Now().Add(-fairshare.Withdrawn - time.Second).Unix())
		f.rdb.ZAdd(f.ctx, asynqkey.Prefix(f.queue)+"g:"+fairshare.Group(p), redis.Z{Score: old, Member: "lost-" + p})
	}
	if err := f.rdb.HSet(f.ctx, fairshare.QuotasKey("", f.queue), "a", "{").Err(); err != nil {
		t.Fatal(err)
	}
	if err := fairshare.Sweep(f.ctx, f.rdb, "", f.queue); err == nil {
		t.Error("a's unreadable quota: the sweep says nothing")
	}
	for _, p := range []string{"a", "b"} {
		if n, _ := f.rdb.Exists(f.ctx, asynqkey.Task(f.queue, "lost-"+p)).Result(); n != 0 {
			t.Errorf("%s's run never admitted is still there", p)
		}
	}
}

// TestWindowFromTheWorkers: a queue whose workers published 4 slots lets 4
// runs of a principal wait in the queue, so that every slot finds one.
func TestWindowFromTheWorkers(t *testing.T) {
	f := newFixture(t, nil)
	if err := fairshare.PublishQuotas(f.ctx, f.rdb, "", []string{f.queue}, nil, 4); err != nil {
		t.Fatal(err)
	}
	for range 6 {
		if _, err := f.enqueue("a", false); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.pending(); len(got) != 4 {
		t.Errorf("pending %v, want 4 of a's runs", got)
	}
}
