// Package asynqkey names the Redis keys of asynq v0.26 (its internal
// base package) that Airlock reads or writes directly, where asynq's API
// would cost round trips: one place to change when asynq changes them.
// Tests against a real asynq (worker's TestStoreRecordWhereAsynqReadsIt,
// asynqkey's own) fail when the names drift.
package asynqkey

import "strings"

// Queues is the set of every queue's name.
const Queues = "asynq:queues"

// Prefix is what every key of queue starts with: "asynq:{queue}:".
func Prefix(queue string) string { return "asynq:{" + queue + "}:" }

// QueueOf returns the queue a key of a queue (Prefix) belongs to.
func QueueOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "asynq:{")
	if !ok {
		return "", false
	}
	q, _, ok := strings.Cut(rest, "}:")
	return q, ok
}

// Task is where asynq keeps a task of queue: a hash whose "state" field is
// the task's state and "result" its result (Airlock's run record).
func Task(queue, taskID string) string { return Prefix(queue) + "t:" + taskID }

// Pending is the list of queue's tasks waiting for a worker.
func Pending(queue string) string { return Prefix(queue) + "pending" }

// Active is the list of queue's tasks a worker runs.
func Active(queue string) string { return Prefix(queue) + "active" }

// Scheduled is the sorted set of queue's tasks to run later.
func Scheduled(queue string) string { return Prefix(queue) + "scheduled" }

// Retry is the sorted set of queue's tasks waiting to be retried.
func Retry(queue string) string { return Prefix(queue) + "retry" }

// Paused exists while queue is paused.
func Paused(queue string) string { return Prefix(queue) + "paused" }

// Lease is the sorted set of the leases of queue's active tasks.
func Lease(queue string) string { return Prefix(queue) + "lease" }
