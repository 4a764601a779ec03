package tasks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// A call of a catalog action (Spec.Action set) holds what says who asks
// and where the run goes, never what runs: the worker takes the rest from
// its own catalog (package actions).

// principalRE is the form of a principal: an API token's name.
var principalRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// MaxParams caps the encoded params of a call.
const MaxParams = 64 << 10

// prepareIdentity checks and fills in the fields a call and a free-form
// spec share: run_id, idempotency_key, queue and the action's name.
func (s *Spec) prepareIdentity() error {
	if s.RunID == "" {
		s.RunID = uuid.NewString()
	} else if !runIDRE.MatchString(s.RunID) {
		return &FieldError{Field: "run_id", Msg: "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'"}
	}
	if len(s.IdempotencyKey) > 256 || strings.ContainsRune(s.IdempotencyKey, 0) {
		return &FieldError{Field: "idempotency_key", Msg: "must be at most 256 bytes without NUL"}
	}
	if s.Queue == "" {
		s.Queue = "default"
	} else if !queueRE.MatchString(s.Queue) {
		return &FieldError{Field: "queue", Msg: "must be 1-64 characters of letters, digits, '_' or '-'"}
	}
	if s.Principal != "" && !principalRE.MatchString(s.Principal) {
		return &FieldError{Field: "principal", Msg: "must be 1-64 characters of letters, digits, '.', '_', '@', '+' or '-'"}
	}
	if s.Action != "" && !nameRE.MatchString(s.Action) {
		return &FieldError{Field: "action", Msg: "must be 1-64 characters of letters, digits, '.', '_' or '-'"}
	}
	return nil
}

// prepareCall checks a call of a catalog action: its identity fields, its
// params (a JSON object), and that it holds nothing that decides what
// runs. A free-form spec that names an action is refused here: an action
// is run from the worker's catalog or not at all.
func (s *Spec) prepareCall() error {
	if s.Version != Version {
		return &FieldError{Field: "version", Msg: fmt.Sprintf("got %d, want %d", s.Version, Version), Hint: `add "version": 1`}
	}
	if err := s.prepareIdentity(); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"steps", len(s.Steps) > 0}, {"files", len(s.Files) > 0}, {"inputs", len(s.Inputs) > 0},
		{"secrets", len(s.Secrets) > 0}, {"limits", s.Limits != (Spec{}).Limits}, {"network", s.Network},
		{"output", s.Output != nil}, {"approval", s.Approval != ""}, {"timeout", s.Timeout != 0},
		{"max_retry", s.MaxRetry != nil}, {"max_record_bytes", s.MaxRecordBytes != 0},
	} {
		if f.set {
			return &FieldError{Field: f.name, Msg: fmt.Sprintf("a run of action %q takes only params, queue, run_id and idempotency_key", s.Action),
				Hint: "the operator's definition of the action decides what runs; remove \"action\" to send a free-form spec"}
		}
	}
	return CheckParams(s.Params)
}

// CheckParams checks the form of a call's params: absent, or a JSON
// object of at most MaxParams bytes.
func CheckParams(params json.RawMessage) error {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	if len(p) > MaxParams {
		return &FieldError{Field: "params", Msg: fmt.Sprintf("%d bytes, at most %d", len(p), MaxParams)}
	}
	if p[0] != '{' || !json.Valid(p) {
		return &FieldError{Field: "params", Msg: "want a JSON object"}
	}
	return nil
}

// paramRefRE is a reference to a call's parameter in a definition:
// ${param:NAME}.
var paramRefRE = regexp.MustCompile(`\$\{param:([^}]*)\}`)

// ParamRefs returns the names s refers to with ${param:NAME}.
func ParamRefs(s string) []string {
	var out []string
	for _, m := range paramRefRE.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// ExpandParams replaces every ${param:NAME} of s with value(NAME).
func ExpandParams(s string, value func(name string) string) string {
	return paramRefRE.ReplaceAllStringFunc(s, func(m string) string {
		return value(paramRefRE.FindStringSubmatch(m)[1])
	})
}
