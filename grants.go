package airlock

import (
	"context"
	"fmt"

	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/tasks"
)

// checkGrants refuses, before it is enqueued, a spec whose secrets the
// queue's workers do not grant it, as they published their grants
// (queuepolicy.PublishGrants): a declared secret without a grant naming
// the queue, one used in a step's env without env: true, one sent in an
// input header to a host its grant does not name. The error is a
// *tasks.FieldError naming the field. Nothing published (no worker of the
// queue started yet, or one from before grants): the worker decides, and
// refuses the same.
//
// A spec that calls a catalog action declares no secrets (its definition
// does, and the worker checks it); a spec that declares secrets is checked
// against the queue's grants only, whatever action it names.
func (c *Client) checkGrants(ctx context.Context, spec *tasks.Spec) error {
	if len(spec.Secrets) == 0 {
		return nil // Prepare refused any ${secret:...} of an undeclared name
	}
	g, ok, err := queuepolicy.LoadGrants(ctx, c.rdb, c.opts.Prefix, spec.Queue)
	if err != nil {
		return fmt.Errorf("airlock: %w", err)
	}
	if !ok {
		return nil
	}
	return spec.CheckGrants(func(name string) (policy.Grant, bool) { return g.Grant(name) },
		fmt.Sprintf("queue %q (the grants its workers published)", spec.Queue))
}
