//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/hibiken/asynq"
)

func TestEnqueueCLI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", 2<<20)
	cases := []struct {
		name, spec, wantErr string
		wantCode            int
	}{
		{"unknown field", `{"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}`, "steps[0].tiemout: unknown field", 2},
		{"dotdot path", `{"version": 1, "files": {"../x": "y"}, "steps": [{"run": ["true"]}]}`, `files["../x"]`, 2},
		{"absolute path", `{"version": 1, "output": {"result": "/etc/passwd"}, "steps": [{"run": ["true"]}]}`, "output.result", 2},
		{"oversized", `{"version": 1, "files": {"big": "` + big + `"}, "steps": [{"run": ["true"]}]}`, "payload", 2},
		{"above max", `{"version": 1, "steps": [{"run": ["true"]}], "limits": {"processes": 100000}}`, "limits.processes", 2},
		{"network not allowed", `{"version": 1, "network": true, "steps": [{"run": ["true"]}]}`, "network", 2},
	}
	for _, c := range cases {
		code, _, stderr := b.enqueueCLI(c.spec, "-queue", b.queue, "-")
		if code != c.wantCode || !strings.Contains(stderr, c.wantErr) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d naming %q", c.name, code, stderr, c.wantCode, c.wantErr)
		}
	}
	// -wait prints the record as one JSON object and exits 0 whatever the verdict.
	code, stdout, stderr := b.enqueueCLI(`{"version": 1, "steps": [{"run": ["sh", "-c", "exit 7"]}]}`, "-queue", b.queue, "-wait", "-")
	var rec record.Run
	if err := json.Unmarshal([]byte(stdout), &rec); err != nil || code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q: %v", code, stdout, stderr, err)
	}
	if rec.Verdict != record.VerdictExit || *rec.Steps[0].ExitCode != 7 {
		t.Fatalf("record: %s", mustJSON(t, rec))
	}
}

func TestGracefulShutdownHandsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	marker := "3600." + numMarker()
	e, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "steps": [{"run": ["sh", "-c", "sleep `+marker+`"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool { return len(procsMatching("sleep "+marker)) > 0 }) {
		t.Fatal("step never started")
	}
	_ = b.worker.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.worker.done:
	case <-time.After(15 * time.Second):
		t.Fatal("worker did not stop within 15s of SIGTERM")
	}
	if left := procsMatching("sleep " + marker); len(left) > 0 {
		t.Fatalf("step survived shutdown: %v", left)
	}
	insp := asynq.NewInspectorFromRedisClient(redistest.Client(t))
	info, err := insp.GetTaskInfo(b.queue, e.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != asynq.TaskStatePending || info.Retried != 0 {
		t.Fatalf("want the task handed back pending with no retry counted, got %v retried=%d", info.State, info.Retried)
	}
	ents, _ := os.ReadDir(b.root)
	for _, e := range ents {
		if e.Name() != ".lock" {
			t.Errorf("workspace root not clean after shutdown: %s", e.Name())
		}
	}
}

// TestCrashRecovery kills the worker mid-task: its steps die with it, and
// a new worker sweeps the old workspace and re-runs the task once asynq's
// lease has expired (about a minute: 30s lease, 30s clock-skew margin,
// recovery every minute).
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits about a minute for asynq's lease to expire")
	}
	b := setup(t)
	marker := "5." + numMarker()
	e, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "max_retry": 2,
		"steps": [{"run": ["sh", "-c", "touch left-`+marker+`; sleep `+marker+`; echo finished"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	leftBehind := filepath.Join(b.root, "slot-*", "ws", "left-"+marker)
	// The step's file, not its command line (sh's holds "sleep" before it
	// ran touch), says the step is under way.
	if !eventually(10*time.Second, func() bool { left, _ := filepath.Glob(leftBehind); return len(left) > 0 }) {
		t.Fatal("step never started")
	}
	_ = b.worker.cmd.Process.Kill()
	<-b.worker.done
	if !eventually(5*time.Second, func() bool { return len(procsMatching("sleep "+marker)) == 0 }) {
		t.Fatalf("the step outlived its SIGKILLed worker: %v", procsMatching("sleep "+marker))
	}
	left, _ := filepath.Glob(leftBehind)
	if len(left) == 0 {
		t.Fatal("expected the killed worker to leave its workspace behind (test premise)")
	}
	b.worker = b.startWorker()
	if left, _ := filepath.Glob(leftBehind); len(left) != 0 {
		// The task may already be re-running in a fresh workspace of the same
		// name only after the lease expired, which takes far longer than a start.
		t.Fatalf("the new worker did not sweep the old workspace: %v", left)
	}
	rec := b.wait(e.TaskID)
	if rec.State != record.StateCompleted || rec.Attempt != 2 || stepOf(t, rec, 0).Stdout != "finished\n" {
		t.Fatalf("want the task re-run to completion as attempt 2:\n%s", mustJSON(t, rec))
	}
}
