package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkBareExec is the baseline: os/exec of /bin/true, no confinement.
func BenchmarkBareExec(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewSlot is the once-per-slot cost: starting a helper (re-exec,
// namespaces, uid drop, Landlock) and stopping it.
func BenchmarkNewSlot(b *testing.B) {
	root := b.TempDir()
	os.Chmod(filepath.Dir(root), 0o711)
	os.Chmod(root, 0o711)
	cfg := SlotConfig{UID: -1, GID: -1, SlotDir: root, Landlock: true, Stderr: os.Stderr}
	if os.Geteuid() == 0 {
		lease, err := LeaseUID(filepath.Join(os.TempDir(), "airlock-test-uids"), 300000, 1000)
		if err != nil {
			b.Fatal(err)
		}
		defer lease.Release()
		cfg.UID, cfg.GID, cfg.Namespaces = lease.UID, lease.UID, true
	}
	for i := 0; i < b.N; i++ {
		s, err := NewSlot(cfg)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
