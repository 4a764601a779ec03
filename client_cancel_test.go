package airlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/cancelrun"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestCancelWaiting cancels a pending task and a scheduled one: each is
// archived with a canceled record that Status, Wait (woken by the event)
// and a second Cancel all give, and no worker runs it.
func TestCancelWaiting(t *testing.T) {
	t.Parallel()
	prefix, q := approvetest.Prefix(t)
	c := newClient(t, airlock.ClientOptions{Prefix: prefix, Principal: "agent-7"})
	ctx := context.Background()
	enq, err := c.Enqueue(ctx, newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *record.Run, 1)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	go func() {
		r, err := c.Wait(wctx, q, enq.TaskID)
		if err != nil {
			t.Error(err)
		}
		waited <- r
	}()
	time.Sleep(100 * time.Millisecond) // Wait is following the events
	start := time.Now()
	rec, err := c.Cancel(ctx, "", enq.TaskID) // located
	if err != nil {
		t.Fatal(err)
	}
	want := record.Run{TaskID: enq.TaskID, RunID: enq.RunID, Queue: q, Principal: "agent-7", State: record.StateCanceled,
		Verdict: record.VerdictCanceled, Error: "canceled by agent-7 before it started", Attempt: 1, MaxRetry: 3, Steps: []record.Step{}}
	ignoreTimes := func(r record.Run) record.Run { r.StartedAt, r.FinishedAt = time.Time{}, time.Time{}; return r }
	if diff := cmp.Diff(want, ignoreTimes(*rec)); diff != "" || rec.FinishedAt.IsZero() {
		t.Errorf("canceled record (-want +got):\n%s", diff)
	}
	select {
	case r := <-waited:
		if r == nil || r.State != record.StateCanceled || time.Since(start) > 900*time.Millisecond {
			t.Errorf("Wait gave %+v after %s, want the canceled record at once (the event)", r, time.Since(start))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
	}
	info, err := inspector(t).GetTaskInfo(q, enq.TaskID)
	if err != nil || info.State != asynq.TaskStateArchived {
		t.Fatalf("task after the cancel: %+v, %v; want archived", info, err)
	}
	for _, get := range []func() (*record.Run, error){
		func() (*record.Run, error) { return c.Status(ctx, q, enq.TaskID) },
		func() (*record.Run, error) { return c.Cancel(ctx, q, enq.TaskID) }, // idempotent
	} {
		r, err := get()
		if err != nil || !cmp.Equal(*r, *rec) {
			t.Errorf("after the cancel: %+v, %v; want the canceled record", r, err)
		}
	}

	// A task scheduled for later (raw asynq), in its second attempt:
	// canceled too, as attempt 2, naming no one for a client without a
	// principal.
	ac := asynq.NewClientFromRedisClient(redistest.Client(t))
	info, err = ac.Enqueue(asynq.NewTask(tasks.TypeRun, []byte(`{"version": 1, "run_id": "r-sched", "principal": "bob", "steps": [{"run": ["true"]}]}`)),
		asynq.Queue(q), asynq.ProcessIn(time.Hour), asynq.MaxRetry(5), asynq.Retention(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	anon := newClient(t, airlock.ClientOptions{Prefix: prefix})
	rec, err = anon.Cancel(ctx, q, info.ID)
	if err != nil || rec.State != record.StateCanceled || rec.Error != "canceled before it started" || rec.RunID != "r-sched" ||
		rec.Principal != "bob" || rec.Attempt != 1 || rec.MaxRetry != 5 {
		t.Errorf("cancel of a scheduled task: %+v, %v", rec, err)
	}
	if now, err := inspector(t).GetTaskInfo(q, info.ID); err != nil || now.State != asynq.TaskStateArchived {
		t.Errorf("scheduled task after the cancel: %+v, %v", now, err)
	}

	for _, queue := range []string{q, ""} {
		if _, err := c.Cancel(ctx, queue, "no-such-task-"+q); !errors.Is(err, airlock.ErrNotFound) {
			t.Errorf("Cancel of an unknown task in %q: %v, want ErrNotFound", queue, err)
		}
	}
}

// TestCancelFinal checks that a finished run is not canceled: a
// *FinalError (ErrFinal) with its record, the record unchanged.
func TestCancelFinal(t *testing.T) {
	t.Parallel()
	enq, done := enqueueAndWait(t, handler(record.StateCompleted, record.VerdictOK, nil))
	c := newClient(t, airlock.ClientOptions{})
	rec, err := c.Cancel(context.Background(), enq.Queue, enq.TaskID)
	var fe *airlock.FinalError
	if !errors.Is(err, airlock.ErrFinal) || !errors.As(err, &fe) || fe.Record.State != record.StateCompleted || rec == nil || rec.Worker != "fake" {
		t.Fatalf("Cancel of a completed run: %+v, %v", rec, err)
	}
	if err.Error() != "airlock: task "+enq.TaskID+" is already completed: nothing to cancel" {
		t.Errorf("error %q", err)
	}
	if now, _ := c.Status(context.Background(), enq.Queue, enq.TaskID); now.State != done.State {
		t.Errorf("after the refused cancel: %+v", now)
	}
}

// TestCancelRunning cancels a task a handler runs: Cancel sets the mark
// naming its principal, asynq's cancel reaches the handler, and Cancel
// returns the canceled record the handler stores (as the worker does),
// woken by its event.
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	prefix, q := approvetest.Prefix(t)
	rdb := redistest.Client(t)
	stream := events.NewStream(rdb, prefix)
	started := make(chan struct{}, 1)
	redistest.Serve(t, q, func(ctx context.Context, task *asynq.Task) error {
		id := task.ResultWriter().TaskID()
		by, marked, err := cancelrun.Get(context.WithoutCancel(ctx), rdb, prefix, q, id)
		if err != nil || marked {
			return errors.Join(err, asynq.SkipRetry) // a retry after the cancel: not run
		}
		started <- struct{}{}
		<-ctx.Done()
		ctx = context.WithoutCancel(ctx)
		if by, marked, err = cancelrun.Get(ctx, rdb, prefix, q, id); err != nil || !marked {
			return errors.Join(err, errors.New("canceled without a mark"))
		}
		rec := fakeRecord(task, record.StateCanceled, record.VerdictCanceled, 1)
		rec.Error = cancelrun.Message(by, "while running")
		b, _ := json.Marshal(rec)
		if err := rdb.HSet(ctx, "asynq:{"+q+"}:t:"+id, "result", b).Err(); err != nil {
			return err
		}
		return stream.Append(ctx, events.Event{RunID: rec.RunID, TaskID: id, State: rec.State, Verdict: rec.Verdict, Error: rec.Error})
	})
	c := newClient(t, airlock.ClientOptions{Prefix: prefix, Principal: "agent-7"})
	ctx := context.Background()
	enq, err := c.Enqueue(ctx, newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never started")
	}
	start := time.Now()
	rec, err := c.Cancel(ctx, q, enq.TaskID)
	if err != nil || rec.State != record.StateCanceled || rec.Error != "canceled by agent-7 while running" || rec.Attempt != 1 {
		t.Fatalf("Cancel of a running task: %+v, %v", rec, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Cancel took %s", d)
	}
}

// TestCancelEndedAsRetried: asynq's processor, seeing a handler's end and
// a cancel at once, may put back for a retry a task whose run ended by
// itself (here: parked, its record stored, then a failure). Cancel then
// archives the task with that record, so that it never runs again (its
// retry would cancel a run whose output is parked), and says the run was
// over; a second Cancel says so too.
func TestCancelEndedAsRetried(t *testing.T) {
	t.Parallel()
	for _, state := range []record.State{record.StateParked, record.StateCanceled} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			endedAsRetried(t, state)
		})
	}
}

// endedAsRetried: Status and Wait give the record of a run that ended in
// state although asynq put its task back for a retry; Cancel archives the
// task of a parked one (its worker archives a canceled one's).
func endedAsRetried(t *testing.T, state record.State) {
	prefix, q := approvetest.Prefix(t)
	c := newClient(t, airlock.ClientOptions{Prefix: prefix})
	ctx := context.Background()
	rdb := redistest.Client(t)
	ran := make(chan struct{}, 10)
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		Queues: map[string]int{q: 1}, Concurrency: 1, TaskCheckInterval: 10 * time.Millisecond,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour },
		LogLevel:       asynq.FatalLevel,
	})
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		n, _ := asynq.GetRetryCount(ctx)
		rec := record.Run{TaskID: task.ResultWriter().TaskID(), Queue: q, State: state, Verdict: record.VerdictOK,
			Attempt: n + 1, MaxRetry: 3, Worker: "fake", ApprovalID: "ap-ended", Steps: []record.Step{}}
		b, _ := json.Marshal(rec)
		if _, err := task.ResultWriter().Write(b); err != nil {
			return err
		}
		ran <- struct{}{}
		return errors.New("the cancel won asynq's select")
	})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	enq, err := c.Enqueue(ctx, newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	<-ran
	insp := inspector(t)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		info, err := insp.GetTaskInfo(q, enq.TaskID)
		if err == nil && info.State == asynq.TaskStateRetry {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task did not reach retry: %+v, %v", info, err)
		}
	}
	if rec, err := c.Status(ctx, q, enq.TaskID); err != nil || rec.State != state {
		t.Errorf("Status of the run that ended %s: %+v, %v", state, rec, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if rec, err := c.Wait(wctx, q, enq.TaskID); err != nil || rec.State != state {
		t.Errorf("Wait of the run that ended %s: %+v, %v", state, rec, err)
	}
	if state == record.StateCanceled {
		return
	}
	for range 2 {
		rec, err := c.Cancel(ctx, q, enq.TaskID)
		if !errors.Is(err, airlock.ErrFinal) || rec == nil || rec.State != record.StateParked || rec.ApprovalID != "ap-ended" {
			t.Fatalf("Cancel of a run that had parked: %+v, %v; want its parked record and ErrFinal", rec, err)
		}
	}
	if info, err := insp.GetTaskInfo(q, enq.TaskID); err != nil || info.State != asynq.TaskStateArchived {
		t.Errorf("task after the cancel: %+v, %v; want archived, never run again", info, err)
	}
	if rec, err := c.Status(ctx, q, enq.TaskID); err != nil || rec.State != record.StateParked {
		t.Errorf("Status after the cancel: %+v, %v; want parked", rec, err)
	}
}
