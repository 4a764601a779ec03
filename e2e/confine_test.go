//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/google/go-cmp/cmp"
)

// checkClean asserts that nothing of the run's uid is left on the machine.
func checkClean(t *testing.T, rec *record.Run) {
	t.Helper()
	if rec.Isolation.UID == 0 {
		t.Fatalf("record has no uid: %s", mustJSON(t, rec.Isolation))
	}
	if !eventually(5*time.Second, func() bool { return len(procsOfUID(rec.Isolation.UID)) == 0 }) {
		t.Fatalf("processes of uid %d survived the run: %v", rec.Isolation.UID, procsOfUID(rec.Isolation.UID))
	}
}

func stepOf(t *testing.T, rec *record.Run, i int) record.Step {
	t.Helper()
	if len(rec.Steps) <= i {
		t.Fatalf("record has %d steps, want > %d:\n%s", len(rec.Steps), i, mustJSON(t, rec))
	}
	return rec.Steps[i]
}

func TestHappyPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "run_id": "happy",
		"files": {"in/x.txt": "hello\n", "go.sh": "id -u; cat in/x.txt; echo $HOME; echo done > out/r.txt"},
		"steps": [{"name": "s1", "run": ["sh", "go.sh"]}, {"name": "s2", "run": ["cat", "out/r.txt"], "stdin": "ignored"}]}`)
	if rec.State != record.StateCompleted || rec.Verdict != record.VerdictOK {
		t.Fatalf("want completed/ok:\n%s", mustJSON(t, rec))
	}
	lines := strings.Split(strings.TrimSpace(stepOf(t, rec, 0).Stdout), "\n")
	if lines[0] != fmt.Sprint(rec.Isolation.UID) || lines[0] == "0" {
		t.Errorf("step ran as uid %q, record says %d", lines[0], rec.Isolation.UID)
	}
	if lines[1] != "hello" || lines[2] != "/workspace" {
		t.Errorf("stdout %q", stepOf(t, rec, 0).Stdout)
	}
	if got := stepOf(t, rec, 1).Stdout; got != "done\n" {
		t.Errorf("step 2 stdout %q", got)
	}
	want := []record.File{{Path: "out/r.txt", Bytes: 5, Type: "file"}}
	if diff := cmp.Diff(want, rec.Files); diff != "" {
		t.Errorf("files (-want +got):\n%s", diff)
	}
	if rec.RunID != "happy" || rec.Attempt != 1 || rec.Workspace.InputBytes != int64(len("hello\n")+len("id -u; cat in/x.txt; echo $HOME; echo done > out/r.txt")) {
		t.Errorf("record: %s", mustJSON(t, rec))
	}
	checkClean(t, rec)
}

func TestForkBomb(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The step's first process starts the bomb, then execs sleep: it needs
	// no fork of its own to outlive the bomb and reach its deadline.
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "b(){ b & b & }; b; exec sleep 60"], "timeout": "2s"}],
		"limits": {"processes": 32}}`)
	st := stepOf(t, rec, 0)
	if rec.Verdict != record.VerdictTimeout || st.Verdict != record.VerdictTimeout {
		t.Fatalf("want timeout:\n%s", mustJSON(t, rec))
	}
	if !strings.Contains(strings.ToLower(st.Stderr), "fork") {
		t.Errorf("stderr does not show the process limit biting: %q", st.Stderr)
	}
	checkClean(t, rec)
	// The worker is still fine.
	if rec := b.run(`{"version": 1, "steps": [{"run": ["true"]}]}`); rec.Verdict != record.VerdictOK {
		t.Fatalf("follow-up task: %s", mustJSON(t, rec))
	}
}

func TestMemoryBomb(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["tail", "/dev/zero"]}], "limits": {"memory": "64MiB"}}`)
	st := stepOf(t, rec, 0)
	// The step's cgroup holds it at 64 MiB; the kernel kills it there.
	if st.Verdict != record.VerdictMemory || st.Signal != "SIGKILL" || st.OOMKills < 1 {
		t.Fatalf("want memory verdict (OOM kill):\n%s", mustJSON(t, rec))
	}
	if st.MemoryPeakBytes <= 32<<20 || st.MemoryPeakBytes > 64<<20 {
		t.Errorf("memory_peak_bytes %d, want near the 64MiB limit and not above", st.MemoryPeakBytes)
	}
	if !strings.HasPrefix(rec.Isolation.Memory, "cgroup v") {
		t.Errorf("isolation.memory %q, want a cgroup", rec.Isolation.Memory)
	}
	checkClean(t, rec)
}

// TestMemoryBombRlimitFallback: without a cgroup (-cgroup off, which only
// best-effort isolation accepts), RLIMIT_AS makes allocation fail; what
// the program does then is its own business, so the honest verdict is its
// exit, and the record says memory is the fallback's.
func TestMemoryBombRlimitFallback(t *testing.T) {
	t.Parallel()
	b := setup(t, "-cgroup", "off", "-isolation", "best-effort")
	rec := b.run(`{"version": 1, "steps": [{"run": ["tail", "/dev/zero"]}], "limits": {"memory": "64MiB"}}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictExit || st.ExitCode == nil || *st.ExitCode == 0 {
		t.Fatalf("want exit verdict:\n%s", mustJSON(t, rec))
	}
	if !strings.Contains(st.Stderr, "memory exhausted") {
		t.Errorf("stderr %q", st.Stderr)
	}
	if st.MaxRSSKB > 64<<10 || st.MemoryPeakBytes != 0 {
		t.Errorf("max_rss_kb %d above the 64MiB limit, or a cgroup peak %d without a cgroup", st.MaxRSSKB, st.MemoryPeakBytes)
	}
	if !strings.HasPrefix(rec.Isolation.Memory, "off: RLIMIT_AS") {
		t.Errorf("isolation.memory %q, want the rlimit fallback", rec.Isolation.Memory)
	}
	checkClean(t, rec)
}

func TestCPUSpin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "while :; do :; done"], "timeout": "30s"}],
		"limits": {"cpu_time": "1s"}}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictCPUTime || st.Signal != "SIGXCPU" {
		t.Fatalf("want cpu_time by SIGXCPU:\n%s", mustJSON(t, rec))
	}
	// The kernel sends SIGXCPU on its own CPU clock, checked at scheduler
	// ticks; rusage's user+system time is sampled apart from it, so on a
	// loaded machine the two differ by a tick or more.
	if st.CPUMS < 850 {
		t.Errorf("cpu_ms %v, want about 1000", st.CPUMS)
	}
	checkClean(t, rec)
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "timeout": "2s", "steps": [{"run": ["sleep", "3600"]}]}`)
	st := stepOf(t, rec, 0)
	if rec.Verdict != record.VerdictTimeout || st.Signal != "SIGTERM" {
		t.Fatalf("want timeout ended by SIGTERM:\n%s", mustJSON(t, rec))
	}
	if !strings.Contains(rec.Error, "task timeout") {
		t.Errorf("error %q does not say the task timed out", rec.Error)
	}
	if st.DurationMS < 1900 || st.DurationMS > 10000 {
		t.Errorf("duration_ms %v, want about 2000", st.DurationMS)
	}
	// A step that ignores SIGTERM is killed after the grace.
	rec = b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "trap '' TERM; while :; do sleep 1; done"], "timeout": "500ms"}]}`)
	if st := stepOf(t, rec, 0); st.Verdict != record.VerdictTimeout || st.Signal != "SIGKILL" {
		t.Fatalf("want timeout ended by SIGKILL:\n%s", mustJSON(t, rec))
	}
	checkClean(t, rec)
}

func TestEscapedProcessesDie(t *testing.T) {
	t.Parallel()
	b := setup(t)
	marker := "4000." + numMarker()
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c",
		"setsid sh -c 'sleep ` + marker + ` &' ; (sleep ` + marker + ` &) ; nohup sleep ` + marker + ` >/dev/null 2>&1 & exit 0"]}]}`)
	if rec.Verdict != record.VerdictOK {
		t.Fatalf("want ok:\n%s", mustJSON(t, rec))
	}
	if left := procsMatching("sleep " + marker); len(left) > 0 {
		t.Fatalf("processes the step left are still running: %v", left)
	}
	checkClean(t, rec)
}

func TestStdoutFlood(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 20 MB is past the default limits.output_total (16 MiB): this
	// spec raises it.
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "head -c 20000000 /dev/zero | tr '\\0' a; printf '\\377\\376' >&2"]}],
		"limits": {"output": "4KiB", "output_total": "32MiB"}}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictOK {
		t.Fatalf("want ok:\n%s", mustJSON(t, rec))
	}
	if len(st.Stdout) != 4096 || !st.StdoutTruncated || st.StdoutBytes != 20000000 {
		t.Errorf("stdout kept %d bytes, truncated=%v, counted %d", len(st.Stdout), st.StdoutTruncated, st.StdoutBytes)
	}
	if st.StderrEncoding != "base64" || st.Stderr != "//4=" || st.StderrTruncated {
		t.Errorf("binary stderr: %q encoding %q", st.Stderr, st.StderrEncoding)
	}
}

func TestWorkspaceQuota(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["dd", "if=/dev/zero", "of=big", "bs=1M", "count=64"]}],
		"limits": {"workspace": "4MiB", "file_size": "128MiB"}}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictWorkspaceQuota || !rec.Workspace.Full {
		t.Fatalf("want workspace_quota:\n%s", mustJSON(t, rec))
	}
	if rec.Workspace.UsedBytes > 4<<20 {
		t.Errorf("used %d bytes, above the 4MiB quota", rec.Workspace.UsedBytes)
	}
	// RLIMIT_FSIZE below the quota gives file_size.
	rec = b.run(`{"version": 1, "steps": [{"run": ["dd", "if=/dev/zero", "of=big", "bs=1M", "count=8"]}],
		"limits": {"workspace": "64MiB", "file_size": "1MiB"}}`)
	if st := stepOf(t, rec, 0); st.Verdict != record.VerdictFileSize || st.Signal != "SIGXFSZ" {
		t.Fatalf("want file_size:\n%s", mustJSON(t, rec))
	}
}

func TestNoNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("needs bash for /dev/tcp")
	}
	key := "airlock-escape-" + b.queue
	rec := b.run(`{"version": 1, "steps": [{"run": ["bash", "-c",
		"exec 3<>/dev/tcp/` + u.Hostname() + `/` + u.Port() + ` && printf 'SET ` + key + ` 1\\r\\n' >&3 && cat <&3"]}]}`)
	st := stepOf(t, rec, 0)
	if st.Verdict != record.VerdictExit {
		t.Fatalf("want the connection to fail:\n%s", mustJSON(t, rec))
	}
	n, err := redistest.Client(t).Exists(context.Background(), key).Result()
	if err != nil || n != 0 {
		t.Fatalf("the step reached Redis: exists=%d err=%v", n, err)
	}
	// Loopback itself works inside the namespace (its own, empty).
	rec = b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "cat /proc/net/dev | grep -c ':'"]}]}`)
	if got := strings.TrimSpace(stepOf(t, rec, 0).Stdout); got != "1" {
		t.Errorf("want only lo in the step's network namespace, /proc/net/dev lists %s interfaces", got)
	}
}

func TestWriteOutsideWorkspace(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := fmt.Sprintf("/tmp/airlock-escape-%s", b.queue)
	t.Cleanup(func() { os.Remove(target) })
	// /tmp is the workspace's tmp/; every other path of the view is read-only.
	rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c",
		"echo x > ` + target + ` && ls tmp; for p in /usr/x /etc/x /x /dev/x /proc/x; do echo x > $p 2>/dev/null && echo wrote $p; done; true"]}]}`)
	if st := stepOf(t, rec, 0); st.Verdict != record.VerdictOK || st.Stdout != "airlock-escape-"+b.queue+"\n" {
		t.Fatalf("want the /tmp write in the workspace and no other write:\n%s", mustJSON(t, rec))
	}
	if _, err := os.Stat(target); err == nil {
		t.Fatalf("%s was written on the host", target)
	}
}

func TestSymlinkInOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["ln", "-s", "/etc/passwd", "out/result.json"]}],
		"output": {"result": "out/result.json"}}`)
	want := []record.File{{Path: "out/result.json", Type: "symlink"}}
	if diff := cmp.Diff(want, rec.Files); diff != "" {
		t.Fatalf("files (-want +got):\n%s", diff)
	}
	if strings.Contains(mustJSON(t, rec), "root:x:0") {
		t.Fatal("the record contains the symlink's target")
	}
}

func TestKillMinusOneSpareOthers(t *testing.T) {
	t.Parallel()
	b := setup(t, "-concurrency", "2")
	ctx := context.Background()
	slow, err := b.client.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["sh", "-c", "sleep 2; echo survived"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	killer, err := b.client.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["sh", "-c", "sleep 0.5; kill -9 -1; echo killer-alive"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	rk, rs := b.wait(killer.TaskID), b.wait(slow.TaskID)
	if rs.Verdict != record.VerdictOK || stepOf(t, rs, 0).Stdout != "survived\n" {
		t.Fatalf("the other task was hurt:\n%s", mustJSON(t, rs))
	}
	if rk.Verdict != record.VerdictOK || rk.Isolation.UID == rs.Isolation.UID {
		t.Fatalf("killer: %s", mustJSON(t, rk))
	}
	if rec := b.run(`{"version": 1, "steps": [{"run": ["true"]}]}`); rec.Verdict != record.VerdictOK {
		t.Fatalf("worker hurt: %s", mustJSON(t, rec))
	}
}

func TestWorkerRechecksSpec(t *testing.T) {
	t.Parallel()
	b := setup(t, "-max-limits", "memory=128MiB")
	// A spec built by hand past the enqueuer's checks: the worker refuses it.
	rec := b.runRaw(`{"version": 1, "steps": [{"run": ["true"]}], "limits": {"memory": "1GiB"}}`)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, "limits.memory") {
		t.Fatalf("want a rejection naming limits.memory:\n%s", mustJSON(t, rec))
	}
	if len(rec.Steps) != 0 {
		t.Fatal("a step ran")
	}
}

func TestExecError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := b.run(`{"version": 1, "steps": [{"run": ["no-such-program-xyz"]}]}`)
	if st := stepOf(t, rec, 0); st.Verdict != record.VerdictExecError || !strings.Contains(st.Error, "not found") {
		t.Fatalf("want exec_error:\n%s", mustJSON(t, rec))
	}
}
