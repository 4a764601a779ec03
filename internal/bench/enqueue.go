//go:build linux

package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// enqueue enqueues spec for a server of sys: through Airlock's client for
// Airlock (its checks, its principal's fair share), and as a bare asynq
// client does for the baselines, which are bare asynq servers: the same
// payload, one asynq enqueue, nothing else.
func (h *harness) enqueue(ctx context.Context, sys string, spec *tasks.Spec) error {
	if sys == systemAirlock {
		_, err := h.client.Enqueue(ctx, spec)
		return err
	}
	if err := spec.Prepare(limits.DefaultPolicy()); err != nil {
		return err
	}
	payload, err := spec.Encode(tasks.DefaultMaxPayload)
	if err != nil {
		return err
	}
	_, err = h.bare.EnqueueContext(ctx, asynq.NewTask(tasks.TypeRun, payload), asynq.Queue(spec.Queue),
		asynq.MaxRetry(*spec.MaxRetry), asynq.Timeout(time.Duration(spec.Timeout)+time.Minute), asynq.Retention(2*time.Hour))
	if err != nil {
		return fmt.Errorf("enqueueing run %s in queue %q: %w", spec.RunID, spec.Queue, err)
	}
	return nil
}
