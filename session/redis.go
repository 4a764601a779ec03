package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"

	"github.com/airlock-run/airlock/record"
)

// Conn reads and writes sessions under a key prefix ("airlock:" when "").
type Conn struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewConn returns the sessions of rdb under prefix.
func NewConn(rdb redis.UniversalClient, prefix string) *Conn {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return &Conn{rdb: rdb, prefix: prefix}
}

func (c *Conn) stateKey(id string) string { return c.prefix + "session:{" + id + "}" }
func (c *Conn) callsKey(id string) string { return c.prefix + "session:{" + id + "}:calls" }
func (c *Conn) answerKey(id, call string) string {
	return c.prefix + "session:{" + id + "}:answer:" + call
}

// Create writes the state hash of a session being opened (state opening),
// kept for ttl (the session's timeout and the record's retention): the
// opener calls it before it queues the session's task.
func (c *Conn) Create(ctx context.Context, in Info, ttl time.Duration) error {
	key := c.stateKey(in.ID)
	p := c.rdb.TxPipeline()
	p.HSet(ctx, key, "task_id", in.TaskID, "queue", in.Queue, "principal", in.Principal,
		"state", StateOpening, "opened_at", in.OpenedAt.UnixMicro())
	p.Expire(ctx, key, ttl)
	_, err := p.Exec(ctx)
	return err
}

// Forget deletes the state of a session whose open was refused before any
// worker saw it (a quota's refusal): nothing of it stays.
func (c *Conn) Forget(ctx context.Context, id string) error {
	return c.rdb.Del(ctx, c.stateKey(id)).Err()
}

// Get returns the session's state hash; an error matching ErrNotFound
// when there is none.
func (c *Conn) Get(ctx context.Context, id string) (*Info, error) {
	m, err := c.rdb.HGetAll(ctx, c.stateKey(id)).Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, NotFound(id)
	}
	in := &Info{ID: id, TaskID: m["task_id"], Queue: m["queue"], Principal: m["principal"], State: m["state"],
		End: record.State(m["end"]), Why: m["why"], Worker: m["worker"], Checkpoint: m["ckpt"]}
	in.OpenedAt = micros(m["opened_at"])
	in.ExpiresAt = micros(m["expires_at"])
	in.SeenAt = micros(m["seen_at"])
	return in, nil
}

func micros(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMicro(n).UTC()
}

// pushIfOpen pushes a call only while the session is open and holds
// fewer than MaxQueuedCalls waiting, answering the state otherwise (""
// when there is no session, "busy" when the calls are full), and the
// worker holding it when pushed.
var pushIfOpen = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'worker', 'queue')
if v[1] ~= 'open' and v[1] ~= 'paused' then return {v[1] or '', ''} end
if redis.call('LLEN', KEYS[2]) >= tonumber(ARGV[3]) then return {'busy', ''} end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if v[1] == 'paused' then return {'paused', v[3] or ''} end
return {'pushed', v[2] or ''}`)

// Call sends a call to the worker holding session id, rings its bell, and
// waits up to wait for its answer. An answer that is not a success is
// returned as an *Error; so is a session not open (404, 409 opening, 410
// ended) and an answer that does not come in time (504, with the
// session's state).
func (c *Conn) Call(ctx context.Context, id string, call Call, wait time.Duration) (*Answer, error) {
	b, err := c.send(ctx, id, call, wait)
	if err != nil {
		return nil, err
	}
	return c.await(ctx, id, call.ID, b, wait)
}

// send sends call to the worker holding session id (or, paused, to its
// queue), and returns it as sent.
func (c *Conn) send(ctx context.Context, id string, call Call, wait time.Duration) ([]byte, error) {
	b, err := encodeCall(call)
	if err != nil {
		return nil, err
	}
	keys := []string{c.stateKey(id), c.callsKey(id)}
	res, err := pushIfOpen.Run(ctx, c.rdb, keys, b, (wait + AnswerTTL).Milliseconds(), MaxQueuedCalls).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("session %s: send the call: %w", id, err)
	}
	switch res[0] {
	case "pushed":
		if err := c.Ring(ctx, res[1], id); err != nil {
			return nil, fmt.Errorf("session %s: ring its worker: %w", id, err)
		}
	case "paused":
		// No worker holds it: its task goes back to its queue, for
		// whichever worker takes it first to resume it and serve this.
		if err := c.wakeTask(ctx, res[1], id); err != nil {
			return nil, fmt.Errorf("session %s: resume: %w", id, err)
		}
	default:
		return nil, c.notOpen(ctx, id, res[0])
	}
	return b, nil
}

// notOpen is the error of a call to a session in state st.
func (c *Conn) notOpen(ctx context.Context, id, st string) error {
	switch st {
	case "":
		return &Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("no session %s", id)}
	case StateOpening:
		return &Error{Status: http.StatusConflict, State: st, Msg: "the session is not open yet: no worker holds it"}
	case "busy":
		return &Error{Status: http.StatusConflict, State: StateOpen,
			Msg: fmt.Sprintf("the session has %d calls waiting already: its calls are served one at a time, send the next when one answers", MaxQueuedCalls)}
	}
	in, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	return &Error{Status: http.StatusGone, State: in.State, End: in.End, Msg: "the session ended: " + in.ended()}
}

// ended says how a session ended: its run's state, and why when known.
func (in *Info) ended() string {
	if in.Why == "" {
		return string(in.End)
	}
	return fmt.Sprintf("%s (%s)", in.End, in.Why)
}

// await waits for the answer to call callID, in slices of at most
// beatEvery*2: between two, a session that ended is answered 410 at once,
// and one whose worker stopped beating is ended as failed (a session is
// never replayed) and answered 410.
func (c *Conn) await(ctx context.Context, id, callID string, sent []byte, wait time.Duration) (*Answer, error) {
	deadline := time.Now().Add(max(wait, time.Millisecond))
	for {
		left := time.Until(deadline)
		res, err := c.rdb.BLPop(ctx, max(min(left, 2*BeatEvery), time.Millisecond), c.answerKey(id, callID)).Result()
		if err == nil {
			var a Answer
			if err := json.Unmarshal([]byte(res[1]), &a); err != nil {
				return nil, fmt.Errorf("session %s: answer: %w", id, err)
			}
			return &a, a.Err()
		}
		if !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("session %s: wait for the answer: %w", id, err)
		}
		in, gerr := c.Get(ctx, id)
		if errors.Is(gerr, ErrNotFound) || gerr == nil && in.State == StateEnded {
			// The answer may have come between the wait and the read: a
			// worker answers, then ends the session (or forgets the state
			// of an open it refused).
			if a, err := c.late(ctx, id, callID); a != nil || err != nil {
				return a, err
			}
		}
		if gerr != nil {
			return nil, gerr
		}
		switch {
		case in.State == StateEnded:
			return nil, &Error{Status: http.StatusGone, State: in.State, End: in.End, Msg: fmt.Sprintf("the session ended before it answered: %s", in.ended())}
		case in.State == StateOpen && !c.alive(ctx, in.Worker) && callID == "open":
			msg := fmt.Sprintf("the worker holding the session (%s) stopped answering (no beat for %s) before it opened", in.Worker, DeadAfter)
			if err := c.End(ctx, id, record.StateFailed, msg, time.Hour); err != nil {
				return nil, err
			}
			return nil, &Error{Status: http.StatusGone, State: StateEnded, End: record.StateFailed, Msg: msg}
		case in.State == StateOpen && !c.alive(ctx, in.Worker):
			// Its holder died: a call it took was not applied (the
			// session's state is its last answered call's, which the
			// next holder resumes from); one still queued waits on.
			if err := c.lost(ctx, in, callID, sent); err != nil {
				return nil, err
			}
		case in.State == StatePaused:
			// Paused, or its holder stopped (a deploy, a crash): the next
			// holder serves the calls queued. A dead holder's task goes
			// back to its queue once its lease expired; a paused one's
			// waits in asynq's retry set, and goes back now (a call
			// pushed as its holder paused it).
			c.reclaim(ctx, in.Queue, id)
			_ = c.wakeTask(ctx, in.Queue, id)
		case in.State == StateOpen && callID != "open":
			// A bell lost with a connection: ring again (a worker
			// serving the session takes nothing twice: the call is
			// popped once).
			_ = c.Ring(ctx, in.Worker, id)
		}
		switch {
		case time.Until(deadline) <= 0:
			return nil, &Error{Status: http.StatusGatewayTimeout, State: in.State,
				Msg: fmt.Sprintf("no answer in %s from the worker holding the session (%s)", wait, in.Worker)}
		}
	}
}

// late takes the answer to call callID if it is there now, without
// waiting: nil, nil when it is not.
func (c *Conn) late(ctx context.Context, id, callID string) (*Answer, error) {
	b, err := c.rdb.LPop(ctx, c.answerKey(id, callID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: read the answer: %w", id, err)
	}
	var a Answer
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("session %s: answer: %w", id, err)
	}
	return &a, a.Err()
}

// Liveness of the worker holding a session: it beats every BeatEvery
// (Alive), for all the sessions it holds at once; a caller that finds no
// beat for DeadAfter ends the session as failed.
const (
	BeatEvery = 2 * time.Second
	DeadAfter = 10 * time.Second
)

func (c *Conn) aliveKey(worker string) string { return c.prefix + "worker:{" + worker + "}:alive" }
func (c *Conn) bellKey(worker string) string  { return c.prefix + "worker:{" + worker + "}:bell" }

// Alive says worker is alive, for DeadAfter: one command for all the
// sessions it holds.
func (c *Conn) Alive(ctx context.Context, worker string) error {
	return c.rdb.Set(ctx, c.aliveKey(worker), time.Now().UnixMicro(), DeadAfter).Err()
}

// Gone withdraws worker's beat: it holds no session any more (a clean
// stop).
func (c *Conn) Gone(ctx context.Context, worker string) error {
	return c.rdb.Del(ctx, c.aliveKey(worker)).Err()
}

// alive reports whether worker beat within DeadAfter; true when Redis
// does not say (the caller waits on).
func (c *Conn) alive(ctx context.Context, worker string) bool {
	n, err := c.rdb.Exists(ctx, c.aliveKey(worker)).Result()
	return err != nil || n > 0
}

// Ring tells worker that session id has a call waiting: its bell, one
// list for all the sessions it holds, which it blocks on (Bells).
func (c *Conn) Ring(ctx context.Context, worker, id string) error {
	if worker == "" {
		return nil
	}
	p := c.rdb.Pipeline()
	p.RPush(ctx, c.bellKey(worker), id)
	p.Expire(ctx, c.bellKey(worker), AnswerTTL)
	_, err := p.Exec(ctx)
	return err
}

// maxBells is how many rings Bells takes at once.
const maxBells = 128

// Bells waits up to wait for rings of worker's bell and returns the
// session ids rung (nil when none came): one blocking command for all the
// sessions the worker holds.
func (c *Conn) Bells(ctx context.Context, worker string, wait time.Duration) ([]string, error) {
	res, err := c.rdb.BLPop(ctx, wait, c.bellKey(worker)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	ids := []string{res[1]}
	more, err := c.rdb.LPopCount(ctx, c.bellKey(worker), maxBells).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ids, nil
	}
	return append(ids, more...), nil
}

// take pops the next call of a session held open by worker ARGV[1].
var take = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'state', 'worker')
if v[1] ~= 'open' or v[2] ~= ARGV[1] then return false end
return redis.call('LPOP', KEYS[2])`)

// Take pops the next call of session id for its holder worker: nil, nil
// when none waits, or when worker no longer holds it open (a holder cut
// off from Redis takes nothing once another took the session over). Each
// call is popped once: a call is never served twice.
func (c *Conn) Take(ctx context.Context, id, worker string) (*Call, error) {
	b, err := take.Run(ctx, c.rdb, []string{c.stateKey(id), c.callsKey(id)}, worker).Text()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var call Call
	if err := json.Unmarshal([]byte(b), &call); err != nil {
		return &Call{Op: "invalid"}, nil
	}
	return &call, nil
}

// Answer sends the answer to call callID of session id; it stays
// AnswerTTL for a caller that gave up.
func (c *Conn) Answer(ctx context.Context, id, callID string, a *Answer) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	key := c.answerKey(id, callID)
	p := c.rdb.Pipeline()
	p.RPush(ctx, key, b)
	p.Expire(ctx, key, AnswerTTL)
	_, err = p.Exec(ctx)
	return err
}

// End marks session id ended as end (the run's state), why saying how in
// words, and answers the calls nobody will take (410); the state hash
// stays ttl, for callers to learn how it ended.
func (c *Conn) End(ctx context.Context, id string, end record.State, why string, ttl time.Duration) error {
	key := c.stateKey(id)
	p := c.rdb.TxPipeline()
	p.HSet(ctx, key, "state", StateEnded, "end", string(end), "why", bounded(why))
	p.Expire(ctx, key, ttl)
	left := p.LRange(ctx, c.callsKey(id), 0, 99)
	p.Del(ctx, c.callsKey(id))
	if _, err := p.Exec(ctx); err != nil {
		return err
	}
	for _, raw := range left.Val() {
		var call Call
		if json.Unmarshal([]byte(raw), &call) == nil && call.ID != "" {
			in := Info{End: end, Why: bounded(why)}
			_ = c.Answer(ctx, id, call.ID, &Answer{Status: http.StatusGone, State: StateEnded, End: end,
				Error: "the session ended before this call: " + in.ended()})
		}
	}
	return nil
}

// maxWhy bounds the words End keeps of how a session ended.
const maxWhy = 512

// bounded is why cut to maxWhy bytes, on a rune boundary.
func bounded(why string) string {
	if len(why) <= maxWhy {
		return why
	}
	cut := maxWhy
	for cut > 0 && !utf8.RuneStart(why[cut]) {
		cut--
	}
	return why[:cut] + "…"
}

// AwaitOpen waits up to wait for the worker's answer to the open.
func (c *Conn) AwaitOpen(ctx context.Context, id string, wait time.Duration) (*Answer, error) {
	return c.await(ctx, id, "open", nil, wait)
}
