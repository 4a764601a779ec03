//go:build linux

package tmpfs_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/tmpfs"
)

func TestNew(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		if mount {
			needRoot(t, "mount")
		}
		root := newRoot(t)
		m, err := tmpfs.New(root, mount)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		defer func() {
			if err := m.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}()

		type state struct {
			Root    entry
			LockPID string
			Mounted bool
			Swept   int
		}
		lock, err := os.ReadFile(filepath.Join(root, ".lock"))
		if err != nil {
			t.Fatal(err)
		}
		want := state{
			Root:    entry{Type: "dir", Perm: 0o711, UID: os.Geteuid(), GID: os.Getegid()},
			LockPID: strconv.Itoa(os.Getpid()),
			Mounted: mount,
		}
		got := state{Root: lstat(t, root), LockPID: strings.TrimSpace(string(lock)), Mounted: m.Mounted(), Swept: m.Swept()}
		if os.Geteuid() == 0 {
			want.Root.GID = 0
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after New (-want +got):\n%s", diff)
		}
		if m.Root() != root {
			t.Errorf("Root() = %q, want %q", m.Root(), root)
		}

		if mount {
			if got, want := m.Mechanism(), "tmpfs per slot, sized to each task's quota"; got != want {
				t.Errorf("Mechanism() = %q, want %q", got, want)
			}
			mounts, err := readMounts()
			if err != nil {
				t.Fatal(err)
			}
			at := atOrBelow(mounts, root)
			if len(at) != 1 || at[0].Point != root {
				t.Fatalf("mounts at or below root: %+v, want one bind mount of root", at)
			}
			// Private: the slots' mounts do not propagate to the host.
			if slices.ContainsFunc(at[0].Optional, func(s string) bool { return strings.HasPrefix(s, "shared:") || strings.HasPrefix(s, "master:") }) {
				t.Errorf("root mount is not private: optional fields %q", at[0].Optional)
			}
		} else if got := m.Mechanism(); !strings.HasPrefix(got, "scan after each step (no tmpfs: ") {
			t.Errorf("Mechanism() = %q, want the scan mechanism with a reason", got)
		}

		if err := m.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if got := mountPointsAtOrBelow(t, root); len(got) != 0 {
			t.Errorf("mounts left by Close: %q", got)
		}
	})
}

// TestNewWithoutMountPrivilege checks the fallback of a worker that asks for
// tmpfs but may not mount. It needs a uid without CAP_SYS_ADMIN.
func TestNewWithoutMountPrivilege(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("needs a non-root uid, which cannot mount; run the test binary as another user to cover it")
	}
	root := newRoot(t)
	m, err := tmpfs.New(root, true)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer m.Close()
	if m.Mounted() {
		t.Fatal("Mounted() = true without CAP_SYS_ADMIN")
	}
	if got := m.Mechanism(); !strings.HasPrefix(got, "scan after each step (no tmpfs: ") || !strings.Contains(got, "not permitted") {
		t.Errorf("Mechanism() = %q, want the scan mechanism and the EPERM reason", got)
	}
}

func TestRootInUse(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		mountsBefore := mountPointsAtOrBelow(t, f.root)

		m2, err := tmpfs.New(f.root, mount)
		if err == nil {
			m2.Close()
			t.Fatal("second New on a root in use succeeded")
		}
		if !errors.Is(err, tmpfs.ErrRootInUse) {
			t.Fatalf("second New: %v, want ErrRootInUse", err)
		}
		var inUse *tmpfs.RootInUseError
		if !errors.As(err, &inUse) {
			t.Fatalf("second New: %T, want *RootInUseError", err)
		}
		if diff := cmp.Diff(&tmpfs.RootInUseError{Root: f.root, PID: os.Getpid()}, inUse); diff != "" {
			t.Errorf("RootInUseError (-want +got):\n%s", diff)
		}
		if pid := strconv.Itoa(os.Getpid()); !strings.Contains(err.Error(), "pid "+pid) {
			t.Errorf("error %q does not name the holder, pid %s", err, pid)
		}
		if diff := cmp.Diff(mountsBefore, mountPointsAtOrBelow(t, f.root)); diff != "" {
			t.Errorf("refused New changed the mounts (-before +after):\n%s", diff)
		}

		// Once released, the root can be taken again.
		if err := f.m.Close(); err != nil {
			t.Fatal(err)
		}
		m3, err := tmpfs.New(f.root, mount)
		if err != nil {
			t.Fatalf("New after Close: %v", err)
		}
		if err := m3.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestResizeSeenThroughCopy checks the point of one mount per slot: a
// sandbox helper that copied the mount table (its own mount namespace,
// made once, after the slot's tmpfs) sees each task's quota, since a
// remount changes the superblock its copy shares, and no mount is made or
// removed per task.
func TestResizeSeenThroughCopy(t *testing.T) {
	f := newFixture(t, true)
	slot := f.slot(t, "s0")

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=statfs", rootEnv+"="+slot.Dir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper: %v", err)
		}
	}()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ready" {
		t.Fatalf("helper did not start: %q %v", out.Text(), out.Err())
	}
	seen := func() string {
		t.Helper()
		if _, err := io.WriteString(stdin, "check\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("helper: %v", out.Err())
		}
		return out.Text()
	}
	for _, quota := range []int64{3 << 20, 1 << 20, 8 << 20} {
		ws, err := slot.Create(quota)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := seen(), fmt.Sprintf("%d 1", quota); got != want {
			t.Errorf("quota %d: the helper sees %q (bytes, mounts), want %q", quota, got, want)
		}
		if err := ws.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSlot(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		for i := range 2 { // a second Slot of the same name makes it afresh
			s, err := f.m.Slot("slot-1", f.uid, f.gid)
			if err != nil {
				t.Fatalf("Slot #%d: %v", i+1, err)
			}
			if want := filepath.Join(f.root, "slot-1", "ws"); s.Dir() != want {
				t.Errorf("Dir() = %q, want %q", s.Dir(), want)
			}
			base := entry{Type: "dir", Perm: 0o711, UID: os.Geteuid(), GID: os.Getegid()}
			if os.Geteuid() == 0 {
				base.GID = 0
			}
			want := map[string]entry{"slot": base, "ws": {Type: "dir", Perm: 0o700, UID: f.uid, GID: f.gid}}
			got := map[string]entry{"slot": lstat(t, filepath.Dir(s.Dir())), "ws": lstat(t, s.Dir())}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Slot #%d (-want +got):\n%s", i+1, diff)
			}
			if i == 0 {
				if err := os.WriteFile(filepath.Join(s.Dir(), "left"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			} else if _, err := os.Lstat(filepath.Join(s.Dir(), "left")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the second Slot kept the first one's file: %v", err)
			}
			var wantMounts []string
			if mount {
				wantMounts = []string{s.Dir()}
			}
			if diff := cmp.Diff(wantMounts, mountPointsAtOrBelow(t, s.Dir())); diff != "" {
				t.Errorf("mounts at the slot's workspace (-want +got):\n%s", diff)
			}
		}
		for _, name := range []string{"", ".", "..", ".lock", ".hidden", "a/b", "a b", "tâche", strings.Repeat("s", 129)} {
			if _, err := f.m.Slot(name, f.uid, f.gid); !errors.Is(err, tmpfs.ErrBadID) {
				t.Errorf("Slot(%q) = %v, want ErrBadID", name, err)
			}
		}
		if _, err := f.m.Slot("s2", -1, f.gid); err == nil {
			t.Error("Slot with uid -1 succeeded")
		}
	})
}

func TestCreate(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		const quota = 3<<20 + 100 // not a page multiple
		slot := f.slot(t, "s0")
		ws, err := slot.Create(quota)
		if err != nil {
			t.Fatal(err)
		}
		if ws.Path() != slot.Dir() || ws.Quota() != quota {
			t.Errorf("Path() = %q, Quota() = %d; want %q, %d", ws.Path(), ws.Quota(), slot.Dir(), quota)
		}
		want := map[string]entry{}
		got := map[string]entry{}
		for _, rel := range []string{".", "in", "out", "tmp"} {
			want[rel] = entry{Type: "dir", Perm: 0o700, UID: f.uid, GID: f.gid}
			got[rel] = lstat(t, filepath.Join(ws.Path(), rel))
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("workspace layout (-want +got):\n%s", diff)
		}
		var st unix.Statfs_t
		if err := unix.Statfs(ws.Path(), &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Type == unix.TMPFS_MAGIC; got != mount {
			t.Errorf("workspace is a tmpfs: %v, want %v", got, mount)
		}
		if mount {
			page := int64(os.Getpagesize())
			type fsInfo struct{ Bytes, Inodes int64 }
			wantFS := fsInfo{Bytes: (quota + page - 1) / page * page, Inodes: max(1024, quota/4096)}
			gotFS := fsInfo{Bytes: int64(st.Blocks) * st.Bsize, Inodes: int64(st.Files)}
			if diff := cmp.Diff(wantFS, gotFS); diff != "" {
				t.Errorf("tmpfs size (-want +got):\n%s", diff)
			}
			mounts, err := readMounts()
			if err != nil {
				t.Fatal(err)
			}
			at := atOrBelow(mounts, ws.Path())
			if len(at) != 1 {
				t.Fatalf("mounts at the workspace: %+v, want 1", at)
			}
			opts := strings.Split(at[0].Options, ",")
			if !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
				t.Errorf("workspace mount options %q, want nosuid and nodev", at[0].Options)
			}
		}
		// One workspace at a time.
		if _, err := slot.Create(quota); !errors.Is(err, tmpfs.ErrBusy) {
			t.Errorf("second Create: %v, want ErrBusy", err)
		}
		if err := ws.Remove(); err != nil {
			t.Fatal(err)
		}
		again, err := slot.Create(1 << 20)
		if err != nil {
			t.Fatalf("Create after Remove: %v", err)
		}
		if err := again.Remove(); err != nil {
			t.Error(err)
		}
		for _, q := range []int64{0, -1} {
			if ws, err := slot.Create(q); err == nil {
				ws.Remove()
				t.Errorf("Create(quota %d) succeeded", q)
			}
		}
	})
}

// TestNothingLeftForTheNextTask: whatever a task leaves in its workspace
// (files, locked directories, links, a FIFO, a changed mode and extended
// attributes on the top directory) the next task of the slot does not
// find, whether the first one's workspace was removed or not (a killed
// worker's).
func TestNothingLeftForTheNextTask(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		for _, removed := range []bool{true, false} {
			t.Run(fmt.Sprintf("removed=%v", removed), func(t *testing.T) {
				f := newFixture(t, mount)
				slot := f.slot(t, "s0")
				ws, err := slot.Create(1 << 20)
				if err != nil {
					t.Fatal(err)
				}
				p := ws.Path()
				f.plant(t, ws, "out/r.txt", []byte("result"))
				f.plant(t, ws, "dot.hidden", []byte("x"))
				if err := os.MkdirAll(filepath.Join(p, "deep/a/b"), 0o700); err != nil {
					t.Fatal(err)
				}
				for _, d := range []string{"deep/a/b", "deep/a", "deep"} {
					if err := os.Chmod(filepath.Join(p, d), 0); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.Symlink("/etc", filepath.Join(p, "etc-link")); err != nil {
					t.Fatal(err)
				}
				if err := unix.Mkfifo(filepath.Join(p, "tmp/fifo"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, 0o777); err != nil {
					t.Fatal(err)
				}
				xattrs := map[string][]byte{
					"user.airlock": []byte("kept?"),
					// A POSIX ACL granting uid 12345 rwx (ACL_USER_OBJ, ACL_USER, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER).
					"system.posix_acl_access": {2, 0, 0, 0, 1, 0, 7, 0, 255, 255, 255, 255, 2, 0, 7, 0, 0x39, 0x30, 0, 0, 4, 0, 7, 0, 255, 255, 255, 255, 16, 0, 7, 0, 255, 255, 255, 255, 32, 0, 5, 0, 255, 255, 255, 255},
				}
				var set []string
				for name, v := range xattrs {
					if err := unix.Setxattr(p, name, v, 0); err == nil {
						set = append(set, name)
					} else if err != unix.ENOTSUP && err != unix.EOPNOTSUPP {
						t.Fatalf("setxattr %s: %v", name, err)
					}
				}
				t.Logf("extended attributes set on the top directory: %q", set)
				if removed {
					if err := ws.Remove(); err != nil {
						t.Fatalf("Remove: %v", err)
					}
					if got := names(t, p); len(got) != 0 {
						t.Errorf("after Remove the workspace holds %q", got)
					}
				} else {
					// The worker died: a new one makes the slot again.
					if slot, err = f.m.Slot("s0", f.uid, f.gid); err != nil {
						t.Fatal(err)
					}
				}
				next, err := slot.Create(1 << 20)
				if err != nil {
					t.Fatalf("next Create: %v", err)
				}
				defer next.Remove()
				if diff := cmp.Diff([]string{"in", "out", "tmp"}, names(t, p)); diff != "" {
					t.Errorf("the next task's workspace (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(entry{Type: "dir", Perm: 0o700, UID: f.uid, GID: f.gid}, lstat(t, p)); diff != "" {
					t.Errorf("top directory (-want +got):\n%s", diff)
				}
				for _, name := range set {
					if _, err := unix.Getxattr(p, name, nil); err != unix.ENODATA {
						t.Errorf("extended attribute %s survived: %v", name, err)
					}
				}
				if _, err := os.Stat("/etc/passwd"); err != nil {
					t.Errorf("emptying followed the symlink: %v", err)
				}
			})
		}
	})
}

// TestQuotaFollowsTheTask: a task with a smaller quota than the slot's
// previous one gets ENOSPC at its own quota.
func TestQuotaFollowsTheTask(t *testing.T) {
	f := newFixture(t, true)
	slot := f.slot(t, "s0")
	big, err := slot.Create(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	f.plant(t, big, "out/six", make([]byte, 6<<20))
	if err := big.Remove(); err != nil {
		t.Fatal(err)
	}
	small, err := slot.Create(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Remove()
	err = os.WriteFile(filepath.Join(small.Path(), "out/three"), make([]byte, 3<<20), 0o600)
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("3 MiB into a 2 MiB workspace: %v, want ENOSPC", err)
	}
}

func TestSweep(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		for _, name := range []string{"s0", "s1"} {
			ws := f.create(t, name, 1<<20)
			if _, err := ws.WriteFiles(map[string]string{"out/r.txt": "result"}); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(f.root, "stray"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		n, err := f.m.Sweep()
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if n != 2 {
			t.Errorf("Sweep removed %d workspaces, want 2", n)
		}
		if diff := cmp.Diff([]string{".lock"}, names(t, f.root)); diff != "" {
			t.Errorf("root after Sweep (-want +got):\n%s", diff)
		}
		var wantMounts []string
		if mount {
			wantMounts = []string{f.root}
		}
		if diff := cmp.Diff(wantMounts, mountPointsAtOrBelow(t, f.root)); diff != "" {
			t.Errorf("mounts after Sweep (-want +got):\n%s", diff)
		}
		// Slots are made again on demand.
		s, err := f.m.Slot("s0", f.uid, f.gid)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.Create(1 << 20)
		if err != nil {
			t.Fatalf("Create after Sweep: %v", err)
		}
		if err := ws.Remove(); err != nil {
			t.Error(err)
		}
	})
}

// TestSweepAfterCrash checks that a new Manager removes the workspace, tmpfs
// mount included, that a worker killed mid-task left.
func TestSweepAfterCrash(t *testing.T) {
	needRoot(t, "mount tmpfs workspaces")
	crashes := map[string]func(t *testing.T, root string) string{
		// The worker's Manager is dropped without Close, its lock released.
		"lock released": func(t *testing.T, root string) string {
			m, err := tmpfs.New(root, true)
			if err != nil {
				t.Fatal(err)
			}
			uid, gid := stepIDs()
			slot, err := m.Slot("s0", uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			ws, err := slot.Create(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ws.WriteFiles(map[string]string{"in/a.txt": "left behind"}); err != nil {
				t.Fatal(err)
			}
			if err := m.ReleaseLockForTest(); err != nil {
				t.Fatal(err)
			}
			return ws.Path()
		},
		// The worker process is killed with SIGKILL.
		"process killed": func(t *testing.T, root string) string {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), helperEnv+"=crash", rootEnv+"="+root)
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("crash helper: %v, want killed by SIGKILL", err)
			}
			return strings.TrimSpace(string(out))
		},
	}
	for name, crash := range crashes {
		t.Run(name, func(t *testing.T) {
			root := newRoot(t)
			stale := crash(t, root)
			if got := mountPointsAtOrBelow(t, stale); len(got) != 1 {
				t.Fatalf("the crash left mounts %q at %s, want its tmpfs", got, stale)
			}
			m, err := tmpfs.New(root, true)
			if err != nil {
				t.Fatalf("New after crash: %v", err)
			}
			defer func() {
				if err := m.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
			if m.Swept() != 1 {
				t.Errorf("Swept() = %d, want 1", m.Swept())
			}
			if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("stale workspace still there: %v", err)
			}
			// The crashed worker's bind mount of root is reused, not stacked.
			if diff := cmp.Diff([]string{root}, mountPointsAtOrBelow(t, root)); diff != "" {
				t.Errorf("mounts after New (-want +got):\n%s", diff)
			}
			uid, gid := stepIDs()
			slot, err := m.Slot("s0", uid, gid)
			if err != nil {
				t.Fatal(err)
			}
			ws, err := slot.Create(1 << 20)
			if err != nil {
				t.Fatalf("Create in the same slot again: %v", err)
			}
			if got := names(t, ws.Path()); !slices.Equal(got, []string{"in", "out", "tmp"}) {
				t.Errorf("the new workspace holds %q", got)
			}
			if err := ws.Remove(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestClose(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		slot := f.slot(t, "s0")
		ws, err := slot.Create(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.m.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := f.m.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if _, err := os.Lstat(ws.Path()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("workspace survived Close: %v", err)
		}
		if got := mountPointsAtOrBelow(t, f.root); len(got) != 0 {
			t.Errorf("mounts after Close: %q", got)
		}
		if _, err := f.m.Slot("s1", f.uid, f.gid); !errors.Is(err, tmpfs.ErrClosed) {
			t.Errorf("Slot after Close: %v, want ErrClosed", err)
		}
		if err := ws.Remove(); err == nil {
			t.Log("Remove after Close: nothing left to remove")
		}
		if _, err := slot.Create(1 << 20); !errors.Is(err, tmpfs.ErrClosed) {
			t.Errorf("Create after Close: %v, want ErrClosed", err)
		}
		if _, err := f.m.Sweep(); !errors.Is(err, tmpfs.ErrClosed) {
			t.Errorf("Sweep after Close: %v, want ErrClosed", err)
		}
		m2, err := tmpfs.New(f.root, mount)
		if err != nil {
			t.Fatalf("New after Close: %v", err)
		}
		if err := m2.Close(); err != nil {
			t.Error(err)
		}
	})
}

func TestRemove(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "s0", 1<<20)

		// What a step may leave: a symlink to a directory outside (which
		// must not be followed), a directory without permissions, a file
		// still open.
		outside := t.TempDir()
		keep := filepath.Join(outside, "keep.txt")
		if err := os.WriteFile(keep, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(ws.Path(), "out/link")); err != nil {
			t.Fatal(err)
		}
		locked := filepath.Join(ws.Path(), "out/locked")
		if err := os.MkdirAll(filepath.Join(locked, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		f.plant(t, ws, "out/locked/sub/f", []byte("x"))
		for _, d := range []string{filepath.Join(locked, "sub"), locked} {
			if err := os.Chmod(d, 0); err != nil {
				t.Fatal(err)
			}
		}
		f.plant(t, ws, "tmp/open.txt", []byte("busy"))
		busy, err := os.Open(filepath.Join(ws.Path(), "tmp/open.txt"))
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()

		for i := range 2 {
			if err := ws.Remove(); err != nil {
				t.Fatalf("Remove #%d: %v", i+1, err)
			}
		}
		if got := names(t, ws.Path()); len(got) != 0 {
			t.Errorf("the workspace holds %q after Remove", got)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("Remove followed a symlink out of the workspace: %v", err)
		}
		want := []string{}
		if mount {
			want = []string{f.root, ws.Path()} // the slot's tmpfs stays for its next task
		}
		if diff := cmp.Diff(want, mountPointsAtOrBelow(t, f.root), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("mounts after Remove (-want +got):\n%s", diff)
		}
	})
}

// names lists the entries of dir, sorted.
func names(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// BenchmarkCreateRemove measures a task's workspace without its steps:
// Create, WriteFiles of one small input, Remove.
func BenchmarkCreateRemove(b *testing.B) {
	for _, mount := range []bool{true, false} {
		name := "dir"
		if mount {
			name = "tmpfs"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b, mount)
			slot := f.slot(b, "s0")
			files := map[string]string{"in/input.json": `{"prompt": "hello"}`}
			for b.Loop() {
				ws, err := slot.Create(64 << 20)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ws.WriteFiles(files); err != nil {
					b.Fatal(err)
				}
				if err := ws.Remove(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
