//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// The path a newcomer takes: a worker that is not root, in best-effort
// isolation. These tests run as any user (CI runs them again as nobody),
// with the real binaries and a real Redis.

// setupBestEffort starts a worker in best-effort isolation, root or not.
func setupBestEffort(t *testing.T, flags ...string) *bundle {
	t.Helper()
	b := newBundle(t)
	b.worker = b.startWorker(append([]string{"-isolation", "best-effort",
		"-uid-lock-dir", filepath.Join(t.TempDir(), "uids"), "-store", filepath.Join(t.TempDir(), "store")}, flags...)...)
	return b
}

func TestBestEffortRunAndApprove(t *testing.T) {
	t.Parallel()
	b := setupBestEffort(t)
	rec := b.run(`{"version": 1, "files": {"in/x.txt": "hello\n"}, "steps": [{"run": ["sh", "-c", "cat in/x.txt; id -u"]}]}`)
	if rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK || !strings.HasPrefix(stepOf(t, rec, 0).Stdout, "hello\n") {
		t.Fatalf("want completed:\n%s", mustJSON(t, rec))
	}
	if os.Geteuid() != 0 && !strings.HasPrefix(rec.Isolation.User, "off: worker is not root") {
		t.Errorf("isolation.user %q does not say the worker is not root", rec.Isolation.User)
	}
	// A failed step: a top-level error names it.
	rec = b.run(`{"version": 1, "steps": [{"name": "boom", "run": ["sh", "-c", "exit 3"]}]}`)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictExit || rec.Error != "step boom: exit (exit code 3)" {
		t.Errorf("want failed with the step's error:\n%s", mustJSON(t, rec))
	}
	rec = b.run(`{"version": 1, "steps": [{"name": "nope", "run": ["no-such-program"]}]}`)
	if rec.Verdict != record.VerdictExecError || !strings.Contains(rec.Error, "step nope: exec_error") {
		t.Errorf("want exec_error with a top-level error:\n%s", mustJSON(t, rec))
	}
	// Parked, accepted with the CLI, promoted.
	e, err := b.client.Enqueue(context.Background(), b.spec(reportSpec(`{"total": 42}`, "")))
	if err != nil {
		t.Fatal(err)
	}
	rec = b.wait(e.TaskID)
	if rec.State != record.StateParked {
		t.Fatalf("want parked:\n%s", mustJSON(t, rec))
	}
	if code, out, errOut := b.approveCLI("accept", rec.ApprovalID, "-by", "alice"); code != 0 {
		t.Fatalf("accept: exit %d %s %s", code, out, errOut)
	}
	if final := b.waitFinal(e.TaskID); final.State != record.StatePromoted || final.DecidedBy != "alice" {
		t.Fatalf("want promoted by alice:\n%s", mustJSON(t, final))
	}
	// enqueue -wait-id reads the record of a task already done.
	code, out, errOut := b.enqueueCLI("", "-queue", b.queue, "-wait-id", e.TaskID, "-json")
	var got record.Run
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.TaskID != e.TaskID || got.State != record.StateParked {
		t.Errorf("enqueue -wait-id: exit %d, %s %s", code, out, errOut)
	}
}

// TestBestEffortDevMode: the README's dev-mode flow, copied literally: the
// worker with -dev runs its demo, and enqueue and approve in another shell
// find its Redis with no -redis and no $REDIS_URL.
func TestBestEffortDevMode(t *testing.T) {
	t.Parallel()
	runtimeDir := t.TempDir()
	store := filepath.Join(t.TempDir(), "store")
	wsRoot := newBundle(t).root // a root slot uids can reach, when run as root
	env := append(withoutRedisURL(os.Environ()), "XDG_RUNTIME_DIR="+runtimeDir)
	cmd := exec.Command(bin.devWorker, "-dev", "-dev-addr", "127.0.0.1:0", "-workspace-root", wsRoot,
		"-uid-lock-dir", filepath.Join(t.TempDir(), "uids"), "-store", store, "-log-format", "console")
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	// The demo's record is printed on stdout, as one indented JSON object.
	recCh := make(chan record.Run, 1)
	go func() {
		var rec record.Run
		if json.NewDecoder(bufio.NewReader(stdout)).Decode(&rec) == nil {
			recCh <- rec
		}
	}()
	var demo record.Run
	select {
	case demo = <-recCh:
	case <-time.After(60 * time.Second):
		t.Fatalf("no demo record after 60s:\n%s", logs.String())
	}
	if demo.State != record.StateParked || demo.RunID != "csv-report" || demo.ApprovalID == "" ||
		len(demo.Inputs) != 1 || demo.Inputs[0].Status != 200 || demo.Inputs[0].Bytes == 0 {
		t.Fatalf("demo: want the csv-report run parked, its export fetched:\n%s", mustJSON(t, demo))
	}
	cli := func(path string, args ...string) (int, string, string) {
		c := exec.Command(path, args...)
		c.Env = env
		var o, e strings.Builder
		c.Stdout, c.Stderr = &o, &e
		err := c.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, o.String(), e.String()
	}
	if code, out, errOut := cli(bin.approve, "list"); code != 0 || !strings.Contains(out, demo.ApprovalID) {
		t.Fatalf("approve list (no -redis, no $REDIS_URL): exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := cli(bin.approve, "accept", demo.ApprovalID, "-by", "newcomer", "-comment", "ok"); code != 0 {
		t.Fatalf("approve accept: exit %d\n%s%s", code, out, errOut)
	}
	published := filepath.Join(store, "csv-report", demo.TaskID, "result.json")
	if !eventually(20*time.Second, func() bool { _, err := os.Stat(published); return err == nil }) {
		t.Errorf("the demo was not promoted to %s", published)
	}
	code, out, errOut := cli(bin.enqueu, "-wait", "-wait-timeout", "60s", "../examples/hello.json")
	var rec record.Run
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.Verdict != record.VerdictOK {
		t.Errorf("enqueue -wait examples/hello.json: exit %d\n%s%s", code, out, errOut)
	}
	// The promoted result, read back as a backend would.
	code, out, errOut = cli(bin.enqueu, "-result", demo.TaskID)
	var pub struct {
		Result struct {
			Rows       int     `json:"rows"`
			RefundRate float64 `json:"refund_rate"`
		} `json:"result"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &pub) != nil || pub.Result.Rows != 500 {
		t.Errorf("enqueue -result: exit %d\n%s%s", code, out, errOut)
	}
}

func withoutRedisURL(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "REDIS_URL=") {
			out = append(out, kv)
		}
	}
	return out
}
