package approve_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
)

// TestAccept checks that Accept accepts and queues the promotion in the
// run's queue; that a second Accept is told who decided; and that an
// approval accepted without its promotion (a crash in between) gets it
// queued by the next Accept.
func TestAccept(t *testing.T) {
	t.Parallel()
	st, rdb, q := approvetest.Store(t, approve.Options{})
	ctx := context.Background()
	ac := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	park := func(id string) {
		t.Helper()
		_, _, err := st.Park(ctx, &approve.Approval{ID: id, TaskID: "task-" + id, RunID: "run", State: approve.StatePending,
			Reasons: []string{"r"}, Run: approve.RunSummary{Queue: q}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	park("ap-1")
	a, warn, err := approve.Accept(ctx, st, ac, "ap-1", "alice", "ok")
	if err != nil || warn != nil || a == nil || a.State != approve.StateAccepted || a.DecidedBy != "alice" {
		t.Fatalf("Accept = %+v, %v, %v", a, warn, err)
	}
	if _, err := insp.GetTaskInfo(q, approve.TaskID("ap-1")); err != nil {
		t.Errorf("no promote task in %s: %v", q, err)
	}
	a, _, err = approve.Accept(ctx, st, ac, "ap-1", "bob", "")
	var de *approve.DecidedError
	if a != nil || !errors.As(err, &de) || de.By != "alice" || !strings.HasSuffix(err.Error(), "; its promotion is queued") {
		t.Errorf("second Accept = %+v, %v; want decided by alice, promotion queued", a, err)
	}

	park("ap-2")
	if _, err := st.Accept(ctx, "ap-2", "carol", ""); err != nil { // accepted, no promotion queued
		t.Fatal(err)
	}
	if _, _, err := approve.Accept(ctx, st, ac, "ap-2", "dave", ""); !errors.Is(err, approve.ErrAlreadyDecided) {
		t.Errorf("Accept of an accepted approval: %v", err)
	}
	if _, err := insp.GetTaskInfo(q, approve.TaskID("ap-2")); err != nil {
		t.Errorf("the promotion of ap-2 was not queued: %v", err)
	}
	if _, _, err := approve.Accept(ctx, st, ac, "ap-none", "alice", ""); !errors.Is(err, approve.ErrNotFound) {
		t.Errorf("Accept of an unknown approval: %v", err)
	}
}
