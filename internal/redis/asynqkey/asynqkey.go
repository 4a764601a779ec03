// Package asynqkey names the Redis keys of asynq v0.26 (its internal
// base package) that Airlock reads or writes directly, where asynq's API
// would cost round trips: one place to change when asynq changes them.
// Tests against a real asynq (worker's TestStoreRecordWhereAsynqReadsIt,
// asynqkey's own) fail when the names drift.
package asynqkey

// Queues is the set of every queue's name.
const Queues = "asynq:queues"

// Task is where asynq keeps a task of queue: a hash whose "state" field is
// the task's state and "result" its result (Airlock's run record).
func Task(queue, taskID string) string { return "asynq:{" + queue + "}:t:" + taskID }
