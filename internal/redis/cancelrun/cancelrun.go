// Package cancelrun keeps what a cancel of a run leaves in Redis for the
// workers, and writes the record of a run canceled before it started.
//
// A client that cancels a running run sets the run's mark, then publishes
// asynq's cancel message (asynq.Inspector.CancelProcessing): the worker
// that runs the task stops it. A cancel published before that worker's
// handler took the task is lost; the handler reads the mark once when it
// starts the run, so that the mark ends it then. The mark also says who
// canceled, for the run record.
//
// Key: <prefix>cancel:<queue>:<task_id>, "airlock:cancel:default:ID" with
// the default prefix; its value is "by=" and the canceler's name (at most
// MaxBy bytes; the name may be empty); it expires after the client's
// retention.
package cancelrun

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
)

// MaxBy bounds the canceler's name a mark keeps, in bytes.
const MaxBy = 256

// valuePrefix starts every mark's value, so that a mark of an unnamed
// canceler is not empty (GETRANGE reads a missing key as "").
const valuePrefix = "by="

// Key is the key of the mark of task taskID of queue; prefix "" is
// "airlock:".
func Key(prefix, queue, taskID string) string {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return prefix + "cancel:" + queue + ":" + taskID
}

// Set sets the mark of task taskID of queue, naming by, for ttl; c may be
// a client or a pipeline.
func Set(ctx context.Context, c redis.Cmdable, prefix, queue, taskID, by string, ttl time.Duration) *redis.StatusCmd {
	return c.Set(ctx, Key(prefix, queue, taskID), valuePrefix+Cut(by), ttl)
}

// Get reads the mark of task taskID of queue: whether there is one, and
// who it names. It reads at most MaxBy bytes of the name (GETRANGE), so
// that a mark written by someone else costs the reader no more.
func Get(ctx context.Context, c redis.Cmdable, prefix, queue, taskID string) (by string, ok bool, err error) {
	v, err := c.GetRange(ctx, Key(prefix, queue, taskID), 0, int64(len(valuePrefix)+MaxBy-1)).Result()
	if err != nil {
		return "", false, err
	}
	if v == "" {
		return "", false, nil
	}
	return strings.TrimPrefix(v, valuePrefix), true, nil
}

// Cut cuts a canceler's name at MaxBy bytes, at a rune boundary.
func Cut(by string) string {
	if len(by) <= MaxBy {
		return by
	}
	i := MaxBy
	for i > 0 && by[i]&0xC0 == 0x80 {
		i--
	}
	return by[:i]
}

// Message is the error of the record of a run canceled by by ("" when
// the canceler gave no name) at a point of the run: "before it started",
// "while running"...
func Message(by, when string) string {
	if by == "" {
		return "canceled " + when
	}
	return fmt.Sprintf("canceled by %s %s", by, when)
}

// storeIfWaiting sets the task's result when the task waits for a worker
// (asynq's states pending, scheduled, retry and aggregating), in one step,
// and returns the task's state ("" for no task).
var storeIfWaiting = redis.NewScript(`
local s = redis.call("HGET", KEYS[1], "state")
if not s then
  return ""
end
if s == "pending" or s == "scheduled" or s == "retry" or s == "aggregating" then
  redis.call("HSET", KEYS[1], "result", ARGV[1])
end
return s
`)

// StoreIfWaiting stores rec (an encoded run record) as the result of
// task taskID of queue if the task waits for a worker, and returns the
// task's state as asynq names it ("" when there is no such task). A
// waiting task's result is then the record its archiving keeps (asynq
// archives a task with its hash, result included).
func StoreIfWaiting(ctx context.Context, c redis.Scripter, queue, taskID string, rec []byte) (string, error) {
	return storeIfWaiting.Run(ctx, c, []string{asynqkey.Task(queue, taskID)}, rec).Text()
}

// Waiting reports whether state (asynq's name of a task's state) is one in
// which the task waits for a worker, which StoreIfWaiting stores into.
func Waiting(state string) bool {
	switch state {
	case "pending", "scheduled", "retry", "aggregating":
		return true
	}
	return false
}
