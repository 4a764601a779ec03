//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/isolation/cgroup"
	"golang.org/x/sys/unix"
)

// cgroupSlot starts a slot with a cgroup of its own (root only), its
// configuration changed by each of mod.
func cgroupSlot(tb testing.TB, mod ...func(*SlotConfig)) (*Slot, *cgroup.Group) {
	tb.Helper()
	needView(tb)
	m, err := cgroup.Open(cgroup.Options{Name: fmt.Sprintf("airlock-test-%d", os.Getpid())})
	if err != nil {
		tb.Skipf("no cgroup: %v", err)
	}
	tb.Cleanup(func() { m.Close() })
	g, err := m.NewGroup(filepath.Base(tb.TempDir()))
	if err != nil {
		tb.Fatal(err)
	}
	cfg := testConfig(tb)
	cfg.Cgroup = g
	for _, f := range mod {
		f(&cfg)
	}
	s, err := NewSlot(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, g
}

// coldFiles writes files of n MiB on disk (not tmpfs), one per name, in
// a new directory readable by all, and drops them from the page cache:
// the step that reads one next brings it in, charged to its own cgroup.
func coldFiles(tb testing.TB, n int, names ...string) string {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("airlock-cold-%d-%s", os.Getpid(), filepath.Base(tb.TempDir())))
	if err := os.Mkdir(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	for _, name := range names {
		coldFile(tb, filepath.Join(dir, name), n)
	}
	return dir
}

func coldFile(tb testing.TB, path string, n int) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for i := 0; i < n; i++ {
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		tb.Fatal(err)
	}
	if err := f.Chmod(0o644); err != nil {
		tb.Fatal(err)
	}
}

// TestMemoryPeakIsTheStepsOwn: after a step that read 300 MiB of files
// (page cache charged to the slot's group), a trivial step reports a peak
// of a few MiB, and one that allocates 200 MiB reports about that, not
// the limit nor the cache of the step before.
func TestMemoryPeakIsTheStepsOwn(t *testing.T) {
	dir := coldFiles(t, 300, "big1", "big2")
	var restarts atomic.Int32
	s, _ := cgroupSlot(t, func(cfg *SlotConfig) {
		cfg.Binds = []Bind{{Src: dir, Dst: "/opt/cold"}}
		cfg.Restarted = func() { restarts.Add(1) }
	})
	run := func(argv ...string) Result {
		t.Helper()
		start := time.Now()
		r, err := s.Run(context.Background(), step(argv...))
		if err != nil || !r.Exited || r.ExitCode != 0 {
			t.Fatalf("%v: %+v, %v", argv, r, err)
		}
		t.Logf("%q: Run took %s, the step %s, its peak %.1f MiB", argv, time.Since(start).Round(time.Millisecond), r.Duration.Round(time.Millisecond), float64(r.MemoryPeak)/(1<<20))
		return r
	}
	// Each cache-heavy step reads a file no group holds yet: big1, big2,
	// then big1 again once the slot came back to the group that held it
	// and emptied it.
	heavy := run("sh", "-c", "cat /opt/cold/big1 > /dev/null")
	if heavy.MemoryPeak < 250<<20 {
		t.Fatalf("the step that read 300 MiB peaked at %d MiB: its reads were not charged to the slot's group, the test proves nothing", heavy.MemoryPeak>>20)
	}
	trivial := run("sh", "-c", "exit 0")
	t.Logf("cache-heavy step: %d MiB; trivial step after it: %.1f MiB", heavy.MemoryPeak>>20, float64(trivial.MemoryPeak)/(1<<20))
	if trivial.MemoryPeak > 16<<20 || trivial.MemoryPeak <= 0 {
		t.Errorf("trivial step after a cache-heavy one: memory peak %d bytes, want (0, 16 MiB]", trivial.MemoryPeak)
	}
	if heavy = run("sh", "-c", "cat /opt/cold/big2 > /dev/null"); heavy.MemoryPeak < 250<<20 {
		t.Fatalf("the second cache-heavy step peaked at %d MiB", heavy.MemoryPeak>>20)
	}
	big := run("python3", "-c", "x = b'a' * (200 << 20)")
	t.Logf("python3 allocating 200 MiB after another cache-heavy step: peak %.1f MiB, max RSS %.1f MiB", float64(big.MemoryPeak)/(1<<20), float64(big.MaxRSSKB)/(1<<10))
	if big.MemoryPeak < 160<<20 || big.MemoryPeak > 240<<20 {
		t.Errorf("200 MiB allocation: memory peak %d MiB, want within 20%% of 200 MiB", big.MemoryPeak>>20)
	}

	// Near the limit (512 MiB), after a cache-heavy step: the peak is the
	// step's, under the limit; past the limit, the OOM kill is counted in
	// the group the step ran in.
	if heavy = run("sh", "-c", "cat /opt/cold/big1 > /dev/null"); heavy.MemoryPeak < 150<<20 {
		t.Fatalf("the third cache-heavy step peaked at %d MiB: the group it left did not drop big1", heavy.MemoryPeak>>20)
	}
	near := run("python3", "-c", "x = b'a' * (460 << 20)")
	t.Logf("python3 allocating 460 MiB of a 512 MiB limit: peak %.1f MiB", float64(near.MemoryPeak)/(1<<20))
	if near.MemoryPeak >= 512<<20 || near.MemoryPeak < 460<<20 {
		t.Errorf("460 MiB of a 512 MiB limit: memory peak %d MiB", near.MemoryPeak>>20)
	}
	run("sh", "-c", "cat /opt/cold/big2 > /dev/null")
	r, err := s.Run(context.Background(), step("python3", "-c", "x = b'a' * (600 << 20)"))
	if err != nil || r.OOMKills < 1 || r.ExitCode == 0 && r.Exited {
		t.Errorf("600 MiB of a 512 MiB limit: %+v, %v; want an OOM kill", r, err)
	}
	// The helper that runs in the new group shows the steps their group
	// as "/", and a move is not counted as a helper restart.
	r = run("cat", "/proc/self/cgroup")
	for _, l := range strings.Split(strings.TrimSpace(string(r.Stdout.Data)), "\n") {
		if _, path, _ := strings.Cut(l[strings.Index(l, ":")+1:], ":"); path != "/" {
			t.Errorf("after moves, the step's /proc/self/cgroup line %q: want /", l)
		}
	}
	if n := restarts.Load(); n != 0 {
		t.Errorf("moves counted as %d helper restarts", n)
	}
}

// BenchmarkRunTrueCgroup is BenchmarkRunTrue in a slot with a cgroup: the
// per-step cgroup work (limits, peak reset, OOM count, usage) included.
func BenchmarkRunTrueCgroup(b *testing.B) {
	s, _ := cgroupSlot(b)
	st := step("/bin/true")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := s.Run(context.Background(), st)
		if err != nil || r.ExitCode != 0 || !r.Exited {
			b.Fatal(err, r)
		}
	}
}
