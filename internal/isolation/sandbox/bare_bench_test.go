//go:build linux

package sandbox

import (
	"os/exec"
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
	cfg := testConfig(b)
	for i := 0; i < b.N; i++ {
		s, err := NewSlot(cfg)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}
