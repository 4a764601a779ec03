//go:build linux

package tmpfs_test

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tmpfs"
)

// TestQuotaEnforced runs a step as an unprivileged uid that writes past the
// quota: the kernel stops it with ENOSPC, Usage says full, and the data went
// to the tmpfs, not to the disk below the root.
func TestQuotaEnforced(t *testing.T) {
	f := newFixture(t, true)
	dd, err := exec.LookPath("dd")
	if err != nil {
		t.Skip("needs dd:", err)
	}
	const quota = 1 << 20
	ws := f.create(t, "t1", quota)

	cmd := exec.Command(dd, "if=/dev/zero", "of=in/big", "bs=64k", "count=32") // twice the quota
	cmd.Dir = ws.Path()
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: stepUID, Gid: stepUID}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("dd wrote 2 MiB into a 1 MiB workspace:\n%s", out)
	}
	if !strings.Contains(string(out), "No space left on device") {
		t.Fatalf("dd failed, but not with ENOSPC: %v\n%s", err, out)
	}

	big := filepath.Join(ws.Path(), "in/big")
	var st unix.Stat_t
	if err := unix.Lstat(big, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != stepUID || st.Size == 0 || st.Size > quota {
		t.Errorf("in/big: uid %d, %d bytes; want written by uid %d, 0 < size <= %d", st.Uid, st.Size, stepUID, quota)
	}
	used, full, err := ws.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if !full || used < st.Size || used > quota {
		t.Errorf("Usage() = %d, %v; want full, %d <= used <= %d", used, full, st.Size, quota)
	}

	// The bytes are on the workspace's tmpfs, not on the root's filesystem.
	var rootSt unix.Stat_t
	if err := unix.Stat(f.root, &rootSt); err != nil {
		t.Fatal(err)
	}
	var fsSt unix.Statfs_t
	if err := unix.Statfs(big, &fsSt); err != nil {
		t.Fatal(err)
	}
	if st.Dev == rootSt.Dev || fsSt.Type != unix.TMPFS_MAGIC {
		t.Errorf("in/big is on device %d (root's: %d), fs type %#x; want a tmpfs of its own", st.Dev, rootSt.Dev, fsSt.Type)
	}

	// Files the spec provides count against the same quota.
	ws2 := f.create(t, "t2", 64<<10)
	n, err := ws2.WriteFiles(map[string]string{"in/input.bin": strings.Repeat("x", 128<<10)})
	if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "in/input.bin") {
		t.Errorf("WriteFiles past the quota: %v, want ENOSPC naming in/input.bin", err)
	}
	if n > 64<<10 {
		t.Errorf("WriteFiles wrote %d bytes into a 64 KiB workspace", n)
	}
}

func TestUsage(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "t1", 1<<20)
		used, full, err := ws.Usage()
		if err != nil || used != 0 || full {
			t.Errorf("Usage() of an empty workspace = %d, %v, %v; want 0, false, nil", used, full, err)
		}

		if _, err := ws.WriteFiles(map[string]string{"in/data": strings.Repeat("d", 10000)}); err != nil {
			t.Fatal(err)
		}
		// A hard link is counted once; a symlink to a big file outside not at all.
		if err := os.Link(filepath.Join(ws.Path(), "in/data"), filepath.Join(ws.Path(), "out/data")); err != nil {
			t.Fatal(err)
		}
		outside := filepath.Join(t.TempDir(), "big")
		if err := os.WriteFile(outside, bytes.Repeat([]byte("b"), 2<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(ws.Path(), "out/big")); err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(ws.Path(), "in/data"), &st); err != nil {
			t.Fatal(err)
		}
		used, full, err = ws.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if want := st.Blocks * 512; used != want || full {
			t.Errorf("Usage() = %d, %v; want %d (the blocks of in/data), not full", used, full, want)
		}

		// The same data in a workspace whose quota it exceeds: full.
		small := f.create(t, "t2", 4096)
		if _, err := small.WriteFiles(map[string]string{"in/data": strings.Repeat("d", 4096)}); err != nil {
			t.Fatal(err)
		}
		if used, full, err := small.Usage(); err != nil || !full || used < 4096 {
			t.Errorf("Usage() of a workspace at its quota = %d, %v, %v; want >= 4096, full", used, full, err)
		}
	})
}

// TestUsageDeepTree checks the bound of the scan: a tree deeper than it can
// walk is reported full rather than measured in part.
func TestUsageDeepTree(t *testing.T) {
	f := newFixture(t, false)
	ws := f.create(t, "t1", 1<<30)
	deep := filepath.Join(ws.Path(), "out", strings.Repeat("d/", 300))
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	used, full, err := ws.Usage()
	if err != nil || !full {
		t.Errorf("Usage() of a 300-level tree = %d, %v, %v; want full", used, full, err)
	}
	files, truncated, err := ws.List("out", 1000)
	if err != nil || !truncated || len(files) >= 300 {
		t.Errorf("List of a 300-level tree: %d entries, truncated %v, %v; want truncated below 300", len(files), truncated, err)
	}
}

func TestWriteFiles(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "t1", 1<<20)
		files := map[string]string{
			"in/a/b/c.txt": "deep",
			"in/a/top.txt": "shallow",
			"run.sh":       "#!/bin/sh\necho hi\n",
			"in/empty":     "",
		}
		n, err := ws.WriteFiles(files)
		if err != nil {
			t.Fatalf("WriteFiles: %v", err)
		}
		var total int64
		for _, data := range files {
			total += int64(len(data))
		}
		if n != total {
			t.Errorf("WriteFiles = %d bytes, want %d", n, total)
		}

		type written struct {
			Entry entry
			Data  string
		}
		want, got := map[string]written{}, map[string]written{}
		for rel, data := range files {
			want[rel] = written{entry{"file", 0o600, f.uid, f.gid}, data}
			b, err := os.ReadFile(filepath.Join(ws.Path(), rel))
			if err != nil {
				t.Fatal(err)
			}
			got[rel] = written{lstat(t, filepath.Join(ws.Path(), rel)), string(b)}
		}
		for _, rel := range []string{"in/a", "in/a/b"} {
			want[rel] = written{Entry: entry{"dir", 0o700, f.uid, f.gid}}
			got[rel] = written{Entry: lstat(t, filepath.Join(ws.Path(), rel))}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("written files (-want +got):\n%s", diff)
		}

		for _, bad := range []string{"", ".", "..", "../x", "/etc/x", "in/../../x", "in//x", "in/./x", "in/"} {
			if _, err := ws.WriteFiles(map[string]string{bad: "x"}); !errors.Is(err, tmpfs.ErrBadPath) {
				t.Errorf("WriteFiles(%q) = %v, want ErrBadPath", bad, err)
			}
		}
		if _, err := ws.WriteFiles(map[string]string{"in/a/top.txt": "again"}); !errors.Is(err, fs.ErrExist) {
			t.Errorf("WriteFiles over an existing file = %v, want ErrExist", err)
		}
		if _, err := ws.WriteFiles(map[string]string{"run.sh/x": "x"}); err == nil {
			t.Error("WriteFiles below a file succeeded")
		}
	})
}

// TestWriteFilesSymlinks plants symlinks where WriteFiles will write and
// checks that nothing is written through them.
func TestWriteFilesSymlinks(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		forEachResolver(t, func(t *testing.T) {
			f := newFixture(t, mount)
			ws := f.create(t, "t1", 1<<20)
			victimDir := t.TempDir()
			victimFile := filepath.Join(victimDir, "victim.txt")
			if err := os.WriteFile(victimFile, []byte("original"), 0o600); err != nil {
				t.Fatal(err)
			}
			for link, target := range map[string]string{"in/dir": victimDir, "in/file": victimFile, "in/dangling": filepath.Join(victimDir, "new.txt")} {
				if err := os.Symlink(target, filepath.Join(ws.Path(), link)); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []struct {
				rel  string
				want error
			}{
				{"in/dir/x.txt", tmpfs.ErrSymlink},
				{"in/dir/sub/x.txt", tmpfs.ErrSymlink},
				{"in/file", fs.ErrExist},
				{"in/dangling", fs.ErrExist},
			} {
				if _, err := ws.WriteFiles(map[string]string{c.rel: "evil"}); !errors.Is(err, c.want) {
					t.Errorf("WriteFiles(%q) = %v, want %v", c.rel, err, c.want)
				}
			}
			entries, err := os.ReadDir(victimDir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 {
				t.Errorf("the symlinks' target directory has %d entries, want only victim.txt", len(entries))
			}
			if b, err := os.ReadFile(victimFile); err != nil || string(b) != "original" {
				t.Errorf("victim file = %q, %v; want it untouched", b, err)
			}
		})
	})
}

func TestReadFile(t *testing.T) {
	passwd, err := os.ReadFile("/etc/passwd")
	if err != nil || len(passwd) == 0 {
		t.Skip("needs a readable /etc/passwd to try to leak:", err)
	}
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "t1", 1<<20)
		const max = 100
		exact := bytes.Repeat([]byte("e"), max)
		f.plant(t, ws, "out/ok.txt", []byte("hello"))
		f.plant(t, ws, "out/exact", exact)
		f.plant(t, ws, "out/big", bytes.Repeat([]byte("b"), max+1))
		f.plant(t, ws, "out/empty", nil)
		f.plant(t, ws, "in/ok.txt", []byte("hello"))
		for link, target := range map[string]string{"out/passwd": "/etc/passwd", "out/etc": "/etc", "out/rel": "ok.txt", "out/in": "../in"} {
			if err := os.Symlink(target, filepath.Join(ws.Path(), link)); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(ws.Path(), "out/sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(ws.Path(), "out/sock")})
		unix.Close(sock)
		if err != nil {
			t.Fatal(err)
		}

		type tc struct {
			rel      string
			want     []byte
			wantErr  error
			wantType string // of a *TypeError
		}
		cases := []tc{
			{rel: "out/ok.txt", want: []byte("hello")},
			{rel: "out/exact", want: exact},
			{rel: "out/empty", want: []byte{}},
			{rel: "out/big", wantErr: tmpfs.ErrTooLarge},
			{rel: "out/passwd", wantErr: tmpfs.ErrNotRegular, wantType: "symlink"},
			{rel: "out/rel", wantErr: tmpfs.ErrNotRegular, wantType: "symlink"},
			{rel: "out/etc", wantErr: tmpfs.ErrNotRegular, wantType: "symlink"},
			{rel: "out/etc/passwd", wantErr: tmpfs.ErrSymlink},
			{rel: "out/in/ok.txt", wantErr: tmpfs.ErrSymlink}, // a link that stays inside is not followed either
			{rel: "out/sub", wantErr: tmpfs.ErrNotRegular, wantType: "dir"},
			{rel: "out/sock", wantErr: tmpfs.ErrNotRegular, wantType: "socket"},
			{rel: "out/missing", wantErr: fs.ErrNotExist},
			{rel: "../../../../../../etc/passwd", wantErr: tmpfs.ErrBadPath},
			{rel: "out/../../t1/out/ok.txt", wantErr: tmpfs.ErrBadPath},
			{rel: "..", wantErr: tmpfs.ErrBadPath},
			{rel: "/etc/passwd", wantErr: tmpfs.ErrBadPath},
			{rel: "out/./ok.txt", wantErr: tmpfs.ErrBadPath},
			{rel: "", wantErr: tmpfs.ErrBadPath},
			{rel: "out/ok.txt/x", wantErr: syscall.ENOTDIR},
		}
		if os.Geteuid() == 0 {
			// A device node (nodev makes opening it fail on tmpfs), a file
			// the step uid does not own (a hard link to a host file would
			// be one), a mount point inside the workspace.
			if err := unix.Mknod(filepath.Join(ws.Path(), "out/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws.Path(), "out/host"), passwd, 0o644); err != nil {
				t.Fatal(err)
			}
			mnt := filepath.Join(ws.Path(), "out/mnt")
			if err := os.Mkdir(mnt, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount("test", mnt, "tmpfs", 0, "size=64k"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
			f.plant(t, ws, "out/mnt/f", []byte("other fs"))
			cases = append(cases,
				tc{rel: "out/null", wantErr: tmpfs.ErrNotRegular, wantType: "device"},
				tc{rel: "out/host", wantErr: tmpfs.ErrNotOwned},
				tc{rel: "out/mnt/f", wantErr: syscall.EXDEV},
			)
		}

		forEachResolver(t, func(t *testing.T) {
			for _, c := range cases {
				got, err := ws.ReadFile(c.rel, max)
				if c.wantErr == nil {
					if err != nil {
						t.Errorf("ReadFile(%q): %v", c.rel, err)
					} else if diff := cmp.Diff(c.want, got); diff != "" {
						t.Errorf("ReadFile(%q) (-want +got):\n%s", c.rel, diff)
					}
					continue
				}
				if !errors.Is(err, c.wantErr) {
					t.Errorf("ReadFile(%q) = %v, want %v", c.rel, err, c.wantErr)
				}
				if got != nil || bytes.Contains([]byte(errString(err)), passwd[:min(len(passwd), 16)]) {
					t.Errorf("ReadFile(%q) returned data %q along with error %v", c.rel, got, err)
				}
				var te *tmpfs.TypeError
				if errors.As(err, &te) != (c.wantType != "") || (te != nil && te.Type != c.wantType) {
					t.Errorf("ReadFile(%q) = %v, want a TypeError of type %q", c.rel, err, c.wantType)
				}
			}
		})
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestReadFileFIFO checks that ReadFile refuses a FIFO without blocking on it
// (nobody ever writes to it).
func TestReadFileFIFO(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		forEachResolver(t, func(t *testing.T) {
			f := newFixture(t, mount)
			ws := f.create(t, "t1", 1<<20)
			if err := unix.Mkfifo(filepath.Join(ws.Path(), "out/pipe"), 0o600); err != nil {
				t.Fatal(err)
			}
			type result struct {
				data []byte
				err  error
			}
			done := make(chan result, 1)
			go func() {
				data, err := ws.ReadFile("out/pipe", 1<<20)
				done <- result{data, err}
			}()
			select {
			case r := <-done:
				var te *tmpfs.TypeError
				if !errors.Is(r.err, tmpfs.ErrNotRegular) || !errors.As(r.err, &te) || te.Type != "fifo" || r.data != nil {
					t.Errorf("ReadFile(fifo) = %q, %v; want a fifo TypeError", r.data, r.err)
				}
			case <-time.After(10 * time.Second):
				// Unblock the reader so that the goroutine ends.
				if w, err := os.OpenFile(filepath.Join(ws.Path(), "out/pipe"), os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatal("ReadFile blocked on a FIFO for 10s")
			}
		})
	})
}

func TestList(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "t1", 1<<20)
		want := []record.File{
			{Path: "out/a.txt", Bytes: 5, Type: "file"},
			{Path: "out/etc", Type: "symlink"},
			{Path: "out/passwd", Type: "symlink"},
			{Path: "out/pipe", Type: "fifo"},
			{Path: "out/sock", Type: "socket"},
			{Path: "out/sub", Type: "dir"},
			{Path: "out/sub/b.txt", Bytes: 3, Type: "file"},
			{Path: "out/sub/deeper", Type: "dir"},
			{Path: "out/sub/deeper/c", Bytes: 0, Type: "file"},
			{Path: "out/z", Bytes: 26, Type: "file"},
		}
		p := func(rel string) string { return filepath.Join(ws.Path(), rel) }
		if err := os.MkdirAll(p("out/sub/deeper"), 0o700); err != nil {
			t.Fatal(err)
		}
		f.plant(t, ws, "out/a.txt", []byte("hello"))
		f.plant(t, ws, "out/sub/b.txt", []byte("abc"))
		f.plant(t, ws, "out/sub/deeper/c", nil)
		f.plant(t, ws, "out/z", []byte("abcdefghijklmnopqrstuvwxyz"))
		for link, target := range map[string]string{"out/etc": "/etc", "out/passwd": "/etc/passwd"} {
			if err := os.Symlink(target, p(link)); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mkfifo(p("out/pipe"), 0o600); err != nil {
			t.Fatal(err)
		}
		sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Bind(sock, &unix.SockaddrUnix{Name: p("out/sock")})
		unix.Close(sock)
		if err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := unix.Mknod(p("out/dev"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))); err != nil {
				t.Fatal(err)
			}
			want = slices.Insert(want, 1, record.File{Path: "out/dev", Type: "device"})
		}

		got, truncated, err := ws.List("out", 1000)
		if err != nil || truncated {
			t.Fatalf("List(out) truncated %v, %v", truncated, err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("List(out) (-want +got):\n%s", diff)
		}

		// Bounded: exactly len(want) fits, one less is truncated.
		if got, truncated, err := ws.List("out", len(want)); err != nil || truncated || len(got) != len(want) {
			t.Errorf("List(out, %d) = %d entries, truncated %v, %v; want all", len(want), len(got), truncated, err)
		}
		for _, n := range []int{0, 3, len(want) - 1} {
			got, truncated, err := ws.List("out", n)
			if err != nil || !truncated || len(got) != n {
				t.Errorf("List(out, %d) = %d entries, truncated %v, %v; want %d, truncated", n, len(got), truncated, err, n)
			}
			for _, e := range got {
				if !slices.Contains(want, e) {
					t.Errorf("List(out, %d) made up %+v", n, e)
				}
			}
		}

		got, _, err = ws.List("out/sub", 1000)
		if diff := cmp.Diff(want[len(want)-4:len(want)-1], got); err != nil || diff != "" {
			t.Errorf("List(out/sub) %v (-want +got):\n%s", err, diff)
		}
		if got, truncated, err := ws.List("out/missing", 1000); err != nil || truncated || len(got) != 0 {
			t.Errorf("List(missing) = %v, %v, %v; want empty", got, truncated, err)
		}
		for rel, typ := range map[string]string{"out/etc": "symlink", "out/a.txt": "file", "out/pipe": "fifo"} {
			_, _, err := ws.List(rel, 1000)
			var te *tmpfs.TypeError
			if !errors.Is(err, tmpfs.ErrNotDir) || !errors.As(err, &te) || te.Type != typ {
				t.Errorf("List(%q) = %v, want a %s TypeError", rel, err, typ)
			}
		}
		if _, _, err := ws.List("out/etc/ssl", 1000); !errors.Is(err, tmpfs.ErrSymlink) {
			t.Errorf("List(out/etc/ssl) = %v, want ErrSymlink", err)
		}
		if _, _, err := ws.List("../..", 1000); !errors.Is(err, tmpfs.ErrBadPath) {
			t.Errorf("List(../..) = %v, want ErrBadPath", err)
		}
		all, _, err := ws.List(".", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, top := range []string{"in", "out", "tmp"} {
			if !slices.Contains(all, record.File{Path: top, Type: "dir"}) {
				t.Errorf("List(.) lacks %s: %+v", top, all)
			}
		}
	})
}

// ReplaceFile replaces what a step left at a path (a link, a FIFO, a file)
// without opening it; a link among the directories is refused, and a
// directory at the path is not replaced.
func TestReplaceFile(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "t1", 1<<20)
		victim := filepath.Join(t.TempDir(), "victim.txt")
		if err := os.WriteFile(victim, []byte("original"), 0o600); err != nil {
			t.Fatal(err)
		}
		in := filepath.Join(ws.Path(), "in")
		if err := os.MkdirAll(filepath.Join(in, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(in, "link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Dir(victim), filepath.Join(in, "dirlink")); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(filepath.Join(in, "fifo"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"in/link", "in/fifo", "in/fifo", "in/new/file"} {
			done := make(chan error, 1)
			go func() { _, err := ws.ReplaceFile(rel, []byte("mine")); done <- err }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ReplaceFile(%s): %v", rel, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("ReplaceFile(%s) blocked", rel)
			}
			fi, err := os.Lstat(filepath.Join(ws.Path(), rel))
			if err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s after ReplaceFile: %v, %v", rel, fi, err)
			}
		}
		if b, _ := os.ReadFile(victim); string(b) != "original" {
			t.Errorf("the link's target was written: %q", b)
		}
		if _, err := ws.ReplaceFile("in/dirlink/x", []byte("evil")); !errors.Is(err, tmpfs.ErrSymlink) {
			t.Errorf("through a directory link: %v, want ErrSymlink", err)
		}
		if _, err := ws.ReplaceFile("in/sub", []byte("x")); err == nil {
			t.Error("a directory was replaced by a file")
		}
		if entries, _ := os.ReadDir(in); len(entries) != 5 { // sub, link, dirlink, fifo, new: no temp file left
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			t.Errorf("in/ holds %v", names)
		}
	})
}
