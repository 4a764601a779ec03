//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

var probeOnce struct {
	sync.Once
	dir string
	err error
}

// probeDir compiles testdata/probe.c once into a directory slot uids can
// read, to bind into a view; it skips the test without a C compiler.
func probeDir(tb testing.TB) string {
	tb.Helper()
	probeOnce.Do(func() {
		cc, err := exec.LookPath("cc")
		if err != nil {
			probeOnce.err = err
			return
		}
		dir, err := os.MkdirTemp("", "airlock-probe-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			probeOnce.err = err
			return
		}
		if out, err := exec.Command(cc, "-O1", "-o", filepath.Join(dir, "probe"), "testdata/probe.c").CombinedOutput(); err != nil {
			probeOnce.err = &exec.Error{Name: string(out), Err: err}
			return
		}
		probeOnce.dir = dir
	})
	if probeOnce.err != nil {
		tb.Skipf("no probe: %v", probeOnce.err)
	}
	return probeOnce.dir
}

func needView(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root for a slot with a view (TestUserNamespaceChild covers the user namespace)")
	}
}

func TestParseBind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Bind
		err  string
	}{
		{in: "/opt/node", want: Bind{Src: "/opt/node", Dst: "/opt/node"}},
		{in: "/srv/venv:/opt/venv", want: Bind{Src: "/srv/venv", Dst: "/opt/venv"}},
		{in: "opt/node", err: "absolute"},
		{in: "/opt/../etc", err: "clean"},
		{in: "/data:/", err: "over /"},
		{in: "/data:/workspace/x", err: "/workspace is built by Airlock"},
		{in: "/data:/etc", err: "/etc is built by Airlock"},
		{in: "/tmp/x", err: "/tmp is built by Airlock"},
		{in: "/data:/proc/x", err: "/proc is built by Airlock"},
	} {
		got, err := ParseBind(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBind(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseBind(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseBind(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestSeccompPolicy: every name of the deny lists the ABI knows is in the
// filter, and the program assembles.
func TestSeccompPolicy(t *testing.T) {
	for _, hostIPC := range []bool{false, true} {
		raw, n, err := seccompProgram(hostIPC)
		if err != nil {
			t.Fatalf("hostIPC=%v: %v", hostIPC, err)
		}
		if len(raw) == 0 || len(raw) > 4096 {
			t.Fatalf("hostIPC=%v: program of %d instructions", hostIPC, len(raw))
		}
		min := 40
		if hostIPC {
			min += len(hostIPCCalls) - 2
		}
		if n < min {
			t.Errorf("hostIPC=%v: %d rules, want at least %d", hostIPC, n, min)
		}
	}
}

// TestViewTree: a step of a slot with a view sees the minimal tree, the
// generated identity and its workspace at /workspace.
func TestViewTree(t *testing.T) {
	needView(t)
	s, host := setup(t)
	if st := s.Status(); st.Workdir != Workdir || !strings.HasPrefix(st.Root, "pivot_root") {
		t.Fatalf("status %+v", st)
	}
	if err := os.WriteFile(filepath.Join(host, "tmp", "seen"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), step("sh", "-c", "ls -A /; id -un; pwd; ls /tmp/; ls /dev/shm/; hostname; echo x > /etc/x || echo ro"))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(r.Stdout.Data))
	var want []string
	for _, d := range []string{"bin", "lib", "lib32", "lib64", "libx32", "sbin", "usr"} {
		if _, err := os.Lstat("/" + d); err == nil {
			want = append(want, d)
		}
	}
	want = append(want, "dev", "etc", "proc", "tmp", "workspace")
	slices.Sort(want)
	want = append(want, "airlock", Workdir, "seen", "seen", hostname, "ro")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the step's view (-want +got):\n%s\nstderr %s", diff, r.Stderr.Data)
	}
}

// TestIPCSweep: SysV objects and POSIX queues a step makes are gone for
// the next step. Landlock is off here: with it, opening a POSIX queue is
// denied outright (its filesystem is outside every allowed path), which
// the e2e tests check.
func TestIPCSweep(t *testing.T) {
	needView(t)
	cfg := testConfig(t)
	cfg.Landlock = false
	cfg.Binds = []Bind{{Src: probeDir(t), Dst: "/opt/probe"}}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(checks ...string) string {
		r, err := s.Run(context.Background(), step(append([]string{"/opt/probe/probe"}, checks...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Stdout.Data)
	}
	if got, want := run("shm-make", "sem-make", "msg-make", "mq-make"), "shm-make ok\nsem-make ok\nmsg-make ok\nmq-make ok\n"; got != want {
		t.Fatalf("first step: %q, want %q", got, want)
	}
	if got, want := run("shm-find", "sem-find", "msg-find", "mq-find"), "shm-find ENOENT\nsem-find ENOENT\nmsg-find ENOENT\nmq-find ENOENT\n"; got != want {
		t.Errorf("next step: %q, want %q", got, want)
	}
}

// BenchmarkIPCSweep is the cost of the sweep after every step, with
// nothing to remove and with one object of each kind. It runs on a thread
// of its own IPC namespace (never the host's: the sweep removes
// everything).
func BenchmarkIPCSweep(b *testing.B) {
	needView(b)
	for _, objects := range []bool{false, true} {
		name := "empty"
		if objects {
			name = "shm+sem+msg"
		}
		b.Run(name, func(b *testing.B) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
				if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
					b.Error(err)
					return
				}
				sw, err := newIPCSweeper()
				if err != nil {
					b.Error(err)
					return
				}
				defer unix.Close(sw.mq)
				for b.Loop() {
					if objects {
						b.StopTimer()
						if _, err := unix.SysvShmGet(unix.IPC_PRIVATE, 4096, unix.IPC_CREAT|0o600); err != nil {
							b.Error(err)
							return
						}
						unix.Syscall(unix.SYS_SEMGET, unix.IPC_PRIVATE, 1, unix.IPC_CREAT|0o600)
						unix.Syscall(unix.SYS_MSGGET, unix.IPC_PRIVATE, unix.IPC_CREAT|0o600, 0)
						b.StartTimer()
					}
					if err := sw.sweep(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
			<-done
		})
	}
}

// BenchmarkIPCNamespace is the alternative to the sweep: a new IPC
// namespace (unshare on a thread of its own), which a step's uid could not
// make itself; it would take a privileged helper or a new helper per task.
func BenchmarkIPCNamespace(b *testing.B) {
	needView(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		for b.Loop() {
			if err := unix.Unshare(unix.CLONE_NEWIPC); err != nil {
				b.Error(err)
				return
			}
		}
	}()
	<-done
}

// TestNoViewReads: a slot without namespaces (a worker that is neither
// root nor allowed user namespaces) sees the host's filesystem, but
// Landlock lets it read only the system directories, the /etc entries
// programs need, /proc and its workspace; SysV IPC is denied, as the
// namespace is the host's. Run as root here, which Landlock binds too.
func TestNoViewReads(t *testing.T) {
	needView(t)
	cfg := testConfig(t)
	cfg.UID, cfg.GID, cfg.Namespaces, cfg.View = -1, -1, false, false
	cfg.Binds = []Bind{{Src: probeDir(t), Dst: probeDir(t)}}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.Status()
	if !strings.HasPrefix(st.Root, "off") || !strings.Contains(st.Seccomp, "+host-ipc") || st.Workdir != cfg.Workspace {
		t.Fatalf("status %+v", st)
	}
	script := `for p in /etc/passwd /usr/bin/env /proc/self/status; do cat $p >/dev/null 2>&1 && echo read $p; done
cat /etc/shadow >/dev/null 2>&1 && echo read /etc/shadow
for p in /root /var /tmp /run /etc; do ls $p >/dev/null 2>&1 && echo listed $p; done
echo x > out && echo wrote workspace
` + probeDir(t) + `/probe shm-make msg-make`
	r, err := s.Run(context.Background(), step("sh", "-c", script))
	if err != nil {
		t.Fatal(err)
	}
	want := "read /etc/passwd\nread /usr/bin/env\nread /proc/self/status\nwrote workspace\nshm-make EPERM\nmsg-make EPERM\n"
	if got := string(r.Stdout.Data); got != want {
		t.Errorf("got:\n%s\nwant:\n%s\nstderr %s", got, want, r.Stderr.Data)
	}
}

// TestStepCannotCrashHelper: the signals that crash a Go program (SIGTRAP,
// SIGSEGV...), sent by a step to every thread of its helper, are caught:
// the same helper runs the next step.
func TestStepCannotCrashHelper(t *testing.T) {
	needView(t)
	cfg := testConfig(t)
	cfg.Binds = []Bind{{Src: probeDir(t), Dst: "/opt/probe"}}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	helper := s.cmd.Process.Pid
	r, err := s.Run(context.Background(), step("/opt/probe/probe", "signal-helper"))
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Stdout.Data)
	var sent, refused int
	if _, err := fmt.Sscanf(out, "signal-helper sent %d refused %d", &sent, &refused); err != nil || sent == 0 {
		t.Fatalf("probe: %q (%v): want signals sent to the helper's threads", out, err)
	}
	r, err = s.Run(context.Background(), step("true"))
	if err != nil || !r.Exited || r.ExitCode != 0 {
		t.Fatalf("next step: %+v, %v", r, err)
	}
	if s.cmd == nil || s.cmd.Process.Pid != helper {
		t.Errorf("the helper was replaced: it died of the signals (%d sent)", sent)
	}
}

// TestStepCannotTamperWithHelper: a step runs as its helper's uid, so it
// may renice the helper's threads; later steps would inherit that. The
// helper sees the change after the step and the slot replaces it: the
// next step runs in a new helper, at the usual limits. Its rlimits are out
// of a step's reach (the helper's saved gid is not the step's): prlimit
// fails and the helper stays.
func TestStepCannotTamperWithHelper(t *testing.T) {
	needView(t)
	cfg := testConfig(t)
	cfg.Binds = []Bind{{Src: probeDir(t), Dst: "/opt/probe"}}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(checks ...string) string {
		t.Helper()
		r, err := s.Run(context.Background(), step(append([]string{"/opt/probe/probe"}, checks...)...))
		if err != nil {
			t.Fatal(err)
		}
		return string(r.Stdout.Data)
	}
	want := run("limits")
	helper := s.cmd.Process.Pid
	if out := run("tamper-rlimit"); out != "tamper-rlimit EPERM\n" {
		t.Fatalf("tamper-rlimit: %q, want EPERM", out)
	}
	if got := run("limits"); got != want || s.cmd == nil || s.cmd.Process.Pid != helper {
		t.Errorf("after tamper-rlimit, the next step has %q (want %q), helper replaced: %v", got, want, s.cmd == nil || s.cmd.Process.Pid != helper)
	}
	for _, attack := range []string{"tamper-nice"} {
		helper := s.cmd.Process.Pid
		if out := run(attack); !strings.HasPrefix(out, "tamper-nice ") {
			t.Fatalf("%s: %q", attack, out)
		}
		if got := run("limits"); got != want {
			t.Errorf("after %s, the next step has %q, want %q", attack, got, want)
		}
		if s.cmd != nil && s.cmd.Process.Pid == helper {
			t.Errorf("after %s, the same helper (pid %d) runs the next step", attack, helper)
		}
	}
}

// TestProcLoadavgConstant: a step reads a constant in /proc/loadavg, not
// the host's load averages and count of tasks, and can neither rewrite
// nor chmod it.
func TestProcLoadavgConstant(t *testing.T) {
	needView(t)
	s, _ := setup(t)
	r, err := s.Run(context.Background(), step("sh", "-c",
		"cat /proc/loadavg; echo '9.99 9.99 9.99 9/9 9' > /proc/loadavg || echo refused; chmod 666 /proc/loadavg || echo refused; cat /proc/loadavg"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(r.Stdout.Data), procLoadavg+"refused\nrefused\n"+procLoadavg; got != want {
		t.Errorf("/proc/loadavg in a step: %q, want %q (stderr %q)", got, want, r.Stderr.Data)
	}
}
