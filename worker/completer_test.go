//go:build linux

package worker

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
)

// TestStoreRecordWhereAsynqReadsIt: the record the worker stores itself,
// in the round trip of the run's event, is the result asynq's Inspector
// reads back (taskKey follows asynq's layout), and the event follows it.
func TestStoreRecordWhereAsynqReadsIt(t *testing.T) {
	w, _ := phaseWorker(t, "")
	ctx := context.Background()
	q := "t-store-" + time.Now().Format("150405.000000")
	cl := asynq.NewClientFromRedisClient(w.cfg.Redis)
	insp := asynq.NewInspectorFromRedisClient(w.cfg.Redis)
	t.Cleanup(func() { _ = insp.DeleteQueue(q, true) })
	info, err := cl.Enqueue(asynq.NewTask("x", nil), asynq.Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	from, err := w.completer.events.Last(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec := []byte(`{"task_id":"` + info.ID + `","state":"completed"}`)
	ev := events.Event{RunID: "r-store", TaskID: info.ID, State: record.StateCompleted, Verdict: record.VerdictOK}
	if evErr, err := w.completer.store(ctx, q, info.ID, rec, nil, &ev, nil); err != nil || evErr != nil {
		t.Fatalf("store: %v, event: %v", err, evErr)
	}
	got, err := insp.GetTaskInfo(q, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Result) != string(rec) {
		t.Errorf("asynq reads result %q, want %q", got.Result, rec)
	}
	var seen []string
	fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = w.completer.events.Follow(fctx, from, 100*time.Millisecond, func() (bool, error) { return true, nil }, func(e events.Event) (bool, error) {
		seen = append(seen, e.TaskID+" "+string(e.State))
		return false, nil
	})
	if len(seen) != 1 || seen[0] != info.ID+" completed" {
		t.Errorf("events %q, want the run's completed event once", seen)
	}
}
