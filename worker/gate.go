//go:build linux

package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/internal/redis/wake"
)

// gate lets the worker's asynq server take a task only for a free slot.
// asynq runs up to -concurrency plus -max-sessions handlers at once (an
// open session keeps its handler for its life, but a slot only while it
// sets up and for each call), so its own bound would let it take far more
// one-shot runs than the worker has slots: they would wait here, for this
// worker only. The gate sits in the Redis client as a hook on asynq's
// dequeue script (the one wake watches) and holds each dequeue while every
// slot has a task that has not given it back: what is queued waits in
// Redis, for whichever worker has room.
type gate struct {
	slots int64
	own   map[string]bool
	stop  <-chan struct{}
	// busy counts the tasks taken that have not given their slot back;
	// freed wakes a held dequeue when it falls (at most one wake-up).
	busy  atomic.Int64
	freed chan struct{}
	// ran counts, per task id, the handler runs started that asynq's
	// error handler has not seen yet: a handler gives its slot back
	// itself (once per run); the error handler gives back the slot of a
	// task whose handler never ran (its deadline passed in the queue),
	// and only then. A session's task runs once per resume: each run is
	// counted.
	mu  sync.Mutex
	ran map[string]int
	// open makes the hook pass everything: the asynq server it gated
	// has shut down, and the client may serve another (Open).
	open atomic.Bool
}

// Open lets every command through from now on.
func (g *gate) Open() { g.open.Store(true) }

// newGate returns the gate of slots slots over queues, open for good once
// stop is closed (no dequeue then: the worker takes no task it would only
// hand back).
func newGate(slots int, queues []string, stop <-chan struct{}) *gate {
	own := make(map[string]bool, len(queues))
	for _, q := range queues {
		own[q] = true
	}
	return &gate{slots: int64(slots), own: own, stop: stop, freed: make(chan struct{}, 1)}
}

// gateRecheck bounds how long a held dequeue waits without a wake-up.
const gateRecheck = 100 * time.Millisecond

// Hook is the gate as a go-redis hook.
func (g *gate) Hook() redis.Hook { return gateHook{g} }

type gateHook struct{ g *gate }

func (h gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g := h.g
		if g.open.Load() {
			return next(ctx, cmd)
		}
		if q, ok := wake.DequeueOf(cmd.Args()); !ok || !g.own[q] {
			return next(ctx, cmd)
		}
		// asynq dequeues from one goroutine: nothing else takes a task
		// between this check and the count below.
		for g.busy.Load() >= g.slots {
			t := time.NewTimer(gateRecheck)
			select {
			case <-g.freed:
			case <-t.C:
			case <-g.stop:
				t.Stop()
				cmd.SetErr(redis.Nil)
				return redis.Nil
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			t.Stop()
		}
		err := next(ctx, cmd)
		if err == nil {
			g.busy.Add(1)
		}
		return err
	}
}

// Start counts a handler run of task id and returns what gives its slot
// back to the gate, once (later calls do nothing).
func (g *gate) Start(id string) func() {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.ran == nil {
		g.ran = map[string]int{}
	}
	g.ran[id]++
	g.mu.Unlock()
	var once sync.Once
	return func() { once.Do(g.release) }
}

// Succeeded is the end of a run of task id that returned nil: asynq calls
// no error handler for it.
func (g *gate) Succeeded(id string) {
	if g != nil {
		g.seen(id)
	}
}

// Failed is asynq's error handler's part: the slot of a task whose
// handler never ran comes back here.
func (g *gate) Failed(id string) {
	if g != nil && !g.seen(id) {
		g.release()
	}
}

// seen uncounts a run of task id, and reports whether there was one.
func (g *gate) seen(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.ran[id]
	if n <= 1 {
		delete(g.ran, id)
	} else {
		g.ran[id] = n - 1
	}
	return n > 0
}

func (g *gate) release() {
	g.busy.Add(-1)
	select {
	case g.freed <- struct{}{}:
	default:
	}
}
