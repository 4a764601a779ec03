package mcpserver

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/airlock-run/airlock/tasks"
)

// draft07 is the dialect of every tool's input schema: that of
// tasks.SpecSchema, whose parts they reuse.
const draft07 = "http://json-schema.org/draft-07/schema#"

// object is a JSON Schema (or a part of one) as a JSON object.
type object = map[string]any

// schemas are the input schemas of the tools, built from tasks.SpecSchema.
type schemas struct {
	runAction, getRun, waitRun, getResult, cancelRun object
	// The session tools' (sessions.go).
	openSession, runInSession, writeFile, readFile, closeSession object
}

// buildSchemas builds the tools' input schemas from the spec's JSON
// Schema: run_action's "spec" property is tasks.SpecSchema itself (its
// definitions moved to the tool schema's root, where its "#/definitions/…"
// references then point), and the fields of the simple form are the
// spec's own (files, steps[].run, steps[].stdin, steps[].env, timeout,
// limits, output.result, output.schema, output.artifacts…), so that the
// schema an agent sees is the one the decoder is held to.
func buildSchemas() (schemas, error) {
	var spec object
	if err := json.Unmarshal(tasks.SpecSchema, &spec); err != nil {
		return schemas{}, fmt.Errorf("tasks.SpecSchema: %w", err)
	}
	defs, ok := spec["definitions"].(object)
	if !ok {
		return schemas{}, fmt.Errorf("tasks.SpecSchema has no definitions")
	}
	if _, ok := spec["properties"].(object); !ok {
		return schemas{}, fmt.Errorf("tasks.SpecSchema has no properties")
	}
	var missing []string
	// part returns the subschema at a path of properties/definitions
	// (a copy, so that a description can be set on it).
	part := func(path ...string) object {
		var cur any = spec
		for _, p := range path {
			m, ok := cur.(object)
			if !ok {
				cur = nil
				break
			}
			cur = m[p]
		}
		m, ok := cur.(object)
		if !ok {
			missing = append(missing, fmt.Sprint(path))
			return object{}
		}
		return maps.Clone(m)
	}
	describe := func(s object, d string) object {
		s["description"] = d
		return s
	}
	step := func(name string) object { return part("definitions", "step", "properties", name) }
	output := func(name string) object { return part("definitions", "output", "properties", name) }

	// The spec itself, without what belongs to a root, nor what an agent
	// may not set: principal, which the server stamps.
	specProp := maps.Clone(spec)
	for _, k := range []string{"$schema", "$id", "definitions"} {
		delete(specProp, k)
	}
	specProps := maps.Clone(spec["properties"].(object))
	delete(specProps, "principal")
	specProp["properties"] = specProps
	specProp["description"] = "A whole task spec v1 (docs/spec.md): files, inputs, secrets, steps, limits, output contract. " +
		"Decoded strictly, as enqueue does: an unknown field or a bad value is refused, naming the field. " +
		"Its queue, if given, must be one this server serves. Use either spec or the simple form (command, files...), not both."

	run := step("run")
	command := object{
		"description": `What to run, as the only step (named "command") in the workspace, which holds files: an argv array (["python3", "main.py"]) ` +
			`or a string, run as ["sh", "-c", STRING]. The step has no network; its stdout and stderr are in the run record.`,
		"anyOf": []any{
			object{"type": "string", "minLength": 1, "pattern": `^[^\x00]*$`, "not": object{"pattern": `\$\{secret:`}},
			run,
		},
		"examples": []any{"wc -l in/data.csv > out/count.txt", []any{"python3", "main.py"}},
	}
	waitProp := object{"type": "boolean", "default": false,
		"description": "true: wait until the run is parked or done (bounded by wait_timeout and the server's -max-wait) and return its record too; " +
			"false: return at once with the task id (follow it with wait_run or get_run)."}
	waitTimeout := describe(part("definitions", "duration"),
		"How long to wait with wait: true (Go duration, e.g. 30s). Default 30s; at most the server's -max-wait.")

	runAction := object{
		"$schema":              draft07,
		"type":                 "object",
		"additionalProperties": false,
		"description": "Either {\"spec\": {...a whole task spec...}} or the simple form {\"command\": ..., \"files\": {...}, ...}: " +
			"exactly one of spec and command. wait and wait_timeout go with either.",
		"properties": object{
			"spec":            specProp,
			"command":         command,
			"files":           part("properties", "files"),
			"stdin":           step("stdin"),
			"env":             step("env"),
			"timeout":         describe(part("properties", "timeout"), "Deadline of the run (Go duration, e.g. 30s). Default: the worker's -timeout (60s)."),
			"limits":          part("properties", "limits"),
			"output_result":   describe(output("result"), "Path of the JSON result the command writes (e.g. out/result.json): the output a human approves before it is published. Without it the run has nothing to publish and ends completed."),
			"output_schema":   describe(output("schema"), "Draft-07 JSON Schema the result must satisfy (needs output_result)."),
			"artifacts":       describe(output("artifacts"), "path.Match globs of files published with the result (e.g. out/*.csv; needs output_result to be useful)."),
			"run_id":          part("properties", "run_id"),
			"idempotency_key": part("properties", "idempotency_key"),
			"approval":        part("properties", "approval"),
			"wait":            waitProp,
			"wait_timeout":    waitTimeout,
		},
		"definitions": defs,
	}
	taskID := object{"type": "string", "minLength": 1, "maxLength": 256, "description": "The task id run_action returned."}
	queue := object{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`,
		"description": "The task's queue, as run_action returned it. Default: this server's first -queue."}
	if q := part("properties", "queue"); q["pattern"] != nil {
		queue["pattern"] = q["pattern"]
	}
	getRun := object{
		"$schema":              draft07,
		"type":                 "object",
		"additionalProperties": false,
		"required":             []any{"task_id"},
		"properties":           object{"task_id": taskID, "queue": queue},
	}
	waitRun := object{
		"$schema":              draft07,
		"type":                 "object",
		"additionalProperties": false,
		"required":             []any{"task_id"},
		"properties": object{
			"task_id": taskID,
			"queue":   queue,
			"until": object{"enum": []any{"done", "final"}, "default": "done",
				"description": "done: until the run is parked (its output waits for a human) or finished (completed, failed, promoted...); " +
					"final: through the human's decision, until promoted, rejected or expired."},
			"timeout": describe(part("definitions", "duration"),
				"How long to wait (Go duration, e.g. 30s). Default 30s; at most the server's -max-wait. On timeout the current record is returned with timed_out: true."),
		},
	}
	getResult := getRun // the same arguments: a run, by task id and queue
	if len(missing) > 0 {
		return schemas{}, fmt.Errorf("tasks.SpecSchema lacks %v", missing)
	}
	cancelRun := getRun // the same arguments: a run, by task id and queue
	sc := schemas{runAction: runAction, getRun: getRun, waitRun: waitRun, getResult: getResult, cancelRun: cancelRun}
	sessionSchemas(&sc, specProp, defs, step)
	return sc, nil
}
