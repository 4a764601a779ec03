package tmpfs_test

import (
	"bufio"
	"errors"
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
			if got, want := m.Mechanism(), "tmpfs per workspace"; got != want {
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
			if !slices.ContainsFunc(at[0].Optional, func(s string) bool { return strings.HasPrefix(s, "shared:") }) {
				t.Errorf("root mount is not shared: optional fields %q", at[0].Optional)
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

// TestMountPropagation checks the point of the shared root: a step helper
// that made its own mount namespace, with every mount a slave, sees the
// tmpfs of a workspace created after it started, and sees it go.
func TestMountPropagation(t *testing.T) {
	f := newFixture(t, true)

	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=slave", rootEnv+"="+f.root)
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
	seen := func() []string {
		t.Helper()
		if _, err := io.WriteString(stdin, "check\n"); err != nil {
			t.Fatal(err)
		}
		var mps []string
		for out.Scan() && out.Text() != "end" {
			mps = append(mps, out.Text())
		}
		return mps
	}

	ws, err := f.m.Create(f.slot, "t1", f.uid, f.gid, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{f.root, ws.Path()}, seen()); diff != "" {
		t.Errorf("helper's mounts after Create (-want +got):\n%s", diff)
	}
	if err := ws.Remove(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{f.root}, seen()); diff != "" {
		t.Errorf("helper's mounts after Remove (-want +got):\n%s", diff)
	}
}

func TestSlotDir(t *testing.T) {
	f := newFixture(t, false)
	for range 2 { // idempotent
		dir, err := f.m.SlotDir("slot-1")
		if err != nil {
			t.Fatalf("SlotDir: %v", err)
		}
		if want := filepath.Join(f.root, "slot-1"); dir != want {
			t.Errorf("SlotDir = %q, want %q", dir, want)
		}
		want := entry{Type: "dir", Perm: 0o711, UID: os.Geteuid(), GID: os.Getegid()}
		if os.Geteuid() == 0 {
			want.GID = 0
		}
		if diff := cmp.Diff(want, lstat(t, dir)); diff != "" {
			t.Errorf("slot directory (-want +got):\n%s", diff)
		}
	}
	for _, name := range []string{"", ".", "..", ".lock", ".hidden", "a/b", "a b", strings.Repeat("s", 129)} {
		if _, err := f.m.SlotDir(name); !errors.Is(err, tmpfs.ErrBadID) {
			t.Errorf("SlotDir(%q) = %v, want ErrBadID", name, err)
		}
	}
}

func TestCreate(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		const quota = 3<<20 + 100 // not a page multiple
		ws := f.create(t, "task-1", quota)

		if want := filepath.Join(f.slot, "task-1"); ws.Path() != want {
			t.Errorf("Path() = %q, want %q", ws.Path(), want)
		}
		if ws.Quota() != quota {
			t.Errorf("Quota() = %d, want %d", ws.Quota(), quota)
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

		// A retry of the task (after a crash) gets a fresh workspace.
		f.plant(t, ws, "out/old.txt", []byte("from the first attempt"))
		again := f.create(t, "task-1", quota)
		if _, err := os.Lstat(filepath.Join(again.Path(), "out/old.txt")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the first attempt's file survived Create: %v", err)
		}
		if mount {
			if got := mountPointsAtOrBelow(t, ws.Path()); len(got) != 1 {
				t.Errorf("mounts at the re-created workspace: %q, want exactly one", got)
			}
		}
	})
}

func TestCreateRejects(t *testing.T) {
	f := newFixture(t, false)
	for _, id := range []string{"", ".", "..", "a/b", "../x", "a b", "tâche", "x\x00", strings.Repeat("a", 129)} {
		if _, err := f.m.Create(f.slot, id, f.uid, f.gid, 1<<20); !errors.Is(err, tmpfs.ErrBadID) {
			t.Errorf("Create(id %q) = %v, want ErrBadID", id, err)
		}
	}
	for _, id := range []string{"task_1.retry-2", ".hidden", strings.Repeat("a", 128)} {
		ws, err := f.m.Create(f.slot, id, f.uid, f.gid, 1<<20)
		if err != nil {
			t.Errorf("Create(id %q): %v", id, err)
			continue
		}
		if err := ws.Remove(); err != nil {
			t.Error(err)
		}
	}
	for _, c := range []struct {
		name     string
		slot     string
		uid, gid int
		quota    int64
	}{
		{"slot outside root", t.TempDir(), f.uid, f.gid, 1 << 20},
		{"root as slot", f.root, f.uid, f.gid, 1 << 20},
		{"nested slot", filepath.Join(f.slot, "x"), f.uid, f.gid, 1 << 20},
		{"zero quota", f.slot, f.uid, f.gid, 0},
		{"negative quota", f.slot, f.uid, f.gid, -1},
		{"negative uid", f.slot, -1, f.gid, 1 << 20},
	} {
		if ws, err := f.m.Create(c.slot, "t", c.uid, c.gid, c.quota); err == nil {
			ws.Remove()
			t.Errorf("%s: Create succeeded", c.name)
		}
	}
	entries, err := os.ReadDir(f.slot)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("rejected Creates left %d entries in the slot", len(entries))
	}
}

func TestSweep(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		slot1, err := f.m.SlotDir("s1")
		if err != nil {
			t.Fatal(err)
		}
		var made []*tmpfs.Workspace
		for _, c := range []struct{ slot, id string }{{f.slot, "a"}, {f.slot, "b"}, {slot1, "c"}} {
			ws, err := f.m.Create(c.slot, c.id, f.uid, f.gid, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ws.WriteFiles(map[string]string{"out/r.txt": "result"}); err != nil {
				t.Fatal(err)
			}
			made = append(made, ws)
		}
		if err := os.WriteFile(filepath.Join(f.root, "stray"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}

		n, err := f.m.Sweep()
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
		if n != len(made) {
			t.Errorf("Sweep removed %d workspaces, want %d", n, len(made))
		}
		entries, err := os.ReadDir(f.root)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if diff := cmp.Diff([]string{".lock"}, names); diff != "" {
			t.Errorf("root after Sweep (-want +got):\n%s", diff)
		}
		var wantMounts []string
		if mount {
			wantMounts = []string{f.root}
		}
		if diff := cmp.Diff(wantMounts, mountPointsAtOrBelow(t, f.root)); diff != "" {
			t.Errorf("mounts after Sweep (-want +got):\n%s", diff)
		}
		for _, ws := range made {
			if err := ws.Remove(); err != nil {
				t.Errorf("Remove after Sweep: %v", err)
			}
		}
		// Slots come back on demand.
		if _, err := f.m.Create(f.slot, "d", f.uid, f.gid, 1<<20); err != nil {
			t.Errorf("Create after Sweep: %v", err)
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
			slot, err := m.SlotDir("s0")
			if err != nil {
				t.Fatal(err)
			}
			uid, gid := stepIDs()
			ws, err := m.Create(slot, "stale", uid, gid, 1<<20)
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
			slot, err := m.SlotDir("s0")
			if err != nil {
				t.Fatal(err)
			}
			uid, gid := stepIDs()
			ws, err := m.Create(slot, "stale", uid, gid, 1<<20)
			if err != nil {
				t.Fatalf("Create the same task again: %v", err)
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
		ws := f.create(t, "t1", 1<<20)
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
		if _, err := f.m.Create(f.slot, "t2", f.uid, f.gid, 1<<20); !errors.Is(err, tmpfs.ErrClosed) {
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
		ws := f.create(t, "t1", 1<<20)

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
		if _, err := os.Lstat(ws.Path()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("workspace still there: %v", err)
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("Remove followed a symlink out of the workspace: %v", err)
		}
		var want []string
		if mount {
			want = []string{f.root}
		}
		if diff := cmp.Diff(want, mountPointsAtOrBelow(t, f.root)); diff != "" {
			t.Errorf("mounts after Remove (-want +got):\n%s", diff)
		}
	})
}

// BenchmarkCreateRemove measures a workspace's life without its steps:
// Create, WriteFiles of one small input, Remove.
func BenchmarkCreateRemove(b *testing.B) {
	for _, mount := range []bool{true, false} {
		name := "dir"
		if mount {
			name = "tmpfs"
		}
		b.Run(name, func(b *testing.B) {
			f := newFixture(b, mount)
			files := map[string]string{"in/input.json": `{"prompt": "hello"}`}
			for b.Loop() {
				ws, err := f.m.Create(f.slot, "bench", f.uid, f.gid, 64<<20)
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
