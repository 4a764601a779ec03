//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDefaultRedisTrustsOnlyPrivateFiles: the dev URL file is read only
// when it and its directory are the user's own and writable by no one
// else: a file in a directory others may write is ignored.
func TestDefaultRedisTrustsOnlyPrivateFiles(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	done, err := WriteDevURL("redis://127.0.0.1:7777/0")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if u, _ := DefaultRedis(); u != "redis://127.0.0.1:7777/0" {
		t.Fatalf("own private file: %s", u)
	}
	dir := filepath.Dir(DevURLFile())
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if u, _ := DefaultRedis(); u != "redis://127.0.0.1:6379/0" {
		t.Errorf("a file in a world-writable directory was trusted: %s", u)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(DevURLFile(), 0o666); err != nil {
		t.Fatal(err)
	}
	if u, _ := DefaultRedis(); u != "redis://127.0.0.1:6379/0" {
		t.Errorf("a world-writable file was trusted: %s", u)
	}
	if os.Getuid() == 0 {
		if err := os.Chmod(DevURLFile(), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(DevURLFile(), 12345, 12345); err != nil {
			t.Fatal(err)
		}
		if u, _ := DefaultRedis(); u != "redis://127.0.0.1:6379/0" {
			t.Errorf("another user's file was trusted: %s", u)
		}
	}
}
