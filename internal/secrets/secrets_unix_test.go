//go:build unix

package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestGetRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "FIFO"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "DIR"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "DEV")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "FIFO"), filepath.Join(dir, "LINK_TO_FIFO")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"FIFO", "DIR", "DEV", "LINK_TO_FIFO"} {
		// The environment does not stand in for a file that is there.
		t.Setenv(EnvPrefix+name, "from-env-value")
		v, err := get(t, Source{Dir: dir}, name)
		if err == nil || errors.Is(err, ErrMissing) || v != "" {
			t.Errorf("Get(%s) = %q, %v; want a refusal", name, v, err)
		}
		if err != nil && !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name the secret", err)
		}
	}
}
