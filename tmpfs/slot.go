//go:build linux

package tmpfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrBusy: Slot.Create was called while the slot's previous workspace was
// not removed.
var ErrBusy = errors.New("slot workspace in use")

// Slot is the workspace area of one concurrency slot: one directory,
// root/<name>/ws, that the tasks of the slot use in turn. Its path never
// changes, so that a sandbox helper can bind it once into its steps' view
// for the helper's whole life; with tmpfs it is one mount, made once, whose
// size is set to each task's quota (a remount: no mount or unmount per
// task, nothing that propagates). Between tasks it is emptied, and its top
// directory's mode, owner and extended attributes are reset, so that a
// task finds nothing of the one before.
type Slot struct {
	m        *Manager
	name     string
	dir      string // root/<name>/ws
	uid, gid int

	mu      sync.Mutex
	current *Workspace // the workspace in use, if any
	closed  bool
	// clean: the workspace directory is known empty and reset, made by
	// make or emptied by the last workspace's Remove, with no step of
	// the slot running since; Create then need not empty it again.
	clean bool
}

// Slot returns the workspace area of the slot name, owned by uid:gid (the
// uid the slot's steps run as), creating root/<name>/ (mode 0711, owned by
// root when run as root) and root/<name>/ws (mode 0700, owned by uid:gid;
// a tmpfs when Mounted). name follows the rules of a task id (1 to 128
// characters of A-Z a-z 0-9 . _ -) and does not start with a dot. What a
// killed worker left there is swept first.
func (m *Manager) Slot(name string, uid, gid int) (*Slot, error) {
	if err := checkSlot(name); err != nil {
		return nil, err
	}
	if uid < 0 || gid < 0 {
		return nil, fmt.Errorf("slot %s: invalid owner %d:%d", name, uid, gid)
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("slot %s: %w", name, ErrClosed)
	}
	base := filepath.Join(m.root, name)
	if err := os.Mkdir(base, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("slot directory: %w", err)
	}
	st, err := os.Lstat(base)
	if err != nil {
		return nil, fmt.Errorf("slot directory: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("slot directory %s: %w", base, &TypeError{Path: name, Type: typeName(uint32(st.Sys().(*syscall.Stat_t).Mode)), Want: "dir"})
	}
	if err := os.Chmod(base, 0o711); err != nil {
		return nil, fmt.Errorf("slot directory: %w", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(base, 0, 0); err != nil {
			return nil, fmt.Errorf("slot directory: %w", err)
		}
	}
	s := &Slot{m: m, name: name, dir: filepath.Join(base, "ws"), uid: uid, gid: gid}
	if err := s.make(); err != nil {
		return nil, fmt.Errorf("slot %s: %w", name, err)
	}
	return s, nil
}

// make creates the slot's workspace directory afresh: what was there
// (a killed worker's, or one that could not be emptied) goes first.
func (s *Slot) make() error {
	s.clean = false
	if s.m.mounted {
		if err := unmountAt(s.dir); err != nil {
			return err
		}
	}
	if err := removeTree(s.dir); err != nil {
		return err
	}
	if err := unix.Mkdir(s.dir, 0o700); err != nil {
		return err
	}
	if s.m.mounted {
		// The smallest tmpfs until a task sets its quota.
		opts := fmt.Sprintf("size=4096,nr_inodes=8,mode=0700,uid=%d,gid=%d", s.uid, s.gid)
		if err := unix.Mount("airlock", s.dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("mount tmpfs: %w", err)
		}
		s.clean = true
		return nil
	}
	if err := unix.Chmod(s.dir, 0o700); err != nil {
		return err
	}
	if err := unix.Lchown(s.dir, s.uid, s.gid); err != nil {
		return err
	}
	s.clean = true
	return nil
}

// Dir returns the host path of the slot's workspace: what the slot's
// sandbox binds into its steps' view.
func (s *Slot) Dir() string { return s.dir }

// Create readies the slot's workspace for one task attempt of quota bytes:
// it empties the workspace if an earlier task left anything (a worker
// killed mid-task, a Remove that failed), sets the quota (with tmpfs, the
// mount's size: quota rounded up to a page, and max(1024, quota/4096)
// inodes), resets the top directory (mode 0700, owned by the slot's
// uid:gid, no extended attributes) and makes in/, out/ and tmp/ (mode
// 0700, owned by uid:gid). A slot has one workspace at a time: Create
// fails with ErrBusy until the previous one is removed.
func (s *Slot) Create(quota int64) (*Workspace, error) {
	if quota <= 0 { // a tmpfs of size 0 would have no limit at all
		return nil, fmt.Errorf("create workspace: quota %d: must be positive", quota)
	}
	s.m.mu.Lock()
	closed := s.m.closed
	s.m.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || closed {
		return nil, fmt.Errorf("create workspace: %w", ErrClosed)
	}
	if s.current != nil {
		return nil, fmt.Errorf("create workspace %s: %w", s.dir, ErrBusy)
	}
	w := &Workspace{path: s.dir, quota: quota, uid: s.uid, gid: s.gid, mounted: s.m.mounted, slot: s}
	if !s.clean {
		if err := w.empty(); err != nil {
			return nil, fmt.Errorf("create workspace %s: empty what an earlier task left: %w", s.dir, err)
		}
	}
	s.clean = false // from here on a step may write in it
	if err := w.create(); err != nil {
		return nil, fmt.Errorf("create workspace %s: %w", s.dir, err)
	}
	s.current = w
	return w, nil
}

// Renew replaces the slot's workspace directory (with tmpfs, unmounts it
// and mounts a new one) after a Remove that failed. A sandbox that bound
// the old directory must be restarted: it still sees the old one.
func (s *Slot) Renew() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.make(); err != nil {
		return fmt.Errorf("renew workspace %s: %w", s.dir, err)
	}
	s.current = nil
	return nil
}

// Close unmounts and removes the slot's workspace. Manager.Close does it
// too, for every slot.
func (s *Slot) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.m.mounted {
		if err := unmountAt(s.dir); err != nil {
			return err
		}
	}
	return removeTree(s.dir)
}

// empty removes every entry of the workspace, without following symlinks,
// and resets its top directory. A workspace that is gone (swept, or its
// Manager closed) is empty.
func (w *Workspace) empty() error {
	if _, err := os.Lstat(w.path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	// Batches, until a pass finds nothing: a step may have made more
	// entries than are worth holding in memory at once.
	for pass := 0; ; pass++ {
		names, err := readNamesAt(w.path, 4096)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			break
		}
		if pass > 1<<20 {
			return fmt.Errorf("%s: entries keep coming back", w.path)
		}
		for _, n := range names {
			if err := removeTree(filepath.Join(w.path, n)); err != nil {
				return err
			}
		}
	}
	return w.resetTop()
}

// readNamesAt reads up to max entry names of dir.
func readNamesAt(dir string, max int) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, err := f.Readdirnames(max)
	if err == io.EOF {
		err = nil
	}
	return names, err
}

// resetTop gives the workspace's top directory mode 0700, the slot's
// owner, and no extended attributes (ACLs included) but the security
// module's: a step owns that directory and could have changed any of it
// for the next task.
func (w *Workspace) resetTop() error {
	if err := unix.Chmod(w.path, 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		if err := unix.Lchown(w.path, w.uid, w.gid); err != nil {
			return err
		}
	}
	size, err := unix.Llistxattr(w.path, nil)
	if err == unix.ENOTSUP || size == 0 {
		return nil
	}
	if err != nil || size > 1<<20 {
		return fmt.Errorf("list extended attributes of %s: %d bytes, %v", w.path, size, err)
	}
	buf := make([]byte, size)
	n, err := unix.Llistxattr(w.path, buf)
	if err != nil {
		return fmt.Errorf("list extended attributes of %s: %w", w.path, err)
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" || strings.HasPrefix(name, "security.") {
			continue
		}
		if err := unix.Lremovexattr(w.path, name); err != nil && err != unix.ENODATA {
			return fmt.Errorf("remove extended attribute %s of %s: %w", name, w.path, err)
		}
	}
	return nil
}
