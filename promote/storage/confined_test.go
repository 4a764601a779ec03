//go:build unix

package storage_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/promote/storage"
)

// TestReadFileConfined: a publication's files are read beneath it, and
// only regular files with one link that are not links themselves (stores
// write nothing else): a link out of it or within it, a hard link, a FIFO
// (which would block a plain open), a directory are refused, quickly, and
// so is a FIFO in place of the publication itself.
func TestReadFileConfined(t *testing.T) {
	ctx := context.Background()
	where := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret.json")
	for name, body := range map[string]string{secret: `{"k": "hunter2"}`, filepath.Join(where, "result.json"): `{"n": 1}`} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(secret, filepath.Join(where, "out.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("result.json", filepath.Join(where, "same.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(secret, filepath.Join(where, "hard.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(where, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(where, "dir.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	fifoWhere := filepath.Join(t.TempDir(), "t1")
	if err := syscall.Mkfifo(fifoWhere, 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, tc := range []struct{ where, name, want string }{
		{where, "out.json", "symbolic link"},
		{where, "same.json", "symbolic link"},
		{where, "hard.json", "2 hard links"},
		{where, "fifo.json", "not a regular file"},
		{where, "dir.json", "not a regular file"},
		{where, "../secret.json", "not a file name of a publication"},
		{fifoWhere, "manifest.json", "not a directory"},
	} {
		b, err := storage.ReadFile(ctx, tc.where, tc.name, 1<<20)
		if err == nil || !strings.Contains(err.Error(), tc.want) || b != nil {
			t.Errorf("%s in %s: %q, %v; want an error with %q", tc.name, tc.where, b, err, tc.want)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusals took %s", d)
	}
	if b, err := storage.ReadFile(ctx, where, "result.json", 1<<20); err != nil || string(b) != `{"n": 1}` {
		t.Errorf("the publication's own file: %q, %v", b, err)
	}
}

// TestCheckWhere: the locations a record may give for its publication.
func TestCheckWhere(t *testing.T) {
	for _, tc := range []struct {
		where, run, task string
		ok               bool
	}{
		{"/var/lib/airlock/store/r1/t1", "r1", "t1", true},
		{"s3://bucket/r1/t1/", "r1", "t1", true},
		{"s3://bucket/pre/fix/r1/t1/", "r1", "t1", true},
		{"/r1/t1", "r1", "t1", false},             // the store would be /
		{"/etc", "r1", "t1", false},               // not the run's publication
		{"/store/r2/t1", "r1", "t1", false},       // another run's
		{"/store/r1/t1/", "r1", "t1", false},      // not clean
		{"/store/x/../r1/t1", "r1", "t1", false},  // not clean
		{"store/r1/t1", "r1", "t1", false},        // relative
		{"s3://bucket/r1/t1", "r1", "t1", false},  // no trailing /
		{"s3://bucket/r2/t1/", "r1", "t1", false}, // another run's
		{"s3:///r1/t1/", "r1", "t1", false},       // no bucket
		{"/store/../t1", "..", "t1", false},       // a run id that is no name
		{"/store/r1/a/b", "r1", "a/b", false},     // a task id that is no name
		{"http://host/r1/t1/", "r1", "t1", false}, // not absolute, not S3
	} {
		err := storage.CheckWhere(tc.where, tc.run, tc.task)
		if (err == nil) != tc.ok {
			t.Errorf("CheckWhere(%q, %q, %q) = %v, want ok %v", tc.where, tc.run, tc.task, err, tc.ok)
		}
	}
}
