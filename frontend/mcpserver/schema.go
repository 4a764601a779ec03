package mcpserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/airlock-run/airlock/tasks"
)

// draft07 is the dialect of every tool's input schema: that of
// tasks.SpecSchema, whose parts they reuse.
const draft07 = "http://json-schema.org/draft-07/schema#"

// object is a JSON Schema (or a part of one) as a JSON object.
type object = map[string]any

// schemas are the tools' input and output schemas, built from
// tasks.SpecSchema, and the spec's schema as the resource SpecSchemaURI
// serves it.
type schemas struct {
	runAction, getRun, waitRun, getResult, cancelRun object
	// The session tools' (sessions.go).
	openSession, runInSession, writeFile, readFile, closeSession, pauseSession object
	// out are the output schemas, by tool (outschema.go); enqueued is
	// that of run_action and of each action's tool.
	out map[string]object
	// specSchema is tasks.SpecSchema without principal.
	specSchema []byte
}

// buildSchemas builds the tools' input schemas from the spec's JSON
// Schema. They are small: a whole spec (run_action's and open_session's
// "spec") is an object whose top-level fields are the spec's, its full
// schema by reference (the resource SpecSchemaURI); the simple form's
// fields are short and loosely typed (files' and limits' names are the
// spec's),
// run_in_session's the spec's step fields (stdin, env; name and timeout
// inline) and run as run_action's command: the decoder holds every call
// to the whole spec schema, naming the field it refuses.
func buildSchemas() (schemas, error) {
	var spec object
	if err := json.Unmarshal(tasks.SpecSchema, &spec); err != nil {
		return schemas{}, fmt.Errorf("tasks.SpecSchema: %w", err)
	}
	specProps, ok := spec["properties"].(object)
	if !ok {
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
	step := func(name string) object { return part("definitions", "step", "properties", name) }
	// duration is the spec's duration, inline, described as d.
	duration := func(d string) object {
		du := part("definitions", "duration")
		return object{"type": "string", "pattern": du["pattern"], "description": d}
	}
	// names are the keys of a schema's properties, sorted, as an enum.
	names := func(props object, but ...string) object {
		var ks []string
		for k := range props {
			if !slices.Contains(but, k) {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		return object{"enum": toAny(ks)}
	}

	// The spec as served (SpecSchemaURI): all of it but principal, which
	// the server stamps.
	served := maps.Clone(spec)
	servedProps := maps.Clone(specProps)
	delete(servedProps, "principal")
	served["properties"] = servedProps
	specSchema, err := json.Marshal(served)
	if err != nil {
		return schemas{}, fmt.Errorf("tasks.SpecSchema: %w", err)
	}
	// wholeSpec is a whole spec by reference: its top-level field names
	// and version; the rest is the spec schema's, the decoder's.
	wholeSpec := func(d string) object {
		return object{"type": "object", "required": spec["required"], "propertyNames": names(specProps, "principal"),
			"properties":  object{"version": part("properties", "version")},
			"description": d + " Its JSON Schema: the resource " + SpecSchemaURI + " (docs/spec.md); a bad field is refused, named."}
	}

	// pathNames holds the names of files to the spec's paths.
	pathNames := part("definitions", "path")
	delete(pathNames, "description")
	// command is what a step runs, as run_action's command and
	// run_in_session's run take it, described as d: a command line or an
	// argv (argv turns either into the step's run).
	command := func(d string) object {
		return object{"description": d,
			"anyOf": []any{
				object{"type": "string", "minLength": 1, "description": `A command line, run as ["sh", "-c", LINE].`},
				object{"type": "array", "minItems": 1, "items": object{"type": "string"}, "description": "An argv: the program, then its arguments; no shell."},
			},
			"examples": []any{"wc -l in/data.csv > out/count.txt", []any{"python3", "main.py"}},
		}
	}
	full := object{"type": "boolean", "default": false,
		"description": "true: the whole run record; false: compact (isolation as {mode, uid, off, uri}: its text is the resource at uri; empty fields left out)."}
	runAction := object{
		"$schema":              draft07,
		"type":                 "object",
		"additionalProperties": false,
		"description":          "The simple form (command, files...) or a whole task spec as spec, not both; wait, wait_timeout and full go with either.",
		"properties": object{
			"command": command(`What to run, as the only step (named "command"): a string or an array. No network; its stdout and stderr are in the run record.`),
			"files": object{"type": "object", "additionalProperties": object{"type": []any{"string", "object"}}, "propertyNames": pathNames,
				"description": `{relative path: content} written into the workspace first: a string (UTF-8 text), or {"text" or "base64": ..., "mode": "0755"}.`},
			"stdin":           object{"type": "string", "description": "Text fed on the command's standard input."},
			"env":             object{"type": "object", "additionalProperties": object{"type": "string"}, "description": "Extra environment variables (not HOME, TMPDIR)."},
			"timeout":         duration("Deadline of the run (Go duration, e.g. 30s). Default: the worker's -timeout (60s)."),
			"limits":          object{"type": "object", "propertyNames": names(part("definitions", "limits")["properties"].(object)), "description": `Per-step limits, as the spec's: e.g. {"memory": "256MiB", "cpu_time": "10s", "processes": 64}.`},
			"output_result":   object{"type": "string", "description": "Path of the JSON result the command writes (e.g. out/result.json), published once approved. Without it the run ends completed."},
			"output_schema":   object{"type": []any{"object", "boolean"}, "description": "Draft-07 JSON Schema the result must satisfy (needs output_result)."},
			"artifacts":       object{"type": "array", "items": object{"type": "string"}, "description": "path.Match globs of files published with the result (e.g. out/*.csv; needs output_result)."},
			"run_id":          part("properties", "run_id"),
			"idempotency_key": object{"type": "string", "maxLength": 256, "description": "Enqueuing the same key again returns the existing task, not a second one."},
			"approval":        part("properties", "approval"),
			"spec":            wholeSpec("A whole task spec v1: files, inputs, secrets, steps, limits, network, output. Its queue must be one this server serves."),
			"wait": object{"type": "boolean", "default": false,
				"description": "true: wait until the run is parked or done and return its record too; false: return the task id at once (then wait_run or get_run)."},
			"wait_timeout": duration("How long wait: true waits (Go duration). Default 30s; at most the server's -max-wait."),
			"full":         full,
		},
	}
	taskID := object{"type": "string", "minLength": 1, "maxLength": 256, "description": "The task id run_action returned."}
	queue := object{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`,
		"description": "The task's queue, as run_action returned it. Default: this server's first -queue."}
	if q := part("properties", "queue"); q["pattern"] != nil {
		queue["pattern"] = q["pattern"]
	}
	runArgs := func(more object) object {
		props := object{"task_id": taskID, "queue": queue}
		maps.Copy(props, more)
		return object{"$schema": draft07, "type": "object", "additionalProperties": false, "required": []any{"task_id"}, "properties": props}
	}
	getRun := runArgs(object{"full": full})
	waitRun := runArgs(object{
		"until": object{"enum": []any{"done", "final"}, "default": "done",
			"description": "done: until the run is parked (its output waits for a human) or finished (completed, failed, promoted...); " +
				"final: through the human's decision, until promoted, rejected or expired."},
		"timeout": duration("How long to wait (Go duration, e.g. 30s). Default 30s; at most the server's -max-wait. On timeout the current record is returned with timed_out: true."),
		"full":    full,
	})
	getResult := runArgs(nil)
	cancelRun := runArgs(object{"full": full})
	sc := schemas{runAction: runAction, getRun: getRun, waitRun: waitRun, getResult: getResult, cancelRun: cancelRun,
		specSchema: specSchema}
	sessionSchemas(&sc, wholeSpec, step, command, duration, part("definitions", "name"), full)
	if len(missing) > 0 {
		return schemas{}, fmt.Errorf("tasks.SpecSchema lacks %v", missing)
	}
	sc.out = outputSchemas()
	return sc, nil
}
