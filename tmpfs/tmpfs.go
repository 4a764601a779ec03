//go:build linux

package tmpfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Errors matched with errors.Is.
var (
	// ErrRootInUse: another live Manager holds the root (see *RootInUseError).
	ErrRootInUse = errors.New("workspace root in use")
	// ErrBadID: a task id or slot name that is not a safe directory name.
	ErrBadID = errors.New("invalid workspace id")
	// ErrBadPath: a path that is not clean and relative, or that has "..".
	ErrBadPath = errors.New("invalid workspace path")
	// ErrNotRegular: ReadFile found something other than a regular file
	// (see *TypeError).
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotDir: List found something other than a directory (see *TypeError).
	ErrNotDir = errors.New("not a directory")
	// ErrSymlink: a directory on a path is a symbolic link, which is never
	// followed.
	ErrSymlink = errors.New("symbolic link on the path")
	// ErrTooLarge: ReadFile found a file larger than its bound.
	ErrTooLarge = errors.New("file too large")
	// ErrNotOwned: ReadFile found a file not owned by the workspace's uid,
	// which a step did not write (a hard link to a file of the host's, say).
	ErrNotOwned = errors.New("file not owned by the workspace uid")
	// ErrClosed: the Manager has been closed.
	ErrClosed = errors.New("workspace manager closed")
)

// RootInUseError reports that a live Manager, possibly of another process,
// holds a workspace root. It matches ErrRootInUse.
type RootInUseError struct {
	Root string // the workspace root
	PID  int    // the process holding its lock; 0 if unknown
}

func (e *RootInUseError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("workspace root %s in use: %s holds %s", e.Root, holder, filepath.Join(e.Root, lockName))
}

// Is reports whether target is ErrRootInUse.
func (e *RootInUseError) Is(target error) bool { return target == ErrRootInUse }

// TypeError reports a workspace entry of the wrong type: a symlink, FIFO,
// directory... where a regular file was wanted, or a non-directory where a
// directory was. It matches ErrNotRegular or ErrNotDir.
type TypeError struct {
	Path string // relative to the workspace
	Type string // what it is: file | dir | symlink | fifo | socket | device
	Want string // "file" or "dir"
}

func (e *TypeError) Error() string {
	want := "a regular file"
	if e.Want == "dir" {
		want = "a directory"
	}
	return fmt.Sprintf("%s is a %s, not %s", e.Path, e.Type, want)
}

// Is reports whether target is ErrNotRegular (Want "file") or ErrNotDir
// (Want "dir").
func (e *TypeError) Is(target error) bool {
	return (target == ErrNotRegular && e.Want == "file") || (target == ErrNotDir && e.Want == "dir")
}

const (
	lockName  = ".lock"
	probeName = ".probe" // a tmpfs mounted and unmounted by New to test mounting
	maxIDLen  = 128
)

// Manager owns a workspace root directory: it holds the root's lock, creates
// the workspaces below it and sweeps what a killed worker left. Its methods
// may be called from several goroutines.
type Manager struct {
	root     string
	lock     *os.File
	mounted  bool   // workspaces are tmpfs mounts
	madeBind bool   // New bind-mounted root onto itself; Close undoes it
	reason   string // why workspaces are not tmpfs mounts
	swept    int    // workspaces New's sweep removed

	mu     sync.Mutex
	closed bool
}

// New returns the Manager of the workspace root root, creating the directory
// (mode 0711, owned by root when run as root) if it is missing.
//
// It takes an exclusive flock on root/.lock, held for the Manager's life, and
// writes its pid there; while another Manager holds it, New fails with a
// *RootInUseError that names the holder's pid.
//
// With mount, each slot's workspace will be a tmpfs. New first bind-mounts
// root onto itself (unless it already is a mount point, for instance one
// left by a killed worker) and makes that mount MS_PRIVATE, so that the
// workspace mounts below it do not propagate to the rest of the host (the
// host's "/" is often shared). New then mounts and unmounts a small tmpfs
// to check that mounting works. If any of this fails, New does not fail:
// workspaces are plain directories, Mounted is false and Mechanism says
// why; a caller that requires tmpfs checks Mounted.
//
// Finally New calls Sweep, so that the Manager starts from an empty root.
func New(root string, mount bool) (*Manager, error) {
	if root == "" {
		return nil, errors.New("workspace root: empty path")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", root, err)
	}
	if err := makeRoot(abs); err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", abs, err)
	}
	// Resolve symlinks once: mountinfo and the lock speak of the real path.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", abs, err)
	}
	m := &Manager{root: real}
	if err := m.lockRoot(); err != nil {
		return nil, err
	}
	if mount {
		if err := m.mountRoot(); err != nil {
			m.reason = err.Error()
			m.unmountRoot()
		} else {
			m.mounted = true
		}
	} else {
		m.reason = "mounting disabled"
	}
	n, err := m.sweep()
	if err != nil {
		m.unmountRoot()
		m.lock.Close()
		return nil, fmt.Errorf("workspace root %s: sweep: %w", m.root, err)
	}
	m.swept = n
	return m, nil
}

// makeRoot creates the workspace root if it is missing.
func makeRoot(dir string) error {
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		if err != nil {
			return err
		}
		st, err := os.Stat(dir)
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return errors.New("not a directory")
		}
		return nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // whatever the umask
		return err
	}
	if os.Geteuid() == 0 {
		return os.Lchown(dir, 0, 0)
	}
	return nil
}

// lockRoot takes the root's lock and writes our pid in it.
func (m *Manager) lockRoot() error {
	name := filepath.Join(m.root, lockName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("workspace root %s: lock: %w", m.root, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		buf := make([]byte, 32)
		n, _ := f.ReadAt(buf, 0)
		f.Close()
		if err == unix.EWOULDBLOCK {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
			return &RootInUseError{Root: m.root, PID: pid}
		}
		return fmt.Errorf("workspace root %s: lock %s: %w", m.root, name, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err != nil {
		f.Close()
		return fmt.Errorf("workspace root %s: lock: %w", m.root, err)
	}
	if _, err := f.WriteAt(pid, 0); err != nil {
		f.Close()
		return fmt.Errorf("workspace root %s: lock: %w", m.root, err)
	}
	m.lock = f
	return nil
}

// mountRoot makes root a private mount point and checks that a tmpfs can be
// mounted below it. See New for why.
func (m *Manager) mountRoot() error {
	isMount, err := isMountPoint(m.root)
	if err != nil {
		return fmt.Errorf("read mount table: %w", err)
	}
	// A killed worker's bind mounts stay; undo them, so that this Manager's
	// Close leaves the root as it found it before that worker started.
	for i := 0; isMount && i < 8; i++ {
		stale, err := isStaleSelfBind(m.root)
		if err != nil || !stale {
			break
		}
		if err := unmountBelow(m.root); err != nil {
			return err
		}
		if err := unix.Unmount(m.root, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount stale bind %s: %w", m.root, err)
		}
		if isMount, err = isMountPoint(m.root); err != nil {
			return fmt.Errorf("read mount table: %w", err)
		}
	}
	if !isMount {
		if err := unix.Mount(m.root, m.root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", m.root, err)
		}
		m.madeBind = true
	}
	// Leave the parent's peer group (the host's "/" is often shared).
	if err := unix.Mount("", m.root, "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make %s private: %w", m.root, err)
	}
	probe := filepath.Join(m.root, probeName)
	if err := unmountAt(probe); err != nil {
		return err
	}
	if err := removeTree(probe); err != nil {
		return err
	}
	if err := os.Mkdir(probe, 0o700); err != nil {
		return err
	}
	defer os.Remove(probe)
	if err := unix.Mount("airlock", probe, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4096,nr_inodes=16,mode=0700"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	return unmountAt(probe)
}

// unmountRoot undoes New's bind mount, if it made one.
func (m *Manager) unmountRoot() error {
	if !m.madeBind {
		return nil
	}
	m.madeBind = false
	if err := unix.Unmount(m.root, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		return fmt.Errorf("unmount %s: %w", m.root, err)
	}
	return nil
}

// Root returns the workspace root, symlinks resolved.
func (m *Manager) Root() string { return m.root }

// Mounted reports whether workspaces are tmpfs mounts.
func (m *Manager) Mounted() bool { return m.mounted }

// Mechanism says how workspace quotas are enforced, for the run record:
// "tmpfs per slot, sized to each task's quota", or "scan after each step
// (no tmpfs: <reason>)".
func (m *Manager) Mechanism() string {
	if m.mounted {
		return "tmpfs per slot, sized to each task's quota"
	}
	return "scan after each step (no tmpfs: " + m.reason + ")"
}

// Swept returns how many workspaces New's sweep removed: those a killed
// worker left.
func (m *Manager) Swept() int { return m.swept }

// Sweep removes everything a killed worker left below root: it lazily
// unmounts every mount below root (deepest first), then removes every entry
// of root but the lock, slot directories included. It returns how many slot
// workspaces it removed. Call it only while no slot is in use: the slots
// are gone afterwards, and Manager.Slot makes them again.
func (m *Manager) Sweep() (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, ErrClosed
	}
	return m.sweep()
}

func (m *Manager) sweep() (int, error) {
	if err := unmountBelow(m.root); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(m.root)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range entries {
		if e.Name() == lockName {
			continue
		}
		dir := filepath.Join(m.root, e.Name())
		if e.IsDir() && checkSlot(e.Name()) == nil {
			workspaces, err := os.ReadDir(dir)
			if err != nil {
				errs = append(errs, err)
			}
			for _, ws := range workspaces {
				if err := removeTree(filepath.Join(dir, ws.Name())); err != nil {
					errs = append(errs, err)
					continue
				}
				n++
			}
		}
		if err := removeTree(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// Close sweeps the root, undoes New's bind mount if it made one, and
// releases the lock. Closing twice is fine.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	_, err := m.sweep()
	err = errors.Join(err, m.unmountRoot(), m.lock.Close())
	if err != nil {
		return fmt.Errorf("close workspace root %s: %w", m.root, err)
	}
	return nil
}

// inodeLimit is the nr_inodes of a workspace tmpfs: one per 4 KiB of quota,
// at least 1024.
func inodeLimit(quota int64) int64 { return max(1024, quota/4096) }

// checkID reports whether id can name a workspace directory.
func checkID(id string) error {
	ok := len(id) >= 1 && len(id) <= maxIDLen && id != "." && id != ".."
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w %q: want 1 to %d characters of A-Z a-z 0-9 . _ -, not . or ..", ErrBadID, id, maxIDLen)
	}
	return nil
}

// checkSlot reports whether name can name a slot directory: a valid id that
// does not start with a dot (those are the Manager's own).
func checkSlot(name string) error {
	if err := checkID(name); err != nil {
		return err
	}
	if name[0] == '.' {
		return fmt.Errorf("%w %q: a slot name may not start with a dot", ErrBadID, name)
	}
	return nil
}
