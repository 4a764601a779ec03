//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestScaleOut runs three real workers on one Redis, as three hosts would:
// each its own workspace root, uid range and uid lock directory, one
// shared store directory. Every task runs once, on one of them; an
// idempotency key enqueued from several goroutines at once makes one
// task; every promoted task has exactly one manifest and one promoted
// event, whichever worker promoted it; concurrent approvers of one
// approval have one winner. Then one worker is stopped (SIGTERM) while it
// runs long tasks: they are handed back, not counted as retries, and the
// other two complete them. Nothing is left behind.
func TestScaleOut(t *testing.T) {
	t.Parallel()
	needRoot(t)
	prefix, queue := approvetest.Prefix(t)
	store := t.TempDir()
	f := newFleet(t, fleetConfig{
		url: redistest.URL(t), queue: queue, prefix: prefix, store: store,
		policy: writePolicy(t, fleetPolicy), workers: 3, concurrency: 2, uidBase: 300000,
	})
	f.startAll(30 * time.Second)
	rdb := redistest.Client(t)
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	st := approve.NewStore(rdb, approve.Options{Prefix: prefix})
	ac := asynq.NewClientFromRedisClient(rdb)
	ctx := waitCtx(t, 5*time.Minute)

	// 200 tasks of the mix, enqueued by 4 goroutines, and 4 idempotency
	// keys enqueued by 8 goroutines each, at the same time.
	const n, keys, racers = 200, 4, 8
	ids := make([]string, n)
	kinds := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, n+keys*racers)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 4 {
				s, err := decodeSpec(fleetSpec(fleetKind(i), i, "0.05", fmt.Sprintf(`"run_id": "so-%d",`, i)), queue)
				if err == nil {
					var e airlock.Enqueued
					e, err = c.Enqueue(ctx, s)
					ids[i] = e.TaskID
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	ikResults := make([][]airlock.Enqueued, keys)
	var ikMu sync.Mutex
	start := make(chan struct{})
	for k := 0; k < keys; k++ {
		for r := 0; r < racers; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				s, err := decodeSpec(fleetSpec("complete", k, "0.05", fmt.Sprintf(`"idempotency_key": "so-ik-%d", "run_id": "so-ik-%d-%d",`, k, k, r)), queue)
				if err != nil {
					errs <- err
					return
				}
				e, err := c.Enqueue(ctx, s)
				if err != nil {
					errs <- err
					return
				}
				ikMu.Lock()
				ikResults[k] = append(ikResults[k], e)
				ikMu.Unlock()
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("enqueue: %v", err)
	}
	for i, id := range ids {
		kinds[id] = fleetKind(i)
	}
	var ikIDs []string
	for k, res := range ikResults {
		want := airlock.IdempotentTaskID(queue, fmt.Sprintf("so-ik-%d", k))
		fresh := 0
		for _, e := range res {
			if e.TaskID != want {
				t.Errorf("idempotency key so-ik-%d: task %s, want %s", k, e.TaskID, want)
			}
			if !e.Duplicate {
				fresh++
			}
		}
		if len(res) != racers || fresh != 1 {
			t.Errorf("idempotency key so-ik-%d from %d goroutines: %d results, %d not duplicates; want %d and 1", k, racers, len(res), fresh, racers)
		}
		ikIDs = append(ikIDs, want)
		kinds[want] = "complete"
	}

	// Parked runs are accepted by three approvers at once.
	var winsMu sync.Mutex
	wins := map[string]int{}
	approvers := sync.WaitGroup{}
	onParked := func(rec *record.Run) {
		for a := 0; a < 3; a++ {
			approvers.Add(1)
			go func() {
				defer approvers.Done()
				_, _, err := approve.Accept(ctx, st, ac, rec.ApprovalID, fmt.Sprintf("approver-%d", a), "scale-out")
				var de *approve.DecidedError
				switch {
				case err == nil:
					winsMu.Lock()
					wins[rec.ApprovalID]++
					winsMu.Unlock()
				case errors.As(err, &de) && de.State == approve.StateAccepted:
				default:
					t.Errorf("accept %s: %v", rec.ApprovalID, err)
				}
			}()
		}
	}
	all := append(append([]string{}, ids...), ikIDs...)
	recs, err := waitFinalAll(ctx, c, queue, all, onParked)
	approvers.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if err := waitSettled(ctx, asynq.NewInspectorFromRedisClient(rdb), queue); err != nil {
		t.Fatal(err)
	}

	want := map[string]record.State{"promote": record.StatePromoted, "park": record.StatePromoted, "fail": record.StateFailed, "complete": record.StateCompleted}
	for id, rec := range recs {
		if rec.State != want[kinds[id]] || rec.Attempt != 1 {
			t.Errorf("task %s (%s): state %s attempt %d, want %s attempt 1: %s", id, kinds[id], rec.State, rec.Attempt, want[kinds[id]], rec.Error)
		}
		if kinds[id] == "park" && (!strings.HasPrefix(rec.DecidedBy, "approver-") || wins[rec.ApprovalID] != 1) {
			t.Errorf("task %s: decided by %q, %d winning approvers; want one approver-N", id, rec.DecidedBy, wins[rec.ApprovalID])
		}
	}

	// Every task ran once, on one worker, at attempt 1.
	starts, ends := f.journal.count("task start"), f.journal.count("task end")
	perWorker := map[int]int{}
	for _, e := range f.journal.snapshot() {
		if e.msg == "task start" && e.attempt != 1 {
			t.Errorf("task %s started at attempt %d on worker %d", e.taskID, e.attempt, e.worker)
		}
		if e.msg == "task end" {
			perWorker[e.worker]++
		}
	}
	for _, id := range all {
		if starts[id] != 1 || ends[id] != 1 {
			t.Errorf("task %s (%s): %d task start and %d task end lines across the workers, want 1 each", id, kinds[id], starts[id], ends[id])
		}
	}
	for i := range f.members {
		if perWorker[i] == 0 {
			t.Errorf("worker %d ran no task (per worker: %v)", i, perWorker)
		}
	}
	t.Logf("%d tasks run by worker: %v", len(all), perWorker)

	// Exactly one publication per promoted task, whole; one promoted
	// event each.
	checkPublished(t, store, recs, rdb, prefix)

	// Shutdown of one worker hands its running tasks to the others.
	var long []string
	for j := 0; j < 6; j++ {
		s, err := decodeSpec(fleetSpec("promote", 900+j, "4", fmt.Sprintf(`"run_id": "so-long-%d",`, j)), queue)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Enqueue(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		long = append(long, e.TaskID)
	}
	victim := f.members[0]
	inc := victim.current()
	if !eventually(30*time.Second, func() bool { return len(f.inFlight(inc)) == f.cfg.concurrency }) {
		t.Fatalf("worker 0 did not take %d of the long tasks: in flight %v", f.cfg.concurrency, f.inFlight(inc))
	}
	running := f.inFlight(inc)
	stopAt := time.Now()
	victim.stop(20 * time.Second)
	t.Logf("worker 0 stopped with SIGTERM in %s while running %v", time.Since(stopAt).Round(time.Millisecond), running)
	handed := map[string]bool{}
	for _, e := range f.journal.snapshot() {
		if e.msg == "handed back" && e.worker == 0 && e.inc == inc.n {
			handed[e.taskID] = true
		}
	}
	for _, id := range running {
		if !handed[id] {
			t.Errorf("task %s was running on worker 0 at SIGTERM but was not handed back", id)
		}
	}
	longRecs, err := waitFinalAll(ctx, c, queue, long, nil)
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	starts = f.journal.count("task start")
	for _, id := range long {
		rec := longRecs[id]
		info, err := insp.GetTaskInfo(queue, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != record.StatePromoted || rec.Attempt != 1 || info.Retried != 0 {
			t.Errorf("long task %s: state %s attempt %d retried %d, want promoted at attempt 1, no retry", id, rec.State, rec.Attempt, info.Retried)
		}
		if handed[id] {
			if strings.Contains(rec.Worker, "/"+strconv.Itoa(inc.pid())+" ") || starts[id] != 2 {
				t.Errorf("handed-back task %s: finished by %q (worker 0 is pid %d), %d starts; want another worker, 2 starts", id, rec.Worker, inc.pid(), starts[id])
			}
		}
	}
	checkPublished(t, store, longRecs, rdb, prefix)

	f.stopAll(20 * time.Second)
	if left := f.leftovers(); len(left) > 0 {
		t.Errorf("left behind after the workers stopped:\n%s", strings.Join(left, "\n"))
	}
}

// decodeSpec decodes a spec and puts it on queue.
func decodeSpec(js, queue string) (*tasks.Spec, error) {
	s, err := tasks.Decode([]byte(js))
	if err != nil {
		return nil, fmt.Errorf("spec %s: %w", js, err)
	}
	s.Queue = queue
	return s, nil
}

// waitFinalAll polls the status of every task until each is final,
// calling onParked (when not nil) once for each run seen parked. On ctx's
// end it returns an error listing the tasks not final, by state.
func waitFinalAll(ctx context.Context, c *airlock.Client, queue string, ids []string, onParked func(*record.Run)) (map[string]*record.Run, error) {
	out := map[string]*record.Run{}
	seenParked := map[string]bool{}
	last := map[string]string{}
	for {
		for _, id := range ids {
			if _, done := out[id]; done {
				continue
			}
			rec, err := c.Status(ctx, queue, id)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				last[id] = "error: " + err.Error()
				continue
			}
			last[id] = string(rec.State)
			if record.Final(rec.State) {
				out[id] = rec
				continue
			}
			if rec.State == record.StateParked && onParked != nil && !seenParked[id] {
				seenParked[id] = true
				onParked(rec)
			}
		}
		if len(out) == len(ids) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			byState := map[string][]string{}
			for _, id := range ids {
				if _, done := out[id]; !done {
					byState[last[id]] = append(byState[last[id]], id)
				}
			}
			return out, fmt.Errorf("%d of %d tasks not final: %v", len(ids)-len(out), len(ids), byState)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitSettled waits until queue holds no task to run: none pending,
// active, scheduled, retrying or aggregating (promote tasks included).
func waitSettled(ctx context.Context, insp *asynq.Inspector, queue string) error {
	var info *asynq.QueueInfo
	var err error
	for {
		info, err = insp.GetQueueInfo(queue)
		if err == nil && info.Pending+info.Active+info.Scheduled+info.Retry+info.Aggregating == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return fmt.Errorf("queue %s not settled: pending %d active %d scheduled %d retry %d", queue, info.Pending, info.Active, info.Scheduled, info.Retry)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkPublished checks the store against the records: one whole
// publication per promoted task, none for the others; and the events
// stream: a promoted event for each promoted task (two are logged: see
// RELIABILITY.md), none for the others.
func checkPublished(t *testing.T, store string, recs map[string]*record.Run, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	pubs, _ := publications(t, store)
	promotedEvents := eventCounts(t, rdb, prefix, record.StatePromoted)
	for id, rec := range recs {
		want := 0
		if rec.State == record.StatePromoted {
			want = 1
		}
		if len(pubs[id]) != want {
			t.Errorf("task %s (%s): %d manifests, want %d", id, rec.State, len(pubs[id]), want)
		}
		switch got := promotedEvents[id]; {
		case want == 0 && got > 0, want == 1 && got == 0:
			t.Errorf("task %s (%s): %d promoted events, want %d", id, rec.State, got, want)
		case got > 1:
			// Not a second publication (the manifest is counted above):
			// the run's own event and a promote task's, when the sweeper
			// queued one for it while it promoted itself.
			t.Logf("task %s: %d promoted events for one publication", id, got)
		}
		for _, p := range pubs[id] {
			if p.manifest.ApprovalID != rec.ApprovalID || len(p.problems) > 0 {
				t.Errorf("task %s: publication %s: approval %s (record: %s), problems %v", id, p.dir, p.manifest.ApprovalID, rec.ApprovalID, p.problems)
			}
		}
	}
}

// eventCounts counts the events of state per task id in the prefix's
// events stream.
func eventCounts(t *testing.T, rdb redis.UniversalClient, prefix string, state record.State) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range readEvents(t, rdb, prefix) {
		if e.State == state {
			out[e.TaskID]++
		}
	}
	return out
}

// readEvents reads the whole events stream of prefix.
func readEvents(t *testing.T, rdb redis.UniversalClient, prefix string) []events.Event {
	t.Helper()
	ctx := context.Background()
	key := events.NewStream(rdb, prefix).Key()
	var out []events.Event
	from := "-"
	for {
		msgs, err := rdb.XRangeN(ctx, key, from, "+", 1000).Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", key, err)
		}
		for _, m := range msgs {
			e := events.Event{ID: m.ID}
			e.TaskID, _ = m.Values["task_id"].(string)
			e.RunID, _ = m.Values["run_id"].(string)
			e.ApprovalID, _ = m.Values["approval_id"].(string)
			s, _ := m.Values["state"].(string)
			e.State = record.State(s)
			out = append(out, e)
		}
		if len(msgs) < 1000 {
			return out
		}
		from = "(" + msgs[len(msgs)-1].ID
	}
}
