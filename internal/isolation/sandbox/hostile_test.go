//go:build linux

package sandbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/airlock-run/airlock/internal/isolation/cgroup"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"golang.org/x/sys/unix"
)

// lockedBuffer collects log lines its writers append concurrently.
type lockedBuffer = logtest.Buffer

// TestForgedSignalsLeaveHelper: a step forges the signals of a crash
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) with SI_QUEUE
// (rt_tgsigqueueinfo) and SI_TKILL (tgkill) to every thread of its helper,
// then every signal in every way a process of the helper's uid can send
// one (probe.c's forge); the same helper runs the next step, nothing
// restarted it, and it wrote nothing. With Landlock (ABI 6+), signals are
// scoped: only the spawner thread, which shares the steps' domain, can be
// reached; without, every thread is.
func TestForgedSignalsLeaveHelper(t *testing.T) {
	needView(t)
	for _, landlock := range []bool{true, false} {
		t.Run(fmt.Sprintf("landlock=%v", landlock), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Landlock = landlock
			cfg.Binds = []Bind{{Src: probeDir(t), Dst: "/opt/probe"}}
			var stderr lockedBuffer
			var restarts atomic.Int32
			cfg.Stderr = &stderr
			cfg.Restarted = func() { restarts.Add(1) }
			s, err := NewSlot(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			scoped := strings.Contains(s.Status().Landlock, "signals")
			helper := s.cmd.Process.Pid
			for _, check := range []string{"forge-crash-signals", "forge-signals"} {
				r, err := s.Run(context.Background(), step("/opt/probe/probe", check))
				if err != nil {
					t.Fatalf("%s: the helper died: %v\nhelper's stderr:\n%s", check, err, stderr.String())
				}
				out := string(r.Stdout.Data)
				var threads, sent, refused int
				var first string
				if _, err := fmt.Sscanf(out, check+" threads %d sent %d refused %d %s", &threads, &sent, &refused, &first); err != nil {
					t.Fatalf("%s: probe said %q (%v), stderr %q", check, out, err, r.Stderr.Data)
				}
				t.Logf("%s", strings.TrimSpace(out))
				// The helper has its main thread, the spawner and the
				// runtime's; 5 signals, 2 ways, for the crash check.
				switch {
				case threads < 2 || sent < 10:
					t.Fatalf("%s: %q: want sends to the helper's threads accepted by the kernel", check, out)
				case !scoped && refused != 0:
					t.Fatalf("%s: %q: without Landlock, want every send accepted", check, out)
				case scoped && refused != 0 && first != "EPERM":
					t.Fatalf("%s: %q: want sends refused only by Landlock's scope (EPERM)", check, out)
				}
				next, err := s.Run(context.Background(), step("sh", "-c", "grep -E '^Sig(Blk|Ign)' /proc/self/status"))
				if err != nil || !next.Exited || next.ExitCode != 0 {
					t.Fatalf("after %s, the next step: %+v, %v\nhelper's stderr:\n%s", check, next, err, stderr.String())
				}
				// What the helper ignores is not what its steps get: they
				// start with nothing blocked or ignored.
				if got, want := string(next.Stdout.Data), "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"; got != want {
					t.Errorf("after %s, a step's signal state is %q, want %q", check, got, want)
				}
				if s.cmd == nil || s.cmd.Process.Pid != helper || restarts.Load() != 0 {
					t.Fatalf("after %s, the helper was replaced (%d restarts)\nhelper's stderr:\n%s", check, restarts.Load(), stderr.String())
				}
			}
			if e := stderr.String(); e != "" {
				t.Errorf("the helper wrote to stderr:\n%s", e)
			}
		})
	}
}

// TestRealFaultStillKills: in a process whose fault signals are ignored as
// a helper's are, a SIGSEGV forged with SI_QUEUE to its own thread is
// dropped, and a real fault (a nil dereference) still kills it, with
// SIGSEGV. It runs itself in a child process.
func TestRealFaultStillKills(t *testing.T) {
	if os.Getenv("AIRLOCK_TEST_REAL_FAULT") == "1" {
		runtime.LockOSThread()
		if err := ignoreFaultSignals(); err != nil {
			fmt.Println(err)
			os.Exit(3)
		}
		var si [128]byte // siginfo_t: signo, errno, code, then the rest
		binary.NativeEndian.PutUint32(si[0:], uint32(unix.SIGSEGV))
		binary.NativeEndian.PutUint32(si[8:], uint32(0xffffffff)) // SI_QUEUE (-1)
		if _, _, errno := unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, uintptr(unix.Getpid()), uintptr(unix.Gettid()),
			uintptr(unix.SIGSEGV), uintptr(unsafe.Pointer(&si[0])), 0, 0); errno != 0 {
			fmt.Println("rt_tgsigqueueinfo:", errno)
			os.Exit(3)
		}
		time.Sleep(50 * time.Millisecond)
		fmt.Println("survived the forged SIGSEGV")
		var p *int
		if os.Getenv("AIRLOCK_TEST_NEVER") != "" {
			p = new(int)
		}
		*p = 1
		fmt.Println("survived the nil dereference")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRealFaultStillKills$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AIRLOCK_TEST_REAL_FAULT=1")
	out, err := cmd.Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, output %q", err, out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if string(out) != "survived the forged SIGSEGV\n" || !ws.Signaled() || ws.Signal() != syscall.SIGSEGV {
		t.Fatalf("child: %v, output %q: want it to survive the forged SIGSEGV and die of the real one", err, out)
	}
}

// TestMPTCPDenied: Multipath TCP sockets, which Landlock's TCP rules do
// not cover, fail with the filter's EPERM, the protocol's upper 32 bits
// set too (the kernel ignores them); plain TCP still works. The same
// calls on the host show that the kernel has MPTCP.
func TestMPTCPDenied(t *testing.T) {
	cfg := testConfig(t)
	dir := probeDir(t)
	in := dir // where the step finds the probe
	if cfg.View {
		in = "/opt/probe"
	}
	cfg.Binds = []Bind{{Src: dir, Dst: in}}
	checks := []string{"socket-mptcp", "socket-mptcp6", "socket-mptcp-highbits", "socket-inet"}
	host, err := exec.Command(dir+"/probe", checks...).Output()
	if err != nil {
		t.Fatal(err)
	}
	if string(host) != "socket-mptcp ok\nsocket-mptcp6 ok\nsocket-mptcp-highbits ok\nsocket-inet ok\n" {
		t.Logf("this kernel has no MPTCP (on the host: %q): the filter is checked all the same", host)
	}
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Run(context.Background(), step(append([]string{in + "/probe"}, checks...)...))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(r.Stdout.Data), "socket-mptcp EPERM\nsocket-mptcp6 EPERM\nsocket-mptcp-highbits EPERM\nsocket-inet ok\n"; got != want {
		t.Errorf("in a step: %q, want %q (stderr %q)", got, want, r.Stderr.Data)
	}
}

// hostFacts is what a step reads of the facts /proc would show of the host.
type hostFacts struct {
	cmdline, bootID, selfCgroup, helperCgroup, disks string
}

func readFacts(t *testing.T, s *Slot) hostFacts {
	t.Helper()
	r, err := s.Run(context.Background(), step("sh", "-c", `cat /proc/cmdline; echo --; cat /proc/sys/kernel/random/boot_id; echo --
cat /proc/self/cgroup; echo --; cat /proc/1/cgroup; echo --; cat /proc/partitions /proc/diskstats /proc/swaps`))
	if err != nil || !r.Exited || r.ExitCode != 0 {
		t.Fatalf("step: %+v, %v", r, err)
	}
	parts := strings.Split(string(r.Stdout.Data), "--\n")
	if len(parts) != 5 {
		t.Fatalf("stdout %q, stderr %q", r.Stdout.Data, r.Stderr.Data)
	}
	return hostFacts{parts[0], strings.TrimSpace(parts[1]), parts[2], parts[3], parts[4]}
}

// TestProcHidesHostFacts: a step reads an empty /proc/cmdline, partitions,
// diskstats and swaps; a boot_id of its slot's own, stable from step to
// step, another in another slot, never the host's; "/" for its own cgroup
// in every hierarchy, also when its slot has a cgroup (v1), and no name of
// the helper's groups.
func TestProcHidesHostFacts(t *testing.T) {
	needView(t)
	hostBoot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	var grp *cgroup.Group
	if m, err := cgroup.Open(cgroup.Options{Name: fmt.Sprintf("airlock-test-%d", os.Getpid())}); err != nil {
		t.Logf("no cgroup: %v", err)
	} else {
		defer m.Close()
		if m.Version() == cgroup.V1 {
			if grp, err = m.NewGroup("facts"); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Logf("%s: steps are moved into their group one by one; no cgroup namespace", m.Describe())
		}
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	var boots []string
	for _, withGroup := range []bool{false, true} {
		if withGroup && grp == nil {
			continue
		}
		cfg := testConfig(t)
		if withGroup {
			cfg.Cgroup = grp
		}
		s, err := NewSlot(cfg)
		if err != nil {
			t.Fatal(err)
		}
		f := readFacts(t, s)
		if f.cmdline != "" || f.disks != "" {
			t.Errorf("cgroup=%v: /proc/cmdline %q, partitions, diskstats and swaps %q: want them empty", withGroup, f.cmdline, f.disks)
		}
		if !uuid.MatchString(f.bootID) || f.bootID == strings.TrimSpace(string(hostBoot)) {
			t.Errorf("cgroup=%v: boot_id %q: want a UUID that is not the host's %q", withGroup, f.bootID, hostBoot)
		}
		if again := readFacts(t, s); again.bootID != f.bootID {
			t.Errorf("cgroup=%v: boot_id changed from step to step: %q, then %q", withGroup, f.bootID, again.bootID)
		}
		boots = append(boots, f.bootID)
		lines := strings.Split(strings.TrimSpace(f.selfCgroup), "\n")
		for _, l := range lines {
			if _, path, _ := strings.Cut(l[strings.Index(l, ":")+1:], ":"); path != "/" {
				t.Errorf("cgroup=%v: the step's /proc/self/cgroup line %q: want /", withGroup, l)
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(f.helperCgroup), "\n") {
			_, path, _ := strings.Cut(l[strings.Index(l, ":")+1:], ":")
			if strings.Trim(path, "/.") != "" {
				t.Errorf("cgroup=%v: the helper's /proc/1/cgroup line %q names a group", withGroup, l)
			}
		}
		t.Logf("cgroup=%v: boot_id %s; /proc/self/cgroup %q; /proc/1/cgroup %q", withGroup, f.bootID, lines, f.helperCgroup)
		s.Close()
	}
	if len(boots) == 2 && boots[0] == boots[1] {
		t.Errorf("two slots share the boot_id %s", boots[0])
	}
}

// TestHelperRlimitsOutOfReach: a step cannot set its helper's rlimits,
// which would let the kernel kill it (RLIMIT_CPU at 0: SIGKILL at the next
// tick the helper spends on a CPU, such as reaping what a step left):
// prlimit on every helper thread fails with EPERM, and the same helper
// reaps 500 processes a step left and runs the next step.
func TestHelperRlimitsOutOfReach(t *testing.T) {
	needView(t)
	cfg := testConfig(t)
	cfg.Binds = []Bind{{Src: probeDir(t), Dst: "/opt/probe"}}
	var restarts atomic.Int32
	cfg.Restarted = func() { restarts.Add(1) }
	s, err := NewSlot(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	helper := s.cmd.Process.Pid
	st := step("sh", "-c", `/opt/probe/probe prlimit-helper; i=0; while [ $i -lt 500 ]; do sleep 100 & i=$((i+1)); done`)
	st.Limits.Processes = 1000
	r, err := s.Run(context.Background(), st)
	if err != nil {
		t.Fatalf("the helper died: %v", err)
	}
	var ok, refused int
	var first string
	if _, err := fmt.Sscanf(string(r.Stdout.Data), "prlimit-helper ok %d refused %d %s", &ok, &refused, &first); err != nil || ok != 0 || refused < 2 || first != "EPERM" {
		t.Fatalf("probe: %q (%v): want prlimit refused with EPERM on every helper thread", r.Stdout.Data, err)
	}
	if r.Killed < 500 {
		t.Errorf("%d processes killed after the step, want 500", r.Killed)
	}
	next, err := s.Run(context.Background(), step("true"))
	if err != nil || !next.Exited || next.ExitCode != 0 || s.cmd.Process.Pid != helper || restarts.Load() != 0 {
		t.Fatalf("next step: %+v, %v; helper replaced: %v", next, err, s.cmd.Process.Pid != helper || restarts.Load() != 0)
	}
}
