package airlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/tasks"
)

// TestEnqueueCatalogHints: a call the published catalog refuses is a
// *tasks.FieldError as is, listing every violation of its params, its
// hint the Go API's; Rehint gives it a front end's hint instead, and
// leaves any other error as it is.
func TestEnqueueCatalogHints(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	report := actions.Info{Name: "report", Digest: "sha256:0", MaxRetry: 1,
		Params: json.RawMessage(`{"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"], "additionalProperties": false}`)}
	if err := queuepolicy.PublishActions(context.Background(), redistest.Client(t), "", []string{q}, []actions.Info{report}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, airlock.ClientOptions{})
	cli := airlock.CatalogHints{Actions: "enqueue -list-actions lists them", Params: "enqueue -list-actions shows them"}
	const badParams = "params: day is required; params: additional property date is not allowed"
	for _, tc := range []struct {
		name, action, params string
		field, goHint        string
		cliHint              string // after cli.Rehint: the same error, this hint
	}{
		{"bad params", report.Name, `{"date": "2026-12-05"}`, "params",
			badParams + " (Client.Actions(ctx, queue) returns each action's params schema)",
			badParams + " (enqueue -list-actions shows them)"},
		{"unknown action", "nope", `{}`, "action",
			`action: "nope" is not in the catalog the workers of queue "` + q + `" published (they have: report) ` +
				"(an action is defined by the operator (worker -actions); Client.Actions(ctx, queue) lists them)",
			`action: "nope" is not in the catalog the workers of queue "` + q + `" published (they have: report) ` +
				"(an action is defined by the operator (worker -actions); enqueue -list-actions lists them)"},
		{"not a catalog error", report.Name, `[1]`, "params", "params: want a JSON object", "params: want a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Enqueue(context.Background(), &tasks.Spec{Version: 1, Queue: q, Action: tc.action, Params: json.RawMessage(tc.params)})
			fe, ok := err.(*tasks.FieldError)
			if !ok || fe.Field != tc.field || err.Error() != tc.goHint {
				t.Fatalf("Enqueue: %v (%T)\nwant a *tasks.FieldError on %s: %s", err, err, tc.field, tc.goHint)
			}
			re := cli.Rehint(err)
			var rfe *tasks.FieldError
			if !errors.As(re, &rfe) || rfe.Field != tc.field || re.Error() != tc.cliHint || err.Error() != tc.goHint {
				t.Errorf("Rehint: %v\nwant %s, the client's error unchanged", re, tc.cliHint)
			}
		})
	}
	if other := errors.New("redis down"); cli.Rehint(other) != other {
		t.Errorf("Rehint changed an error that is not a *tasks.FieldError")
	}
}
