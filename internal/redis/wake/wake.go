// Package wake lets an enqueuer wake the idle workers of a queue at once,
// so that a worker can poll its queues rarely and still start a task
// within milliseconds of its enqueue.
//
// asynq's processor polls: it runs its dequeue script on each queue, and
// when every queue is empty it sleeps its task check interval and polls
// again. A short interval buys latency with Redis commands and CPU (10 ms:
// about 250 commands a second for one idle worker); a long one the
// reverse. A Waiter sits in the worker's Redis client as a hook on that
// dequeue script: once a whole round of polls has found nothing, the next
// poll first waits for a wake-up, published by the enqueuer on the queue's
// channel (Notify, one PUBLISH), or for the longest idle wait, whichever
// comes first. An idle worker then sends one dequeue per queue per idle
// wait, and a task enqueued by Airlock's client starts as soon as the
// wake-up arrives. asynq's own moves of scheduled and retry tasks that
// came due (its forward script, seen in the same hook) wake the polls too.
// A stopping worker wakes the queues it handed tasks back to (Notify). A
// task enqueued without a wake-up (a bare asynq client, a task handed
// back after a crash, a wake-up lost with a connection) waits at most the
// idle wait. A round of polls that no wake-up opened (the idle wait ran
// out) first asks each queue's length (one LLEN) and runs the dequeue
// script only on a queue that holds tasks: an idle worker's poll costs
// Redis one command per queue, not the script's three (the EVALSHA, its
// EXISTS and RPOPLPUSH). asynq itself is unchanged.
package wake

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/asynqkey"
)

// DefaultMaxIdle is the longest a poll waits for a wake-up.
const DefaultMaxIdle = 2 * time.Second

// Channel is the Pub/Sub channel of a queue's wake-ups; an empty prefix is
// events.DefaultPrefix, as for every key Airlock keeps.
func Channel(prefix, queue string) string {
	if prefix == "" {
		prefix = events.DefaultPrefix
	}
	return prefix + "wake:" + queue
}

// Notify wakes the idle workers of queue: one PUBLISH. A worker that is not
// listening misses it and finds the task at its next poll.
func Notify(ctx context.Context, rdb redis.UniversalClient, prefix, queue string) error {
	return rdb.Publish(ctx, Channel(prefix, queue), "").Err()
}

// Waiter holds the polls of a worker's asynq server while its queues are
// empty, until a wake-up or MaxIdle. Start it, add Hook to the Redis client
// the asynq server uses, and Stop it before the server's shutdown (a held
// poll keeps one of the server's tokens).
type Waiter struct {
	rdb     redis.UniversalClient
	chans   []string
	own     map[string]bool // the worker's queues: polls of others pass through
	queues  int32
	maxIdle time.Duration

	wakeup chan struct{} // a wake-up not yet consumed: at most one
	stop   chan struct{}
	once   sync.Once
	ps     *redis.PubSub

	// released makes the hook pass everything through: the asynq server
	// whose polls it held has shut down (Release).
	released atomic.Bool

	empty atomic.Int32 // consecutive empty dequeues
	// probe is set while a round of polls that MaxIdle opened, not a
	// wake-up, goes on: each poll asks its queue's length first.
	probe atomic.Bool
	woken atomic.Int64 // waits ended by a wake-up
	timed atomic.Int64 // waits ended by MaxIdle
}

// New returns a Waiter for the worker's queues, their channels under
// prefix. maxIdle <= 0 means DefaultMaxIdle.
func New(rdb redis.UniversalClient, prefix string, queues []string, maxIdle time.Duration) *Waiter {
	if maxIdle <= 0 {
		maxIdle = DefaultMaxIdle
	}
	w := &Waiter{rdb: rdb, queues: int32(max(len(queues), 1)), maxIdle: maxIdle,
		wakeup: make(chan struct{}, 1), stop: make(chan struct{}), own: map[string]bool{}}
	for _, q := range queues {
		w.chans = append(w.chans, Channel(prefix, q))
		w.own[q] = true
	}
	return w
}

// Start subscribes to the queues' channels and returns once Redis has
// confirmed the subscription.
func (w *Waiter) Start(ctx context.Context) error {
	w.ps = w.rdb.Subscribe(ctx, w.chans...)
	if _, err := w.ps.Receive(ctx); err != nil {
		w.ps.Close()
		return err
	}
	// Channel resubscribes after a lost connection by itself; wake-ups
	// published meanwhile are lost, and the polls find their tasks within
	// MaxIdle. An idle subscription is checked every 30s, not go-redis's
	// 3s: each check is a PING, and an idle worker's commands are what
	// this package saves.
	msgs := w.ps.Channel(redis.WithChannelHealthCheckInterval(30 * time.Second))
	go func() {
		for range msgs {
			w.notify()
		}
	}()
	return nil
}

// notify records a wake-up for the next wait.
func (w *Waiter) notify() {
	select {
	case w.wakeup <- struct{}{}:
	default: // one pending wake-up is enough
	}
}

// Stop ends the waits, now and to come, and the subscription. It does not
// wait for the subscription's reader, which ends once go-redis closes its
// channel: with Redis gone that may take a while, and a worker's shutdown
// must not wait on Redis.
func (w *Waiter) Stop() {
	w.once.Do(func() {
		close(w.stop)
		if w.ps != nil {
			_ = w.ps.Close()
		}
	})
}

// Release makes the hook inert, for good, once the asynq server it held
// the polls of has shut down. go-redis cannot remove a hook: without
// Release, a later server on the same client (a worker started again in
// the same process) would find every poll answered "empty" by the hook of
// a stopped Waiter. Release implies Stop.
func (w *Waiter) Release() {
	w.Stop()
	w.released.Store(true)
}

// Counts returns how many waits a wake-up ended, and how many MaxIdle did.
func (w *Waiter) Counts() (woken, timedOut int64) { return w.woken.Load(), w.timed.Load() }

// Hook is the go-redis hook that holds asynq's dequeue script while the
// queues are empty, and takes asynq's forward of due tasks as a wake-up.
// Other commands pass through untouched.
func (w *Waiter) Hook() redis.Hook { return hook{w} }

type hook struct{ w *Waiter }

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.w.released.Load() {
			return next(ctx, cmd)
		}
		args := cmd.Args()
		q, ok := queueOf(args)
		if !ok || !h.w.own[q] {
			// Not asynq's polls of this worker's queues: another
			// asynq server on the same client is none of its business.
			return next(ctx, cmd)
		}
		if isForward(args, q) {
			// asynq moved scheduled or retry tasks that came due to
			// the queue: a wake-up of its own, no enqueuer sends one.
			err := next(ctx, cmd)
			if c, ok := cmd.(*redis.Cmd); ok && err == nil {
				if n, _ := c.Int64(); n > 0 {
					h.w.notify()
				}
			}
			return err
		}
		if !isDequeue(args, q) {
			return next(ctx, cmd)
		}
		w := h.w
		// A whole round found nothing: this poll opens the next round,
		// which waits first.
		if w.empty.Load() >= w.queues {
			stopped, woken := w.wait(ctx)
			if stopped {
				// The worker is shutting down: no poll, as if empty, so
				// that it takes no task it would only hand back.
				cmd.SetErr(redis.Nil)
				return redis.Nil
			}
			w.empty.Store(0)
			w.probe.Store(!woken)
		}
		if w.probe.Load() && isEmpty(ctx, next, q) {
			// Nothing woke this round and the queue holds no task: the
			// dequeue script would find none either. A task pushed just
			// after the LLEN comes with its enqueuer's wake-up, which
			// opens the next round at once.
			w.empty.Add(1)
			cmd.SetErr(redis.Nil)
			return redis.Nil
		}
		err := next(ctx, cmd)
		if errors.Is(err, redis.Nil) {
			w.empty.Add(1)
		} else {
			// A task (or an error): the polls go on as asynq's, without
			// the LLEN, until a round waits again.
			w.empty.Store(0)
			w.probe.Store(false)
		}
		return err
	}
}

// isEmpty reports whether queue q's pending list is empty, by one LLEN
// sent below the hook; false when Redis did not say (the dequeue script
// then runs, and meets the same error).
func isEmpty(ctx context.Context, next redis.ProcessHook, q string) bool {
	n := redis.NewIntCmd(ctx, "llen", asynqkey.Pending(q))
	return next(ctx, n) == nil && n.Val() == 0
}

// wait waits for a wake-up or MaxIdle; it reports whether Stop ended it,
// and whether a wake-up did.
func (w *Waiter) wait(ctx context.Context) (stopped, woken bool) {
	t := time.NewTimer(w.maxIdle)
	defer t.Stop()
	select {
	case <-w.wakeup:
		w.woken.Add(1)
		return false, true
	case <-t.C:
		w.timed.Add(1)
	case <-w.stop:
		return true, false
	case <-ctx.Done():
	}
	return false, false
}

// queueOf returns the queue of an asynq script whose first key is one of
// its queue's keys ("asynq:{QUEUE}:..."), as the dequeue and forward
// scripts' are: an EVAL or EVALSHA of 9 arguments, as both are.
func queueOf(args []any) (string, bool) {
	if len(args) != 9 {
		return "", false
	}
	if name, _ := args[0].(string); !strings.EqualFold(name, "evalsha") && !strings.EqualFold(name, "eval") {
		return "", false
	}
	k, _ := args[3].(string)
	return asynqkey.QueueOf(k)
}

// isForward reports whether args, a script of queue q (queueOf), are
// asynq's forward script (v0.26): two keys, the queue's scheduled or
// retry set and its pending list, and four arguments; it returns how many
// tasks it moved.
func isForward(args []any, q string) bool {
	from, to := args[3], args[4]
	return (from == asynqkey.Scheduled(q) || from == asynqkey.Retry(q)) && to == asynqkey.Pending(q)
}

// isDequeue reports whether args, a script of queue q (queueOf), are
// asynq's dequeue script (v0.26): four keys, the queue's pending, paused,
// active and lease keys, and two arguments.
func isDequeue(args []any, q string) bool {
	return args[3] == asynqkey.Pending(q) && args[4] == asynqkey.Paused(q) &&
		args[5] == asynqkey.Active(q) && args[6] == asynqkey.Lease(q)
}

// DequeueOf returns the queue whose asynq dequeue script (v0.26) a
// command's args run, and whether they run it: what a worker's own hook
// gates (a dequeue takes a task for one of its slots).
func DequeueOf(args []any) (string, bool) {
	q, ok := queueOf(args)
	if !ok || !isDequeue(args, q) {
		return "", false
	}
	return q, true
}
