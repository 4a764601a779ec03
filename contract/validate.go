package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Bounds of a result's validation (Checker). Validation in the worker
// costs at most InProcessUnits (see cost.go: ~35 ms of CPU and ~10 MiB
// when every check fails, far less when they pass), on a document of at
// most InProcessValues values (~4 MiB decoded); anything costlier runs in
// a child process bounded by the task's deadline, ChildMemory of address
// space and MaxUnits of work.
const (
	InProcessUnits  = 10_000
	InProcessValues = 50_000
	MaxUnits        = 50_000_000
	ChildMemory     = 1 << 30
)

// Errors of Checker.Check, matched with errors.Is.
var (
	// ErrTooCostly: validating the result would cost more than MaxUnits,
	// or more than the child's memory; the caller fails the run (schema).
	ErrTooCostly = errors.New("validation too costly")
	// ErrDeadline: the task's deadline passed before validation ended;
	// the caller fails the run (timeout).
	ErrDeadline = errors.New("validation did not end before the task's deadline")
	// ErrCanceled: the caller's context was canceled (the worker shuts
	// down) while a child validated; the child was killed.
	ErrCanceled = errors.New("validation canceled")
)

// Checker validates results with bounded work. Its zero value validates
// in the calling process only, refusing costlier documents as
// ErrTooCostly.
type Checker struct {
	// Child, when set, runs costly validations in a child process: the
	// binary at Child.Path (default /proc/self/exe), which must call
	// MaybeValidator at the top of main.
	Child *Child
}

// Child says how a validation child is started. A child parses untrusted
// output: it is confined as a step is (see child_linux.go and Describe),
// and killed at the deadline, or when the context of Check ends.
type Child struct {
	Path     string // default /proc/self/exe
	UID, GID int    // the child's identity when >= 0 (the worker is root); -1 keeps the caller's
	// Join, when set, puts the child (its pid) in a control group; it is
	// called before the child reads its request.
	Join func(pid int) error
}

// Check checks doc, a result that json.Valid accepted, against the
// contract: every number fits a float64 (ErrNumber; unless s allows big
// numbers), and, when s is not nil, doc satisfies s. It returns the
// violations (at most MaxViolations) and never spends more than the
// bounds above: a validation that would cost more, or would end after
// deadline (the zero time: none), fails with ErrTooCostly or ErrDeadline;
// one that ctx cancels while a child runs it, with ErrCanceled. Check
// returns at most about a second after the deadline or ctx's end.
func (c *Checker) Check(ctx context.Context, s *Schema, doc []byte, deadline time.Time) ([]Violation, error) {
	sh, err := scan(doc, s != nil && s.bigNumbers)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, nil
	}
	if past(deadline) {
		return nil, ErrDeadline
	}
	if sh.values <= InProcessValues {
		v, err := decodeJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrResultNotJSON, err)
		}
		e := &estimator{budget: InProcessUnits}
		if e.cost(s.plan, v) {
			vs, err := s.validateDecoded(v)
			if err == nil && past(deadline) {
				return nil, ErrDeadline
			}
			return vs, err
		}
	}
	if c == nil || c.Child == nil {
		return nil, fmt.Errorf("%w: more than %d units of work in the worker, and no validation child", ErrTooCostly, InProcessUnits)
	}
	return c.Child.run(ctx, s, doc, deadline)
}

// past reports whether deadline (the zero time: none) has passed.
func past(deadline time.Time) bool { return !deadline.IsZero() && time.Now().After(deadline) }

// validateDecoded validates v, a decoded document.
func (s *Schema) validateDecoded(v any) ([]Violation, error) {
	res, err := s.schema.Validate(gojsonschemaLoader(v))
	if err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	if res.Valid() {
		return nil, nil
	}
	vs := violations(res.Errors(), v)
	return vs[:min(len(vs), MaxViolations)], nil
}

// childArg is argv[1] of a validation child.
const childArg = "__airlock_validate"

// childRequest is what a validation child reads on stdin.
type childRequest struct {
	Schema   json.RawMessage `json:"schema"`
	Doc      json.RawMessage `json:"doc"`
	MaxUnits int64           `json:"max_units"`
	Probe    bool            `json:"probe,omitempty"` // tests: answer what childProbe finds
}

// childResponse is what it writes on stdout.
type childResponse struct {
	Violations []Violation       `json:"violations"`
	TooCostly  string            `json:"too_costly,omitempty"`
	Error      string            `json:"error,omitempty"`
	Probe      map[string]string `json:"probe,omitempty"`
}

// childProbe, set by this package's tests only, tries from inside a
// validation child what its confinement must deny.
var childProbe func() map[string]string

// maxChildOutput bounds what is read of a child's answer: MaxViolations
// violations of two 1 KiB texts each, and room for the JSON.
const maxChildOutput = 256 << 10

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

// limitedBuffer keeps the first max bytes written to it and drops the rest.
type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func validateChild(req childRequest) childResponse {
	if req.Probe && childProbe != nil {
		return childResponse{Probe: childProbe()}
	}
	s, err := Compile(req.Schema)
	if err != nil {
		return childResponse{Error: err.Error()}
	}
	if _, err := scan(req.Doc, s.bigNumbers); err != nil {
		return childResponse{Error: err.Error()}
	}
	v, err := decodeJSON(req.Doc)
	if err != nil {
		return childResponse{Error: err.Error()}
	}
	e := &estimator{budget: req.MaxUnits}
	if !e.cost(s.plan, v) {
		return childResponse{TooCostly: fmt.Sprintf("validating the result would take more than %d units of work (subschemas applied to its values, regular expressions compiled and run over its strings)", req.MaxUnits)}
	}
	vs, err := s.validateDecoded(v)
	if err != nil {
		return childResponse{Error: err.Error()}
	}
	return childResponse{Violations: vs}
}
