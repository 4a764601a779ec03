//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// napSpec is a run whose one step, nap, sleeps for 30s (marker makes its
// command line unique), with retries left.
func napSpec(marker string) string {
	return `{"version": 1, "max_retry": 3, "steps": [{"name": "nap", "run": ["sh", "-c", "sleep ` + marker + `"]}]}`
}

// started waits for the step whose command line holds "sleep marker".
func started(t *testing.T, marker string) {
	t.Helper()
	if !eventually(20*time.Second, func() bool { return len(procsMatching("sleep "+marker)) > 0 }) {
		t.Fatal("the step never started")
	}
}

// stillCanceled checks, a few seconds on, that the run was not run again:
// its record still says canceled, attempt 1, and asynq keeps its task
// archived.
func (b *bundle) stillCanceled(taskID string) {
	b.t.Helper()
	time.Sleep(4 * time.Second)
	rec, err := b.client.Status(context.Background(), b.queue, taskID)
	if err != nil || rec.State != record.StateCanceled || rec.Attempt != 1 {
		b.t.Fatalf("a few seconds after the cancel: %v\n%s\nworker logs:\n%s", err, mustJSON(b.t, rec), b.worker.logs.String())
	}
	info, err := asynq.NewInspectorFromRedisClient(redistest.Client(b.t)).GetTaskInfo(b.queue, taskID)
	if err != nil || info.State != asynq.TaskStateArchived {
		b.t.Fatalf("task after the cancel: %+v, %v; want archived", info, err)
	}
	if n := strings.Count(b.worker.logs.String(), `"task_id":"`+taskID+`","attempt":2`); n != 0 {
		b.t.Fatalf("the canceled run was run again:\n%s", b.worker.logs.String())
	}
}

// TestCancelPending cancels, with enqueue -cancel, a run waiting behind a
// busy worker (-concurrency 1): it ends canceled before it started, and
// the worker never runs it, even once free.
func TestCancelPending(t *testing.T) {
	t.Parallel()
	b := setup(t, "-concurrency", "1")
	ctx := context.Background()
	marker := "30." + numMarker()
	busy, err := b.client.Enqueue(ctx, b.spec(napSpec(marker)))
	if err != nil {
		t.Fatal(err)
	}
	started(t, marker)
	waiting, err := b.client.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["true"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := b.enqueueCLI("", "-principal", "ops", "-cancel", waiting.TaskID)
	var rec record.Run
	if err := json.Unmarshal([]byte(stdout), &rec); err != nil || code != 0 {
		t.Fatalf("enqueue -cancel: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if rec.State != record.StateCanceled || rec.Verdict != record.VerdictCanceled || rec.Attempt != 1 ||
		rec.Error != "canceled by ops before it started" || len(rec.Steps) != 0 || rec.Queue != b.queue {
		t.Fatalf("canceled record:\n%s", mustJSON(t, rec))
	}
	// Free the worker: cancel the busy run too, then make sure it never
	// takes the canceled one.
	if r, err := b.client.Cancel(ctx, b.queue, busy.TaskID); err != nil || r.State != record.StateCanceled {
		t.Fatalf("cancel of the busy run: %v\n%s", err, mustJSON(t, r))
	}
	b.stillCanceled(waiting.TaskID)
	if strings.Contains(b.worker.logs.String(), waiting.TaskID) {
		t.Fatalf("the worker took the canceled run:\n%s", b.worker.logs.String())
	}
	// Again: the same record (idempotent), exit 0.
	if code, stdout, _ := b.enqueueCLI("", "-queue", b.queue, "-cancel", waiting.TaskID); code != 0 || !strings.Contains(stdout, `"error":"canceled by ops before it started"`) {
		t.Errorf("second enqueue -cancel: exit %d, %s", code, stdout)
	}
}

// TestCancelRunning cancels a running run with Client.Cancel: its step's
// process tree is killed, the record (canceled, attempt 1, the step that
// ran) comes back within a couple of seconds, and the run is not retried.
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	marker := "30." + numMarker()
	e, err := b.client.Enqueue(ctx, b.spec(napSpec(marker)))
	if err != nil {
		t.Fatal(err)
	}
	started(t, marker)
	start := time.Now()
	rec, err := b.client.Cancel(ctx, "", e.TaskID)
	if err != nil {
		t.Fatalf("cancel: %v\nworker logs:\n%s", err, b.worker.logs.String())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the cancel took %s", d)
	}
	if rec.State != record.StateCanceled || rec.Verdict != record.VerdictCanceled || rec.Attempt != 1 ||
		rec.Error != "canceled while running (step nap)" || len(rec.Steps) != 1 || rec.Steps[0].Verdict != record.VerdictCanceled {
		t.Fatalf("record:\n%s", mustJSON(t, rec))
	}
	if left := procsMatching("sleep " + marker); len(left) > 0 {
		t.Fatalf("the step outlived the cancel: %v", left)
	}
	b.stillCanceled(e.TaskID)
	// A second cancel answers the same record.
	if again, err := b.client.Cancel(ctx, b.queue, e.TaskID); err != nil || again.Error != rec.Error {
		t.Errorf("second cancel: %v, %+v", err, again)
	}
}

// TestCancelAsynqCancelProcessing cancels a running run as asynqmon does,
// with asynq's own Inspector.CancelProcessing: the worker tells it from a
// shutdown, and the run ends canceled, attempt 1, never retried.
func TestCancelAsynqCancelProcessing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	marker := "30." + numMarker()
	e, err := b.client.Enqueue(context.Background(), b.spec(napSpec(marker)))
	if err != nil {
		t.Fatal(err)
	}
	started(t, marker)
	if err := asynq.NewInspectorFromRedisClient(redistest.Client(t)).CancelProcessing(e.TaskID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rec, err := b.client.Wait(ctx, b.queue, e.TaskID)
	if err != nil {
		t.Fatalf("wait: %v\nworker logs:\n%s", err, b.worker.logs.String())
	}
	if rec.State != record.StateCanceled || rec.Verdict != record.VerdictCanceled || rec.Attempt != 1 ||
		!strings.HasPrefix(rec.Error, "canceled by asynq's cancel") || !strings.HasSuffix(rec.Error, "while running (step nap)") {
		t.Fatalf("record:\n%s", mustJSON(t, rec))
	}
	if left := procsMatching("sleep " + marker); len(left) > 0 {
		t.Fatalf("the step outlived the cancel: %v", left)
	}
	b.stillCanceled(e.TaskID)
}
