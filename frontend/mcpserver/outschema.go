package mcpserver

import (
	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
)

// Output schemas: what each tool's structured content holds, as draft-07
// JSON Schema (its outputSchema). Each is the tool's answer or a tool
// error's {"error", "field", "state"} (isError): structured content is
// both, and a client may check either against the schema. The record is
// described by its main fields (docs/record.md has them all), and left
// open to the others, so that the compact and the full record (full:
// true) both satisfy it.

// states are the states a run record can be in: before the worker's
// record (airlock.StatePending...) and the record's own.
var states = []record.State{airlock.StatePending, airlock.StateScheduled, airlock.StateActive, airlock.StateRetry,
	record.StateCompleted, record.StateFailed, record.StateParked, record.StateAccepted, record.StatePromoted,
	record.StateRejected, record.StateExpired, record.StateCanceled}

// outputSchemas returns the output schemas, by tool name; "enqueued" is
// that of run_action and of every action's tool.
func outputSchemas() map[string]object {
	str := object{"type": "string"}
	integer := object{"type": "integer"}
	boolean := object{"type": "boolean"}
	stateEnum := make([]any, len(states))
	for i, st := range states {
		stateEnum[i] = string(st)
	}
	step := object{
		"type":     "object",
		"required": []any{"name", "verdict"},
		"properties": object{
			"name": str, "argv": object{"type": []any{"array", "null"}, "items": str},
			"exit_code": object{"type": []any{"integer", "null"}}, "verdict": str, "stdout": str, "stderr": str,
		},
	}
	steps := object{"type": []any{"array", "null"}, "items": step}
	rec := object{
		"type":        "object",
		"description": "The run record (docs/record.md); compact unless full: true.",
		"required":    []any{"task_id", "queue", "state"},
		"properties": object{
			"task_id": str, "run_id": str, "queue": str, "state": object{"enum": stateEnum}, "verdict": str, "error": str,
			"steps": steps, "isolation": object{"type": "object"}, "approval_id": str,
		},
	}
	note := str
	strict := func(required []string, props object) object {
		return object{"type": "object", "additionalProperties": false, "required": toAny(required), "properties": props}
	}
	runOut := strict([]string{"record", "note"}, object{"record": rec, "timed_out": boolean, "note": note})
	enqueued := strict([]string{"task_id", "queue", "run_id", "duplicate"}, object{
		"task_id": str, "queue": str, "run_id": str, "duplicate": boolean, "record": rec, "timed_out": boolean, "note": note})
	file := strict([]string{"path", "size"}, object{"path": str, "size": integer, "content": str, "encoding": object{"enum": []any{"utf-8", "base64"}}})
	answers := map[string]object{
		"enqueued":       enqueued,
		ToolRunAction:    enqueued,
		ToolGetRun:       runOut,
		ToolWaitRun:      runOut,
		ToolCancelRun:    runOut,
		ToolCloseSession: runOut,
		ToolGetResult: strict([]string{"where", "manifest", "result"}, object{
			"where": str, "manifest": object{"type": "object"}, "result": object{"description": "The published JSON result (null when none)."}}),
		ToolOpenSession: strict([]string{"session_id", "queue", "steps", "expires_at", "idle_until", "note"}, object{
			"session_id": str, "queue": str, "steps": steps, "expires_at": str, "idle_until": str, "note": str}),
		ToolRunInSession: step,
		ToolPauseSession: strict([]string{"session_id", "state", "expires_at", "idle_until"}, object{
			"session_id": str, "state": str, "expires_at": str, "idle_until": str}),
		ToolWriteFile: file,
		ToolReadFile:  file,
	}
	toolError := strict([]string{"error"}, object{"error": str, "field": str, "state": str})
	out := make(map[string]object, len(answers))
	for name, a := range answers {
		out[name] = object{"$schema": draft07, "type": "object", "anyOf": []any{a, toolError}}
	}
	return out
}
