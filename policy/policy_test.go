package policy_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustParse(t *testing.T, yaml string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(yaml), "yaml")
	if err != nil {
		t.Fatalf("Parse:\n%s\n: %v", yaml, err)
	}
	return p
}

// rule1 is a policy of one rule that parks when cond holds, default promote.
func rule1(cond string) string {
	return "default: promote\nrules:\n  - name: r\n    when:\n      " + cond + "\n    then: park\n"
}

func park(rule string, reasons ...string) policy.Decision {
	return policy.Decision{Action: policy.Park, Rule: rule, Reasons: reasons}
}

func promote(rule string, reasons ...string) policy.Decision {
	return policy.Decision{Action: policy.Promote, Rule: rule, Reasons: reasons}
}

// ignoreChecked leaves out the values a decision says its rules looked
// at: TestChecked checks them.
var ignoreChecked = cmpopts.IgnoreFields(policy.Decision{}, "Checked")

var noMatch = promote("default", "no rule matched: the policy's default is promote")

func TestEvaluateConditions(t *testing.T) {
	res := func(s string) []byte { return []byte(s) }
	amount := res(`{"amount": 1500, "currency": "EUR", "approved": false, "note": null, "a/b": {"~c": 1},
		"items": [{"price": 10}, {"price": 2000}], "big": 1e400, "label": "1500"}`)
	tests := []struct {
		name string
		cond string
		in   policy.Input
		want policy.Decision
	}{
		{"queue in list", "queue: [payments, refunds]", policy.Input{Queue: "refunds"},
			park("r", `rule r: queue is "refunds"`)},
		{"queue not in list", "queue: [payments, refunds]", policy.Input{Queue: "default"}, noMatch},
		{"action in list", "action: [send-email]", policy.Input{Action: "send-email"},
			park("r", `rule r: action is "send-email"`)},
		{"action not in list", "action: [send-email]", policy.Input{Action: "render-pdf"}, noMatch},
		{"artifact bytes over", "artifact_bytes_over: 1048576", policy.Input{ArtifactBytes: 1048577},
			park("r", "rule r: artifacts hold 1048577 bytes > 1048576")},
		{"artifact bytes at the bound", "artifact_bytes_over: 1048576", policy.Input{ArtifactBytes: 1048576}, noMatch},
		{"artifact bytes over 0", "artifact_bytes_over: 0", policy.Input{ArtifactBytes: 1},
			park("r", "rule r: artifacts hold 1 bytes > 0")},
		{"network on", "network: true", policy.Input{Network: true}, park("r", "rule r: the run had network")},
		{"network off, want on", "network: true", policy.Input{}, noMatch},
		{"network off", "network: false", policy.Input{}, park("r", "rule r: the run had no network")},
		{"network on, want off", "network: false", policy.Input{Network: true}, noMatch},
		{"stderr", "stderr: true", policy.Input{Stderr: true}, park("r", "rule r: a step wrote to stderr")},
		{"no stderr, want some", "stderr: true", policy.Input{}, noMatch},
		{"no stderr", "stderr: false", policy.Input{}, park("r", "rule r: no step wrote to stderr")},
		{"secret in artifacts", "secret_in_artifacts: true", policy.Input{SecretInArtifacts: true},
			park("r", "rule r: a secret's value appears in an artifact")},
		{"no secret in artifacts", "secret_in_artifacts: true", policy.Input{}, noMatch},

		{"result >", `result: {pointer: /amount, op: ">", value: 1000}`, policy.Input{Result: amount},
			park("r", "rule r: /amount is 1500 > 1000")},
		{"result > not holding", `result: {pointer: /amount, op: ">", value: 1500}`, policy.Input{Result: amount}, noMatch},
		{"result >=", `result: {pointer: /amount, op: ">=", value: 1500}`, policy.Input{Result: amount},
			park("r", "rule r: /amount is 1500 >= 1500")},
		{"result <", `result: {pointer: /amount, op: "<", value: 1500.5}`, policy.Input{Result: amount},
			park("r", "rule r: /amount is 1500 < 1500.5")},
		{"result < not holding", `result: {pointer: /amount, op: "<", value: 1500}`, policy.Input{Result: amount}, noMatch},
		{"result <=", `result: {pointer: /amount, op: "<=", value: 1500}`, policy.Input{Result: amount},
			park("r", "rule r: /amount is 1500 <= 1500")},
		{"result > on a string", `result: {pointer: /label, op: ">", value: 1000}`, policy.Input{Result: amount},
			park("r", `rule r could not be evaluated, so it parks: /label is "1500" (a string), not a number like 1000`)},
		{"result > on a number out of float64's range", `result: {pointer: /big, op: ">", value: 1000}`, policy.Input{Result: amount},
			park("r", "rule r could not be evaluated, so it parks: /big is 1e400, beyond float64's range")},
		{"result in an array", `result: {pointer: /items/1/price, op: ">", value: 1000}`, policy.Input{Result: amount},
			park("r", "rule r: /items/1/price is 2000 > 1000")},
		{"result past an array's end", `result: {pointer: /items/2/price, op: ">", value: 0}`, policy.Input{Result: amount},
			park("r", "rule r could not be evaluated, so it parks: /items/2/price is missing")},
		{"result with escaped pointer", `result: {pointer: /a~1b/~0c, op: "==", value: 1}`, policy.Input{Result: amount},
			park("r", "rule r: /a~1b/~0c is 1 == 1")},
		{"result == string", `result: {pointer: /currency, op: "==", value: EUR}`, policy.Input{Result: amount},
			park("r", `rule r: /currency is "EUR" == "EUR"`)},
		{"result == string not holding", `result: {pointer: /currency, op: "==", value: USD}`, policy.Input{Result: amount}, noMatch},
		{"result == bool", `result: {pointer: /approved, op: "==", value: false}`, policy.Input{Result: amount},
			park("r", "rule r: /approved is false == false")},
		{"result == number", `result: {pointer: /amount, op: "==", value: 1500.0}`, policy.Input{Result: amount},
			park("r", "rule r: /amount is 1500 == 1500")},
		{"result == number vs string", `result: {pointer: /label, op: "==", value: 1500}`, policy.Input{Result: amount},
			park("r", `rule r could not be evaluated, so it parks: /label is "1500" (a string), not a number like 1500`)},
		{"result != ", `result: {pointer: /currency, op: "!=", value: USD}`, policy.Input{Result: amount},
			park("r", `rule r: /currency is "EUR" != "USD"`)},
		{"result != not holding", `result: {pointer: /currency, op: "!=", value: EUR}`, policy.Input{Result: amount}, noMatch},
		{"result != on a missing pointer", `result: {pointer: /missing, op: "!=", value: EUR}`, policy.Input{Result: amount},
			park("r", "rule r could not be evaluated, so it parks: /missing is missing")},
		{"result in", `result: {pointer: /currency, op: in, value: [USD, EUR]}`, policy.Input{Result: amount},
			park("r", `rule r: /currency is "EUR" in ["USD","EUR"]`)},
		{"result in not holding", `result: {pointer: /currency, op: in, value: [USD, GBP]}`, policy.Input{Result: amount}, noMatch},
		{"result in, mixed types", `result: {pointer: /amount, op: in, value: ["1500", 1500]}`, policy.Input{Result: amount},
			park("r", `rule r: /amount is 1500 in ["1500",1500]`)},
		{"result not_in", `result: {pointer: /currency, op: not_in, value: [USD, GBP]}`, policy.Input{Result: amount},
			park("r", `rule r: /currency is "EUR" not_in ["USD","GBP"]`)},
		{"result not_in not holding", `result: {pointer: /currency, op: not_in, value: [EUR]}`, policy.Input{Result: amount}, noMatch},
		{"result not_in on a missing pointer", `result: {pointer: /missing, op: not_in, value: [EUR]}`, policy.Input{Result: amount},
			park("r", "rule r could not be evaluated, so it parks: /missing is missing")},
		{"result exists", `result: {pointer: /amount, op: exists}`, policy.Input{Result: amount},
			park("r", "rule r: /amount exists")},
		{"result exists, null", `result: {pointer: /note, op: exists}`, policy.Input{Result: amount},
			park("r", "rule r: /note exists")},
		{"result exists on a missing pointer", `result: {pointer: /missing, op: exists}`, policy.Input{Result: amount}, noMatch},
		{"result missing pointer", `result: {pointer: /missing, op: ">", value: 0}`, policy.Input{Result: amount},
			park("r", "rule r could not be evaluated, so it parks: /missing is missing")},
		{"result below a scalar", `result: {pointer: /amount/x, op: exists}`, policy.Input{Result: amount}, noMatch},
		{"no result", `result: {pointer: /amount, op: exists}`, policy.Input{}, noMatch},
		{"result not JSON", `result: {pointer: /amount, op: exists}`, policy.Input{Result: res(`{"amount": 1`)}, noMatch},
		{"result of two values", `result: {pointer: "", op: exists}`, policy.Input{Result: res(`1 2`)}, noMatch},
		{"whole result", `result: {pointer: "", op: "==", value: ok}`, policy.Input{Result: res(`"ok"`)},
			park("r", `rule r: the result is "ok" == "ok"`)},
		{"result is an object", `result: {pointer: /a~1b, op: "!=", value: 1}`, policy.Input{Result: amount},
			park("r", `rule r could not be evaluated, so it parks: /a~1b is {"~c":1} (an object), not a number like 1`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, rule1(tt.cond)).Evaluate(tt.in)
			if diff := cmp.Diff(tt.want, got, ignoreChecked); diff != "" {
				t.Errorf("when %s, Evaluate(%+v) (-want +got):\n%s", tt.cond, tt.in, diff)
			}
		})
	}
}

// TestFailClosed: a rule that cannot be evaluated on a result (wrong
// type, missing value, a number beyond float64, no result) parks when it
// is a park rule and does not promote when it is a promote rule, for every
// operator; the reasons name the rule and why.
func TestFailClosed(t *testing.T) {
	results := []struct {
		name   string
		result []byte
		why    string
	}{
		{"string where a number is compared", []byte(`{"v": "5000000"}`), `/v is "5000000" (a string), not a number like 1000`},
		{"number beyond float64", []byte(`{"v": 1e400}`), "/v is 1e400, beyond float64's range"},
		{"missing", []byte(`{"w": 1}`), "/v is missing"},
		{"null", []byte(`{"v": null}`), "/v is null (null), not a number like 1000"},
		{"array", []byte(`{"v": [1]}`), "/v is [1] (an array), not a number like 1000"},
		{"no result", nil, "/v: the run has no result"},
		{"result not JSON", []byte(`{"v": `), "/v: the result is not one JSON value"},
	}
	for _, op := range []string{">", ">=", "<", "<=", "==", "!=", "in", "not_in"} {
		value := "1000"
		if op == "in" || op == "not_in" {
			value = "[1000, 2000]"
		}
		for _, r := range results {
			t.Run(op+"/"+r.name, func(t *testing.T) {
				why := r.why
				if op == "in" || op == "not_in" {
					why = strings.Replace(why, "not a number like 1000", "of no type in [1000,2000]", 1)
				}
				cond := fmt.Sprintf(`result: {pointer: /v, op: %q, value: %s}`, op, value)
				parkRule := "default: promote\nrules:\n  - name: r\n    when:\n      " + cond + "\n    then: park\n"
				want := park("r", "rule r could not be evaluated, so it parks: "+why)
				if diff := cmp.Diff(want, mustParse(t, parkRule).Evaluate(policy.Input{Result: r.result}), ignoreChecked); diff != "" {
					t.Errorf("park rule, %s (-want +got):\n%s", cond, diff)
				}
				promoteRule := "default: park\nrules:\n  - name: r\n    when:\n      " + cond + "\n    then: promote\n"
				want = park("default", "no rule matched: the policy's default is park",
					"rule r could not be evaluated, so it does not promote: "+why)
				if diff := cmp.Diff(want, mustParse(t, promoteRule).Evaluate(policy.Input{Result: r.result}), ignoreChecked); diff != "" {
					t.Errorf("promote rule, %s (-want +got):\n%s", cond, diff)
				}
			})
		}
	}
	// A condition that fails outright decides, whatever the unknown one:
	// the rule does not apply.
	p := mustParse(t, "default: promote\nrules:\n  - name: r\n    when:\n      queue: [payments]\n      result: {pointer: /v, op: \">\", value: 1000}\n    then: park\n")
	if diff := cmp.Diff(noMatch, p.Evaluate(policy.Input{Queue: "default", Result: []byte(`{"v": "x"}`)}), ignoreChecked); diff != "" {
		t.Errorf("queue fails, result unknown (-want +got):\n%s", diff)
	}
	// exists is never unknown: a missing value is a plain no.
	p = mustParse(t, rule1(`result: {pointer: /v, op: exists}`))
	if diff := cmp.Diff(noMatch, p.Evaluate(policy.Input{}), ignoreChecked); diff != "" {
		t.Errorf("exists without a result (-want +got):\n%s", diff)
	}
}

func TestEvaluateReasonQuotesLittleOfTheResult(t *testing.T) {
	long := make([]byte, 500)
	for i := range long {
		long[i] = 'x'
	}
	p := mustParse(t, rule1(`result: {pointer: /s, op: "!=", value: "y"}`))
	got := p.Evaluate(policy.Input{Result: []byte(`{"s": "` + string(long) + `"}`)})
	want := park("r", `rule r: /s is "`+string(long[:79])+`… != "y"`)
	if diff := cmp.Diff(want, got, ignoreChecked); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

const payments = `
default: promote
rules:
  - name: payments-need-a-human
    when:
      queue: [payments]
      result: {pointer: /amount, op: ">", value: 1000}
    then: park
  - name: small-reports-go
    when:
      action: [report]
    then: promote
  - name: reports-without-errors-go
    when:
      action: [report]
      stderr: false
    then: promote
  - name: big-artifacts-wait
    when:
      artifact_bytes_over: 1000
    then: park
  - name: leaks-wait
    when:
      secret_in_artifacts: true
    then: park
`

func TestEvaluateRules(t *testing.T) {
	p := mustParse(t, payments)
	tests := []struct {
		name string
		in   policy.Input
		want policy.Decision
	}{
		{
			name: "AND: every condition holds",
			in:   policy.Input{Queue: "payments", Result: []byte(`{"amount": 1500}`)},
			want: park("payments-need-a-human", `rule payments-need-a-human: queue is "payments" and /amount is 1500 > 1000`),
		},
		{
			name: "AND: one condition fails",
			in:   policy.Input{Queue: "payments", Result: []byte(`{"amount": 999}`)},
			want: noMatch,
		},
		{
			name: "AND: the other fails",
			in:   policy.Input{Queue: "default", Result: []byte(`{"amount": 1500}`)},
			want: noMatch,
		},
		{
			name: "promote rules: every match is a reason, the first decides",
			in:   policy.Input{Action: "report"},
			want: promote("small-reports-go", "rule small-reports-go: action is \"report\"",
				"rule reports-without-errors-go: action is \"report\" and no step wrote to stderr"),
		},
		{
			name: "park beats promote, whatever the order",
			in:   policy.Input{Action: "report", ArtifactBytes: 5000},
			want: park("big-artifacts-wait", "rule big-artifacts-wait: artifacts hold 5000 bytes > 1000"),
		},
		{
			name: "every matching park rule is a reason",
			in:   policy.Input{Queue: "payments", Action: "report", Result: []byte(`{"amount": 1e6}`), ArtifactBytes: 5000, SecretInArtifacts: true},
			want: park("payments-need-a-human",
				`rule payments-need-a-human: queue is "payments" and /amount is 1000000 > 1000`,
				"rule big-artifacts-wait: artifacts hold 5000 bytes > 1000",
				"rule leaks-wait: a secret's value appears in an artifact"),
		},
		{
			name: "default promote",
			in:   policy.Input{Queue: "default", Action: "other"},
			want: noMatch,
		},
		{
			name: "spec always is stricter than a promote rule",
			in:   policy.Input{Action: "report", SpecApproval: "always"},
			want: park("spec", "spec asks approval: always"),
		},
		{
			name: "spec always is stricter than a promote default",
			in:   policy.Input{SpecApproval: "always"},
			want: park("spec", "spec asks approval: always"),
		},
		{
			name: "spec always with a parking rule keeps the rule's reason",
			in:   policy.Input{ArtifactBytes: 5000, SpecApproval: "always"},
			want: park("spec", "spec asks approval: always", "rule big-artifacts-wait: artifacts hold 5000 bytes > 1000"),
		},
		{
			name: "spec auto cannot loosen a park",
			in:   policy.Input{ArtifactBytes: 5000, SpecApproval: "auto"},
			want: park("big-artifacts-wait", "rule big-artifacts-wait: artifacts hold 5000 bytes > 1000"),
		},
		{
			name: "spec auto keeps a promote",
			in:   policy.Input{Action: "report", Stderr: true, SpecApproval: "auto"},
			want: promote("small-reports-go", "rule small-reports-go: action is \"report\""),
		},
		{
			name: "an unknown spec approval parks",
			in:   policy.Input{Action: "report", SpecApproval: "never"},
			want: park("spec", `spec approval "never" is not a mode: parked`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, p.Evaluate(tt.in), ignoreChecked); diff != "" {
				t.Errorf("Evaluate(%+v) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestEvaluateDefault(t *testing.T) {
	tests := []struct {
		name, policy string
		want         policy.Decision
	}{
		{"default park", "default: park\nrules: []\n", park("default", "no rule matched: the policy's default is park")},
		{"default promote", "default: promote\n", promote("default", "no rule matched: the policy's default is promote")},
		{"no default parks", "rules:\n  - {name: x, when: {queue: [other]}, then: promote}\n", park("default", "no rule matched: the policy's default is park")},
		{"empty policy parks", "", park("default", "no rule matched: the policy's default is park")},
		{"comment-only policy parks", "# nothing yet\n", park("default", "no rule matched: the policy's default is park")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustParse(t, tt.policy).Evaluate(policy.Input{Queue: "default"})
			if diff := cmp.Diff(tt.want, got, ignoreChecked); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNoPolicy(t *testing.T) {
	none := park("no-policy", "no policy: every result is parked")
	for _, p := range []*policy.Policy{policy.NoPolicy(), nil} {
		for _, in := range []policy.Input{
			{},
			{Queue: "default", Action: "report", SpecApproval: "auto"},
			{Result: []byte(`{"ok": true}`)},
		} {
			if diff := cmp.Diff(none, p.Evaluate(in), ignoreChecked); diff != "" {
				t.Errorf("Evaluate(%+v) (-want +got):\n%s", in, diff)
			}
		}
		got := p.Evaluate(policy.Input{SpecApproval: "always"})
		want := park("spec", "spec asks approval: always", "no policy: every result is parked")
		if diff := cmp.Diff(want, got, ignoreChecked); diff != "" {
			t.Errorf("with spec always (-want +got):\n%s", diff)
		}
	}
	if s := policy.NoPolicy().Summary(); s != "no policy: every result is parked" {
		t.Errorf("Summary() = %q", s)
	}
}

func TestEvaluateConcurrently(t *testing.T) {
	p := mustParse(t, payments)
	in := policy.Input{Queue: "payments", Result: []byte(`{"amount": 5000}`)}
	want := p.Evaluate(in)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if diff := cmp.Diff(want, p.Evaluate(in), ignoreChecked); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestSummary(t *testing.T) {
	got := mustParse(t, payments).Summary()
	want := "5 rules (payments-need-a-human → park, small-reports-go → promote, reports-without-errors-go → promote, big-artifacts-wait → park, leaks-wait → park), default promote"
	if got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

// A session's run is promoted only by a rule that says session: true:
// neither another promote rule nor a promote default.
func TestSessionPromotedOnlyBySessionRule(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      string
		rule      string
	}{
		{"default promote", "default: promote\n", "park", policy.RuleSession},
		{"promote rule without session", "rules:\n  - name: reports\n    when: {queue: [reports]}\n    then: promote\n", "park", policy.RuleSession},
		{"rule says session", "rules:\n  - name: sessions-ok\n    when: {queue: [reports], session: true}\n    then: promote\n", "promote", "sessions-ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(c.src), "yaml")
			if err != nil {
				t.Fatal(err)
			}
			d := p.Evaluate(policy.Input{Queue: "reports", Session: true})
			if string(d.Action) != c.want || d.Rule != c.rule {
				t.Errorf("%s by %s (%v), want %s by %s", d.Action, d.Rule, d.Reasons, c.want, c.rule)
			}
			if c.want == "park" {
				if d := p.Evaluate(policy.Input{Queue: "reports"}); d.Action != policy.Promote {
					t.Errorf("a one-shot run: %s by %s, want promote", d.Action, d.Rule)
				}
			}
		})
	}
}

// TestChecked: a decision names the values of the result its deciding
// rules looked at, whether they held or could not be evaluated; a rule
// that did not decide, or looks at no result, adds none; the spec's
// approval: always keeps those of the policy's park.
func TestChecked(t *testing.T) {
	p := mustParse(t, `default: promote
rules:
  - name: big
    when: {result: {pointer: /amount, op: ">", value: 100}}
    then: park
  - name: eur
    when: {result: {pointer: /currency, op: "==", value: EUR}}
    then: park
  - name: queue-only
    when: {queue: [q]}
    then: park
  - name: small
    when: {result: {pointer: /amount, op: "<", value: 100}}
    then: promote
`)
	in := policy.Input{Queue: "q", Result: []byte(`{"amount": 150, "currency": "EUR"}`)}
	want := []record.Check{{Rule: "big", Pointer: "/amount"}, {Rule: "eur", Pointer: "/currency"}}
	if diff := cmp.Diff(want, p.Evaluate(in).Checked); diff != "" {
		t.Errorf("two park rules held (-want +got):\n%s", diff)
	}
	in.SpecApproval = policy.ApprovalAlways
	if diff := cmp.Diff(want, p.Evaluate(in).Checked); diff != "" {
		t.Errorf("approval: always (-want +got):\n%s", diff)
	}
	in = policy.Input{Queue: "other", Result: []byte(`{"amount": "x", "currency": "USD"}`)}
	if diff := cmp.Diff([]record.Check{{Rule: "big", Pointer: "/amount"}}, p.Evaluate(in).Checked); diff != "" {
		t.Errorf("a park rule that could not be evaluated (-want +got):\n%s", diff)
	}
	in = policy.Input{Queue: "other", Result: []byte(`{"amount": 5, "currency": "USD"}`)}
	if d := p.Evaluate(in); d.Action != policy.Promote || !cmp.Equal(d.Checked, []record.Check{{Rule: "small", Pointer: "/amount"}}) {
		t.Errorf("the promote rule that decided: %+v", d)
	}
	if d := p.Evaluate(policy.Input{Queue: "q", Result: []byte(`{"amount": 5, "currency": "USD"}`)}); d.Checked != nil {
		t.Errorf("a rule with no result condition decided: checked %+v", d.Checked)
	}
}
