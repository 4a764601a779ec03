package session

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/wake"
)

// A session outlives the worker that holds it. After each call the worker
// writes the session's workspace and state to the store (a checkpoint)
// and commits it with the call's answer, in one script (Commit): the
// session's state is always its last answered call's. A worker that stops
// marks its sessions paused (Pause) and hands their tasks back; a pause
// asked for does the same. A call to a paused session is queued as to an
// open one, and its task goes back to its queue (wakeTask): whichever
// worker takes it resumes the session from its checkpoint (Hold) and
// serves the calls waiting. A worker that dies stops beating: a caller
// waiting on it learns its call was not applied (ErrNotApplied: its call
// is taken back if no worker took it), the session is marked paused, and
// its task goes back to its queue once asynq's lease on it has expired
// (reclaim), to resume on another worker from its last checkpoint. A
// call is popped once and a checkpoint committed once, by the session's
// holder only (a worker that lost it is fenced out): a step never runs
// twice, and none that was answered is lost.

// ErrNotApplied: the worker holding the session died during the call,
// which was not applied; the session goes on from its last answered call.
var ErrNotApplied = fmt.Errorf("session call not applied")

// Held is what Hold found.
type Held struct {
	// Resumed: the session was open before (paused, or its holder died),
	// and resumes from Checkpoint ("" when it never answered its open).
	Resumed    bool
	Checkpoint string
	ExpiresAt  time.Time
	// IdleUntil is when it expires without a call, as its last answer
	// said (zero when unknown).
	IdleUntil time.Time
}

// hold takes a session for worker: an opening one (the first time), a
// paused one, or an open one whose holder ARGV[5] is known dead.
var hold = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'queue', 'state', 'worker', 'ckpt', 'expires_at', 'idle_until')
if not v[1] then return {''} end
if v[1] ~= ARGV[1] then return {'queue', v[1]} end
local st = v[2]
if st == 'opening' then
  redis.call('HSET', KEYS[1], 'state', 'open', 'worker', ARGV[2], 'expires_at', ARGV[3], 'seen_at', ARGV[4])
  redis.call('DEL', KEYS[2])
  return {'held'}
end
if st == 'paused' or (st == 'open' and ARGV[5] ~= '' and v[3] == ARGV[5]) then
  redis.call('HSET', KEYS[1], 'state', 'open', 'worker', ARGV[2], 'seen_at', ARGV[4])
  return {'resumed', v[4] or '', v[5] or '', v[6] or ''}
end
return {st or '', v[3] or ''}`)

// Hold makes worker the holder of session id, taken from queue: an
// opening one (it expires then), a paused one, or an open one whose
// holder stopped beating (Held.Resumed: it resumes from its checkpoint).
// A session held by a live worker, ended, opened for another queue or
// never opened is refused with an error that says so.
func (c *Conn) Hold(ctx context.Context, id, queue, worker string, expires time.Time) (Held, error) {
	keys := []string{c.stateKey(id), c.callsKey(id)}
	run := func(dead string) ([]string, error) {
		return hold.Run(ctx, c.rdb, keys, queue, worker, expires.UnixMicro(), time.Now().UnixMicro(), dead).StringSlice()
	}
	res, err := run("")
	if err == nil && res[0] == StateOpen && len(res) > 1 && res[1] != worker && !c.alive(ctx, res[1]) {
		res, err = run(res[1]) // its holder died: taken over
	}
	if err != nil {
		return Held{}, fmt.Errorf("session %s: hold: %w", id, err)
	}
	switch res[0] {
	case "held":
		return Held{}, nil
	case "resumed":
		return Held{Resumed: true, Checkpoint: res[1], ExpiresAt: micros(res[2]), IdleUntil: micros(res[3])}, nil
	case "":
		return Held{}, fmt.Errorf("session %s was never opened (no state in Redis): a session is opened through Client.OpenSession or POST /v1/sessions", id)
	case "queue":
		return Held{}, fmt.Errorf("session %s was opened for queue %q, not this one", id, res[1])
	case StateOpen:
		return Held{}, fmt.Errorf("session %s is held by worker %s, which is alive", id, res[1])
	}
	return Held{}, fmt.Errorf("session %s is %s", id, res[0])
}

// commit answers a call and, when ARGV[3] is not empty, makes it the
// session's checkpoint: only while worker ARGV[1] holds the session open.
var commit = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'worker')
if v[1] ~= 'open' or v[2] ~= ARGV[1] then return 0 end
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'ckpt', ARGV[3]) end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'idle_until', ARGV[6]) end
if ARGV[5] == '1' then redis.call('HSET', KEYS[1], 'state', 'paused', 'worker', '') end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1`)

// ErrFenced: the worker no longer holds the session (it was taken over
// after its beat stopped): it must stop serving it, and commit nothing.
var ErrFenced = fmt.Errorf("session no longer held by this worker")

// Commit sends the answer to call callID of session id and, when
// checkpoint is not "", makes it the session's checkpoint, at once and
// only while worker holds the session (ErrFenced otherwise). With pause,
// the session is paused in the same step (Pause): a call sent after the
// answer finds it paused.
func (c *Conn) Commit(ctx context.Context, id, worker, callID, checkpoint string, a *Answer, pause bool) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	p := "0"
	if pause {
		p = "1"
	}
	idle := ""
	if !a.IdleUntil.IsZero() {
		idle = strconv.FormatInt(a.IdleUntil.UnixMicro(), 10)
	}
	n, err := commit.Run(ctx, c.rdb, []string{c.stateKey(id), c.answerKey(id, callID)}, worker, b, checkpoint, int(AnswerTTL/time.Second), p, idle).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// pause marks a session paused by its holder ARGV[1].
var pause = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'worker')
if v[1] ~= 'open' or v[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', 'paused', 'worker', '')
return 1`)

// Pause marks session id paused, if worker holds it open (ErrFenced
// otherwise): no worker holds it until a call resumes it. The worker
// then hands its task back.
func (c *Conn) Pause(ctx context.Context, id, worker string) error {
	n, err := pause.Run(ctx, c.rdb, []string{c.stateKey(id)}, worker).Int()
	if err != nil {
		return err
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}

// requeue moves a session's task from asynq's retry set (a paused session
// waits there, until its expiry) to its queue's pending list: ARGV[1] the
// task id. asynq's own run-task move, for one state.
var requeue = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'state')
if st ~= 'retry' then return st or '' end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return 'gone' end
redis.call('LPUSH', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'pending')
return 'moved'`)

// wakeTask sends a paused session's task back to its queue, if it waits
// in the retry set, and wakes the queue's idle workers. A task still
// active (its handler pausing it, a moment ago) is tried again for up to
// a second.
func (c *Conn) wakeTask(ctx context.Context, queue, id string) error {
	keys := []string{asynqkey.Task(queue, id), asynqkey.Retry(queue), asynqkey.Pending(queue)}
	for i := 0; ; i++ {
		st, err := requeue.Run(ctx, c.rdb, keys, id).Text()
		if err != nil {
			return err
		}
		if st != "active" || i >= 20 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return wake.Notify(ctx, c.rdb, c.prefix, queue)
}

// reclaim sends the task of a session whose holder died back to its
// queue once asynq's lease on it expired (ARGV[2], now in seconds): what
// asynq's recoverer does, a minute or more later.
var reclaim = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not s or tonumber(s) >= tonumber(ARGV[2]) then return 0 end
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LPUSH', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[4], 'state', 'pending')
return 1`)

// orphan marks a session whose holder ARGV[1] died paused, and reports
// whether the call ARGV[2] is still queued (1): no worker took it.
var orphan = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'worker')
if v[1] == 'open' and v[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'state', 'paused', 'worker', '')
end
if ARGV[2] == '' then return 0 end
for _, c in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  if c == ARGV[2] then return 1 end
end
return 0`)

// lost handles call callID of a session whose holder in.Worker died. The
// session is marked paused, and its task sent back to its queue once its
// lease expired, for another worker to resume it. A call still queued
// (the holder never took it) waits on for that worker: nil. One the
// holder took died with it: it was not applied (ErrNotApplied).
func (c *Conn) lost(ctx context.Context, in *Info, callID string, sent []byte) error {
	queued, _ := orphan.Run(ctx, c.rdb, []string{c.stateKey(in.ID), c.callsKey(in.ID)}, in.Worker, string(sent)).Int()
	c.reclaim(ctx, in.Queue, in.ID)
	// The answer may have come just before the beat stopped.
	if a, err := c.late(ctx, in.ID, callID); a != nil || err != nil {
		return err
	}
	if queued == 1 {
		return nil
	}
	return &Error{Status: http.StatusServiceUnavailable, State: StatePaused, notApplied: true,
		Msg: fmt.Sprintf("the worker holding the session (%s) stopped during this call: it was not applied; the session goes on from its last answered call on another worker (send the call again)", in.Worker)}
}

// reclaim sends the task of session id, whose holder died, back to its
// queue if asynq's lease on it expired, and wakes the queue.
func (c *Conn) reclaim(ctx context.Context, queue, id string) {
	keys := []string{asynqkey.Active(queue), asynqkey.Lease(queue), asynqkey.Pending(queue), asynqkey.Task(queue, id)}
	if n, err := reclaim.Run(ctx, c.rdb, keys, id, time.Now().Unix()).Int(); err == nil && n > 0 {
		_ = wake.Notify(ctx, c.rdb, c.prefix, queue)
	}
}

// Holds reports whether worker holds session id (false when Redis does
// not say: a worker that cannot tell ends nothing of it).
func (c *Conn) Holds(ctx context.Context, id, worker string) bool {
	w, err := c.rdb.HGet(ctx, c.stateKey(id), "worker").Result()
	return err == nil && w == worker
}

// IsAlive reports whether worker beat within DeadAfter (true when Redis
// does not say).
func (c *Conn) IsAlive(ctx context.Context, worker string) bool { return c.alive(ctx, worker) }
