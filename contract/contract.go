// Package contract checks what a run produced against its spec's output
// contract (tasks.Output): the result file, read from the workspace without
// following links and parsed as JSON, is validated against the spec's JSON
// Schema, and the artifact files named by its globs are collected with their
// size, SHA-256 and content type, for the approval queue.
//
// Everything in a workspace was written by untrusted code. The reads of this
// package go through tmpfs.Workspace, so they never follow a symbolic link,
// never block on a FIFO and never read without a bound; what is not a regular
// file is refused and reported, never read.
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
