// Package contract owns a spec's output contract (tasks.Output), from the
// spec to the approval queue, in this order:
//
//   - Schema checks at enqueue: CheckSchema (the spec's output.schema),
//     CheckGlob (its output.artifacts) and CheckDuplicateKeys (a spec, or a
//     result, with a key twice in one object), called by package tasks
//     when it decodes a spec, so that a bad contract is refused before it
//     is queued.
//   - Compile: a JSON Schema, bounded before gojsonschema sees it (its
//     shape, its regular expressions, its $ref and combinator graph) and
//     cached by content (schema.go, shape.go, regex.go, refs.go).
//   - The cost model: an upper bound on a validation's work, estimated from
//     the compiled schema and the document before validating (cost.go,
//     scan.go).
//   - Validation: Checker.Check validates a result in the worker when it is
//     cheap and in a confined child process otherwise (validate.go; on
//     Linux, child_linux.go and confine_linux.go: namespaces, Landlock,
//     rlimits, seccomp, the task's deadline).
//   - Reading the result: ReadResult reads the spec's output.result from
//     the run's workspace and checks that it is one JSON value with no key
//     twice (result_linux.go).
//   - Collecting artifacts: CollectArtifacts finds the files that the
//     spec's artifact globs match and reads them, with their size, SHA-256
//     and content type, for the approval queue (collect_linux.go).
//
// Everything in a workspace was written by untrusted code. ReadResult and
// CollectArtifacts read it through tmpfs.Workspace, so they never follow a
// symbolic link, never block on a FIFO and never read without a bound; what
// is not a regular file is refused and reported, never read. They, the
// validation child and tmpfs build on Linux only, where the worker runs;
// the rest of the package (what a client or a backend checks at enqueue)
// builds on every platform.
package contract

import (
	"errors"

	"github.com/airlock-run/airlock/record"
)

// Default bounds, used where a Limits field (or ReadResult's max) is 0.
const (
	DefaultMaxCount  = 64       // artifact files per run
	DefaultMaxBytes  = 32 << 20 // artifact bytes per run, all files together
	DefaultMaxResult = 1 << 20  // bytes of the result file
)

// MaxViolations is how many violations Schema.Validate returns at most.
const MaxViolations = 20

// Errors matched with errors.Is. The errors of ReadResult and
// CollectArtifacts also match the tmpfs errors they come from:
// tmpfs.ErrNotRegular (a symlink, FIFO, socket, device or directory where a
// file was wanted), tmpfs.ErrSymlink (a symlink among the directories of a
// path), tmpfs.ErrNotOwned, tmpfs.ErrTooLarge and tmpfs.ErrBadPath.
var (
	// ErrBadSchema: a schema that is not JSON or does not compile.
	ErrBadSchema = errors.New("invalid JSON Schema")
	// ErrNoResult: the result file is missing (it also matches fs.ErrNotExist).
	ErrNoResult = errors.New("no result file")
	// ErrResultNotJSON: the result (or a document given to Validate) is not
	// one JSON value.
	ErrResultNotJSON = errors.New("result is not JSON")
	// ErrBadGlob: an artifact glob that path.Match cannot use, or that this
	// package does not support ("**", absolute, "..").
	ErrBadGlob = errors.New("invalid artifact glob")
	// ErrTooManyArtifacts: more files match the globs than Limits.MaxCount.
	ErrTooManyArtifacts = errors.New("too many artifacts")
	// ErrArtifactsTooLarge: the matching files hold more than Limits.MaxBytes.
	ErrArtifactsTooLarge = errors.New("artifacts too large")
)

// Limits bounds what a run may produce. A zero field takes its default.
type Limits struct {
	MaxCount  int   // artifact files; DefaultMaxCount when 0
	MaxBytes  int64 // artifact bytes, all files together; DefaultMaxBytes when 0
	MaxResult int64 // result bytes, for the caller to pass to ReadResult; DefaultMaxResult when 0
}

// withDefaults returns l with its zero (or negative) fields set to the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxCount <= 0 {
		l.MaxCount = DefaultMaxCount
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxResult <= 0 {
		l.MaxResult = DefaultMaxResult
	}
	return l
}

// Resolved returns l with every zero field set to its default, for the run
// record.
func (l Limits) Resolved() Limits { return l.withDefaults() }

// Violation is one way a result fails its schema (see record.Violation).
type Violation = record.Violation
