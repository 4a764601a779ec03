//go:build linux

package bench

import (
	"os"
	"testing"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
)

// TestMain lets the test binary serve as what the harness re-executes: a
// slot helper (sandbox), or a worker or baseline server (MaybeChild).
func TestMain(m *testing.M) {
	sandbox.MaybeHelper()
	contract.MaybeValidator()
	MaybeChild()
	os.Exit(m.Run())
}
