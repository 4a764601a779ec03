package airlock

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// Actions returns the catalog of actions the workers of queue ("" for
// "default") published, by name; none when no worker published one.
func (c *Client) Actions(ctx context.Context, queue string) ([]actions.Info, error) {
	if queue == "" {
		queue = defaultQueue
	}
	infos, _, err := queuepolicy.LoadActions(ctx, c.rdb, c.opts.Prefix, queue)
	if err != nil {
		return nil, fmt.Errorf("airlock: %w", err)
	}
	return infos, nil
}

// runBounds returns the deadline and the retries asynq gives a prepared
// spec's task. A free-form spec has its own. A call of an action has the
// action's, as its queue's workers published them, after its params are
// checked against the published schema; when no worker published a
// catalog, the longest deadline the queue's limits allow and the default
// retries (the worker then checks the call alone).
func (c *Client) runBounds(ctx context.Context, spec *tasks.Spec, p limits.Policy) (time.Duration, int, error) {
	if spec.Action == "" {
		return time.Duration(spec.Timeout), *spec.MaxRetry, nil
	}
	infos, published, err := queuepolicy.LoadActions(ctx, c.rdb, c.opts.Prefix, spec.Queue)
	if err != nil {
		return 0, 0, fmt.Errorf("airlock: %w", err)
	}
	if !published {
		return time.Duration(p.MaxTimeout), tasks.DefaultMaxRetry, nil
	}
	info, ok := actions.Find(infos, spec.Action)
	if !ok {
		names := make([]string, 0, len(infos))
		for _, i := range infos {
			names = append(names, i.Name)
		}
		have := "none"
		if len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return 0, 0, &tasks.FieldError{Field: "action", Msg: fmt.Sprintf("%q is not in the catalog the workers of queue %q published (they have: %s)", spec.Action, spec.Queue, have),
			Hint: "an action is defined by the operator (worker -actions); list them with enqueue -list-actions or GET /v1/actions"}
	}
	if err := info.CheckParams(spec.Params); err != nil {
		return 0, 0, err
	}
	return time.Duration(info.Timeout), info.MaxRetry, nil
}
