package tasks

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlock-run/airlock/limits"
)

// Session makes a run a session: one run (one workspace, one slot, one
// record, one deadline: the spec's timeout) whose steps arrive over time,
// one call at a time, until it is closed (its output then goes through
// the contract, the policy and the approval as any run's), deleted, or
// expired. A session's spec may have no steps; those it has run first.
type Session struct {
	// IdleTimeout ends the session as expired when no call comes for
	// that long. Default DefaultIdleTimeout; at most the spec's timeout.
	IdleTimeout limits.Duration `json:"idle_timeout,omitempty"`
	// PauseAfter pauses the session when no call comes for that long: its
	// workspace and state go to the worker's session store and it frees
	// the worker; the next call resumes it on whichever worker takes it.
	// Default DefaultPauseAfter.
	PauseAfter limits.Duration `json:"pause_after,omitempty"`
}

// Bounds of a session.
const (
	DefaultIdleTimeout = limits.Duration(5 * time.Minute)
	DefaultPauseAfter  = limits.Duration(2 * time.Minute)
	// MaxSessionSteps bounds the steps one session runs, all calls
	// together (the record lists each).
	MaxSessionSteps = 256
)

// prepareSession checks the session block and fills its defaults.
func (s *Spec) prepareSession() error {
	if s.Session == nil {
		return nil
	}
	if s.Action != "" {
		return &FieldError{Field: "session", Msg: "a catalog action is a one-shot run", Hint: "open a session with a free-form spec"}
	}
	if s.Session.IdleTimeout < 0 {
		return &FieldError{Field: "session.idle_timeout", Msg: "must be positive"}
	}
	if s.Session.IdleTimeout == 0 {
		s.Session.IdleTimeout = min(DefaultIdleTimeout, s.Timeout)
	}
	if s.Session.PauseAfter < 0 {
		return &FieldError{Field: "session.pause_after", Msg: "must be positive"}
	}
	if s.Session.PauseAfter == 0 {
		s.Session.PauseAfter = DefaultPauseAfter
	}
	if s.Session.IdleTimeout > s.Timeout {
		return &FieldError{Field: "session.idle_timeout", Msg: fmt.Sprintf("%s is above the session's timeout %s", s.Session.IdleTimeout, s.Timeout),
			Hint: "timeout is the session's whole life, idle_timeout the most time between two calls"}
	}
	// A session is never replayed: its steps were chosen call by call.
	if s.MaxRetry != nil && *s.MaxRetry != 0 {
		return &FieldError{Field: "max_retry", Msg: "a session is never retried", Hint: "leave max_retry out, or 0"}
	}
	return nil
}

// CheckStep checks one step of a session call as a spec's step is checked
// (name, argv, env, timeout within the session's), naming the field; it
// fills the name from n (the step's number in the session) when empty.
func (s *Spec) CheckStep(st *Step, n int) error {
	one := Spec{Timeout: s.Timeout, Steps: []Step{*st}}
	if err := one.prepareSteps(); err != nil {
		var fe *FieldError
		if errors.As(err, &fe) && strings.HasPrefix(fe.Field, "steps[0]") {
			fe.Field = "step" + strings.TrimPrefix(fe.Field, "steps[0]")
		}
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(st.Env)) {
		for _, name := range SecretRefs(st.Env[k]) {
			if !slices.Contains(s.Secrets, name) {
				return &FieldError{Field: fmt.Sprintf("step.env[%q]", k), Msg: fmt.Sprintf("secret %s is not among the session's secrets", name),
					Hint: "a session's steps use only the secrets its spec declared (and the operator granted to steps' environments)"}
			}
		}
	}
	*st = one.Steps[0]
	if st.Name == "step-1" && n > 0 {
		st.Name = fmt.Sprintf("step-%d", n)
	}
	return nil
}

// DecodeStep reads one step of a session call strictly: unknown fields
// and wrong types are errors naming the field. Check it with
// Spec.CheckStep.
func DecodeStep(data []byte, st *Step) error { return strictDecode(data, st) }
