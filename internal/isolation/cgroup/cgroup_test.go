//go:build linux

package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// open opens a Manager on this machine, or skips: the tests need a
// writable hierarchy (root on cgroup v1, or a delegated v2 group).
func open(t *testing.T) *Manager {
	t.Helper()
	m, err := Open(Options{Name: "airlock-test-" + strconv.Itoa(os.Getpid()) + "-" + strings.ReplaceAll(t.Name(), "/", "-")})
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no usable cgroup here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for _, d := range m.dirs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("%s left behind", d)
			}
		}
	})
	return m
}

// join starts argv stopped in the group and lets it run: as the helper
// does, it writes the pid into each cgroup.procs before the program runs
// (here: before it is resumed from SIGSTOP by the shell's own kill).
func join(t *testing.T, g *Group, script string) *exec.Cmd {
	t.Helper()
	// The shell stops itself, is moved, then resumes into the script.
	cmd := exec.Command("sh", "-c", "kill -STOP $$; "+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WUNTRACED, nil); err != nil || !ws.Stopped() {
		t.Fatalf("wait for the stop: %v %v", ws, err)
	}
	for _, f := range g.Join() {
		if _, err := f.Write([]byte(strconv.Itoa(cmd.Process.Pid))); err != nil {
			t.Fatalf("join %s: %v", f.Name(), err)
		}
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func TestLimitsPeakAndOOM(t *testing.T) {
	m := open(t)
	g, err := m.NewGroup("t1")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Set(64<<20, 16); err != nil {
		t.Fatal(err)
	}
	mark, err := g.Mark()
	if err != nil {
		t.Fatal(err)
	}
	// tail keeps the last "line" of /dev/zero, which never ends, in
	// memory until the group's limit kills it.
	cmd := join(t, g, "exec tail /dev/zero")
	err = cmd.Wait()
	u, uerr := g.Usage(mark)
	if uerr != nil {
		t.Fatal(uerr)
	}
	if u.OOMKills < 1 {
		t.Errorf("OOMKills = %d (wait: %v), want at least 1 at a 64 MiB limit", u.OOMKills, err)
	}
	if g.peak != nil && g.peakResets && (u.PeakBytes > 64<<20 || u.PeakBytes < 32<<20) {
		t.Errorf("PeakBytes = %d, want near 64 MiB and not above", u.PeakBytes)
	}
	// A second step starts from a fresh mark: no OOM kill of its own.
	mark, err = g.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if err := join(t, g, "true").Wait(); err != nil {
		t.Fatal(err)
	}
	if u, err := g.Usage(mark); err != nil || u.OOMKills != 0 {
		t.Errorf("next step: %+v %v, want no OOM kill", u, err)
	}
}

func TestPidsLimit(t *testing.T) {
	m := open(t)
	g, err := m.NewGroup("t2")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Set(256<<20, 4); err != nil {
		t.Fatal(err)
	}
	// perl forks until fork fails: perl itself and at most 3 children (on
	// v1 the limit has room for a spawner thread that is not there).
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("needs perl")
	}
	out := filepath.Join(t.TempDir(), "n")
	cmd := join(t, g, `exec perl -e 'my $n = 0; for (1..8) { my $p = fork; last unless defined $p; if (!$p) { sleep 2; exit } $n++ } open my $f, ">", "`+out+`"; print $f "$n\n"; close $f; 1 while wait != -1'`)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 || n > 4 {
		t.Errorf("perl forked %q children under pids 4 (perl is one), want 1 to 3 (4 on v1)", b)
	}
	cur, _ := os.ReadFile(filepath.Join(g.dirs[len(g.dirs)-1], "pids.max"))
	want := "4"
	if g.ThreadJoin() {
		want = "5" // and the helper's spawner thread
	}
	if strings.TrimSpace(string(cur)) != want {
		t.Errorf("pids.max = %q", cur)
	}
}

// TestSetWritesOnlyChanges: the limits are written when they change.
func TestSetWritesOnlyChanges(t *testing.T) {
	m := open(t)
	g, err := m.NewGroup("t3")
	if err != nil {
		t.Fatal(err)
	}
	for _, lim := range []struct {
		mem  int64
		pids int
	}{{128 << 20, 8}, {128 << 20, 8}, {256 << 20, 32}, {64 << 20, 8}} {
		if err := g.Set(lim.mem, lim.pids); err != nil {
			t.Fatal(err)
		}
		got, err := readInt(g.memMax)
		if err != nil || got != lim.mem {
			t.Errorf("memory limit %d, want %d (%v)", got, lim.mem, err)
		}
		p, err := readInt(g.pidsMax)
		want := int64(lim.pids)
		if g.ThreadJoin() {
			want++ // the helper's spawner thread
		}
		if err != nil || p != want {
			t.Errorf("pids limit %d, want %d (%v)", p, want, err)
		}
	}
}

// TestSweep: the groups of a worker that died are removed by the next
// one; a live worker's are not.
func TestSweep(t *testing.T) {
	m := open(t)
	parent := filepath.Dir(m.dirs[0])
	dead := filepath.Join(parent, "airlock-999999999")
	if err := os.MkdirAll(filepath.Join(dead, "slot-x"), 0o755); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(parent, "airlock-"+strconv.Itoa(os.Getppid()))
	if err := os.Mkdir(live, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	defer os.Remove(live)
	sweep([]string{parent})
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s was not swept", dead)
		os.Remove(filepath.Join(dead, "slot-x"))
		os.Remove(dead)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live worker's group was swept: %v", err)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/sys/fs/cgroup\040x`); got != "/sys/fs/cgroup x" {
		t.Errorf("got %q", got)
	}
}

// BenchmarkStep is the cgroup work of one step: Set (unchanged limits:
// no write), Mark, moving the step's process into the group (one write
// per hierarchy), Usage. The process alternates between two groups so
// that every write is a real migration.
func BenchmarkStep(b *testing.B) {
	m, err := Open(Options{Name: "airlock-bench-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		b.Skipf("no usable cgroup here: %v", err)
	}
	defer m.Close()
	var gs [2]*Group
	for i := range gs {
		if gs[i], err = m.NewGroup("b" + strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
	}
	cmd := exec.Command("sleep", "3600")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := []byte(strconv.Itoa(cmd.Process.Pid))
	i := 0
	for b.Loop() {
		g := gs[i%2]
		i++
		if err := g.Set(256<<20, 64); err != nil {
			b.Fatal(err)
		}
		mark, err := g.Mark()
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range g.Join() {
			if _, err := f.Write(pid); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := g.Usage(mark); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRenew (cgroup v1): a group that holds the page cache of an earlier
// step is stale; one that holds only tmpfs files (a workspace's) is not.
// Renew gives the steps the spare group, with new Join descriptors, its
// limits written again by Set, and a peak that starts near zero; coming
// back to the first group empties it of what it still held. Close removes
// both.
func TestRenew(t *testing.T) {
	m := open(t)
	if m.Version() != V1 {
		t.Skipf("%s: steps' groups are renewed on cgroup v1 only", m.Describe())
	}
	g, err := m.NewGroup("t4")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Set(256<<20, 8); err != nil {
		t.Fatal(err)
	}
	if stale, err := g.Stale(); err != nil || stale {
		t.Fatalf("a new group: stale %v, %v", stale, err)
	}
	// A file on disk, out of the page cache, that a step then reads.
	cold := filepath.Join(t.TempDir(), "cold")
	if err := os.WriteFile(cold, make([]byte, 32<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	dropCache(t, cold)
	shm := filepath.Join("/dev/shm", "airlock-test-"+strconv.Itoa(os.Getpid()))
	defer os.Remove(shm)
	if err := join(t, g, "head -c 16000000 /dev/zero > "+shm).Wait(); err != nil {
		t.Fatal(err)
	}
	if stale, err := g.Stale(); err != nil || stale {
		t.Errorf("a group holding 16 MB of tmpfs files: stale %v, %v; want false", stale, err)
	}
	if err := join(t, g, "cat "+cold+" > /dev/null").Wait(); err != nil {
		t.Fatal(err)
	}
	if stale, err := g.Stale(); err != nil || !stale {
		t.Fatalf("a group holding 32 MiB of page cache: stale %v, %v; want true", stale, err)
	}
	first, tasks := g.dirs[0], g.Join()[0]
	if err := g.Renew(); err != nil {
		t.Fatal(err)
	}
	if g.dirs[0] == first || g.Join()[0] == tasks || g.Join()[1] != g.procs[1] {
		t.Errorf("after Renew: %s, the memory join descriptor changed %v", g.dirs[0], g.Join()[0] != tasks)
	}
	if stale, err := g.Stale(); err != nil || stale {
		t.Errorf("the renewed group: stale %v, %v", stale, err)
	}
	if err := g.Set(256<<20, 8); err != nil {
		t.Fatal(err)
	}
	if got, _ := readInt(g.memMax); got != 256<<20 {
		t.Errorf("the renewed group's limit %d, want it written by Set", got)
	}
	mark, err := g.Mark()
	if err != nil {
		t.Fatal(err)
	}
	if err := join(t, g, "true").Wait(); err != nil {
		t.Fatal(err)
	}
	if u, err := g.Usage(mark); err != nil || u.PeakBytes > StaleBytes {
		t.Errorf("a trivial step in the renewed group: %+v, %v", u, err)
	}
	// Back to the first group: it is emptied of the cache it held.
	dropCache(t, cold)
	if err := join(t, g, "cat "+cold+" > /dev/null").Wait(); err != nil {
		t.Fatal(err)
	}
	os.Remove(shm)
	if err := g.Renew(); err != nil {
		t.Fatal(err)
	}
	if g.dirs[0] != first {
		t.Errorf("second Renew: %s, want %s back", g.dirs[0], first)
	}
	if used, err := readInt(g.usage); err != nil || used > StaleBytes {
		t.Errorf("the group come back to holds %d bytes (%v)", used, err)
	}
	spare := g.spare.dir
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{first, spare} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s left behind", d)
		}
	}
}

// dropCache drops a file's pages from the page cache.
func dropCache(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkStale is what Stale adds to each step when the slot's group
// holds little (the usual case): one read of memory.usage_in_bytes.
func BenchmarkStale(b *testing.B) {
	m, err := Open(Options{Name: "airlock-bench-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		b.Skipf("no usable cgroup here: %v", err)
	}
	defer m.Close()
	g, err := m.NewGroup("stale")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if stale, err := g.Stale(); err != nil || stale {
			b.Fatal(stale, err)
		}
	}
}
