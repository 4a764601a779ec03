package airlock

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-run/airlock/live"
)

// FollowOption is an option of a call that follows a run (Session.Run,
// Wait).
type FollowOption func(*followOptions)

type followOptions struct {
	onOutput func(live.Output)
}

// OnOutput has f receive the run's step output while the steps run: what
// the record keeps of stdout and stderr, secrets redacted, in order, each
// piece once (live.Output.Seq), from one goroutine. What a step printed is
// f's before the call returns.
func OnOutput(f func(live.Output)) FollowOption {
	return func(o *followOptions) { o.onOutput = f }
}

func followOpts(opts []FollowOption) followOptions {
	var o followOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// followBlock is how long one read of the output stream blocks: the most
// a follow's stop waits for it.
const followBlock = 200 * time.Millisecond

// followOutput calls f with run id's output from now on, until the
// returned stop, which returns once f has had everything up to then. It
// says it listens (live.Conn.Listen), so that workers send the output.
func (c *Client) followOutput(ctx context.Context, id string, f func(live.Output)) (stop func()) {
	conn := live.NewConn(c.rdb, c.opts.Prefix)
	from, err := conn.Last(ctx, id)
	if err != nil {
		from = "0-0"
	}
	_ = conn.Listen(ctx, id)
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	deliver := func(outs []live.Output) {
		for _, o := range outs {
			f(o)
			from = o.Seq
		}
	}
	go func() {
		defer wg.Done()
		renew := time.Now().Add(live.ListenTTL / 3)
		for fctx.Err() == nil {
			outs, err := conn.Read(fctx, id, from, followBlock, 256)
			if err != nil && fctx.Err() == nil {
				time.Sleep(followBlock)
			}
			deliver(outs)
			if time.Now().After(renew) {
				_ = conn.Listen(fctx, id)
				renew = time.Now().Add(live.ListenTTL / 3)
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		// What the worker sent before it answered: the rest of it.
		for range 64 {
			outs, err := conn.Read(context.WithoutCancel(ctx), id, from, 0, 1024)
			if err != nil || len(outs) == 0 {
				return
			}
			deliver(outs)
		}
	}
}
