//go:build linux

package sandbox

import (
	"math"
	"testing"
	"time"

	"github.com/airlock-run/airlock/limits"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestRlimitsCPU(t *testing.T) {
	tests := []struct {
		cpu      time.Duration
		wantSoft uint64
	}{
		{0, 1}, // unset still gets a bound
		{time.Nanosecond, 1},
		{500 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{time.Second + 100*time.Microsecond, 2},
		{time.Second + time.Millisecond, 2},
		{1500 * time.Millisecond, 2},
		{2*time.Second - time.Nanosecond, 2},
		{2 * time.Second, 2},
		{30 * time.Second, 30},
		{10*time.Minute + time.Nanosecond, 601},
		{10 * time.Minute, 600},
		{math.MaxInt64, uint64(math.MaxInt64/int64(time.Second)) + 1},
	}
	for _, tt := range tests {
		rl := byResource(rlimitsOf(limits.Set{CPUTime: limits.Duration(tt.cpu)}, 0, false))
		got, ok := rl[unix.RLIMIT_CPU]
		if !ok {
			t.Fatalf("Rlimits has no RLIMIT_CPU")
		}
		want := Rlimit{Resource: unix.RLIMIT_CPU, Cur: tt.wantSoft, Max: tt.wantSoft + 1}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("RLIMIT_CPU for %v mismatch (-want +got):\n%s", tt.cpu, diff)
		}
		// Never below what was asked for.
		if time.Duration(got.Cur)*time.Second < tt.cpu && tt.cpu < math.MaxInt64-time.Second {
			t.Errorf("RLIMIT_CPU for %v is %ds, below the limit", tt.cpu, got.Cur)
		}
	}
}

func byResource(rls []Rlimit) map[int]Rlimit {
	m := make(map[int]Rlimit, len(rls))
	for _, r := range rls {
		m[r.Resource] = r
	}
	return m
}

func TestRlimits(t *testing.T) {
	p := limits.DefaultPolicy()
	for _, s := range []limits.Set{p.Default, p.Max, {CPUTime: limits.Duration(2500 * time.Millisecond), Memory: 1 << 20, Processes: 1, FileSize: 1, OpenFiles: 3, Output: 1, Workspace: 1}} {
		for _, tc := range []struct {
			extra  int
			cgroup bool
		}{{0, false}, {1, false}, {5, false}, {5, true}} {
			extra := tc.extra
			got := rlimitsOf(s, extra, tc.cgroup)
			if len(byResource(got)) != len(got) {
				t.Errorf("Rlimits(%d, %v) sets a resource twice: %+v", extra, tc.cgroup, got)
			}
			soft := uint64((time.Duration(s.CPUTime) + time.Second - 1) / time.Second)
			n := func(v int64) Rlimit { return Rlimit{Cur: uint64(v), Max: uint64(v)} }
			want := map[int]Rlimit{
				unix.RLIMIT_CPU:    {Cur: soft, Max: soft + 1},
				unix.RLIMIT_AS:     n(int64(s.Memory)),
				unix.RLIMIT_NPROC:  n(int64(s.Processes + extra)),
				unix.RLIMIT_FSIZE:  n(int64(s.FileSize)),
				unix.RLIMIT_NOFILE: n(int64(s.OpenFiles)),
				unix.RLIMIT_CORE:   n(0),
			}
			if tc.cgroup {
				// memory and processes are the cgroup's
				delete(want, unix.RLIMIT_AS)
				delete(want, unix.RLIMIT_NPROC)
			}
			for r, w := range want {
				w.Resource = r
				want[r] = w
			}
			if diff := cmp.Diff(want, byResource(got)); diff != "" {
				t.Errorf("Rlimits(%d, %v) of %v mismatch (-want +got):\n%s", extra, tc.cgroup, s, diff)
			}
		}
	}
}

// TestBaselineCheck: the helper's check sees a changed rlimit, through
// its one-read fast path and the detailed comparison after it.
func TestBaselineCheck(t *testing.T) {
	b, err := takeBaseline()
	if err != nil {
		t.Fatal(err)
	}
	if b.limitsFD < 0 {
		t.Fatal("/proc/self/limits could not be read: the fast path is off")
	}
	t.Cleanup(func() { unix.Close(b.limitsFD) })
	if what := b.check(); what != "" {
		t.Fatalf("check with nothing changed = %q", what)
	}
	var old unix.Rlimit
	if err := unix.Prlimit(0, unix.RLIMIT_CORE, nil, &old); err != nil {
		t.Fatal(err)
	}
	lower := unix.Rlimit{Cur: 0, Max: old.Max}
	if old.Cur == 0 {
		lower.Cur = min(1, old.Max)
		if lower.Cur == old.Cur {
			t.Skip("RLIMIT_CORE cannot be changed here")
		}
	}
	if err := unix.Prlimit(0, unix.RLIMIT_CORE, &lower, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prlimit(0, unix.RLIMIT_CORE, &old, nil) })
	if b.rlimitsUnchanged() {
		t.Error("the fast path says unchanged after RLIMIT_CORE changed")
	}
	if what := b.check(); what == "" {
		t.Error("check after RLIMIT_CORE changed = \"\", want the change named")
	} else {
		t.Log(what)
	}
}
