//go:build linux

package tmpfs_test

import (
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestWorkspaceTimesReset: the times a task sets on its workspace's top
// directory (an access time ten years ahead, which relatime never
// refreshes, and a modification time ten years back, with nothing left in
// the directory to change it) are not what the next task of the slot
// reads: its workspace's top directory and in/, out/, tmp/ have times of
// its own Create.
func TestWorkspaceTimesReset(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		slot := f.slot(t, "s0")
		ws, err := slot.Create(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		p := ws.Path()
		for _, d := range []string{"in", "out", "tmp"} {
			if err := unix.Rmdir(filepath.Join(p, d)); err != nil {
				t.Fatal(err)
			}
		}
		decade := 10 * 365 * 24 * time.Hour
		set := []unix.Timespec{unix.NsecToTimespec(time.Now().Add(decade).UnixNano()), unix.NsecToTimespec(time.Now().Add(-decade).UnixNano())}
		if err := unix.UtimesNano(p, set); err != nil {
			t.Fatal(err)
		}
		if err := ws.Remove(); err != nil {
			t.Fatal(err)
		}
		before := time.Now().Add(-time.Second)
		next, err := slot.Create(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer next.Remove()
		after := time.Now().Add(time.Second)
		for _, rel := range []string{".", "in", "out", "tmp"} {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(p, rel), &st); err != nil {
				t.Fatal(err)
			}
			for name, ts := range map[string]unix.Timespec{"atime": st.Atim, "mtime": st.Mtim, "ctime": st.Ctim} {
				if at := time.Unix(ts.Unix()); at.Before(before) || at.After(after) {
					t.Errorf("%s of %s in the next task's workspace: %s, want between %s and %s", name, rel, at, before, after)
				}
			}
		}
	})
}
