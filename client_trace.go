package airlock

import (
	"context"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/tasks"
)

// runTask is the asynq task of a run's payload, with the W3C trace
// context of ctx's span (traceparent, tracestate) in its headers when ctx
// holds one: the worker's spans of the run are then children of the
// caller's, and its record's trace_id is the caller's trace id. The
// headers are not part of the payload: neither the task's idempotent id
// nor its approval's id depends on them.
func runTask(ctx context.Context, payload []byte) *asynq.Task {
	if h := tracing.Inject(ctx); h != nil {
		return asynq.NewTaskWithHeaders(tasks.TypeRun, payload, h)
	}
	return asynq.NewTask(tasks.TypeRun, payload)
}
