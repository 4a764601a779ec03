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
