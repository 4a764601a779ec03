//go:build linux

package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCancelWhileStarting: a cancel that reaches the helper while it is
// still starting the step (here: the context ends before Run is called,
// as when a worker's shutdown begins just as a task takes its slot) stops
// the step as soon as it exists. The helper used to drop such a cancel:
// the step then ran on (its task handed back and run again by another
// worker meanwhile) until it ended, or until the slot gave up on the
// helper after the grace and five seconds and killed it.
func TestCancelWhileStarting(t *testing.T) {
	s, _ := setup(t)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		r, err := s.Run(ctx, step("sleep", "60"))
		took := time.Since(start)
		if errors.Is(err, ErrHelperDied) || err != nil || !r.Canceled || took > 3*time.Second {
			t.Fatalf("run %d, canceled before it started: took %s, %+v, %v; want canceled at once", i, took, r, err)
		}
		// The helper is still good, and a later step is not canceled by
		// the earlier cancel.
		r, err = s.Run(context.Background(), step("sh", "-c", "sleep 0.3; echo after"))
		if err != nil || r.Canceled || string(r.Stdout.Data) != "after\n" {
			t.Fatalf("run %d, the step after a canceled one: %+v, %v", i, r, err)
		}
	}
}
