package policy_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/record"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, format, policy, want string
	}{
		// Unknown keys, at every level.
		{"unknown top key", "yaml", "defualt: park\n",
			`line 1: defualt: unknown key "defualt" (known: default, rules, secrets, quotas)`},
		{"unknown top key", "json", `{"defualt": "park"}`,
			`line 1: defualt: unknown key "defualt" (known: default, rules, secrets, quotas)`},
		{"unknown rule key", "yaml", "rules:\n  - name: a\n    when: {queue: [x]}\n    then: park\n    why: because\n",
			`line 5: rules[0].why: unknown key "why" (known: name, when, then)`},
		{"unknown rule key", "json", `{"rules": [{"name": "a", "when": {"queue": ["x"]}, "then": "park", "why": "because"}]}`,
			`line 1: rules[0].why: unknown key "why" (known: name, when, then)`},
		{"unknown condition", "yaml", "rules:\n  - name: a\n    when:\n      queue: [x]\n      colour: red\n    then: park\n",
			`line 5: rules[0].when.colour: unknown key "colour" (known: queue, principal, action, artifact_bytes_over, result, network, stderr, secret_in_artifacts, secret_in_env, session)`},
		{"unknown condition", "json", "{\"rules\": [{\"name\": \"a\", \"when\": {\n\"queue\": [\"x\"],\n\"colour\": \"red\"}, \"then\": \"park\"}]}",
			`line 3: rules[0].when.colour: unknown key "colour" (known: queue, principal, action, artifact_bytes_over, result, network, stderr, secret_in_artifacts, secret_in_env, session)`},
		{"unknown result key", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: exists, path: /b}}\n    then: park\n",
			`line 3: rules[0].when.result.path: unknown key "path" (known: pointer, op, value)`},

		// Bad operator, pointer, value.
		{"bad op", "yaml", "rules:\n  - name: a\n    when: {queue: [x]}\n    then: park\n  - name: b\n    when: {queue: [x]}\n    then: park\n  - name: c\n    when:\n      result: {pointer: /amount, op: \"~\", value: 1}\n    then: park\n",
			`line 10: rules[2].when.result.op: unknown operator "~": use one of > >= < <= == != in not_in exists`},
		{"bad op", "json", `{"rules": [{"name": "a", "when": {"queue": ["x"]}, "then": "park"}, {"name": "b", "when": {"queue": ["x"]}, "then": "park"}, {"name": "c", "when": {"result": {"pointer": "/amount", "op": "~", "value": 1}}, "then": "park"}]}`,
			`line 1: rules[2].when.result.op: unknown operator "~": use one of > >= < <= == != in not_in exists`},
		{"op not a string", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: 3, value: 1}}\n    then: park\n",
			`line 3: rules[0].when.result.op: unknown operator the number 3: use one of > >= < <= == != in not_in exists`},
		{"no op", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, value: 1}}\n    then: park\n",
			`line 3: rules[0].when.result.op: is required: one of > >= < <= == != in not_in exists`},
		{"no pointer", "yaml", "rules:\n  - name: a\n    when: {result: {op: exists}}\n    then: park\n",
			`line 3: rules[0].when.result.pointer: is required: a JSON pointer such as /amount`},
		{"pointer without slash", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: amount, op: exists}}\n    then: park\n",
			`line 3: rules[0].when.result.pointer: "amount" is not a JSON pointer: it must be empty or start with /`},
		{"pointer with a bad escape", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a~2, op: exists}}\n    then: park\n",
			`line 3: rules[0].when.result.pointer: "/a~2" is not a JSON pointer: ~ must be followed by 0 or 1`},
		{"> with a string", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: \">\", value: \"10\"}}\n    then: park\n",
			`line 3: rules[0].when.result.value: > needs a number, not the string "10"`},
		{"> without value", "json", `{"rules": [{"name": "a", "when": {"result": {"pointer": "/a", "op": ">"}}, "then": "park"}]}`,
			`line 1: rules[0].when.result.value: is required: > needs a number`},
		{"== with a list", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: \"==\", value: [1]}}\n    then: park\n",
			`line 3: rules[0].when.result.value: == needs a number, string or boolean, not a list`},
		{"== with null", "json", `{"rules": [{"name": "a", "when": {"result": {"pointer": "/a", "op": "==", "value": null}}, "then": "park"}]}`,
			`line 1: rules[0].when.result.value: == needs a number, string or boolean, not null`},
		{"in with a scalar", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: in, value: 3}}\n    then: park\n",
			`line 3: rules[0].when.result.value: in needs a non-empty list of numbers, strings or booleans, not the number 3`},
		{"in with an empty list", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: not_in, value: []}}\n    then: park\n",
			`line 3: rules[0].when.result.value: not_in needs a non-empty list of numbers, strings or booleans, not a list`},
		{"in with a nested list", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: in, value: [1, [2]]}}\n    then: park\n",
			`line 3: rules[0].when.result.value[1]: must be a number, string or boolean, not a list`},
		{"exists with a value", "yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: exists, value: true}}\n    then: park\n",
			`line 3: rules[0].when.result.value: exists takes no value`},

		// Names.
		{"no name", "yaml", "rules:\n  - when: {queue: [x]}\n    then: park\n",
			`line 2: rules[0].name: is required`},
		{"no name", "json", "{\"rules\": [\n {\"when\": {\"queue\": [\"x\"]}, \"then\": \"park\"}]}",
			`line 2: rules[0].name: is required`},
		{"duplicate names", "yaml", "rules:\n  - name: a\n    when: {queue: [x]}\n    then: park\n  - name: a\n    when: {queue: [y]}\n    then: promote\n",
			`line 5: rules[1].name: "a" is the name of rules[0] too; names must be unique`},
		{"duplicate names", "json", `{"rules": [{"name": "a", "when": {"queue": ["x"]}, "then": "park"}, {"name": "a", "when": {"queue": ["y"]}, "then": "promote"}]}`,
			`line 1: rules[1].name: "a" is the name of rules[0] too; names must be unique`},
		{"reserved name", "yaml", "rules:\n  - name: spec\n    when: {queue: [x]}\n    then: park\n",
			`line 2: rules[0].name: "spec" is reserved: decisions name it when no rule decided`},
		{"bad name", "yaml", "rules:\n  - name: a b\n    when: {queue: [x]}\n    then: park\n",
			`line 2: rules[0].name: "a b" must be 1-64 characters of letters, digits, '.', '_' or '-'`},
		{"name not a string", "json", `{"rules": [{"name": 7, "when": {"queue": ["x"]}, "then": "park"}]}`,
			`line 1: rules[0].name: must be a string, not the number 7`},

		// Rules without conditions.
		{"empty when", "yaml", "rules:\n  - name: a\n    when: {}\n    then: park\n",
			`line 3: rules[0].when: a rule needs at least one condition`},
		{"empty when", "json", `{"rules": [{"name": "a", "when": {}, "then": "park"}]}`,
			`line 1: rules[0].when: a rule needs at least one condition`},
		{"no when", "yaml", "rules:\n  - name: a\n    then: park\n",
			`line 2: rules[0].when: is required: a rule needs at least one condition`},
		{"null when", "yaml", "rules:\n  - name: a\n    when:\n    then: park\n",
			`line 3: rules[0].when: must be a mapping, not null`},

		// Bad then and default.
		{"bad then", "yaml", "rules:\n  - name: a\n    when: {queue: [x]}\n    then: maybe\n",
			`line 4: rules[0].then: the string "maybe" is not a decision: use park or promote`},
		{"bad then", "json", `{"rules": [{"name": "a", "when": {"queue": ["x"]}, "then": "maybe"}]}`,
			`line 1: rules[0].then: the string "maybe" is not a decision: use park or promote`},
		{"no then", "yaml", "rules:\n  - name: a\n    when: {queue: [x]}\n",
			`line 2: rules[0].then: is required: park or promote`},
		{"bad default", "yaml", "default: later\n",
			`line 1: default: the string "later" is not a decision: use park or promote`},
		{"bad default", "json", `{"default": true}`,
			`line 1: default: true is not a decision: use park or promote`},

		// Condition values.
		{"queue not a list", "yaml", "rules:\n  - name: a\n    when: {queue: payments}\n    then: park\n",
			`line 3: rules[0].when.queue: must be a list of queue names, not the string "payments"`},
		{"empty queue list", "yaml", "rules:\n  - name: a\n    when: {queue: []}\n    then: park\n",
			`line 3: rules[0].when.queue: must list at least one queue`},
		{"bad queue name", "yaml", "rules:\n  - name: a\n    when: {queue: [\"bad queue\"]}\n    then: park\n",
			`line 3: rules[0].when.queue[0]: "bad queue" is not a queue name`},
		{"action not a string", "yaml", "rules:\n  - name: a\n    when: {action: [{x: 1}]}\n    then: park\n",
			`line 3: rules[0].when.action[0]: must be a non-empty string, not a mapping`},
		{"action not a string", "json", `{"rules": [{"name": "a", "when": {"action": [3]}, "then": "park"}]}`,
			`line 1: rules[0].when.action[0]: must be a non-empty string, not the number 3`},
		{"empty action", "yaml", "rules:\n  - name: a\n    when: {action: [\"\"]}\n    then: park\n",
			`line 3: rules[0].when.action[0]: must be a non-empty string, not the string ""`},
		{"fractional bytes", "yaml", "rules:\n  - name: a\n    when: {artifact_bytes_over: 1.5}\n    then: park\n",
			`line 3: rules[0].when.artifact_bytes_over: must be a whole number of bytes, at least 0, not the number 1.5`},
		{"negative bytes", "json", `{"rules": [{"name": "a", "when": {"artifact_bytes_over": -1}, "then": "park"}]}`,
			`line 1: rules[0].when.artifact_bytes_over: must be a whole number of bytes, at least 0, not the number -1`},
		{"huge number", "json", `{"rules": [{"name": "a", "when": {"artifact_bytes_over": 1e400}, "then": "park"}]}`,
			`line 1: rules[0].when.artifact_bytes_over: number 1e400 is out of range`},
		{"flag not a bool", "yaml", "rules:\n  - name: a\n    when: {network: yes}\n    then: park\n",
			`line 3: rules[0].when.network: must be true or false, not the string "yes"`},

		// Documents.
		{"rules not a list", "yaml", "rules: {}\n", `line 1: rules: must be a list of rules, not a mapping`},
		{"a list", "yaml", "- 1\n", `line 1: must be a mapping, not a list`},
		{"a list", "json", `[]`, `line 1: must be a mapping, not a list`},
		{"duplicate key", "yaml", "default: park\ndefault: promote\n", `line 2: key "default" appears twice`},
		{"duplicate key", "json", `{"default": "park", "default": "promote"}`, `line 1: key "default" appears twice`},
		{"yaml syntax", "yaml", "rules: [\n", `line 1: not YAML: did not find expected node content`},
		{"two documents", "yaml", "default: park\n---\ndefault: promote\n", `line 2: more than one YAML document`},
		{"anchor", "yaml", "default: &d park\nrules: []\n", `line 1: default: anchors (&d) are not supported`},
		{"merge key", "yaml", "rules:\n  - <<: {name: a}\n    when: {queue: [x]}\n    then: park\n",
			`line 2: rules[0]: keys must be plain strings (no merge keys or complex keys)`},
		{"custom tag", "yaml", "default: !!binary cGFyaw==\n", `line 1: default: values tagged !!binary are not supported`},
		{"json syntax", "json", "{\n\"default\": \"park\",\n}", `line 3: not JSON: invalid character '}' looking for beginning of object key string`},
		{"json trailing data", "json", `{"default": "park"} {}`, `line 1: not JSON: data after the policy's object`},
		{"json empty", "json", ``, `line 1: not JSON: unexpected EOF`},
		{"unknown format", "toml", `default = "park"`, `unknown format "toml": use json or yaml`},
	}
	for _, tt := range tests {
		t.Run(tt.format+" "+tt.name, func(t *testing.T) {
			p, err := policy.Parse([]byte(tt.policy), tt.format)
			if p != nil || !errors.Is(err, policy.ErrInvalid) {
				t.Fatalf("Parse = %v, %v; want ErrInvalid", p, err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse error\n got: %s\nwant: %s", got, tt.want)
			}
		})
	}
}

func TestParseAcceptsBothFormats(t *testing.T) {
	yamlPolicy := `
# The operator's policy.
default: promote
rules:
  - name: big-payments
    when:
      queue: [payments]
      result:
        pointer: /amount
        op: ">="
        value: 1e3
    then: park
`
	jsonPolicy := `{
		"default": "promote",
		"rules": [
			{"name": "big-payments", "then": "park",
			 "when": {"result": {"value": 1000, "op": ">=", "pointer": "/amount"}, "queue": ["payments"]}}
		]
	}`
	in := policy.Input{Queue: "payments", Result: []byte(`{"amount": 1000}`)}
	want := park("big-payments", `rule big-payments: queue is "payments" and /amount is 1000 >= 1000`)
	want.Checked = []record.Check{{Rule: "big-payments", Pointer: "/amount"}}
	for format, text := range map[string]string{"yaml": yamlPolicy, ".yml": yamlPolicy, "JSON": jsonPolicy} {
		p, err := policy.Parse([]byte(text), format)
		if err != nil {
			t.Fatalf("Parse(%s): %v", format, err)
		}
		if diff := cmp.Diff(want, p.Evaluate(in)); diff != "" {
			t.Errorf("%s: Evaluate (-want +got):\n%s", format, diff)
		}
	}
}

func TestParseYAMLNamesThatLookLikeNumbers(t *testing.T) {
	p := mustParse(t, "rules:\n  - name: 2024\n    when: {queue: [007, true], action: [1.5]}\n    then: park\n")
	got := p.Evaluate(policy.Input{Queue: "007", Action: "1.5"})
	want := park("2024", `rule 2024: queue is "007" and action is "1.5"`)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := policy.Parse([]byte(`{"rules": [{"name": 2024, "when": {"queue": ["x"]}, "then": "park"}]}`), "json"); err == nil {
		t.Error("JSON: a number as a rule name was accepted")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const y = "default: promote\nrules:\n  - {name: wait, when: {stderr: true}, then: park}\n"
	const j = `{"default": "promote", "rules": [{"name": "wait", "when": {"stderr": true}, "then": "park"}]}`
	in := policy.Input{Stderr: true}
	want := park("wait", "rule wait: a step wrote to stderr")
	for _, path := range []string{write("p.yaml", y), write("p.yml", y), write("P.YAML", y), write("p.json", j)} {
		p, err := policy.Load(path)
		if err != nil {
			t.Fatalf("Load(%s): %v", path, err)
		}
		if diff := cmp.Diff(want, p.Evaluate(in)); diff != "" {
			t.Errorf("Load(%s): Evaluate (-want +got):\n%s", path, diff)
		}
	}

	// The extension, not the content, says the format.
	jsonInYAML := write("json.yaml", j) // JSON is YAML too
	if _, err := policy.Load(jsonInYAML); err != nil {
		t.Errorf("Load(%s): %v", jsonInYAML, err)
	}
	yamlInJSON := write("yaml.json", y)
	if _, err := policy.Load(yamlInJSON); !errors.Is(err, policy.ErrInvalid) || !strings.HasPrefix(err.Error(), yamlInJSON+":1: not JSON") {
		t.Errorf("Load(%s) = %v, want a JSON error naming the file", yamlInJSON, err)
	}

	bad := write("bad.yaml", "rules:\n  - name: a\n    when: {result: {pointer: /a, op: \"~\", value: 1}}\n    then: park\n")
	_, err := policy.Load(bad)
	if want := bad + `:3: rules[0].when.result.op: unknown operator "~": use one of > >= < <= == != in not_in exists`; err == nil || err.Error() != want {
		t.Errorf("Load(%s) error\n got: %v\nwant: %s", bad, err, want)
	}
	var pe *policy.ParseError
	if !errors.As(err, &pe) || pe.File != bad || pe.Line != 3 || pe.Field != "rules[0].when.result.op" {
		t.Errorf("Load(%s) = %#v, want a *ParseError with file, line and field", bad, err)
	}

	txt := write("policy.txt", y)
	if _, err := policy.Load(txt); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), `unknown extension ".txt"`) {
		t.Errorf("Load(%s) = %v, want an unknown extension error", txt, err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := policy.Load(missing); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(%s) = %v, want fs.ErrNotExist naming the file", missing, err)
	}
	huge := write("huge.yaml", "# "+strings.Repeat("x", 1<<20)+"\n")
	if _, err := policy.Load(huge); !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(%s) = %v, want a size error", huge, err)
	}
	empty := write("empty.yaml", "")
	if p, err := policy.Load(empty); err != nil || p.Evaluate(policy.Input{}).Action != policy.Park {
		t.Errorf("Load(empty.yaml) = %v, %v; want a policy that parks", p, err)
	}
}

func TestParseDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	for _, format := range []string{"json", "yaml"} {
		_, err := policy.Parse([]byte(`{"default": "park", "x": `+deep+`}`), format)
		if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "nested deeper than") {
			t.Errorf("%s: Parse of a deep document = %v, want a depth error", format, err)
		}
	}
}
