package tasks_test

import (
	"errors"
	"testing"

	"github.com/airlock-run/airlock/tasks"
)

// A key twice in one object, anywhere in a spec, is refused naming the
// object as the other decode errors name fields.
func TestDecodeDuplicateKeys(t *testing.T) {
	const step = `{"run": ["true"]}`
	tests := []struct {
		name, spec, field, msg string
	}{
		{"top level", `{"version": 1, "steps": [` + step + `], "version": 1}`, "spec", `duplicate key "version"`},
		{"a step's env", `{"version": 1, "steps": [` + step + `, {"run": ["true"], "env": {"X": "a", "Y": "b", "X": "c"}}]}`, "steps[1].env", `duplicate key "X"`},
		{"a step's field", `{"version": 1, "steps": [{"run": ["true"], "run": ["sh"]}]}`, "steps[0]", `duplicate key "run"`},
		{"an escaped spelling", `{"version": 1, "steps": [{"run": ["true"], "env": {"X": "a", "\u0058": "c"}}]}`, "steps[0].env", `duplicate key "X"`},
		{"an input's headers", `{"version": 1, "inputs": [{"url": "https://a.example/x", "path": "in/x", "headers": {"A": "1", "A": "2"}}], "steps": [` + step + `]}`, "inputs[0].headers", `duplicate key "A"`},
		{"inside the output schema", `{"version": 1, "steps": [` + step + `], "output": {"result": "out/r.json", "schema": {"type": "object", "properties": {"amount": {"maximum": 1000, "maximum": 1e9}}}}}`,
			`output.schema["properties"]["amount"]`, `duplicate key "maximum"`},
		{"files", `{"version": 1, "files": {"a.sh": "x", "a.sh": "y"}, "steps": [` + step + `]}`, "files", `duplicate key "a.sh"`},
		{"limits", `{"version": 1, "limits": {"memory": "64MiB", "memory": "8GiB"}, "steps": [` + step + `]}`, "limits", `duplicate key "memory"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tasks.Decode([]byte(tt.spec))
			var fe *tasks.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("Decode = %v, %v; want a *FieldError", s, err)
			}
			if fe.Field != tt.field || fe.Msg != tt.msg {
				t.Errorf("FieldError{Field: %q, Msg: %q}, want {%q, %q}", fe.Field, fe.Msg, tt.field, tt.msg)
			}
		})
	}
	// The same keys in different objects are fine.
	if _, err := tasks.Decode([]byte(`{"version": 1, "steps": [{"run": ["true"], "env": {"X": "1"}}, {"run": ["true"], "env": {"X": "2"}}]}`)); err != nil {
		t.Errorf("Decode of keys repeated across objects: %v", err)
	}
}
