package tasks

import (
	"maps"
	"slices"
)

// Clone returns a deep copy of s: its maps, slices and pointers are its
// own, so that preparing or expanding the copy leaves s as it was. The
// output schema's bytes are shared (nothing writes them).
func (s *Spec) Clone() *Spec {
	if s == nil {
		return nil
	}
	c := *s
	c.Files = maps.Clone(s.Files)
	c.FileModes = maps.Clone(s.FileModes)
	c.Secrets = slices.Clone(s.Secrets)
	c.Params = slices.Clone(s.Params)
	if s.MaxRetry != nil {
		n := *s.MaxRetry
		c.MaxRetry = &n
	}
	if s.Inputs != nil {
		c.Inputs = make([]Input, len(s.Inputs))
		for i, in := range s.Inputs {
			in.Headers = maps.Clone(in.Headers)
			c.Inputs[i] = in
		}
	}
	if s.Steps != nil {
		c.Steps = make([]Step, len(s.Steps))
		for i, st := range s.Steps {
			st.Run = slices.Clone(st.Run)
			st.Env = maps.Clone(st.Env)
			c.Steps[i] = st
		}
	}
	if s.Session != nil {
		se := *s.Session
		c.Session = &se
	}
	if s.Output != nil {
		o := *s.Output
		o.Artifacts = slices.Clone(o.Artifacts)
		c.Output = &o
	}
	return &c
}
