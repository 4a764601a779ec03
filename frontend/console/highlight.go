package console

import (
	"strings"

	"github.com/airlock-run/airlock/record"
)

// Highlight is a value of the result a policy rule looked at: the rule's
// name, the value's pointer, and the reason the rule gave.
type Highlight struct {
	Pointer string `json:"pointer"`
	Rule    string `json:"rule"`
	Reason  string `json:"reason,omitempty"`
}

// Highlights are the values of the result the deciding rules looked at
// (the approval's checks, which the worker's policy recorded, never the
// result's own words), each with its rule's reason.
func Highlights(checks []record.Check, reasons []string) []Highlight {
	out := []Highlight{}
	for _, c := range checks {
		h := Highlight{Pointer: c.Pointer, Rule: c.Rule}
		for _, r := range reasons {
			if strings.HasPrefix(r, "rule "+c.Rule+":") || strings.HasPrefix(r, "rule "+c.Rule+" could not be evaluated") {
				h.Reason = r
				break
			}
		}
		out = append(out, h)
	}
	return out
}
