package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// TestCancel checks -cancel: a pending run is canceled (exit 0, its
// record on stdout, naming -principal), found without -queue, again
// (idempotent); a finished run exits 3, an unknown task 1, a misuse 2.
func TestCancel(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	url := redistest.URL(t)
	got := enqueueCmd(t, validSpec, "", "-queue", q, "-principal", "ops")
	if got.Code != 0 {
		t.Fatalf("enqueue: %+v", got)
	}
	id := strings.TrimSpace(got.Stdout)
	for _, args := range [][]string{{"-queue", q}, {}} {
		got = runArgs(t, "", append([]string{"-redis", url, "-principal", "ops", "-cancel", id}, args...)...)
		var rec record.Run
		if err := json.Unmarshal([]byte(got.Stdout), &rec); err != nil || got.Code != 0 || got.Stderr != "" {
			t.Fatalf("-cancel %v: %+v (%v)", args, got, err)
		}
		if rec.TaskID != id || rec.Queue != q || rec.State != record.StateCanceled || rec.Verdict != record.VerdictCanceled ||
			rec.Attempt != 1 || rec.Principal != "ops" || rec.Error != "canceled by ops before it started" {
			t.Errorf("-cancel %v: record %+v", args, rec)
		}
	}
	info, err := asynq.NewInspectorFromRedisClient(redistest.Client(t)).GetTaskInfo(q, id)
	if err != nil || info.State != asynq.TaskStateArchived {
		t.Errorf("task after -cancel: %+v, %v; want archived", info, err)
	}

	done := redistest.Queue(t)
	fakeWorker(t, done, record.StateCompleted, record.VerdictOK, nil)
	got = enqueueCmd(t, validSpec, "", "-queue", done, "-wait", "-wait-timeout", "20s")
	var rec record.Run
	if err := json.Unmarshal([]byte(got.Stdout), &rec); err != nil || rec.State != record.StateCompleted {
		t.Fatalf("run: %+v", got)
	}
	got = runArgs(t, "", "-redis", url, "-queue", done, "-cancel", rec.TaskID)
	if got.Code != exitNotYet || got.Stdout != "" || got.Stderr != "enqueue: airlock: task "+rec.TaskID+" is already completed: nothing to cancel\n" {
		t.Errorf("-cancel of a completed run: %+v", got)
	}
	got = runArgs(t, "", "-redis", url, "-json", "-queue", done, "-cancel", rec.TaskID)
	var ej cli.ErrorJSON
	if err := json.Unmarshal([]byte(got.Stdout), &ej); err != nil || got.Code != exitNotYet || ej.Code != exitNotYet || !strings.Contains(ej.Error, "already completed") {
		t.Errorf("-json -cancel of a completed run: %+v", got)
	}

	got = runArgs(t, "", "-redis", url, "-queue", q, "-cancel", "no-such-task")
	if got.Code != exitError || !strings.Contains(got.Stderr, `task "no-such-task" not found in queue "`+q+`"`) {
		t.Errorf("-cancel of an unknown task: %+v", got)
	}
	for _, args := range [][]string{{"-cancel", id, "spec.json"}, {"-cancel", id, "-wait"}, {"-cancel", id, "-result", id}} {
		got = runArgs(t, "", append([]string{"-redis", url}, args...)...)
		if got.Code != exitRejected || !strings.Contains(got.Stderr, "-cancel takes no spec") {
			t.Errorf("%v: %+v", args, got)
		}
	}
}
