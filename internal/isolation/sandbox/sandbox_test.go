//go:build linux

package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/limits"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	MaybeHelper()
	goleak.VerifyTestMain(m)
}

// testConfig is the strongest slot configuration this process can have,
// with a slot directory slot uids can reach.
func testConfig(tb testing.TB) SlotConfig {
	tb.Helper()
	root := tb.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o711); err != nil {
			tb.Fatal(err)
		}
	}
	slot := filepath.Join(root, "slot")
	if err := os.Mkdir(slot, 0o711); err != nil {
		tb.Fatal(err)
	}
	cfg := SlotConfig{UID: -1, GID: -1, Workspace: filepath.Join(slot, "ws"), Landlock: true, Stderr: os.Stderr, Grace: 200 * time.Millisecond}
	if os.Geteuid() == 0 {
		// 370000-370999: no other package's tests run steps as these
		// uids (e2e's fleets take 300000-359999 and scan for leftovers
		// of their ranges while this package's tests may run).
		lease, err := LeaseUID(filepath.Join(os.TempDir(), "airlock-test-uids"), 370000, 1000)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { lease.Release() })
		cfg.UID, cfg.GID, cfg.Namespaces, cfg.View = lease.UID, lease.UID, true, true
	}
	mkWorkspace(tb, cfg)
	return cfg
}

// mkWorkspace makes cfg's workspace directory, with tmp/, owned by the
// slot's uid.
func mkWorkspace(tb testing.TB, cfg SlotConfig) {
	tb.Helper()
	for _, d := range []string{cfg.Workspace, filepath.Join(cfg.Workspace, "tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			tb.Fatal(err)
		}
		if cfg.UID >= 0 {
			if err := os.Chown(d, cfg.UID, cfg.GID); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// setup starts a slot; it returns the slot and its workspace's host path.
func setup(tb testing.TB) (*Slot, string) {
	tb.Helper()
	cfg := testConfig(tb)
	s, err := NewSlot(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, cfg.Workspace
}

// step is argv under the default limits. As root it runs on a slot uid of
// its own (testConfig), where RLIMIT_NPROC (the fallback without a cgroup)
// counts only the step's tasks and the slot's helper. Without root it runs
// as this user, whose RLIMIT_NPROC counts every task the user already runs,
// here and elsewhere (a dev worker, a browser): the limit is raised by
// those, plus room for what they start while the step runs, so the step
// still has the default's own room whatever the user's thread count.
func step(argv ...string) Step {
	lim := limits.DefaultPolicy().Default
	if os.Geteuid() != 0 {
		lim.Processes += userTasks(os.Getuid()) + userTasksSlack
	}
	return Step{Argv: argv, Limits: lim, Timeout: 10 * time.Second}
}

// userTasksSlack is the room step leaves for the tasks the user starts
// while a step runs (other test binaries of the same go test, in parallel).
const userTasksSlack = 256

// userTasks counts the tasks (threads) whose real uid is uid: what the
// kernel holds against that uid's RLIMIT_NPROC.
func userTasks(uid int) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone, or not ours to read
		}
		var ruid, threads int
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 {
				switch f[0] {
				case "Uid:":
					ruid, _ = strconv.Atoi(f[1])
				case "Threads:":
					threads, _ = strconv.Atoi(f[1])
				}
			}
		}
		if ruid == uid {
			n += threads
		}
	}
	return n
}

func TestRunEcho(t *testing.T) {
	s, _ := setup(t)
	r, err := s.Run(context.Background(), step("sh", "-c", "echo hello; id -u; echo err >&2; exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v landlock=%s", r, s.Landlock())
	if !r.Exited || r.ExitCode != 3 {
		t.Fatalf("want exit 3, got %+v", r)
	}
	lines := strings.Fields(string(r.Stdout.Data))
	if len(lines) != 2 || lines[0] != "hello" {
		t.Fatalf("stdout %q", r.Stdout.Data)
	}
	if os.Geteuid() == 0 && lines[1] == "0" {
		t.Fatalf("step ran as root")
	}
	if string(r.Stderr.Data) != "err\n" {
		t.Fatalf("stderr %q", r.Stderr.Data)
	}
}

func TestRunTimeoutKillsTree(t *testing.T) {
	s, _ := setup(t)
	st := step("sh", "-c", "sleep 1000 & setsid sleep 1001 & sleep 1002")
	st.Timeout = 300 * time.Millisecond
	r, err := s.Run(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	if !r.TimedOut {
		t.Fatalf("want timeout, got %+v", r)
	}
	if r.Signal != syscall.SIGTERM && r.Signal != syscall.SIGKILL {
		t.Fatalf("signal %v", r.Signal)
	}
}

func BenchmarkRunTrue(b *testing.B) {
	s, _ := setup(b)
	st := step("/bin/true")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := s.Run(context.Background(), st)
		if err != nil || r.ExitCode != 0 || !r.Exited {
			b.Fatal(err, r)
		}
	}
}

// TestHelperRestarts: a helper that died between steps (a step may end
// its own helper) is replaced on the next Run.
func TestHelperRestarts(t *testing.T) {
	cfg := testConfig(t)
	var restarts atomic.Int32
	cfg.Restarted = func() { restarts.Add(1) }
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if n := restarts.Load(); n != 0 {
		t.Fatalf("Restarted called %d times at the first start", n)
	}
	old := s.cmd.Process.Pid
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	r, err := s.Run(context.Background(), step("sh", "-c", "echo again"))
	if err != nil || string(r.Stdout.Data) != "again\n" {
		t.Fatalf("run after helper death: %+v %v", r, err)
	}
	if s.cmd.Process.Pid == old {
		t.Fatal("helper was not replaced")
	}
	if n := restarts.Load(); n != 1 {
		t.Errorf("Restarted called %d times, want 1", n)
	}
}

// TestCancel: cancelling the context stops the step and says so.
func TestCancel(t *testing.T) {
	s, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	r, err := s.Run(ctx, step("sleep", "60"))
	if err != nil || !r.Canceled || r.TimedOut || r.Signal != syscall.SIGTERM {
		t.Fatalf("want canceled by SIGTERM: %+v %v", r, err)
	}
}
