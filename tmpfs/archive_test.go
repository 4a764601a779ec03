//go:build linux

package tmpfs_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/tmpfs"
)

// archEntry is what a test compares of a workspace archEntry.
type archEntry struct {
	Mode  os.FileMode
	Data  string
	Link  string
	Mtime int64
	UID   uint32
	Inode string // the name of the first archEntry sharing its inode

}

// snapshot reads every archEntry below dir, never following a link.
func archSnapshot(t *testing.T, dir string) map[string]archEntry {
	t.Helper()
	got := map[string]archEntry{}
	inodes := map[uint64]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := fi.Sys().(*syscall.Stat_t)
		e := archEntry{Mode: fi.Mode(), Mtime: fi.ModTime().UnixNano(), UID: st.Uid}
		if first, ok := inodes[st.Ino]; ok {
			e.Inode = first
		} else {
			inodes[st.Ino] = rel
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			e.Link, _ = os.Readlink(p)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Data = string(b)
		}
		if fi.IsDir() {
			e.Mtime = 0 // moved by the walk's own reads on some filesystems
		}
		got[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestArchiveRoundTrip: a tree of files, modes, links, a hard link and a
// FIFO comes back byte for byte in another slot's workspace, owned by
// that slot's uid, set-id bits dropped.
func TestArchiveRoundTrip(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		src := f.create(t, "a", 1<<20)
		p := src.Path()
		f.plant(t, src, "in/data.csv", []byte("id,amount\n1,10\n"))
		f.plant(t, src, "run.sh", []byte("#!/bin/sh\necho hi\n"))
		must(t, os.Chmod(filepath.Join(p, "run.sh"), 0o4755)) // set-uid: dropped
		must(t, os.MkdirAll(filepath.Join(p, "out/deep/er"), 0o750))
		f.plant(t, src, "out/deep/er/r.json", []byte(`{"n":1}`))
		must(t, os.Symlink("../in/data.csv", filepath.Join(p, "out/link")))
		must(t, os.Symlink("/etc/passwd", filepath.Join(p, "host")))
		must(t, os.Link(filepath.Join(p, "in/data.csv"), filepath.Join(p, "tmp/hard")))
		must(t, unix.Mkfifo(filepath.Join(p, "tmp/fifo"), 0o640))
		must(t, os.Chmod(filepath.Join(p, "out"), 0o755))
		must(t, os.MkdirAll(filepath.Join(p, "ro/sub"), 0o700))
		f.plant(t, src, "ro/sub/kept", []byte("behind a read-only directory"))
		must(t, os.Chmod(filepath.Join(p, "ro/sub"), 0o500))
		must(t, os.Chmod(filepath.Join(p, "ro"), 0o500))
		old := time.Now().Add(-time.Hour).Truncate(time.Second)
		must(t, os.Chtimes(filepath.Join(p, "in/data.csv"), old, old))
		if os.Geteuid() == 0 {
			for _, rel := range []string{"out/deep", "out/deep/er", "out/link", "host", "tmp/fifo", "ro", "ro/sub"} {
				must(t, os.Lchown(filepath.Join(p, rel), f.uid, f.gid))
			}
		}
		want := archSnapshot(t, p)
		var buf bytes.Buffer
		files, n, err := src.Archive(&buf, 0)
		if err != nil {
			t.Fatalf("Archive: %v", err)
		}
		if files != 4 || n != int64(len("id,amount\n1,10\n")+len("#!/bin/sh\necho hi\n")+len(`{"n":1}`)+len("behind a read-only directory")) {
			t.Errorf("Archive: %d files, %d bytes", files, n)
		}
		dst := f.create(t, "b", 1<<20)
		if _, _, err := dst.Restore(bytes.NewReader(buf.Bytes())); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		got := archSnapshot(t, dst.Path())
		e := want["run.sh"]
		e.Mode &^= os.ModeSetuid
		want["run.sh"] = e
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("restored tree differs (-archived +restored):\n%s", diff)
		}
	})
}

// TestArchiveBounds: a tree whose files hold more than the workspace's
// quota is refused, and so is an archive that names a path outside it.
func TestArchiveBounds(t *testing.T) {
	f := newFixture(t, false)
	ws := f.create(t, "a", 1<<20)
	f.plant(t, ws, "big", bytes.Repeat([]byte("x"), 1<<20+1))
	if _, _, err := ws.Archive(&bytes.Buffer{}, 0); !errors.Is(err, tmpfs.ErrArchive) {
		t.Errorf("Archive of a tree above its quota: %v, want ErrArchive", err)
	}
	must(t, os.Remove(filepath.Join(ws.Path(), "big")))
	f.plant(t, ws, "small", []byte("ok"))
	var buf bytes.Buffer
	if _, _, err := ws.Archive(&buf, 0); err != nil {
		t.Fatal(err)
	}
	// The same archive restored into a smaller workspace: ENOSPC, not a
	// write past the quota.
	small := f.create(t, "b", 1)
	if _, _, err := small.Restore(bytes.NewReader(buf.Bytes())); !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Restore above the quota: %v, want ENOSPC", err)
	}
	// An archive bound below the tree's size: refused while written.
	if _, _, err := ws.Archive(&bytes.Buffer{}, 1024); !errors.Is(err, tmpfs.ErrArchiveTooLarge) {
		t.Errorf("Archive above its bound: %v, want ErrArchiveTooLarge", err)
	}
	evil := tarOf(t, "../escape", "x")
	third := f.create(t, "c", 1<<20)
	if _, _, err := third.Restore(bytes.NewReader(evil)); !errors.Is(err, tmpfs.ErrArchive) {
		t.Errorf("Restore of ../escape: %v, want ErrArchive", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(third.Path()), "escape")); err == nil {
		t.Error("Restore wrote outside the workspace")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// tarOf is a tar stream of one file name holding data.
func tarOf(t *testing.T, name, data string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	must(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}))
	_, err := tw.Write([]byte(data))
	must(t, err)
	must(t, tw.Close())
	return buf.Bytes()
}

// BenchmarkParkRestore is what a session's call adds to its step: the
// workspace (four small files, or one of 1 MiB) archived out of one
// slot's workspace and restored into another's.
func BenchmarkParkRestore(b *testing.B) {
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"small", map[string]string{"in/a.csv": "id,n\n1,2\n", "out/r.json": `{"n":1}`, "run.sh": "echo hi\n", "tmp/x": "x"}},
		{"1MiB", map[string]string{"in/blob": strings.Repeat("x", 1<<20)}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b, os.Geteuid() == 0)
			src := f.create(b, "a", 8<<20)
			if _, err := src.WriteFiles(tc.files); err != nil {
				b.Fatal(err)
			}
			dst := f.slot(b, "b")
			var buf bytes.Buffer
			b.ResetTimer()
			for range b.N {
				buf.Reset()
				if _, _, err := src.Archive(&buf, 0); err != nil {
					b.Fatal(err)
				}
				ws, err := dst.Create(8 << 20)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := ws.Restore(bytes.NewReader(buf.Bytes())); err != nil {
					b.Fatal(err)
				}
				if err := ws.Remove(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
