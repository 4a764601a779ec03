package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/airlock-run/airlock/tasks"
)

// simpleForm is run_action's simple form: one step, "command", in a
// workspace that holds files, with the spec's top-level options flattened.
type simpleForm struct {
	Command        json.RawMessage // a string (run with sh -c) or an argv array
	Files          json.RawMessage
	Stdin          json.RawMessage
	Env            json.RawMessage
	Timeout        json.RawMessage
	Limits         json.RawMessage
	OutputResult   json.RawMessage
	OutputSchema   json.RawMessage
	Artifacts      json.RawMessage
	RunID          json.RawMessage
	IdempotencyKey json.RawMessage
	Approval       json.RawMessage
}

// args are the simple form's fields, for decodeArgs.
func (f *simpleForm) args() []arg {
	return []arg{
		{"command", &f.Command}, {"files", &f.Files}, {"stdin", &f.Stdin}, {"env", &f.Env},
		{"timeout", &f.Timeout}, {"limits", &f.Limits}, {"output_result", &f.OutputResult},
		{"output_schema", &f.OutputSchema}, {"artifacts", &f.Artifacts}, {"run_id", &f.RunID},
		{"idempotency_key", &f.IdempotencyKey}, {"approval", &f.Approval},
	}
}

// given reports whether any field of the simple form is set, and names
// the first one.
func (f *simpleForm) given() (string, bool) {
	for _, a := range f.args() {
		if len(*a.dst.(*json.RawMessage)) > 0 {
			return a.name, true
		}
	}
	return "", false
}

// spec builds the task spec of the simple form and decodes it as
// tasks.Decode does; errors name the simple form's fields.
func (f *simpleForm) spec() (*tasks.Spec, error) {
	if len(f.Command) == 0 {
		return nil, &tasks.FieldError{Field: "command", Msg: "missing",
			Hint: `give "command" (a string run with sh -c, or an argv array) and "files", or a whole task spec as "spec"`}
	}
	run, err := argv("command", f.Command)
	if err != nil {
		return nil, err
	}
	commandIsString := f.commandIsString()
	step := map[string]json.RawMessage{"name": json.RawMessage(`"command"`), "run": run}
	set := func(m map[string]json.RawMessage, k string, v json.RawMessage) {
		if len(v) > 0 {
			m[k] = v
		}
	}
	set(step, "stdin", f.Stdin)
	set(step, "env", f.Env)
	stepJSON, _ := json.Marshal(step)
	spec := map[string]json.RawMessage{
		"version": json.RawMessage(`1`),
		"steps":   json.RawMessage("[" + string(stepJSON) + "]"),
	}
	set(spec, "files", f.Files)
	set(spec, "timeout", f.Timeout)
	set(spec, "limits", f.Limits)
	set(spec, "run_id", f.RunID)
	set(spec, "idempotency_key", f.IdempotencyKey)
	set(spec, "approval", f.Approval)
	if len(f.OutputResult) > 0 || len(f.OutputSchema) > 0 || len(f.Artifacts) > 0 {
		out := map[string]json.RawMessage{}
		set(out, "result", f.OutputResult)
		set(out, "schema", f.OutputSchema)
		set(out, "artifacts", f.Artifacts)
		spec["output"], _ = json.Marshal(out)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, &tasks.FieldError{Field: "arguments", Msg: err.Error()}
	}
	sp, err := tasks.Decode(data)
	if err != nil {
		return nil, simpleFieldError(err, commandIsString)
	}
	return sp, nil
}

// commandIsString reports whether command is a string (run with sh -c).
func (f *simpleForm) commandIsString() bool { return isLine(f.Command) }

// argv returns the argv of a command as run_action's command and
// run_in_session's run take it (field names which): a string is a
// command line, run as ["sh", "-c", LINE]; an array is the argv itself,
// its items checked by the step's decoder.
func argv(field string, command json.RawMessage) (json.RawMessage, error) {
	var line string
	if json.Unmarshal(command, &line) == nil {
		if line == "" {
			return nil, &tasks.FieldError{Field: field, Msg: "empty", Hint: `e.g. "wc -l in/data.csv" or ["python3", "main.py"]`}
		}
		return json.Marshal([]string{"sh", "-c", line})
	}
	if !bytes.HasPrefix(bytes.TrimSpace(command), []byte("[")) {
		return nil, &tasks.FieldError{Field: field, Msg: "want a string (run with sh -c) or an array of strings (argv)"}
	}
	return command, nil
}

// isLine reports whether a command is a string: a command line, run with
// sh -c.
func isLine(command json.RawMessage) bool {
	var line string
	return json.Unmarshal(command, &line) == nil
}

// simpleFieldError renames the field of a spec's *tasks.FieldError to the
// simple form's field it came from; other errors are returned as they are.
func simpleFieldError(err error, commandIsString bool) error {
	var fe *tasks.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	out.Field = simpleField(fe.Field, commandIsString)
	// Messages name other fields too ("a schema needs output.result").
	r := strings.NewReplacer("output.result", "output_result", "output.schema", "output_schema", "output.artifacts", "artifacts")
	out.Msg, out.Hint = r.Replace(out.Msg), r.Replace(out.Hint)
	return &rejectedError{&out}
}

// simpleField maps a spec field path to the simple form's.
func simpleField(f string, commandIsString bool) string {
	for _, m := range []struct{ spec, simple string }{
		{"steps[0].run", "command"},
		{"steps[0].stdin", "stdin"},
		{"steps[0].env", "env"},
		{"output.result", "output_result"},
		{"output.schema", "output_schema"},
		{"output.artifacts", "artifacts"},
	} {
		if rest, ok := strings.CutPrefix(f, m.spec); ok && (rest == "" || rest[0] == '[' || rest[0] == '.') {
			if m.simple == "command" && commandIsString {
				return "command"
			}
			return m.simple + rest
		}
	}
	switch {
	case f == "output":
		return "output_result"
	case f == "steps" || strings.HasPrefix(f, "steps["):
		return "command"
	case f == "spec":
		return "arguments"
	}
	return f
}

// specFieldError prefixes the field of a spec's *tasks.FieldError with
// "spec.", its path in run_action's arguments.
func specFieldError(err error) error {
	var fe *tasks.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	out := *fe
	if out.Field != "spec" {
		out.Field = "spec." + out.Field
	}
	return &rejectedError{&out}
}

// reject marks a *tasks.FieldError about the spec as a rejected spec.
func reject(err error) error {
	var fe *tasks.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return &rejectedError{fe}
}

// rejectedError is a spec the decoder or the client's checks refused:
// "spec rejected: FIELD: MSG (HINT)", as enqueue says it.
type rejectedError struct{ fe *tasks.FieldError }

func (e *rejectedError) Error() string { return "spec rejected: " + e.fe.Error() }
func (e *rejectedError) Unwrap() error { return e.fe }
