// Package airlock is the Go API of Airlock for app backends: it enqueues a
// task spec (tasks.Spec) as an asynq task for an Airlock worker to run in a
// confined workspace, and waits for the run record (record.Run) the worker
// stores as the task's result.
//
// A spec is checked before it is enqueued, against the limits.Policy the
// queue's workers published (internal/redis/queuepolicy) or, when none did, the
// default policy; the worker checks it again. A spec with an idempotency_key
// is enqueued at most once per queue while its task is kept: pending,
// running, retrying, archived, or completed within the retention period.
package airlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-run/airlock/internal/redis/fairshare"
	"github.com/airlock-run/airlock/tasks"
)

// Defaults of ClientOptions.
const (
	DefaultRetention = 24 * time.Hour
	DefaultGrace     = 30 * time.Second
)

// ClientOptions tune a Client. The zero value gives the defaults.
type ClientOptions struct {
	// Retention is how long a finished task, and so its run record, is kept
	// (asynq.Retention). Zero or negative means DefaultRetention: Wait
	// needs the record to be kept.
	Retention time.Duration
	// MaxPayload caps the encoded spec in bytes; zero or negative means
	// tasks.DefaultMaxPayload.
	MaxPayload int
	// Grace is added to the spec's timeout to make asynq's own deadline for
	// the task, so that the worker can kill the steps at the spec's timeout
	// and still store the record. Zero means DefaultGrace, negative none.
	Grace time.Duration
	// Prefix is the prefix of Airlock's keys in Redis (published limits,
	// events, approvals): the workers' -prefix. "" means "airlock:".
	Prefix string
	// Principal is who asks, stamped on every spec Enqueue takes (its
	// principal field, in the run record, events and approvals, and what
	// a policy's principal condition matches): a front end that serves
	// one caller sets it (the MCP server's -principal, enqueue
	// -principal). Enqueue refuses a spec that names another principal.
	// "" stamps nothing: a spec's own principal, if any, is kept (the
	// HTTP API stamps each spec with its token's name itself).
	Principal string
	// OpenWait is how long OpenSession waits for a worker to take a
	// session before it gives up (ErrNoRoom). Zero means DefaultOpenWait.
	OpenWait time.Duration
	// Store is where Result reads promoted outputs: the workers' -store
	// as this process sees it, a directory (<store>/<run_id>/<task_id>/)
	// or s3://bucket/prefix (enqueue, api and mcp -store). "" reads where
	// the run's record says its output was published, which workers give
	// as an absolute path or an s3:// URL; a record of an older worker
	// that gives a path relative to its directory is read in the store
	// the queue's workers announce (queuepolicy.Announce), and is an
	// error naming them when they announce several.
	Store string
}

func (o ClientOptions) withDefaults() ClientOptions {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.MaxPayload <= 0 {
		o.MaxPayload = tasks.DefaultMaxPayload
	}
	switch {
	case o.Grace == 0:
		o.Grace = DefaultGrace
	case o.Grace < 0:
		o.Grace = 0
	}
	return o
}

// ErrQuota is matched (errors.Is) by the error of a call its principal's
// quota refused (the worker's policy file, quotas: section): a
// *QuotaError names the quota, its value and when to try again. The HTTP
// API answers it 429 with Retry-After, the enqueue CLI exits 2.
var ErrQuota = fairshare.ErrQuota

// QuotaError is a refusal of a principal's quota (ErrQuota).
type QuotaError = fairshare.QuotaError

// ErrNotFound is matched (errors.Is) by the error of Wait when the task is
// not in the queue.
var ErrNotFound = errors.New("task not found")

// NotFoundError is the error of Wait for a task that is not in its queue:
// it never was, or it was kept for less than the wait (its retention ran
// out, or it was deleted).
type NotFoundError struct {
	Queue, TaskID string
	Err           error // asynq's error
}

// Error names the task and queue, with a hint.
func (e *NotFoundError) Error() string {
	if e.Queue == "" {
		return fmt.Sprintf("airlock: task %q not found in any queue (check the id; a finished task is kept only for the retention period)", e.TaskID)
	}
	return fmt.Sprintf("airlock: task %q not found in queue %q (check the queue and id; a finished task is kept only for the retention period)", e.TaskID, e.Queue)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// Unwrap returns asynq's error.
func (e *NotFoundError) Unwrap() error { return e.Err }
