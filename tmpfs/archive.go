//go:build linux

package tmpfs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// A session's workspace outlives the slot its steps borrow: between two
// calls it is an archive (Archive), and the next call restores it into
// whichever slot's workspace it borrows (Restore). The archive is a tar
// stream of the tree below the workspace, in walk order (a directory
// before what it holds): directories, regular files, symbolic links (their
// target, never followed), hard links among the workspace's files (one
// copy, then links to it) and FIFOs, each with its permission bits (set-id
// bits dropped) and modification time. Sockets and devices are left out:
// nothing outlives a step that could use a socket, and a step cannot make
// a device (nodev). Owners are not kept: a restored tree belongs to the
// uid of the slot it is restored into, as the step that runs there needs.

// ErrArchive is the error of an archive Restore refuses: an entry that
// would leave the workspace, of a type it does not restore, or beyond the
// bounds of a walk.
var ErrArchive = errors.New("workspace archive refused")

// keptMode is the permission bits an archive keeps of an entry.
const keptMode = 0o1777

// MaxArchiveMeta bounds what an archive holds besides its files' bytes:
// headers, names, link targets. A tree of a workspace's most entries of
// ordinary names takes a fraction of it; one built to blow its archive up
// (long names, deep trees, many links) is refused.
const MaxArchiveMeta = 32 << 20

// ErrArchiveTooLarge is the error of an archive that would exceed the
// bound Archive was given.
var ErrArchiveTooLarge = errors.New("workspace archive too large")

// Archive writes the workspace's tree to w as a tar stream, reading at
// most quota bytes of files (the workspace's own bound: a tree that holds
// more is refused) and at most maxWalkEntries entries, and writing at most
// max bytes in all (at most quota plus MaxArchiveMeta whatever max says:
// ErrArchiveTooLarge past it). A path longer than Restore takes is
// refused. Nothing is followed: a symbolic link is archived as a link.
func (w *Workspace) Archive(out io.Writer, max int64) (files int, bytes int64, err error) {
	top, err := w.open()
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(top)
	if max <= 0 || max > w.quota+MaxArchiveMeta {
		max = w.quota + MaxArchiveMeta
	}
	cw := &cappedWriter{w: out, left: max}
	tw := tar.NewWriter(cw)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	var werr error
	wk := &walker{left: maxWalkEntries}
	wk.visit = func(parent int, name, rel string, st *unix.Stat_t) {
		if werr != nil {
			wk.left = 0 // the walk stops here
			return
		}
		if checkRel(rel) != nil {
			werr = fmt.Errorf("%w: path %.64q… is longer than a workspace path may be", ErrArchive, rel)
			return
		}
		h := &tar.Header{Name: rel, Mode: int64(st.Mode & keptMode), ModTime: time.Unix(st.Mtim.Unix()).UTC(), Format: tar.FormatPAX}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case unix.S_IFLNK:
			target, err := readlinkAt(parent, name)
			if err != nil {
				werr = fmt.Errorf("read link %s: %w", rel, err)
				return
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case unix.S_IFIFO:
			h.Typeflag = tar.TypeFifo
		case unix.S_IFREG:
			id := inode{st.Dev, st.Ino}
			if first, ok := seen[id]; ok && st.Nlink > 1 {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				break
			}
			if st.Nlink > 1 {
				seen[id] = rel
			}
			if bytes+st.Size > w.quota {
				werr = fmt.Errorf("%w: its files hold more than the workspace's %d bytes", ErrArchive, w.quota)
				return
			}
			h.Typeflag, h.Size = tar.TypeReg, st.Size
			files++
			bytes += st.Size
			werr = copyFileAt(tw, h, parent, name, st)
			return
		default:
			return // a socket or a device: not kept
		}
		werr = tw.WriteHeader(h)
	}
	if err := wk.walkTree(top, "."); err != nil {
		return files, bytes, err
	}
	if werr != nil {
		return files, bytes, werr
	}
	if wk.cut {
		return files, bytes, fmt.Errorf("%w: more than %d entries, or deeper than %d, or a directory it could not read", ErrArchive, maxWalkEntries, maxWalkDepth)
	}
	return files, bytes, tw.Close()
}

// cappedWriter writes at most left bytes to w, then fails.
type cappedWriter struct {
	w    io.Writer
	left int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, ErrArchiveTooLarge
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// copyFileAt writes the header and content of the regular file name of the
// directory open at parent: the one the walk saw (same inode), of the size
// it saw, never more.
func copyFileAt(tw *tar.Writer, h *tar.Header, parent int, name string, seen *unix.Stat_t) error {
	fd, err := retry(func() (int, error) {
		return unix.Openat(parent, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	})
	if err != nil {
		return fmt.Errorf("open %s: %w", h.Name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Ino != seen.Ino || st.Dev != seen.Dev || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %s changed while it was archived", ErrArchive, h.Name)
	}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// A file that grew since the walk is cut at the size the header says;
	// one that shrank fails the copy (no step runs while it is archived).
	n, err := io.Copy(tw, io.LimitReader(&fdReader{fd}, h.Size))
	if err == nil && n != h.Size {
		err = fmt.Errorf("%w: %s shrank while it was archived", ErrArchive, h.Name)
	}
	return err
}

// fdReader reads a descriptor.
type fdReader struct{ fd int }

func (r *fdReader) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(r.fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

// readlinkAt reads the target of the link name of the directory open at
// parent (at most PATH_MAX).
func readlinkAt(parent int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(parent, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// Restore writes the tree of an archive made by Archive into the
// workspace, which Create just made (in/, out/ and tmp/ are there and take
// the archive's modes): every entry is created below the workspace,
// never through a link, owned by the workspace's uid:gid, within its
// quota (a tree that no longer fits fails with ENOSPC). An entry whose
// name is not a clean relative path, of another type, or beyond the
// walk's bounds is refused (ErrArchive).
func (w *Workspace) Restore(in io.Reader) (files int, bytes int64, err error) {
	top, err := w.open()
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(top)
	tr := tar.NewReader(in)
	type dirTime struct {
		rel  string
		mt   time.Time
		mode uint32
	}
	var dirs []dirTime
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return files, bytes, fmt.Errorf("%w: %v", ErrArchive, err)
		}
		if n >= maxWalkEntries {
			return files, bytes, fmt.Errorf("%w: more than %d entries", ErrArchive, maxWalkEntries)
		}
		rel := path.Clean(h.Name)
		if checkRel(rel) != nil || rel == "." {
			return files, bytes, fmt.Errorf("%w: entry %q", ErrArchive, h.Name)
		}
		parent, name := path.Dir(rel), path.Base(rel)
		pfd, err := openBeneath(top, parent, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return files, bytes, fmt.Errorf("restore %s: its directory: %w", rel, err)
		}
		mode := uint32(h.Mode) & keptMode
		switch h.Typeflag {
		case tar.TypeDir:
			err = restoreDir(pfd, name, w.uid, w.gid)
			dirs = append(dirs, dirTime{rel, h.ModTime, mode})
		case tar.TypeReg:
			if bytes+h.Size > w.quota {
				err = unix.ENOSPC
				break
			}
			err = restoreFile(pfd, name, mode, w.uid, w.gid, tr, h.Size)
			files++
			bytes += h.Size
		case tar.TypeSymlink:
			if err = unix.Symlinkat(h.Linkname, pfd, name); err == nil {
				err = unix.Fchownat(pfd, name, w.uid, w.gid, unix.AT_SYMLINK_NOFOLLOW)
			}
		case tar.TypeLink:
			target := path.Clean(h.Linkname)
			if checkRel(target) != nil || target == "." {
				err = fmt.Errorf("%w: link %q", ErrArchive, h.Linkname)
				break
			}
			var tfd int
			if tfd, err = openBeneath(top, target, unix.O_PATH, 0); err == nil {
				err = unix.Linkat(tfd, "", pfd, name, unix.AT_EMPTY_PATH)
				unix.Close(tfd)
			}
		case tar.TypeFifo:
			if err = unix.Mkfifoat(pfd, name, mode); err == nil {
				err = unix.Fchownat(pfd, name, w.uid, w.gid, unix.AT_SYMLINK_NOFOLLOW)
				if err == nil {
					err = unix.Fchmodat(pfd, name, mode, 0)
				}
			}
		default:
			err = fmt.Errorf("%w: entry %q of type %q", ErrArchive, h.Name, h.Typeflag)
		}
		if err == nil && h.Typeflag != tar.TypeDir && h.Typeflag != tar.TypeLink {
			err = setTime(pfd, name, h.ModTime)
		}
		unix.Close(pfd)
		if err != nil {
			return files, bytes, fmt.Errorf("restore %s: %w", rel, err)
		}
	}
	// Directories' modes and times last, deepest first: what was written
	// in them moved their times, and a mode without write or search
	// would have kept it out.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Fchmodat(top, dirs[i].rel, dirs[i].mode, 0); err != nil {
			return files, bytes, fmt.Errorf("restore %s: %w", dirs[i].rel, err)
		}
		if err := setTime(top, dirs[i].rel, dirs[i].mt); err != nil {
			return files, bytes, fmt.Errorf("restore %s: %w", dirs[i].rel, err)
		}
	}
	return files, bytes, nil
}

// restoreDir makes the directory name (or takes the one Create made),
// mode 0700 until its own mode is set once its entries are in, owned by
// uid:gid.
func restoreDir(pfd int, name string, uid, gid int) error {
	fd, err := openOrMkdir(pfd, name, uid, gid)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	return unix.Fchmod(fd, 0o700)
}

// restoreFile creates the file name with the next size bytes of r.
func restoreFile(pfd int, name string, mode uint32, uid, gid int, r io.Reader, size int64) error {
	fd, err := retry(func() (int, error) {
		return unix.Openat(pfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return err
	}
	if n, err := io.Copy(&fdWriter{fd: fd, max: -1}, io.LimitReader(r, size)); err != nil {
		return err
	} else if n != size {
		return fmt.Errorf("%w: %s is cut short", ErrArchive, name)
	}
	return unix.Fchmod(fd, mode)
}

// setTime sets the modification time (and access time) of name below the
// directory open at dirfd, never following a link.
func setTime(dirfd int, name string, mt time.Time) error {
	ts := unix.NsecToTimespec(mt.UnixNano())
	return unix.UtimesNanoAt(dirfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
