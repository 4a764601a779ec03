// Package tasks defines the task spec v1: the JSON document an app backend
// enqueues to have Airlock run an action (files, ordered steps, limits, an
// output contract), its strict decoding, and its validation against the
// operator's limits.Policy.
//
// Decoding is strict: an unknown field, a wrong type, an unsafe path or a
// limit above the operator's maximum is an error that names the field. The
// same checks run at enqueue and again in the worker, which does not trust
// the enqueuer.
package tasks

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/limits"
)

// TypeRun is the asynq task type of a run.
const TypeRun = "airlock:run"

// Version is the spec version this package reads.
const Version = 1

// DefaultMaxPayload caps the encoded spec (files and stdin included).
const DefaultMaxPayload = 1 << 20

// DefaultMaxRetry is the retry budget of a spec that gives none. Retries
// cover infrastructure failures (a worker that died, Redis errors); a step's
// own verdict is final and never retried.
const DefaultMaxRetry = 3

// ErrInvalidSpec is matched (errors.Is) by every validation error.
var ErrInvalidSpec = limits.ErrInvalid

// FieldError names the field of a spec that is wrong; see limits.FieldError.
type FieldError = limits.FieldError

// Spec is a task spec, version 1.
type Spec struct {
	Version        int    `json:"version"`
	RunID          string `json:"run_id,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	Queue          string `json:"queue,omitempty"`
	// Action names an operator-defined action of the worker's catalog
	// (worker -actions): the worker runs the catalog's definition with
	// Params, never the caller's copy. A spec that names an action holds
	// only version, action, params, queue, run_id and idempotency_key
	// (and principal, stamped by a front end).
	Action string `json:"action,omitempty"`
	// Params are the caller's parameters of Action, a JSON object checked
	// against the action's params schema; they reach the run only as the
	// file in/params.json (and ${param:NAME} where the definition says).
	Params json.RawMessage `json:"params,omitempty"`
	// Principal is who asked: set by the front end that took the request
	// (the API's token name, the MCP server's -principal, a Go client's
	// ClientOptions.Principal), never by a caller of those front ends.
	Principal string          `json:"principal,omitempty"`
	Timeout   limits.Duration `json:"timeout,omitempty"`
	MaxRetry  *int            `json:"max_retry,omitempty"`
	Files     map[string]File `json:"files,omitempty"`
	Inputs    []Input         `json:"inputs,omitempty"`
	Secrets   []string        `json:"secrets,omitempty"`
	Steps     []Step          `json:"steps"`
	Limits    limits.Set      `json:"limits"`
	Network   bool            `json:"network,omitempty"`
	Output    *Output         `json:"output,omitempty"`
	Approval  string          `json:"approval,omitempty"`
	// MaxRecordBytes lowers the bound of what the run record keeps of the
	// steps' stdout and stderr, all steps together; 0 takes the worker's
	// (-max-record-bytes), which it may not exceed.
	MaxRecordBytes limits.Bytes `json:"max_record_bytes,omitempty"`
	// Session makes the run a session whose steps arrive call by call
	// (session.go); nil for a one-shot run.
	Session *Session `json:"session,omitempty"`
	// FileModes are the modes of files given in JSON in the object form
	// with "mode" ({"text": "...", "mode": "0755"}): Decode fills it,
	// MarshalJSON writes those files so, Prepare checks it. A file without
	// one is written DefaultFileMode (0600).
	FileModes map[string]FileMode `json:"-"`
}

// Step is one process run in the task's workspace. Steps run in order; a
// failing step stops the run.
type Step struct {
	Name    string            `json:"name,omitempty"`
	Run     []string          `json:"run"`
	Stdin   string            `json:"stdin,omitempty"`
	Timeout limits.Duration   `json:"timeout,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Cwd is the directory the step starts in, relative to the workspace
	// (/workspace, the default), clean and without "..": "out", "src/app".
	// A directory the step finds missing fails it (exec_error).
	Cwd string `json:"cwd,omitempty"`
}

// Output is the output contract: where the result is, the JSON Schema it
// must satisfy, and which files are artifacts.
type Output struct {
	Result    string          `json:"result,omitempty"`
	Schema    json.RawMessage `json:"schema,omitempty"`
	Artifacts []string        `json:"artifacts,omitempty"`
}

// Approval modes of a spec. A spec may make a run stricter than the
// operator's policy ("always"), never looser.
const (
	ApprovalAuto   = "auto"
	ApprovalAlways = "always"
)

// Decode reads a spec strictly: unknown fields and wrong types are errors
// naming the field. It does not validate values; call Prepare.
func Decode(data []byte) (*Spec, error) {
	var s Spec
	if err := strictDecode(data, &s); err != nil {
		return nil, err
	}
	if err := s.readModes(data); err != nil {
		return nil, err
	}
	return &s, nil
}

// Encode returns the spec as a task payload, failing with a *FieldError when
// it is larger than maxPayload bytes (DefaultMaxPayload when 0).
func (s *Spec) Encode(maxPayload int) ([]byte, error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if len(b) > maxPayload {
		return nil, PayloadError(len(b), maxPayload)
	}
	return b, nil
}

// PayloadError is the error for a payload of n bytes above max.
func PayloadError(n, max int) error {
	return &FieldError{
		Field: "spec",
		Msg:   fmt.Sprintf("payload is %d bytes, above the cap of %d", n, max),
		Hint:  "inline files and stdin are for small inputs",
	}
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	queueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	runIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)
	envRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// ReservedEnv are the variables the worker sets for every step; a spec may
// not set them, since they point into the workspace.
var ReservedEnv = []string{"HOME", "TMPDIR"}

// Limits on the shape of a spec.
const (
	maxSteps    = 64
	maxFiles    = 1000
	maxArgs     = 4096
	maxRetryCap = 25
	maxPathLen  = 4096
	maxNameLen  = 255
)

// Prepare validates the spec against the operator's policy and fills in
// what it left out: run_id (a new UUID), queue ("default"), timeout, step
// names, max_retry and every limit. It is idempotent, so an enqueuer and a
// worker can both call it. Every error is a *FieldError.
//
// A spec that names an action is a call of the worker's catalog: Prepare
// then checks only what a call may hold (see Spec.Action) and fills in
// run_id and queue; the worker expands the call from its catalog and
// prepares the result with PrepareExpanded.
func (s *Spec) Prepare(p limits.Policy) error {
	if s.Action != "" {
		return s.prepareCall()
	}
	return s.prepare(p)
}

// PrepareExpanded is Prepare for a spec the worker expanded from its own
// catalog's definition of s.Action (package actions): every check of a
// free-form spec, with the action's name kept beside the steps.
func (s *Spec) PrepareExpanded(p limits.Policy) error {
	if s.Action == "" {
		return &FieldError{Field: "action", Msg: "an expanded spec names its action"}
	}
	return s.prepare(p)
}

func (s *Spec) prepare(p limits.Policy) error {
	if s.Version != Version {
		return &FieldError{Field: "version", Msg: fmt.Sprintf("got %d, want %d", s.Version, Version), Hint: `add "version": 1`}
	}
	if err := s.prepareIdentity(); err != nil {
		return err
	}
	if s.Timeout == 0 {
		s.Timeout = p.DefaultTimeout
		if s.Session != nil {
			s.Timeout = p.SessionTimeout()
		}
	}
	if s.Timeout > p.MaxTimeout {
		return &FieldError{Field: "timeout", Msg: fmt.Sprintf("%s is above the worker's maximum %s", s.Timeout, p.MaxTimeout)}
	}
	if s.MaxRetry == nil {
		n := DefaultMaxRetry
		if s.Session != nil {
			n = 0 // a session is never replayed
		}
		s.MaxRetry = &n
	} else if *s.MaxRetry < 0 || *s.MaxRetry > maxRetryCap {
		return &FieldError{Field: "max_retry", Msg: fmt.Sprintf("must be between 0 and %d", maxRetryCap)}
	}
	if err := s.prepareFiles(); err != nil {
		return err
	}
	if err := s.prepareSteps(); err != nil {
		return err
	}
	if err := s.prepareSession(); err != nil {
		return err
	}
	if err := s.prepareInputs(p.InputMax()); err != nil {
		return err
	}
	if err := s.prepareSecrets(); err != nil {
		return err
	}
	resolved, err := p.Resolve("limits", s.Limits)
	if err != nil {
		return err
	}
	s.Limits = resolved
	if s.MaxRecordBytes == 0 {
		s.MaxRecordBytes = p.RecordMax()
	} else if s.MaxRecordBytes > p.RecordMax() {
		return &FieldError{Field: "max_record_bytes", Msg: fmt.Sprintf("%s is above the worker's maximum %s", s.MaxRecordBytes, p.RecordMax()),
			Hint: "a spec may lower a bound, never raise it past the operator's -max-record-bytes"}
	}
	if s.Network && !p.AllowNetwork {
		return &FieldError{Field: "network", Msg: "the worker's operator does not allow network for steps", Hint: "remove \"network\" or ask for a worker started with -allow-network"}
	}
	if err := s.Output.check(); err != nil {
		return err
	}
	switch s.Approval {
	case "", ApprovalAuto, ApprovalAlways:
	default:
		return &FieldError{Field: "approval", Msg: fmt.Sprintf("%q is not a mode", s.Approval), Hint: `use "auto" or "always"`}
	}
	return nil
}

func (s *Spec) prepareSteps() error {
	if len(s.Steps) == 0 && s.Session == nil {
		return &FieldError{Field: "steps", Msg: "at least one step is required"}
	}
	if len(s.Steps) > maxSteps {
		return &FieldError{Field: "steps", Msg: fmt.Sprintf("%d steps, at most %d", len(s.Steps), maxSteps)}
	}
	seen := map[string]bool{}
	for i := range s.Steps {
		st := &s.Steps[i]
		f := fmt.Sprintf("steps[%d]", i)
		if st.Name == "" {
			st.Name = fmt.Sprintf("step-%d", i+1)
		} else if !nameRE.MatchString(st.Name) {
			return &FieldError{Field: f + ".name", Msg: "must be 1-64 characters of letters, digits, '.', '_' or '-'"}
		}
		if seen[st.Name] {
			return &FieldError{Field: f + ".name", Msg: fmt.Sprintf("%q is used by an earlier step", st.Name)}
		}
		seen[st.Name] = true
		if len(st.Run) == 0 || st.Run[0] == "" {
			return &FieldError{Field: f + ".run", Msg: "must hold a program and its arguments", Hint: `e.g. ["sh", "-c", "echo hi"]`}
		}
		if len(st.Run) > maxArgs {
			return &FieldError{Field: f + ".run", Msg: fmt.Sprintf("%d arguments, at most %d", len(st.Run), maxArgs)}
		}
		for j, a := range st.Run {
			if strings.ContainsRune(a, 0) {
				return &FieldError{Field: fmt.Sprintf("%s.run[%d]", f, j), Msg: "contains a NUL byte"}
			}
		}
		if st.Cwd != "" {
			if err := CheckPath(f+".cwd", st.Cwd); err != nil {
				return err
			}
		}
		if st.Timeout > s.Timeout {
			return &FieldError{Field: f + ".timeout", Msg: fmt.Sprintf("%s is above the task's timeout %s", st.Timeout, s.Timeout)}
		}
		for k, v := range st.Env {
			ef := fmt.Sprintf("%s.env[%q]", f, k)
			if !envRE.MatchString(k) {
				return &FieldError{Field: ef, Msg: "is not a variable name"}
			}
			for _, r := range ReservedEnv {
				if k == r {
					return &FieldError{Field: ef, Msg: "is set by the worker", Hint: "HOME and TMPDIR point into the workspace"}
				}
			}
			if strings.ContainsRune(v, 0) {
				return &FieldError{Field: ef, Msg: "value contains a NUL byte"}
			}
		}
	}
	return nil
}

func (o *Output) check() error {
	if o == nil {
		return nil
	}
	if o.Result != "" {
		if err := CheckPath("output.result", o.Result); err != nil {
			return err
		}
	}
	if len(o.Schema) > 0 && string(o.Schema) != "null" {
		if err := contract.CheckSchema(o.Schema); err != nil {
			return &FieldError{Field: "output.schema", Msg: err.Error(), Hint: "a draft-07 JSON Schema, without references to other documents"}
		}
		if o.Result == "" {
			return &FieldError{Field: "output.schema", Msg: "a schema needs output.result, the file it validates"}
		}
	}
	for i, g := range o.Artifacts {
		f := fmt.Sprintf("output.artifacts[%d]", i)
		if err := CheckPath(f, g); err != nil {
			return err
		}
		if err := contract.CheckGlob(g); err != nil {
			return &FieldError{Field: f, Msg: err.Error(), Hint: "use path.Match syntax, e.g. out/*.csv"}
		}
	}
	return nil
}

// CheckPath reports whether p is a clean relative path that stays inside a
// workspace: not absolute, no "..", no NUL, components of at most 255 bytes.
func CheckPath(field, p string) error {
	switch {
	case p == "":
		return &FieldError{Field: field, Msg: "empty path"}
	case strings.ContainsRune(p, 0):
		return &FieldError{Field: field, Msg: "path contains a NUL byte"}
	case !utf8.ValidString(p):
		return &FieldError{Field: field, Msg: "path is not valid UTF-8"}
	case len(p) > maxPathLen:
		return &FieldError{Field: field, Msg: "path is longer than 4096 bytes"}
	case strings.HasPrefix(p, "/"):
		return &FieldError{Field: field, Msg: fmt.Sprintf("%q is absolute", p), Hint: "paths are relative to the workspace"}
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return &FieldError{Field: field, Msg: fmt.Sprintf("%q leaves the workspace", p), Hint: "remove the .. component"}
		}
		if len(c) > maxNameLen {
			return &FieldError{Field: field, Msg: "a path component is longer than 255 bytes"}
		}
	}
	if clean := path.Clean(p); clean != p || p == "." {
		return &FieldError{Field: field, Msg: fmt.Sprintf("%q is not a clean path", p), Hint: fmt.Sprintf("write %q", clean)}
	}
	return nil
}

// StepTimeout is the deadline of step i: its own timeout, or the task's.
func (s *Spec) StepTimeout(i int) time.Duration {
	if t := s.Steps[i].Timeout; t > 0 {
		return time.Duration(t)
	}
	return time.Duration(s.Timeout)
}

// IsInvalid reports whether err is a spec validation error.
func IsInvalid(err error) bool { return errors.Is(err, ErrInvalidSpec) }
