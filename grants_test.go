package airlock_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/tasks"
)

// TestEnqueueRefusesUngrantedSecrets: with the queue's grants published,
// Enqueue refuses a spec that declares a secret its queue is not granted,
// uses one in a step's env without env: true, or sends one in a header to
// a host its grant does not name: a *tasks.FieldError naming the field,
// and nothing enqueued. Without published grants the worker decides.
func TestEnqueueRefusesUngrantedSecrets(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	rdb := redistest.Client(t)
	p, err := policy.Parse([]byte(`secrets:
  PARTNER_TOKEN: {queues: [`+q+`], hosts: [partner.example]}
  ENV_KEY: {queues: [`+q+`], env: true}
  OTHER_QUEUE: {queues: [elsewhere], env: true, hosts: [partner.example]}
  ACTION_ONLY: {actions: [csv-report], env: true}
`), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := queuepolicy.PublishGrants(context.Background(), rdb, "", []string{q}, p.Grants()); err != nil {
		t.Fatal(err)
	}
	c := airlock.NewClient(rdb, airlock.ClientOptions{})
	header := func(url, secret string) []tasks.Input {
		return []tasks.Input{{URL: url, Path: "in/x", Headers: map[string]string{"Authorization": "Bearer ${secret:" + secret + "}"}}}
	}
	for _, tc := range []struct {
		name    string
		edit    func(*tasks.Spec)
		field   string // "" when granted
		message string
	}{
		{"header to the granted host", func(s *tasks.Spec) {
			s.Secrets, s.Inputs = []string{"PARTNER_TOKEN"}, header("https://partner.example/x", "PARTNER_TOKEN")
		}, "", ""},
		{"env granted", func(s *tasks.Spec) {
			s.Secrets, s.Steps[0].Env = []string{"ENV_KEY"}, map[string]string{"K": "${secret:ENV_KEY}"}
		}, "", ""},
		{"a secret the queue is not granted", func(s *tasks.Spec) { s.Secrets = []string{"ENV_KEY", "OTHER_QUEUE"} },
			"secrets[1]", "secret OTHER_QUEUE: not granted to queue"},
		{"a secret granted to an action only", func(s *tasks.Spec) { s.Secrets = []string{"ACTION_ONLY"} },
			"secrets[0]", "secret ACTION_ONLY: not granted to queue"},
		{"a secret granted to an action only, the spec naming it", func(s *tasks.Spec) {
			s.Secrets, s.Action = []string{"ACTION_ONLY"}, "csv-report"
		}, "", "refused"}, // Prepare (no secrets in an action call) or the grants: refused either way
		{"a secret nobody granted", func(s *tasks.Spec) { s.Secrets = []string{"UNKNOWN_KEY"} },
			"secrets[0]", "secret UNKNOWN_KEY: not granted to queue"},
		{"env without env: true", func(s *tasks.Spec) {
			s.Secrets, s.Steps[0].Env = []string{"PARTNER_TOKEN"}, map[string]string{"TOK": "${secret:PARTNER_TOKEN}"}
		}, `steps[0].env["TOK"]`, "secret PARTNER_TOKEN: not granted to steps' environments"},
		{"header to another host", func(s *tasks.Spec) {
			s.Secrets, s.Inputs = []string{"PARTNER_TOKEN"}, header("https://evil.example/x", "PARTNER_TOKEN")
		}, `inputs[0].headers["Authorization"]`, `secret PARTNER_TOKEN: not granted to host "evil.example"`},
		{"header with a secret whose grant has no hosts", func(s *tasks.Spec) {
			s.Secrets, s.Inputs = []string{"ENV_KEY"}, header("https://partner.example/x", "ENV_KEY")
		}, `inputs[0].headers["Authorization"]`, "secret ENV_KEY: not granted to any host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpec(q)
			tc.edit(s)
			_, err := c.Enqueue(context.Background(), s)
			switch {
			case tc.field == "" && tc.message == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			case tc.field == "":
				if err == nil || !tasks.IsInvalid(err) {
					t.Fatalf("Enqueue: %v, want a refusal", err)
				}
				return
			}
			fe, ok := err.(*tasks.FieldError)
			if !ok {
				t.Fatalf("Enqueue: err = %v (%T), want a *tasks.FieldError", err, err)
			}
			if fe.Field != tc.field || !strings.Contains(fe.Msg, tc.message) || fe.Hint != tasks.GrantsHint {
				t.Errorf("got %s, want field %s, message with %q", fe, tc.field, tc.message)
			}
		})
	}
	// Only the two granted specs reached the queue.
	if n := queueSize(t, q); n != 2 {
		t.Errorf("%d tasks enqueued, want the 2 granted ones", n)
	}

	// A queue no worker published grants for: the client cannot know, the
	// worker decides.
	q2 := redistest.Queue(t)
	s := newSpec(q2)
	s.Secrets = []string{"UNKNOWN_KEY"}
	if _, err := c.Enqueue(context.Background(), s); err != nil {
		t.Errorf("Enqueue without published grants: %v", err)
	}
	// Published, granting nothing (a worker without a policy): refused.
	if err := queuepolicy.PublishGrants(context.Background(), rdb, "", []string{q2}, policy.NoPolicy().Grants()); err != nil {
		t.Fatal(err)
	}
	s = newSpec(q2)
	s.Secrets = []string{"UNKNOWN_KEY"}
	if _, err := c.Enqueue(context.Background(), s); err == nil || !strings.Contains(err.Error(), "secrets[0]: secret UNKNOWN_KEY: not granted") {
		t.Errorf("Enqueue with an empty grant list: %v", err)
	}
}

func queueSize(t *testing.T, q string) int {
	t.Helper()
	queues, err := inspector(t).Queues()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(queues, q) {
		return 0
	}
	info, err := inspector(t).GetQueueInfo(q)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size
}
