// Package refused keeps the records of runs a worker refused without
// running them: a session's open past its -max-sessions, a spec it
// rejects, a secret it may not grant, a quota. asynq deletes such a task
// as soon as its handler returns (asynq.RevokeTask), payload and all: what
// a caller sent to a worker that never ran it does not stay in Redis. Its
// record stays here, small, for Status, Wait, Result, Cancel and Locate to
// read as they read a task's.
//
// Keys, per queue, in one hash slot (the queue is the hash tag, as in
// asynq's keys): <prefix>refused:{<queue>}, a hash of task id → the run
// record, compact (Encode: about 130 bytes); and
// <prefix>refused:{<queue>}:order, the list of its task ids, oldest
// first. A queue keeps its last MaxPerQueue refusals; both keys expire
// TTL after its last one.
package refused

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/record"
)

// MaxPerQueue is how many refusals a queue keeps: past it, the oldest
// record goes (as asynq bounds its archive).
const MaxPerQueue = 10000

// TTL is how long a queue's refusals stay after its last one.
const TTL = 24 * time.Hour

// Key is the hash of queue's refused runs; prefix "" is "airlock:".
func Key(prefix, queue string) string {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return prefix + "refused:{" + queue + "}"
}

// OrderKey is the list of the task ids of queue's refused runs, oldest
// first.
func OrderKey(prefix, queue string) string { return Key(prefix, queue) + ":order" }

// compact is the stored form of a refused run's record: without what a
// run that never ran has none of (isolation, limits, workspace, steps:
// Decode gives them back empty), nor what the keys say (task_id, queue).
type compact struct {
	*record.Run
	TaskID    *struct{} `json:"task_id,omitempty"`
	Queue     *struct{} `json:"queue,omitempty"`
	Isolation *struct{} `json:"isolation,omitempty"`
	Limits    *struct{} `json:"limits,omitempty"`
	Workspace *struct{} `json:"workspace,omitempty"`
	Steps     *struct{} `json:"steps,omitempty"`
}

// ErrRan is Encode's error for a record with steps: a refused run ran
// none.
var ErrRan = errors.New("refused: the record of a run that ran steps")

// Encode is the stored form of rec, the record of a refused run: its
// JSON without task_id, queue (the keys say them), isolation, limits,
// workspace and steps (it ran nothing), about 480 bytes, compressed: a
// version byte (1), then raw DEFLATE with dict as its preset dictionary,
// about 130 bytes, mostly the ids and times. What a queue's refusals hold
// in Redis is per refusal this, its id twice and Redis's own overhead:
// about 270 bytes (the run's event, in the events stream, about 270 more).
func Encode(rec *record.Run) ([]byte, error) {
	if len(rec.Steps) > 0 {
		return nil, ErrRan
	}
	js, err := json.Marshal(compact{Run: rec})
	if err != nil {
		return nil, err
	}
	b := bytes.NewBuffer([]byte{formatDict})
	zw, _ := flate.NewWriterDict(b, flate.BestCompression, []byte(dict)) // the level is valid
	if _, err := zw.Write(js); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// formatDict is the first byte of Encode's form: DEFLATE with dict. A
// change of dict is a new format (stored records outlive a worker's
// version).
const formatDict = 1

// dict is what a refused run's record shares with others: its fields'
// names, in their order, and the values and words refusals repeat.
const dict = `spec rejected: secret refused: not granted to queue  (worker -policy grants) ` +
	`session  was never opened (no state in Redis): a session is never replayed` +
	`{"run_id":"","principal":"","trace_id":"","action":"","action_digest":"sha256:",` +
	`"state":"failed","verdict":"error","error":"","verdict":"session_limit",` +
	`"error":"this worker holds its -max-sessions  sessions; try again later",` +
	`"started_at":"T00:00:00.000000000Z","finished_at":"T00:00:00.000000000Z","duration_ms":0.,` +
	`"attempt":1,"max_retry":0,"worker":" 0.1.0-dev",` +
	`"session":{"idle_timeout":"5m0s","calls":0,"ended":"session_limit","steps_failed":0}}`

// maxJSON bounds what Decode inflates: a record a worker stored is far
// smaller.
const maxJSON = 64 << 10

// Decode is the record stored as b (Encode's) for task taskID of queue.
func Decode(queue, taskID string, b []byte) (*record.Run, error) {
	if len(b) == 0 || b[0] != formatDict {
		return nil, fmt.Errorf("refused: the record of task %s is in no format this version reads", taskID)
	}
	js, err := io.ReadAll(io.LimitReader(flate.NewReaderDict(bytes.NewReader(b[1:]), []byte(dict)), maxJSON+1))
	if err != nil {
		return nil, fmt.Errorf("refused: the record of task %s: %w", taskID, err)
	}
	if len(js) > maxJSON {
		return nil, fmt.Errorf("refused: the record of task %s is more than %d bytes", taskID, maxJSON)
	}
	var rec record.Run
	if err := json.Unmarshal(js, &rec); err != nil {
		return nil, fmt.Errorf("refused: the record of task %s: %w", taskID, err)
	}
	rec.TaskID, rec.Queue, rec.Steps = taskID, queue, []record.Step{}
	return &rec, nil
}

// store adds a record, drops the oldest past the bound, and sets both
// keys' expiry. A record stored again (the same task id) keeps its place.
//
// KEYS[1] the hash, KEYS[2] the order; ARGV: task id, record, bound, ttl
// in milliseconds.
const store = `
if redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  for i = 1, redis.call('LLEN', KEYS[2]) - tonumber(ARGV[3]) do
    redis.call('HDEL', KEYS[1], redis.call('LPOP', KEYS[2]))
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1`

// Store stores b (Encode's) as the record of refused task taskID of
// queue, in one script; c may be a pipeline (the script is sent whole,
// never by its digest, which a pipeline could not fall back from).
func Store(ctx context.Context, c redis.Scripter, prefix, queue, taskID string, b []byte) *redis.Cmd {
	return storeBounded(ctx, c, prefix, queue, taskID, b, MaxPerQueue)
}

// storeBounded is Store keeping at most max refusals of queue.
func storeBounded(ctx context.Context, c redis.Scripter, prefix, queue, taskID string, b []byte, max int) *redis.Cmd {
	return c.Eval(ctx, store, []string{Key(prefix, queue), OrderKey(prefix, queue)}, taskID, b, max, TTL.Milliseconds())
}

// Get returns the record of refused task taskID of queue; ok is false
// when there is none.
func Get(ctx context.Context, c redis.Cmdable, prefix, queue, taskID string) (rec *record.Run, ok bool, err error) {
	b, err := c.HGet(ctx, Key(prefix, queue), taskID).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if rec, err = Decode(queue, taskID, b); err != nil {
		return nil, false, err
	}
	return rec, true, nil
}

// Exists queues the look-up of refused task taskID of queue on p (a
// pipeline of Locate's); Found reads its answer. An HMGET (a stored
// record is small), so that the documented ACL needs no HEXISTS.
func Exists(ctx context.Context, p redis.Cmdable, prefix, queue, taskID string) *redis.SliceCmd {
	return p.HMGet(ctx, Key(prefix, queue), taskID)
}

// Found reports whether the look-up Exists queued found a record.
func Found(c *redis.SliceCmd) bool {
	v := c.Val()
	return len(v) == 1 && v[0] != nil
}
