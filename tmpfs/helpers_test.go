//go:build linux

package tmpfs_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/tmpfs"
)

// The test binary doubles as the helper processes some tests need: it runs
// helper instead of the tests when helperEnv is set.
const (
	helperEnv = "AIRLOCK_TMPFS_TEST_HELPER" // "crash" or "statfs"
	rootEnv   = "AIRLOCK_TMPFS_TEST_ROOT"   // the workspace root (crash) or the directory to statfs
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "crash":
		crashHelper(os.Getenv(rootEnv))
	case "statfs":
		statfsHelper(os.Getenv(rootEnv))
	}
	goleak.VerifyTestMain(m)
}

// crashHelper creates a workspace on a tmpfs, prints its path and dies by
// SIGKILL, as a worker killed mid-task would, leaving the workspace and its
// mount behind.
func crashHelper(root string) {
	die := func(err error) { fmt.Fprintln(os.Stderr, err); os.Exit(2) }
	m, err := tmpfs.New(root, true)
	if err != nil {
		die(err)
	}
	uid, gid := stepIDs()
	slot, err := m.Slot("s0", uid, gid)
	if err != nil {
		die(err)
	}
	ws, err := slot.Create(1 << 20)
	if err != nil {
		die(err)
	}
	if _, err := ws.WriteFiles(map[string]string{"in/a.txt": "left behind"}); err != nil {
		die(err)
	}
	fmt.Println(ws.Path())
	unix.Kill(os.Getpid(), unix.SIGKILL)
	select {}
}

// statfsHelper plays a sandbox helper: started in a mount namespace of its
// own (a copy of the test's, made after the slot's tmpfs was mounted), it
// makes every mount there private, says "ready", then for each line read
// from stdin prints the size in bytes of the filesystem at dir, as it sees
// it, and the number of mounts at or below dir.
func statfsHelper(dir string) {
	if err := unix.Mount("", "/", "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		fmt.Fprintln(os.Stderr, "make / private:", err)
		os.Exit(2)
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		mounts, err := readMounts()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fmt.Println(int64(st.Blocks)*st.Bsize, len(atOrBelow(mounts, dir)))
	}
	os.Exit(0)
}

// stepUID is the uid and gid the tests' steps run as when the tests run as
// root: any id no process uses.
const stepUID = 64417

// stepIDs returns the uid and gid workspaces are created for: stepUID as
// root, the test's own otherwise (only root may give files away).
func stepIDs() (int, int) {
	if os.Geteuid() == 0 {
		return stepUID, stepUID
	}
	return os.Getuid(), os.Getgid()
}

// needRoot skips a test that needs root.
func needRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to %s; running as uid %d", why, os.Geteuid())
	}
}

// newRoot returns the path of a workspace root that does not exist yet, in a
// temporary directory the step uid can traverse, and makes sure that no
// mount at or below it outlives the test.
func newRoot(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's parent is mode 0700; steps run as stepUID must traverse.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(real, "root")
	t.Cleanup(func() { detachAll(t, root) })
	return root
}

// detachAll unmounts whatever a test left mounted at or below dir, so that
// t.TempDir's cleanup can remove it.
func detachAll(t testing.TB, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for range 8 {
		mounts, err := readMounts()
		if err != nil {
			t.Error(err)
			return
		}
		left := atOrBelow(mounts, dir)
		if len(left) == 0 {
			return
		}
		slices.Reverse(left) // mountinfo lists parents before children
		for _, mp := range left {
			unix.Unmount(mp.Point, unix.MNT_DETACH)
		}
	}
	t.Errorf("mounts remain at or below %s", dir)
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	Point    string   // mount point
	Options  string   // per-mount options, e.g. "rw,nosuid,nodev"
	Optional []string // optional fields, e.g. "shared:12"
	FSType   string
}

// readMounts parses /proc/self/mountinfo (see proc(5)).
func readMounts() ([]mount, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	unescape := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	var out []mount
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || sep+1 >= len(f) {
			return nil, fmt.Errorf("bad mountinfo line %q", line)
		}
		out = append(out, mount{Point: unescape.Replace(f[4]), Options: f[5], Optional: f[6:sep], FSType: f[sep+1]})
	}
	return out, nil
}

// atOrBelow returns the mounts at dir or below it.
func atOrBelow(mounts []mount, dir string) []mount {
	var out []mount
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}

// mountPointsAtOrBelow returns the mount points at dir or below it.
func mountPointsAtOrBelow(t testing.TB, dir string) []string {
	t.Helper()
	mounts, err := readMounts()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range atOrBelow(mounts, dir) {
		out = append(out, m.Point)
	}
	return out
}

// fixture is a Manager on a fresh root, with slots made on demand.
type fixture struct {
	m        *tmpfs.Manager
	root     string
	uid, gid int
	slots    map[string]*tmpfs.Slot
}

// newFixture returns a fixture, with tmpfs workspaces if mount (skipping the
// test when not root). The Manager is closed at the end of the test.
func newFixture(t testing.TB, mount bool) *fixture {
	t.Helper()
	if mount {
		needRoot(t, "mount tmpfs workspaces")
	}
	root := newRoot(t)
	m, err := tmpfs.New(root, mount)
	if err != nil {
		t.Fatalf("New(%q, %v): %v", root, mount, err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if m.Mounted() != mount {
		t.Fatalf("New(mount=%v): Mounted() = %v, mechanism %q", mount, m.Mounted(), m.Mechanism())
	}
	uid, gid := stepIDs()
	return &fixture{m: m, root: root, uid: uid, gid: gid, slots: map[string]*tmpfs.Slot{}}
}

// slot returns the fixture's slot name, made on first use.
func (f *fixture) slot(t testing.TB, name string) *tmpfs.Slot {
	t.Helper()
	if s := f.slots[name]; s != nil {
		return s
	}
	s, err := f.m.Slot(name, f.uid, f.gid)
	if err != nil {
		t.Fatalf("Slot(%q): %v", name, err)
	}
	f.slots[name] = s
	return s
}

// create readies the workspace of slot name with quota bytes; it is removed
// at the end of the test.
func (f *fixture) create(t testing.TB, name string, quota int64) *tmpfs.Workspace {
	t.Helper()
	ws, err := f.slot(t, name).Create(quota)
	if err != nil {
		t.Fatalf("Create(%q): %v", name, err)
	}
	t.Cleanup(func() {
		if err := ws.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	return ws
}

// plant writes a file into a workspace behind its back, as a step would:
// owned by the step uid.
func (f *fixture) plant(t testing.TB, ws *tmpfs.Workspace, rel string, data []byte) {
	t.Helper()
	p := filepath.Join(ws.Path(), rel)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(p, f.uid, f.gid); err != nil {
		t.Fatal(err)
	}
}

// forEachMode runs fn as a subtest with tmpfs workspaces and with plain
// directories.
func forEachMode(t *testing.T, fn func(t *testing.T, mount bool)) {
	t.Helper()
	for _, mount := range []bool{true, false} {
		name := "dir"
		if mount {
			name = "tmpfs"
		}
		t.Run(name, func(t *testing.T) { fn(t, mount) })
	}
}

// forEachResolver runs fn as a subtest with openat2 and with the
// component-by-component walk used on kernels without it.
func forEachResolver(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	for _, on := range []bool{true, false} {
		name := "walk"
		if on {
			name = "openat2"
		}
		t.Run(name, func(t *testing.T) {
			defer tmpfs.UseOpenat2ForTest(on)()
			fn(t)
		})
	}
}

// entry is what the tests check of a file: its type, permissions and owner.
type entry struct {
	Type     string
	Perm     os.FileMode
	UID, GID int
}

// lstat returns the entry of p, without following a symlink.
func lstat(t testing.TB, p string) entry {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	typ := map[uint32]string{unix.S_IFREG: "file", unix.S_IFDIR: "dir", unix.S_IFLNK: "symlink"}[st.Mode&unix.S_IFMT]
	return entry{Type: typ, Perm: os.FileMode(st.Mode & 0o7777), UID: int(st.Uid), GID: int(st.Gid)}
}
