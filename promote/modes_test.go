//go:build unix

package promote_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/promote"
)

// TestSinkModes: the store is the worker's alone (0700/0600), or readable
// by the group the operator names (0750/0640).
func TestSinkModes(t *testing.T) {
	for _, tc := range []struct {
		group            int
		dirMode, fileMod os.FileMode
	}{{0, 0o700, 0o600}, {os.Getegid() + 1, 0o750, 0o640}} {
		if tc.group != 0 && os.Geteuid() != 0 {
			continue // chown to another group needs root
		}
		dir := filepath.Join(t.TempDir(), "store")
		s := &promote.FS{Dir: dir, ReadGroup: tc.group}
		m := &approve.Manifest{RunID: "r", TaskID: "t", ApprovalID: "a"}
		if _, err := s.Publish(context.Background(), m, map[string][]byte{"out/x.csv": []byte("1")}); err != nil {
			t.Fatal(err)
		}
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			want := tc.fileMod
			if d.IsDir() {
				want = tc.dirMode
			}
			if fi.Mode().Perm() != want {
				t.Errorf("group %d: %s has mode %04o, want %04o", tc.group, p, fi.Mode().Perm(), want)
			}
			if tc.group != 0 && int(fi.Sys().(*syscall.Stat_t).Gid) != tc.group {
				t.Errorf("%s: gid %d, want %d", p, fi.Sys().(*syscall.Stat_t).Gid, tc.group)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
