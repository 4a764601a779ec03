package airlock

import (
	"context"

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

// followOutput calls f with run id's output from now on, until the
// returned stop, which returns once f has had everything up to then.
func (c *Client) followOutput(ctx context.Context, id string, f func(live.Output)) (stop func()) {
	return live.NewConn(c.rdb, c.opts.Prefix).Follow(ctx, id, "", f)
}
