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
			Hint: clientHints.unknownAction()}
	}
	if err := info.CheckParams(spec.Params); err != nil {
		if fe, ok := err.(*tasks.FieldError); ok && strings.HasPrefix(fe.Field, "params") {
			fe.Hint = clientHints.Params
		}
		return 0, 0, err
	}
	return time.Duration(info.Timeout), info.MaxRetry, nil
}

// CatalogHints say where a front end's callers find the catalog of
// actions, in the hints of the errors Client.Enqueue gives a call the
// published catalog refuses: an action it lacks (field "action") or
// params its schema refuses ("params", "params.NAME"). Client.Enqueue's
// own name the Go API (Client.Actions); a front end gives its callers its
// own with Rehint.
type CatalogHints struct {
	// Actions says where the actions are listed, e.g. "enqueue
	// -list-actions lists them".
	Actions string
	// Params says where an action's params schema is, e.g. "enqueue
	// -list-actions shows each action's params schema".
	Params string
}

// clientHints are the hints of Client.Enqueue's own errors: the Go API.
var clientHints = CatalogHints{
	Actions: "Client.Actions(ctx, queue) lists them",
	Params:  "Client.Actions(ctx, queue) returns each action's params schema",
}

// unknownAction is the hint of an action the catalog lacks.
func (h CatalogHints) unknownAction() string {
	return "an action is defined by the operator (worker -actions); " + h.Actions
}

// Rehint returns err, an error of Client.Enqueue, with the hint of a call
// the catalog refused (the Go API's) replaced by h's. Any other error
// is returned as it is.
func (h CatalogHints) Rehint(err error) error {
	fe, ok := err.(*tasks.FieldError)
	if !ok {
		return err
	}
	out := *fe
	switch fe.Hint {
	case clientHints.unknownAction():
		out.Hint = h.unknownAction()
	case clientHints.Params:
		out.Hint = h.Params
	default:
		return err
	}
	return &out
}
