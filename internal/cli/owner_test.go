//go:build unix

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDefaultRedisTrustsOnlyPrivateFiles: the dev URL file is read only
// when it and its directory are the user's own and writable by no one
// else; one that exists but is not is not read, and the default is then
// refused (Check), the error naming the file.
func TestDefaultRedisTrustsOnlyPrivateFiles(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	done, err := WriteDevURL("redis://127.0.0.1:7777/0")
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	if u, src := DefaultRedis(); u != "redis://127.0.0.1:7777/0" || src.From != FromDevFile || src.DevFile != DevURLFile() {
		t.Fatalf("own private file: %s, %+v", u, src)
	}
	refused := func(what string) {
		t.Helper()
		u, src := DefaultRedis()
		r := &Redis{URL: u, src: src}
		err := r.Check()
		if u != DefaultURL || src.From != FromDefault || src.DevErr == nil || err == nil ||
			!strings.HasPrefix(err.Error(), "-redis: not using the default redis://127.0.0.1:6379/0: the dev-mode URL file "+DevURLFile()+" exists but cannot be used: ") {
			t.Errorf("%s: %s, %+v, Check: %v; want the default refused, naming the file", what, u, src, err)
		}
		if _, _, oerr := r.Open(); oerr == nil || oerr.Error() != err.Error() {
			t.Errorf("%s: Open: %v, want Check's error", what, oerr)
		}
	}
	dir := filepath.Dir(DevURLFile())
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused("a file in a world-writable directory")
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(DevURLFile(), 0o666); err != nil {
		t.Fatal(err)
	}
	refused("a world-writable file")
	if err := os.Chmod(DevURLFile(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(DevURLFile(), []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused("an empty file")
	if os.Getuid() == 0 {
		if err := os.WriteFile(DevURLFile(), []byte("redis://127.0.0.1:7777/0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(DevURLFile(), 12345, 12345); err != nil {
			t.Fatal(err)
		}
		refused("another user's file")
	}
	// No file at all: the default, quietly.
	if err := os.Remove(DevURLFile()); err != nil {
		t.Fatal(err)
	}
	if u, src := DefaultRedis(); u != DefaultURL || src.From != FromDefault || src.DevErr != nil || (&Redis{URL: u, src: src}).Check() != nil {
		t.Errorf("no file: %s, %+v", u, src)
	}
}
