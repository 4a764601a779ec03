package tasks

import _ "embed"

// SpecSchema is the JSON Schema (draft-07) of the task spec v1, as
// published in tasks/spec.schema.json: every field of Spec with its type,
// its description and, where the schema can say it, the checks of Decode
// and Prepare (patterns, ranges, unknown fields rejected). It is meant for
// editors, for OpenAPI documents and for LLM tool definitions. A document
// it accepts may still be rejected by Decode and Prepare for what a schema
// cannot express (unique step names, undeclared secrets, a step timeout
// above the task's, limits above the worker's maximums, the payload cap);
// Decode and Prepare remain the authority.
//
//go:embed spec.schema.json
var SpecSchema []byte
