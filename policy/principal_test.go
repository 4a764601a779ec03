package policy_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
)

// TestPrincipalCondition checks the principal condition: it holds for a
// principal in the list, not for another one, and never for a run that
// names no principal, whether the rule parks or promotes.
func TestPrincipalCondition(t *testing.T) {
	parks := mustParse(t, rule1("principal: [alice, billing@corp]"))
	for _, tc := range []struct {
		principal string
		want      policy.Decision
	}{
		{"alice", park("r", `rule r: principal is "alice"`)},
		{"billing@corp", park("r", `rule r: principal is "billing@corp"`)},
		{"bob", noMatch},
		{"Alice", noMatch},
		{"", noMatch},
	} {
		if got := parks.Evaluate(policy.Input{Queue: "default", Principal: tc.principal}); !cmp.Equal(got, tc.want) {
			t.Errorf("park rule, principal %q: %+v, want %+v", tc.principal, got, tc.want)
		}
	}
	promotes := mustParse(t, "default: park\nrules:\n  - name: trusted\n    when: {principal: [mcp], queue: [agents]}\n    then: promote\n")
	for _, tc := range []struct {
		in   policy.Input
		want record.Action
	}{
		{policy.Input{Queue: "agents", Principal: "mcp"}, policy.Promote},
		{policy.Input{Queue: "agents"}, policy.Park},
		{policy.Input{Queue: "agents", Principal: "mcp2"}, policy.Park},
		{policy.Input{Queue: "other", Principal: "mcp"}, policy.Park},
	} {
		if got := promotes.Evaluate(tc.in); got.Action != tc.want {
			t.Errorf("promote rule, %+v: %+v, want %s", tc.in, got, tc.want)
		}
	}
}

// TestPrincipalConditionErrors checks that a principal list is checked
// as the token names it matches are, naming the entry.
func TestPrincipalConditionErrors(t *testing.T) {
	for _, tc := range []struct{ cond, want string }{
		{"principal: [alice, a/b]", `rules[0].when.principal[1]: "a/b" is not a principal`},
		{"principal: [\"-x\"]", `rules[0].when.principal[0]: "-x" is not a principal`},
		{"principal: alice", "rules[0].when.principal: must be a list of principal names"},
		{"principal: []", "rules[0].when.principal: must list at least one principal"},
		{"principal: [\"\"]", "rules[0].when.principal[0]: must be a non-empty string"},
	} {
		_, err := policy.Parse([]byte(rule1(tc.cond)), "yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.cond, err, tc.want)
		}
	}
}
