//go:build linux

package tmpfs

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// This file holds the filesystem primitives the rest of the package is built
// on: opening a path inside a workspace without following links, walking a
// tree written by untrusted code, and reading the mount table.

// resolveFlags confine openat2 to the directory it starts from: no "..", no
// absolute path, no symlink of any kind and no mount point on the way.
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// noOpenat2 is set once openat2 has returned ENOSYS (Linux before 5.6), after
// which openBeneath walks the path one component at a time.
var noOpenat2 atomic.Bool

// openBeneath opens rel, a clean relative path (or "."), below the directory
// open at dirfd. No component may be a symlink, ".." or a mount point: such a
// path fails (ELOOP for a symlink). O_NOFOLLOW and O_CLOEXEC are always added;
// mode is used with O_CREAT only.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_NOFOLLOW | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Resolve: resolveFlags}
		if flags&unix.O_CREAT != 0 {
			how.Mode = uint64(mode)
		}
		fd, err := retry(func() (int, error) { return unix.Openat2(dirfd, rel, &how) })
		if err != unix.ENOSYS {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	return openWalk(dirfd, rel, flags, mode)
}

// openWalk is openBeneath without openat2: each directory component is opened
// with O_NOFOLLOW|O_DIRECTORY relative to the previous one and must be on the
// same filesystem as dirfd.
func openWalk(dirfd int, rel string, flags int, mode uint32) (int, error) {
	var base unix.Stat_t
	if err := unix.Fstat(dirfd, &base); err != nil {
		return -1, err
	}
	comps := strings.Split(rel, "/")
	cur := dirfd
	closeCur := func() {
		if cur != dirfd {
			unix.Close(cur)
		}
	}
	defer func() { closeCur() }()
	for i, c := range comps {
		if c == "" || c == ".." || (c == "." && len(comps) > 1) {
			return -1, unix.EXDEV
		}
		f, m := unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(0)
		if i == len(comps)-1 {
			f, m = flags, mode
		}
		fd, err := retry(func() (int, error) { return unix.Openat(cur, c, f, m) })
		if err != nil {
			return -1, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if st.Dev != base.Dev {
			unix.Close(fd)
			return -1, unix.EXDEV
		}
		if i == len(comps)-1 {
			return fd, nil
		}
		closeCur()
		cur = fd
	}
	return -1, unix.EINVAL // not reached: strings.Split returns at least one element
}

// retry calls open again when it is interrupted (EINTR) or when openat2 asks
// for a retry after a concurrent rename (EAGAIN), a bounded number of times.
func retry(open func() (int, error)) (int, error) {
	for i := 0; ; i++ {
		fd, err := open()
		if (err == unix.EINTR || err == unix.EAGAIN) && i < 16 {
			continue
		}
		return fd, err
	}
}

// openOrMkdir opens the directory name below dirfd, first creating it with
// mode 0700 and owner uid:gid if it does not exist. An existing symlink or
// non-directory is refused, never followed.
func openOrMkdir(dirfd int, name string, uid, gid int) (int, error) {
	mkErr := unix.Mkdirat(dirfd, name, 0o700)
	if mkErr != nil && mkErr != unix.EEXIST {
		return -1, mkErr
	}
	fd, err := openBeneath(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	if mkErr == nil { // ours: set the exact mode (umask) and the owner
		if err := unix.Fchmod(fd, 0o700); err != nil {
			unix.Close(fd)
			return -1, err
		}
		if err := unix.Fchown(fd, uid, gid); err != nil {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// checkRel reports whether rel is a clean relative path that stays inside a
// workspace ("." is the workspace itself). The kernel checks again on open.
func checkRel(rel string) error {
	switch {
	case rel == "", len(rel) > 4096, strings.IndexByte(rel, 0) >= 0,
		path.IsAbs(rel), path.Clean(rel) != rel,
		rel == "..", strings.HasPrefix(rel, "../"):
		return fmt.Errorf("%w %q: want a clean relative path without ..", ErrBadPath, rel)
	}
	return nil
}

// typeName names the type of a file mode as record.File.Type does.
func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return "unknown"
}

// Bounds of a walk over a tree written by untrusted code.
const (
	// maxWalkEntries bounds the entries Usage visits in directory mode.
	maxWalkEntries = 100_000
	// maxWalkDepth bounds the directory nesting a walk descends into; a walk
	// keeps one descriptor open per level.
	maxWalkDepth = 256
)

// walker visits a directory tree without following symlinks or crossing
// mount points: every directory is opened relative to its parent's
// descriptor with O_NOFOLLOW|O_DIRECTORY, every entry is read with
// fstatat(AT_SYMLINK_NOFOLLOW). Entries are visited depth-first, names
// sorted within a directory.
type walker struct {
	// left is how many more entries may be visited.
	left int
	// cut is set when the walk stopped early: more than left entries, a
	// tree deeper than maxWalkDepth, or a directory it could not open.
	cut bool
	// visit is called for each entry: parent is the descriptor of its
	// directory, name its name there, rel its path in the workspace.
	visit func(parent int, name, rel string, st *unix.Stat_t)

	dev uint64 // device of the walk's top directory
	buf []byte // getdents buffer, shared: names are copied out before descending
}

// walkTree visits the entries below the directory open at fd (not fd
// itself), whose path in the workspace is rel. It does not close fd.
func (w *walker) walkTree(fd int, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	w.dev = st.Dev
	w.buf = make([]byte, 32<<10)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return w.walk(dup, rel, 0)
}

// walk visits the entries of the directory open at fd, which it closes.
func (w *walker) walk(fd int, rel string, depth int) error {
	defer unix.Close(fd)
	names, more, err := w.readNames(fd, w.left)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", rel, err)
	}
	if more {
		w.cut = true
	}
	sort.Strings(names)
	for _, name := range names {
		if w.left <= 0 {
			w.cut = true
			return nil
		}
		var st unix.Stat_t
		err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			continue // removed since it was listed
		}
		if err != nil {
			return fmt.Errorf("stat %s: %w", join(rel, name), err)
		}
		w.left--
		child := join(rel, name)
		w.visit(fd, name, child, &st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != w.dev {
			continue
		}
		if depth+1 >= maxWalkDepth {
			w.cut = true
			continue
		}
		cfd, err := retry(func() (int, error) {
			return unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		})
		switch {
		case err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR:
			continue // replaced since fstatat: not followed
		case err == unix.EACCES:
			w.cut = true
			continue
		case err != nil:
			return fmt.Errorf("open %s: %w", child, err)
		}
		if err := w.walk(cfd, child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// readNames returns up to max names of the directory open at fd ("." and ".."
// left out), and whether it has more.
func (w *walker) readNames(fd, max int) ([]string, bool, error) {
	var names []string
	for {
		n, err := unix.Getdents(fd, w.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if n <= 0 {
			return names, false, nil
		}
		_, _, names = unix.ParseDirent(w.buf[:n], -1, names)
		if len(names) > max {
			return names[:max], true, nil
		}
	}
}

// join returns the workspace path of name in directory rel.
func join(rel, name string) string {
	if rel == "." || rel == "" {
		return name
	}
	return rel + "/" + name
}

// removeTree removes dir and everything below it without following symlinks
// (os.RemoveAll works with unlinkat relative to directory descriptors). When
// that fails, for instance because a step running as the worker's own uid
// left a directory without write or search permission, it gives every
// directory of the tree mode 0700 and tries again.
func removeTree(dir string) error {
	err := os.RemoveAll(dir)
	if err == nil {
		return nil
	}
	if cerr := openDirs(dir); cerr != nil {
		return errors.Join(err, cerr)
	}
	return os.RemoveAll(dir)
}

// openDirs gives every directory of the tree at dir mode 0700.
func openDirs(dir string) error {
	if err := unix.Chmod(dir, 0o700); err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var chmodErr error
	w := &walker{left: math.MaxInt, visit: func(parent int, name, _ string, st *unix.Stat_t) {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&0o700 != 0o700 {
			// fstatat just said it is a directory, not a symlink; the tree
			// belongs to the worker's uid, which fchmodat cannot exceed.
			if err := unix.Fchmodat(parent, name, 0o700, 0); err != nil && chmodErr == nil {
				chmodErr = err
			}
		}
	}}
	if err := w.walkTree(fd, "."); err != nil {
		return err
	}
	return chmodErr
}

// mountPoints returns the mount points of this process's mount namespace
// from /proc/self/mountinfo, a path once per mount (stacked mounts repeat).
func mountPoints() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 ..." (proc(5));
		// the fifth field is the mount point, with space, tab, newline and
		// backslash escaped in octal.
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 {
			out = append(out, unescapeOctal(fields[4]))
		}
	}
	return out, sc.Err()
}

// unescapeOctal undoes the \ooo escapes of mountinfo.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// isMountPoint reports whether dir is a mount point.
func isMountPoint(dir string) (bool, error) {
	mps, err := mountPoints()
	if err != nil {
		return false, err
	}
	for _, mp := range mps {
		if mp == dir {
			return true, nil
		}
	}
	return false, nil
}

// unmountBelow lazily unmounts every mount strictly below dir, deepest first,
// until the mount table has none left.
func unmountBelow(dir string) error {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for pass := 0; pass < 8; pass++ {
		mps, err := mountPoints()
		if err != nil {
			return err
		}
		var below []string
		for _, mp := range mps {
			if strings.HasPrefix(mp, prefix) {
				below = append(below, mp)
			}
		}
		if len(below) == 0 {
			return nil
		}
		sort.SliceStable(below, func(i, j int) bool {
			return strings.Count(below[i], "/") > strings.Count(below[j], "/")
		})
		for _, mp := range below {
			err := unix.Unmount(mp, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			// EINVAL or ENOENT: gone with a mount detached before it.
			if err != nil && err != unix.EINVAL && err != unix.ENOENT {
				return fmt.Errorf("unmount %s: %w", mp, err)
			}
		}
	}
	return fmt.Errorf("mounts remain below %s after 8 passes", dir)
}

// unmountAt lazily unmounts whatever is mounted at dir, stacked mounts
// included; MNT_DETACH takes the mounts below along. A dir that is not a
// mount point (EINVAL) or does not exist is fine.
func unmountAt(dir string) error {
	for i := 0; i < 16; i++ {
		err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err == unix.EINVAL || err == unix.ENOENT {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", dir)
}

// isStaleSelfBind reports whether the mount at dir is a bind mount of a
// directory of the same filesystem as dir's parent: what New leaves behind
// when its worker is killed. A volume an operator mounted there has a
// device of its own and is kept.
func isStaleSelfBind(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	var atDir, parentDev string
	parentLen := -1
	parent := filepath.Dir(dir)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp, dev := unescapeOctal(fields[4]), fields[2]
		if mp == dir {
			atDir = dev // the last one listed is on top
			continue
		}
		if (parent == mp || strings.HasPrefix(parent, strings.TrimSuffix(mp, "/")+"/") || mp == "/") && len(mp) >= parentLen {
			parentDev, parentLen = dev, len(mp)
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return atDir != "" && atDir == parentDev, nil
}
