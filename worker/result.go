//go:build linux

package worker

import (
	"context"
	"time"

	"github.com/hibiken/asynq"
)

// resultRetryFor bounds how long writeResult tries to store a record.
const resultRetryFor = 10 * time.Second

// writeResult stores a run's record as its task's result. Redis may fail
// for a moment (a restart: connections refused, then LOADING while it
// reads its AOF back; a failover): the write is tried again, for up to
// resultRetryFor and as long as ctx lasts, before the error is returned
// (report then has asynq run the task again rather than end it without a
// record).
func writeResult(ctx context.Context, t *asynq.Task, b []byte) error {
	deadline := time.Now().Add(resultRetryFor)
	delay := 100 * time.Millisecond
	for {
		_, err := t.ResultWriter().Write(b)
		if err == nil || ctx.Err() != nil || time.Now().Add(delay).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}
