package airlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestStatus checks Status before a worker runs the task (pending, with
// no record), once it is done (the stored record), and for an unknown id.
func TestStatus(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	ctx := context.Background()
	enq, err := c.Enqueue(ctx, newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.Status(ctx, q, enq.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != airlock.StatePending || rec.TaskID != enq.TaskID || rec.RunID != enq.RunID || rec.Queue != q || rec.Attempt != 1 || rec.MaxRetry != 3 {
		t.Errorf("Status of a pending task: %+v", rec)
	}
	if record.Final(rec.State) {
		t.Errorf("pending is final")
	}
	redistest.Serve(t, q, handler(record.StateCompleted, record.VerdictOK, nil))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := c.Wait(wctx, q, enq.TaskID); err != nil {
		t.Fatal(err)
	}
	rec, err = c.Status(ctx, q, enq.TaskID)
	if err != nil || rec.State != record.StateCompleted || rec.Worker != "fake" {
		t.Errorf("Status of a completed task: %+v, %v", rec, err)
	}
	if _, err := c.Status(ctx, q, "no-such-task"); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("Status of an unknown task: %v, want ErrNotFound", err)
	}
}

// TestLocate checks that Locate finds a task's queue, and says when no
// queue or several hold the id.
func TestLocate(t *testing.T) {
	t.Parallel()
	q1, q2 := redistest.Queue(t), redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	ctx := context.Background()
	enq, err := c.Enqueue(ctx, newSpec(q1))
	if err != nil {
		t.Fatal(err)
	}
	if q, err := c.Locate(ctx, enq.TaskID); err != nil || q != q1 {
		t.Errorf("Locate = %q, %v; want %s", q, err, q1)
	}
	if _, err := c.Locate(ctx, "no-such-task-"+q1); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("Locate of an unknown id: %v", err)
	}
	ac := asynq.NewClientFromRedisClient(redistest.Client(t))
	if _, err := ac.Enqueue(asynq.NewTask(tasks.TypeRun, []byte(`{}`)), asynq.Queue(q2), asynq.TaskID(enq.TaskID)); err != nil {
		t.Fatal(err)
	}
	two := []string{q1, q2}
	slices.Sort(two)
	want := "airlock: task " + enq.TaskID + " is in queues " + strings.Join(two, ", ") + ": say which"
	if _, err := c.Locate(ctx, enq.TaskID); err == nil || err.Error() != want {
		t.Errorf("Locate of an id in two queues: %v, want %s", err, want)
	}
	if _, err := c.Result(ctx, enq.TaskID); err == nil || err.Error() != want+" (ResultIn, enqueue -queue)" {
		t.Errorf("Result of an id in two queues: %v", err)
	}
	// A bound caller looks in its queues only.
	if q, err := c.LocateIn(ctx, enq.TaskID, []string{q2}); err != nil || q != q2 {
		t.Errorf("LocateIn(%s) = %q, %v", q2, q, err)
	}
	if _, err := c.LocateIn(ctx, enq.TaskID, nil); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("LocateIn no queue: %v", err)
	}
	// Past one round trip's batch: found wherever it is among them.
	many := make([]string, 600)
	for i := range many {
		many[i] = fmt.Sprintf("%s-none-%d", q1, i)
	}
	many[517] = q1
	if q, err := c.LocateIn(ctx, enq.TaskID, many); err != nil || q != q1 {
		t.Errorf("LocateIn among %d queues = %q, %v; want %s", len(many), q, err, q1)
	}
}

// TestStatusOfArchivedTask: a task archived without a record (its worker
// died, or none ran it) reads as failed, still saying who asked for it
// (principal, from its payload): whose run it is decides who may read it.
func TestStatusOfArchivedTask(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{Principal: "agent"})
	ctx := context.Background()
	enq, err := c.Enqueue(ctx, newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	if err := inspector(t).ArchiveTask(q, enq.TaskID); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() (*record.Run, error){
		"Status": func() (*record.Run, error) { return c.Status(ctx, q, enq.TaskID) },
		"Wait":   func() (*record.Run, error) { return c.Wait(ctx, q, enq.TaskID) },
	} {
		rec, err := read()
		if err != nil || rec.State != record.StateFailed || rec.Principal != "agent" || rec.RunID != enq.RunID {
			t.Errorf("%s of an archived task: %+v, %v; want failed, principal agent, run %s", name, rec, err, enq.RunID)
		}
	}
}
