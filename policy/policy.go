// Package policy is the operator's risk policy: the rules that decide, once
// a run's output has met its contract, whether it is promoted at once or
// parked for a human to accept or reject.
//
// A policy is a file of rules, JSON or YAML:
//
//	default: park            # promote | park: when no rule matches (default: park)
//	rules:
//	  - name: payments-need-a-human      # required, unique
//	    when:                            # every condition must hold (AND)
//	      queue: [payments]              # the run's queue is in the list
//	      action: [send-email]           # the action's name is in the list
//	      artifact_bytes_over: 1048576   # the artifacts hold more bytes
//	      result:                        # a field of the JSON result
//	        pointer: /amount             # RFC 6901 JSON pointer
//	        op: ">"                      # > >= < <= == != in not_in exists
//	        value: 1000                  # number, string, bool; a list for in/not_in
//	      network: true                  # the run had network (false: it had none)
//	      stderr: true                   # a step wrote to stderr (false: none did)
//	      secret_in_artifacts: true      # a secret's value appears in an artifact
//	    then: park                       # park | promote
//
// A run is parked when any matching rule says park, whatever the others say;
// otherwise promoted when a matching rule says promote; otherwise the
// default decides. A spec can only make this stricter: its approval
// "always" parks the run whatever the policy says, and "auto" never
// promotes what the policy parks. A worker without a policy parks
// everything (NoPolicy).
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Decisions.
const (
	Promote = "promote"
	Park    = "park"
)

// What Decision.Rule says when no rule of the policy decided.
const (
	RuleDefault  = "default"   // no rule matched: the policy's default
	RuleSpec     = "spec"      // the spec's approval "always"
	RuleNoPolicy = "no-policy" // the worker has no policy
)

// Spec approval modes, as in tasks.Spec.Approval.
const (
	ApprovalAuto   = "auto"
	ApprovalAlways = "always"
)

// Input is what a policy looks at: the facts of one finished run.
type Input struct {
	Queue             string
	Action            string // the action's name, as the caller knows it
	ArtifactBytes     int64  // total bytes of the artifacts
	Result            []byte // the JSON result, or nil when there is none
	Network           bool   // the run had network enabled
	Stderr            bool   // some step wrote to stderr
	SecretInArtifacts bool   // a secret's value appears in an artifact
	SpecApproval      string // "", "auto" or "always"
}

// Decision is what a policy decided for a run.
type Decision struct {
	Action  string   `json:"action"`  // Promote or Park
	Reasons []string `json:"reasons"` // why, for the approver and the run record
	// Rule is the name of the rule that decided (the first matching park
	// rule, or the first matching promote rule), or RuleDefault, RuleSpec
	// or RuleNoPolicy.
	Rule string `json:"rule"`
}

// Policy is a parsed policy. It is immutable and may be used from several
// goroutines.
type Policy struct {
	def   string
	rules []*rule
	none  bool // NoPolicy
}

// NoPolicy returns the policy of a worker started without one: every result
// is parked.
func NoPolicy() *Policy { return &Policy{def: Park, none: true} }

// Summary describes the policy in a line, for a worker's log.
func (p *Policy) Summary() string {
	if p == nil || p.none {
		return "no policy: every result is parked"
	}
	if len(p.rules) == 0 {
		return "no rules, default " + p.def
	}
	names := make([]string, len(p.rules))
	for i, r := range p.rules {
		names[i] = r.name + " → " + r.then
	}
	return fmt.Sprintf("%d rules (%s), default %s", len(p.rules), strings.Join(names, ", "), p.def)
}

type rule struct {
	name  string
	then  string
	conds []cond
}

// cond is one condition of a rule: whether it holds for the run, and if it
// does, what held, in words.
type cond func(*facts) (bool, string)

// facts is an Input with its result decoded once.
type facts struct {
	Input
	decoded bool
	doc     any
	docOK   bool
}

func (f *facts) result() (any, bool) {
	if !f.decoded {
		f.decoded = true
		if f.Result != nil {
			dec := json.NewDecoder(bytes.NewReader(f.Result))
			dec.UseNumber()
			if err := dec.Decode(&f.doc); err == nil {
				if _, err := dec.Token(); err == io.EOF {
					f.docOK = true
				}
			}
		}
	}
	return f.doc, f.docOK
}

// Evaluate decides for a run. A nil *Policy is NoPolicy.
func (p *Policy) Evaluate(in Input) Decision {
	d := p.decide(in)
	switch in.SpecApproval {
	case "", ApprovalAuto:
		return d
	case ApprovalAlways:
		return stricter(d, "spec asks approval: always")
	default:
		return stricter(d, fmt.Sprintf("spec approval %q is not a mode: parked", in.SpecApproval))
	}
}

// stricter parks d for the spec's reason, keeping the policy's own reasons
// when it parks too.
func stricter(d Decision, reason string) Decision {
	reasons := []string{reason}
	if d.Action == Park {
		reasons = append(reasons, d.Reasons...)
	}
	return Decision{Action: Park, Reasons: reasons, Rule: RuleSpec}
}

// decide is the policy's decision, before the spec's approval.
func (p *Policy) decide(in Input) Decision {
	if p == nil || p.none {
		return Decision{Action: Park, Reasons: []string{"no policy: every result is parked"}, Rule: RuleNoPolicy}
	}
	f := &facts{Input: in}
	var park, promote Decision
	for _, r := range p.rules {
		what, ok := r.match(f)
		if !ok {
			continue
		}
		d := &promote
		if r.then == Park {
			d = &park
		}
		if d.Rule == "" {
			d.Rule = r.name
		}
		d.Reasons = append(d.Reasons, fmt.Sprintf("rule %s: %s", r.name, what))
	}
	switch {
	case park.Rule != "":
		park.Action = Park
		return park
	case promote.Rule != "":
		promote.Action = Promote
		return promote
	}
	return Decision{Action: p.def, Reasons: []string{"no rule matched: the policy's default is " + p.def}, Rule: RuleDefault}
}

// match reports whether every condition of r holds, and what held.
func (r *rule) match(f *facts) (string, bool) {
	whats := make([]string, 0, len(r.conds))
	for _, c := range r.conds {
		ok, what := c(f)
		if !ok {
			return "", false
		}
		whats = append(whats, what)
	}
	return strings.Join(whats, " and "), true
}

// The conditions, built by the parser.

func queueCond(queues []string) cond {
	return func(f *facts) (bool, string) {
		return contains(queues, f.Queue), fmt.Sprintf("queue is %s", quote(f.Queue))
	}
}

func actionCond(actions []string) cond {
	return func(f *facts) (bool, string) {
		return contains(actions, f.Action), fmt.Sprintf("action is %s", quote(f.Action))
	}
}

func bytesOverCond(n int64) cond {
	return func(f *facts) (bool, string) {
		return f.ArtifactBytes > n, fmt.Sprintf("artifacts hold %d bytes > %d", f.ArtifactBytes, n)
	}
}

func flagCond(get func(*facts) bool, want bool, yes, no string) cond {
	return func(f *facts) (bool, string) {
		if want {
			return get(f) == want, yes
		}
		return get(f) == want, no
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// resultCond is a condition on the value at pointer of the result.
type resultCond struct {
	pointer string
	tokens  []string // the pointer's reference tokens, unescaped
	op      string
	value   any   // float64, string or bool; nil for exists
	list    []any // for in and not_in
}

func (c *resultCond) eval(f *facts) (bool, string) {
	doc, ok := f.result()
	if !ok {
		return false, ""
	}
	v, found := lookup(doc, c.tokens)
	if !found {
		return false, ""
	}
	got := scalar(v)
	var holds bool
	switch c.op {
	case "exists":
		return true, fmt.Sprintf("%s exists", c.name())
	case "==":
		holds = equal(got, c.value)
	case "!=":
		holds = !equal(got, c.value)
	case "in", "not_in":
		in := false
		for _, w := range c.list {
			if equal(got, w) {
				in = true
				break
			}
		}
		holds = in == (c.op == "in")
	default: // > >= < <=
		n, isNum := got.(float64)
		w := c.value.(float64)
		if !isNum {
			return false, ""
		}
		switch c.op {
		case ">":
			holds = n > w
		case ">=":
			holds = n >= w
		case "<":
			holds = n < w
		case "<=":
			holds = n <= w
		}
	}
	want := render(c.value)
	if c.list != nil {
		want = render(c.list)
	}
	return holds, fmt.Sprintf("%s is %s %s %s", c.name(), render(got), c.op, want)
}

// name is the pointer as shown in a reason: "(result)" for the whole result.
func (c *resultCond) name() string {
	if c.pointer == "" {
		return "the result"
	}
	return c.pointer
}

// lookup returns the value at the pointer tokens of doc.
func lookup(doc any, tokens []string) (any, bool) {
	for _, t := range tokens {
		switch v := doc.(type) {
		case map[string]any:
			child, ok := v[t]
			if !ok {
				return nil, false
			}
			doc = child
		case []any:
			i, ok := arrayIndex(t)
			if !ok || i >= len(v) {
				return nil, false
			}
			doc = v[i]
		default:
			return nil, false
		}
	}
	return doc, true
}

// arrayIndex parses an RFC 6901 array index: digits, no leading zero.
func arrayIndex(t string) (int, bool) {
	if t == "" || len(t) > 9 || (len(t) > 1 && t[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// scalar converts a decoded JSON number to float64; other values are kept.
func scalar(v any) any {
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			return f
		}
		return v // out of float64's range: equal to nothing, compared with nothing
	}
	return v
}

// equal compares two scalars: numbers as float64, strings, bools. An
// object, array or null equals nothing.
func equal(a, b any) bool {
	switch a := a.(type) {
	case float64, string, bool:
		return a == b
	}
	return false
}

// maxRendered bounds a value of the result quoted in a reason.
const maxRendered = 80

// render shows a value as JSON, cut to maxRendered bytes.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > maxRendered {
		i := maxRendered
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return s
}

func quote(s string) string { return render(s) }
