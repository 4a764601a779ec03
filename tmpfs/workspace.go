//go:build linux

package tmpfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/record"
)

// Workspace is the directory of one task attempt. Its path and the
// directories above it belong to the worker; everything below it may have
// been written by untrusted code, and the methods treat it so. Its methods
// may be called from several goroutines.
type Workspace struct {
	path     string
	quota    int64
	uid, gid int
	mounted  bool // a tmpfs is mounted at path
	slot     *Slot

	mu      sync.Mutex
	removed bool
}

// Path returns the workspace directory.
func (w *Workspace) Path() string { return w.path }

// Quota returns the workspace's size bound in bytes.
func (w *Workspace) Quota() int64 { return w.quota }

// create sets the workspace's quota (with tmpfs, its size) and makes in/,
// out/ and tmp/. The workspace is empty and its top directory reset; the
// access and modification times of the top directory and of in/, out/
// and tmp/ are set to now (their change time follows): a step could have
// set the top directory's for the next task to read.
func (w *Workspace) create() error {
	if w.mounted {
		// A remount changes the superblock, which every bind of it (the
		// helper's view) shares; tmpfs keeps mode and owner of its root.
		opts := fmt.Sprintf("size=%d,nr_inodes=%d", w.quota, inodeLimit(w.quota))
		if err := unix.Mount("", w.path, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return fmt.Errorf("set the tmpfs size: %w", err)
		}
	}
	fd, err := w.open()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, d := range []string{"in", "out", "tmp"} {
		dfd, err := openOrMkdir(fd, d, w.uid, w.gid)
		if err != nil {
			return fmt.Errorf("make %s: %w", d, err)
		}
		unix.Close(dfd)
	}
	now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, w.path, now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("reset the times of %s: %w", w.path, err)
	}
	for _, d := range []string{"in", "out", "tmp"} {
		if err := unix.UtimesNanoAt(fd, d, now, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("reset the times of %s: %w", d, err)
		}
	}
	return nil
}

// open opens the workspace directory. Its path is the worker's, so it may be
// opened by name.
func (w *Workspace) open() (int, error) {
	fd, err := unix.Open(w.path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: w.path, Err: err}
	}
	return fd, nil
}

// WriteFiles writes the files a task spec provides, before its first step:
// each key is a clean relative path, each value the content. Missing parent
// directories are made with mode 0700, files with mode 0600, all owned by
// the workspace's uid:gid. Nothing is written through a symlink: every path
// is opened with openat2 (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS) and files
// with O_CREAT|O_EXCL|O_NOFOLLOW, so an existing entry of the same name is
// an error. With tmpfs, files beyond the quota fail with ENOSPC, in an error
// that names the file. It returns the bytes written, also on error.
func (w *Workspace) WriteFiles(files map[string]string) (int64, error) {
	return w.WriteFilesMode(files, nil)
}

// WriteFilesMode is WriteFiles with the modes of some files: a file named
// in modes gets its mode (permission bits only, at most 0777: a mode with
// other bits is an error, nothing written), the others 0600.
func (w *Workspace) WriteFilesMode(files map[string]string, modes map[string]fs.FileMode) (int64, error) {
	names := slices.Sorted(maps.Keys(files))
	for _, name := range names {
		if err := checkRel(name); err != nil || name == "." {
			return 0, fmt.Errorf("write files: %w", errors.Join(err, fmt.Errorf("%w %q", ErrBadPath, name)))
		}
		if m, ok := modes[name]; ok && m&^fs.ModePerm != 0 {
			return 0, fmt.Errorf("write files: %s: mode %s has bits beyond the permissions (at most 0777)", name, m)
		}
	}
	fd, err := w.open()
	if err != nil {
		return 0, fmt.Errorf("write files: %w", err)
	}
	defer unix.Close(fd)
	var total int64
	for _, name := range names {
		mode, ok := modes[name]
		if !ok {
			mode = 0o600
		}
		n, err := w.writeFile(fd, name, strings.NewReader(files[name]), -1, false, uint32(mode))
		total += n
		if err != nil {
			return total, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return total, nil
}

// ReplaceFile writes data to rel as WriteFiles does (its directories made,
// never through a symlink), replacing what is at rel: the file is written
// beside it and renamed over it, so that nothing there (a file, a link, a
// FIFO) is opened. A directory at rel is not replaced.
func (w *Workspace) ReplaceFile(rel string, data []byte) (int64, error) {
	return w.writeOne(rel, bytes.NewReader(data), -1, true)
}

// ReplaceStream is ReplaceFile from r, 32 KiB at a time, never holding
// it whole: at most max bytes (max < 0: no bound but the quota).
func (w *Workspace) ReplaceStream(rel string, r io.Reader, max int64) (int64, error) {
	return w.writeOne(rel, r, max, true)
}

// OpenRead opens the regular file rel for a streamed read, as ReadFile
// checks it (never through a link, owned by the workspace's uid), and
// returns it with its size then. The caller closes it.
func (w *Workspace) OpenRead(rel string) (*os.File, int64, error) {
	if err := checkRel(rel); err != nil {
		return nil, 0, fmt.Errorf("read: %w", err)
	}
	top, err := w.open()
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", rel, err)
	}
	defer unix.Close(top)
	fd, err := openBeneath(top, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", rel, explain(top, rel, "file", err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("read %s: %w", rel, err)
	}
	if t := typeName(st.Mode); t != "file" {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("read: %w", &TypeError{Path: rel, Type: t, Want: "file"})
	}
	if int(st.Uid) != w.uid {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("read %s: owned by uid %d, not %d: %w", rel, st.Uid, w.uid, ErrNotOwned)
	}
	return os.NewFile(uintptr(fd), rel), st.Size, nil
}

// ErrStreamTooLarge is returned by WriteStream for a reader that holds more
// than its max.
var ErrStreamTooLarge = errors.New("more bytes than allowed")

// WriteStream creates the file rel (a new file; its directories are
// created as WriteFiles does, never through a symlink) and copies r into
// it, 32 KiB at a time, never holding it whole: at most max bytes (max < 0:
// no bound but the workspace's quota), failing with ErrStreamTooLarge past
// it, ENOSPC past the quota. It returns the bytes written; on error the
// file is removed.
func (w *Workspace) WriteStream(rel string, r io.Reader, max int64) (int64, error) {
	return w.writeOne(rel, r, max, false)
}

// writeOne is WriteStream (replace false: a new file, removed on error)
// and ReplaceFile (replace true).
func (w *Workspace) writeOne(rel string, r io.Reader, max int64, replace bool) (int64, error) {
	if err := checkRel(rel); err != nil || rel == "." {
		return 0, fmt.Errorf("write %s: %w", rel, errors.Join(err, fmt.Errorf("%w %q", ErrBadPath, rel)))
	}
	fd, err := w.open()
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", rel, err)
	}
	defer unix.Close(fd)
	n, err := w.writeFile(fd, rel, r, max, replace, 0o600)
	if err != nil {
		if !replace {
			_ = unix.Unlinkat(fd, rel, 0) // openat2-checked above; best effort
		}
		return n, fmt.Errorf("write %s: %w", rel, err)
	}
	return n, nil
}

// writeFile writes one file below the workspace open at top, from r, at
// most max bytes (max < 0: no bound), with the permission bits mode.
func (w *Workspace) writeFile(top int, rel string, r io.Reader, max int64, replace bool, mode uint32) (n int64, err error) {
	dir := top
	if parent := path.Dir(rel); parent != "." {
		var done []string
		for _, c := range strings.Split(parent, "/") {
			fd, err := openOrMkdir(dir, c, w.uid, w.gid)
			if dir != top {
				unix.Close(dir)
			}
			done = append(done, c)
			if err != nil {
				at := strings.Join(done, "/")
				if _, typ := inspect(top, at); typ == "symlink" {
					return 0, fmt.Errorf("%s is a symlink: %w", at, ErrSymlink)
				}
				return 0, fmt.Errorf("directory %s: %w", at, err)
			}
			dir = fd
		}
		defer unix.Close(dir)
	}
	name := path.Base(rel)
	if replace {
		// Written aside, then renamed over rel: what was at rel (a file,
		// a link, a FIFO a step left) is replaced, never opened.
		name = ".airlock-write-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	fd, err := openBeneath(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if replace {
		defer func() {
			if err == nil {
				err = unix.Renameat(dir, name, dir, path.Base(rel))
			}
			if err != nil {
				_ = unix.Unlinkat(dir, name, 0)
			}
		}()
	}
	if err := unix.Fchmod(fd, mode&0o777); err != nil { // whatever the umask
		return 0, err
	}
	if err := unix.Fchown(fd, w.uid, w.gid); err != nil {
		return 0, err
	}
	fw := &fdWriter{fd: fd, max: max}
	if wt, ok := r.(io.WriterTo); ok {
		// The reader writes its own buffers (no copy in between).
		_, err = wt.WriteTo(fw)
		return fw.n, err
	}
	// Large reads for streams (fewer syscalls per byte); small inputs get
	// a buffer their size.
	size := 256 << 10
	if l, ok := r.(interface{ Len() int }); ok && l.Len() < size {
		size = l.Len() + 1
	}
	_, err = io.CopyBuffer(fw, struct{ io.Reader }{r}, make([]byte, size))
	return fw.n, err
}

// fdWriter writes to a file descriptor, at most max bytes (max < 0: no
// bound): a write past it writes nothing and fails with ErrStreamTooLarge.
type fdWriter struct {
	fd  int
	max int64
	n   int64
}

func (w *fdWriter) Write(p []byte) (int, error) {
	if w.max >= 0 && w.n+int64(len(p)) > w.max {
		return 0, fmt.Errorf("%w (%d)", ErrStreamTooLarge, w.max)
	}
	done := 0
	for done < len(p) {
		m, err := unix.Write(w.fd, p[done:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += m
		w.n += int64(m)
	}
	return done, nil
}

// Usage returns the bytes the workspace uses and whether it is full.
//
// With tmpfs it asks the filesystem (statfs): used is the bytes of its
// allocated blocks, and it is full when no block or no inode is free, which
// is what made a step's write fail with ENOSPC.
//
// Without tmpfs it walks the tree without following links and sums
// st_blocks*512 of the regular files, each inode once: the disk space data
// really takes, so a sparse file counts for what it allocated, not for its
// apparent size. Directories and symlinks are not counted, as on tmpfs
// (where they take inodes, not blocks). The walk visits at most 100,000
// entries and 256 levels; a tree it could not walk entirely (too large, too
// deep, or with a directory it may not read) is reported full, with used a
// lower bound. It is full too when used >= Quota.
func (w *Workspace) Usage() (used int64, full bool, err error) {
	if w.mounted {
		var st unix.Statfs_t
		if err := unix.Statfs(w.path, &st); err != nil {
			return 0, false, fmt.Errorf("workspace usage: %w", &fs.PathError{Op: "statfs", Path: w.path, Err: err})
		}
		if st.Type != unix.TMPFS_MAGIC {
			return 0, false, fmt.Errorf("workspace usage: %s is no longer a tmpfs", w.path)
		}
		return int64(st.Blocks-st.Bfree) * st.Bsize, st.Bfree == 0 || st.Ffree == 0, nil
	}
	fd, err := w.open()
	if err != nil {
		return 0, false, fmt.Errorf("workspace usage: %w", err)
	}
	defer unix.Close(fd)
	seen := map[uint64]bool{} // inodes with several links, counted once
	wk := &walker{left: maxWalkEntries, visit: func(_ int, _, _ string, st *unix.Stat_t) {
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return
		}
		if st.Nlink > 1 {
			if seen[st.Ino] {
				return
			}
			seen[st.Ino] = true
		}
		used += st.Blocks * 512
	}}
	if err := wk.walkTree(fd, "."); err != nil {
		return used, true, fmt.Errorf("workspace usage: %w", err)
	}
	return used, used >= w.quota || wk.cut, nil
}

// ReadFile returns the content of the regular file rel (a clean relative
// path) of the workspace, of at most max bytes.
//
// The file is opened with openat2 from the workspace directory, with
// RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS and
// RESOLVE_NO_XDEV (on kernels without openat2, one component at a time with
// O_NOFOLLOW), and O_NOFOLLOW|O_NONBLOCK|O_NOCTTY. So it never follows a
// symlink, never leaves the workspace and never blocks opening a FIFO.
// Errors:
//   - a symlink, FIFO, socket, device or directory: a *TypeError (ErrNotRegular);
//   - a symlink among the directories of rel: ErrSymlink;
//   - a file not owned by the workspace's uid: ErrNotOwned (a step cannot
//     have written it; it may be a hard link to a host file);
//   - more than max bytes: ErrTooLarge; at most max+1 bytes are read;
//   - no such file: an error matching fs.ErrNotExist.
func (w *Workspace) ReadFile(rel string, max int64) ([]byte, error) {
	if err := checkRel(rel); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if max < 0 {
		return nil, fmt.Errorf("read %s: negative bound %d", rel, max)
	}
	top, err := w.open()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	defer unix.Close(top)
	fd, err := openBeneath(top, rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, explain(top, rel, "file", err))
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", rel, err)
	}
	if t := typeName(st.Mode); t != "file" {
		return nil, fmt.Errorf("read: %w", &TypeError{Path: rel, Type: t, Want: "file"})
	}
	if int(st.Uid) != w.uid {
		return nil, fmt.Errorf("read %s: owned by uid %d, not %d: %w", rel, st.Uid, w.uid, ErrNotOwned)
	}
	if st.Size > max {
		return nil, fmt.Errorf("read %s: %d bytes, more than %d: %w", rel, st.Size, max, ErrTooLarge)
	}
	limit := max // read up to max+1 bytes: the file may have grown
	if limit < math.MaxInt64 {
		limit++
	}
	buf := make([]byte, 0, min(min(st.Size, 1<<20)+1, limit))
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(limit-int64(len(buf)), 1<<20)))
		}
		room := min(int64(cap(buf)), limit)
		n, err := unix.Read(fd, buf[len(buf):room])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", rel, err)
		}
		if n == 0 {
			break
		}
		buf = buf[:len(buf)+n]
	}
	if int64(len(buf)) > max {
		return nil, fmt.Errorf("read %s: more than %d bytes: %w", rel, max, ErrTooLarge)
	}
	return buf, nil
}

// explain turns the failure to open rel (wanted of type want) into a more
// useful error: a *TypeError when rel is there but of another type (opening
// a symlink with O_NOFOLLOW gives ELOOP, or ENOTDIR with O_DIRECTORY; a
// socket ENXIO; a device on a nodev mount EACCES), ErrSymlink naming the
// directory of rel that is a symlink.
func explain(top int, rel, want string, err error) error {
	if err != unix.ENOENT {
		at, typ := inspect(top, rel)
		switch {
		case at == rel && typ != want:
			return &TypeError{Path: rel, Type: typ, Want: want}
		case at != "" && at != rel && typ == "symlink":
			return fmt.Errorf("%s: %s is a symlink: %w", rel, at, ErrSymlink)
		}
	}
	return &fs.PathError{Op: "open", Path: rel, Err: err}
}

// inspect walks rel below top, looking at each component without following
// it, and returns the first that is not a directory, or rel itself, with its
// type; "", "" if a component cannot be looked at.
func inspect(top int, rel string) (at, typ string) {
	comps := strings.Split(rel, "/")
	dir := top
	defer func() {
		if dir != top {
			unix.Close(dir)
		}
	}()
	for i, c := range comps {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return "", ""
		}
		at, typ = strings.Join(comps[:i+1], "/"), typeName(st.Mode)
		if i == len(comps)-1 || typ != "dir" {
			return at, typ
		}
		fd, err := openBeneath(dir, c, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return "", ""
		}
		if dir != top {
			unix.Close(dir)
		}
		dir = fd
	}
	return "", ""
}

// List returns the entries below the directory dir of the workspace (a
// clean relative path such as "out", or "." for all), recursively,
// depth-first with names sorted within each directory. Paths are relative to
// the workspace; Bytes is the size of regular files, 0 for other types.
// Symlinks are listed, never followed; neither are mount points entered. At
// most maxEntries entries are returned, and at most 256 levels descended;
// truncated is true when there was more. A missing dir gives an empty list;
// a dir that is a symlink or not a directory, a *TypeError (ErrNotDir).
func (w *Workspace) List(dir string, maxEntries int) (files []record.File, truncated bool, err error) {
	if err := checkRel(dir); err != nil {
		return nil, false, fmt.Errorf("list: %w", err)
	}
	top, err := w.open()
	if err != nil {
		return nil, false, fmt.Errorf("list %s: %w", dir, err)
	}
	defer unix.Close(top)
	fd, err := openBeneath(top, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err == unix.ENOENT {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("list: %w", explain(top, dir, "dir", err))
	}
	defer unix.Close(fd)
	wk := &walker{left: maxEntries, visit: func(_ int, _, rel string, st *unix.Stat_t) {
		f := record.File{Path: rel, Type: typeName(st.Mode)}
		if f.Type == "file" {
			f.Bytes = st.Size
		}
		files = append(files, f)
	}}
	if err := wk.walkTree(fd, dir); err != nil {
		return files, wk.cut, fmt.Errorf("list %s: %w", dir, err)
	}
	return files, wk.cut, nil
}

// Remove empties the workspace (without following symlinks) and resets
// its top directory, for the slot's next task. Removing twice is fine.
// When it fails, the slot's workspace must be renewed (Slot.Renew) before
// the next Create.
func (w *Workspace) Remove() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.removed {
		return nil
	}
	if err := w.empty(); err != nil {
		return fmt.Errorf("remove workspace %s: %w", w.path, err)
	}
	w.removed = true
	w.slot.mu.Lock()
	if w.slot.current == w {
		// Nothing of the slot runs between this task and the next one's
		// Create: what was just emptied stays empty.
		w.slot.current, w.slot.clean = nil, true
	}
	w.slot.mu.Unlock()
	return nil
}
