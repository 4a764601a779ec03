//go:build linux

package tmpfs_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWriteFilesMode: a file given a mode gets it (0755: the workspace's
// uid runs it as ./run.sh), the others 0600 (running one is "permission
// denied"); a mode beyond the permission bits writes nothing.
func TestWriteFilesMode(t *testing.T) {
	forEachMode(t, func(t *testing.T, mount bool) {
		f := newFixture(t, mount)
		ws := f.create(t, "t1", 1<<20)
		files := map[string]string{"run.sh": "#!/bin/sh\necho ran as $(id -u)\n", "bin/tool": "#!/bin/sh\necho tool\n", "plain.sh": "#!/bin/sh\necho no\n"}
		modes := map[string]fs.FileMode{"run.sh": 0o755, "bin/tool": 0o700}
		if _, err := ws.WriteFilesMode(files, modes); err != nil {
			t.Fatal(err)
		}
		for rel, want := range map[string]os.FileMode{"run.sh": 0o755, "bin/tool": 0o700, "plain.sh": 0o600} {
			if e := lstat(t, filepath.Join(ws.Path(), rel)); e.Perm != want || e.UID != f.uid {
				t.Errorf("%s: %+v, want mode %#o owned by %d", rel, e, want, f.uid)
			}
		}
		run := func(prog string) (string, error) {
			cmd := exec.Command(prog)
			cmd.Dir = ws.Path()
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			if os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(f.uid), Gid: uint32(f.gid)}}
			}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := run("./run.sh"); err != nil || !strings.HasPrefix(out, "ran as ") {
			t.Errorf("./run.sh (0755): %v %s", err, out)
		}
		if out, err := run("./bin/tool"); err != nil || out != "tool\n" {
			t.Errorf("./bin/tool (0700): %v %s", err, out)
		}
		if _, err := run("./plain.sh"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("./plain.sh (0600): %v, want permission denied", err)
		}

		for _, bad := range []fs.FileMode{0o4755, fs.ModeSetuid | 0o755, fs.ModeDir | 0o755} {
			if _, err := ws.WriteFilesMode(map[string]string{"x.sh": "x"}, map[string]fs.FileMode{"x.sh": bad}); err == nil || !strings.Contains(err.Error(), "at most 0777") {
				t.Errorf("mode %v: %v, want refused", bad, err)
			}
			if _, err := os.Lstat(filepath.Join(ws.Path(), "x.sh")); err == nil {
				t.Errorf("mode %v: x.sh was written", bad)
			}
		}
	})
}
