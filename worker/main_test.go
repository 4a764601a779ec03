//go:build linux

package worker

import (
	"os"
	"testing"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
)

// TestMain lets the test binary serve as what a Worker re-executes: a
// slot's sandbox helper, or a validation child.
func TestMain(m *testing.M) {
	sandbox.MaybeHelper()
	contract.MaybeValidator()
	os.Exit(m.Run())
}
