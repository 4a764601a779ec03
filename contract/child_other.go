//go:build !linux

package contract

import (
	"context"
	"fmt"
	"time"
)

// Validation children run on Linux only, where the worker runs: elsewhere
// a validation too costly for the calling process is refused.
func (c *Child) run(context.Context, *Schema, []byte, time.Time) ([]Violation, error) {
	return nil, fmt.Errorf("%w: validation children run on Linux only", ErrTooCostly)
}

// Describe says how c confines validations, for a run record's isolation.
func (c *Child) Describe() string {
	return fmt.Sprintf("in the worker up to %d units of work (the cost model); costlier validations are refused (validation children run on Linux only)", InProcessUnits)
}

// MaybeValidator does nothing outside Linux.
func MaybeValidator() {}
