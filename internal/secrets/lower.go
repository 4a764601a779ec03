package secrets

import (
	"bytes"
	"strings"
)

// RedactLower is Redact for text that was lower-cased after a step wrote
// it, such as a host name as the egress proxy records it: besides every
// form of every value, it replaces each form's lower-case spelling.
func (s *Set) RedactLower(t string) string {
	t = s.Redact(t)
	if s.Empty() || t == "" {
		return t
	}
	for _, f := range s.forms {
		if lf := bytes.ToLower(f); !bytes.Equal(lf, f) {
			t = strings.ReplaceAll(t, string(lf), Mask)
		}
	}
	return t
}
