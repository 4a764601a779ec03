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
//	      principal: [billing-backend]   # who asked (API token name, MCP -principal) is in the list
//	      action: [send-email]           # the run is a catalog action of the list (worker -actions): a fact, never a spec's claim
//	      artifact_bytes_over: 1048576   # the artifacts hold more bytes
//	      result:                        # a field of the JSON result
//	        pointer: /amount             # RFC 6901 JSON pointer
//	        op: ">"                      # > >= < <= == != in not_in exists
//	        value: 1000                  # number, string, bool; a list for in/not_in
//	      network: true                  # the run had network (false: it had none)
//	      stderr: true                   # a step wrote to stderr (false: none did)
//	      secret_in_artifacts: true      # a secret's value appears in an artifact
//	      secret_in_env: true            # a step saw a secret in its environment
//	      session: true                  # the run was a session: its steps were chosen call by call
//	    then: park                       # park | promote
//	secrets:                             # grants: a secret not named here is usable by nothing
//	  PARTNER_TOKEN:                     # a secret's name, as specs declare it
//	    queues: [reports]                # runs on these queues may use it
//	    actions: [csv-report]            # and runs of these catalog actions (worker -actions)
//	    hosts: [partner.example, "*.cdn.example:443", "127.0.0.1:8765"]
//	                                     # input headers may carry it to these hosts only
//	                                     # (none: no header use); no port: any port
//	    env: false                       # true lets steps see it in their env (default false)
//	quotas:                              # what one principal may hold in each queue (none: no bound)
//	  billing-backend:                   # a principal (API token name, MCP -principal)
//	    max_queued: 1000                 # runs waiting in the queue
//	    max_active: 4                    # runs running at once (an open session runs)
//	    max_sessions: 2                  # open sessions
//	    max_pending_bytes: 16MiB         # bytes its parked outputs hold until decided
//	    max_waiters: 20                  # open long polls and event streams, per API server
//	    runs_per_minute: 600             # runs enqueued in any minute
//	  "*": {max_queued: 100}             # every other principal, and runs naming none
//
// A run is parked when any matching rule says park, whatever the others say;
// otherwise promoted when a matching rule says promote; otherwise the
// default decides. A spec can only make this stricter: its approval
// "always" parks the run whatever the policy says, and "auto" never
// promotes what the policy parks. A worker without a policy parks
// everything (NoPolicy). A run whose steps saw a secret in their
// environment is promoted only by a matching rule that says
// secret_in_env: true; neither another promote rule nor the default
// promotes it. Likewise a session's run (its steps were chosen at run
// time, call by call) is promoted only by a matching rule that says
// session: true.
//
// A worker enforces the secrets: section before a run starts (Grant): a
// secret is usable by a run only when its grant names the run's queue or
// catalog action; a worker without a policy grants nothing.
//
// The quotas: section bounds what one principal holds in each queue the
// policy's workers serve (Quotas); they publish it per queue, and every
// front end and worker enforces it (internal/redis/fairshare).
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/airlock-run/airlock/record"
)

// Decisions.
const (
	Promote = record.Promote
	Park    = record.Park
)

// What Decision.Rule says when no rule of the policy decided.
const (
	RuleDefault  = "default"   // no rule matched: the policy's default
	RuleSpec     = "spec"      // the spec's approval "always"
	RuleNoPolicy = "no-policy" // the worker has no policy
	// RuleSecretInEnv: a step saw a secret in its environment and no rule
	// saying secret_in_env: true promoted the run.
	RuleSecretInEnv = "secret-in-env"
	// RuleSession: the run was a session and no rule saying session: true
	// promoted it.
	RuleSession = "session"
)

// Spec approval modes, as in tasks.Spec.Approval.
const (
	ApprovalAuto   = "auto"
	ApprovalAlways = "always"
)

// Input is what a policy looks at: the facts of one finished run.
type Input struct {
	Queue string
	// Principal is who asked for the run, as the front end that took the
	// request stamped it (tasks.Spec.Principal); "" when nobody is named,
	// which no principal condition matches.
	Principal         string
	Action            string // the catalog action the run ran (worker -actions); "" for a free-form spec
	ArtifactBytes     int64  // total bytes of the artifacts
	Result            []byte // the JSON result, or nil when there is none
	Network           bool   // the run had network enabled
	Stderr            bool   // some step wrote to stderr
	SecretInArtifacts bool   // a secret's value appears in an artifact
	SpecApproval      string // "", "auto" or "always"
	// SecretInEnv: a step saw a secret's value in its environment (a
	// grant with env: true). Such a run is promoted only by a rule that
	// says secret_in_env: true; SecretsInEnv names the secrets, for the
	// reasons.
	SecretInEnv  bool
	SecretsInEnv []string
	// Session: the run was a session, whose steps were chosen call by
	// call (tasks.Spec.Session). Such a run is promoted only by a rule
	// that says session: true.
	Session bool
}

// Decision is what a policy decided for a run (see record.Decision).
type Decision = record.Decision

// Policy is a parsed policy. It is immutable and may be used from several
// goroutines.
type Policy struct {
	def    record.Action
	rules  []*rule
	none   bool             // NoPolicy
	grants []Grant          // the secrets: section, sorted by name
	quotas map[string]Quota // the quotas: section, by principal ("*": the rest)
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
		return "no rules, default " + string(p.def)
	}
	names := make([]string, len(p.rules))
	for i, r := range p.rules {
		names[i] = r.name + " → " + string(r.then)
	}
	return fmt.Sprintf("%d rules (%s), default %s", len(p.rules), strings.Join(names, ", "), p.def)
}

type rule struct {
	name  string
	then  record.Action
	conds []cond
	// envOK: the rule says secret_in_env: true, so it may promote a run
	// whose steps saw a secret in their environment.
	envOK bool
	// sessionOK: the rule says session: true, so it may promote a session.
	sessionOK bool
	// looksAtResult: the rule has a result condition, on the value at
	// pointer.
	looksAtResult bool
	pointer       string
}

// outcome is what a condition says of a run.
type outcome int

const (
	fails   outcome = iota // the condition does not hold
	holds                  // it holds
	unknown                // it cannot be evaluated on this run (wrong type, missing value, number out of range)
)

// cond is one condition of a rule: its outcome for the run and, when it
// holds, what held, or, when unknown, why it could not be evaluated, in
// words.
type cond func(*facts) (outcome, string)

// yes turns a boolean and its words into a condition's result.
func yes(ok bool, what string) (outcome, string) {
	if ok {
		return holds, what
	}
	return fails, ""
}

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
	var checked []record.Check
	if d.Action == Park {
		reasons = append(reasons, d.Reasons...)
		checked = d.Checked
	}
	return Decision{Action: Park, Reasons: reasons, Rule: RuleSpec, Checked: checked}
}

// decide is the policy's decision, before the spec's approval. It fails
// closed: a rule that cannot be evaluated on the run (one of its
// conditions is unknown, none fails) counts as matching when it parks and
// as not matching when it promotes, and the reasons say which rule and
// why.
func (p *Policy) decide(in Input) Decision {
	if p == nil || p.none {
		return Decision{Action: Park, Reasons: []string{"no policy: every result is parked"}, Rule: RuleNoPolicy}
	}
	f := &facts{Input: in}
	var park, promote Decision
	var notes []string       // promote rules that could not be evaluated
	var held []string        // promote rules that do not say secret_in_env: true, on a run that needs it
	var heldSession []string // promote rules that do not say session: true, on a session's run
	for _, r := range p.rules {
		o, what := r.match(f)
		switch {
		case o == fails:
			continue
		case o == unknown && r.then == Promote:
			notes = append(notes, fmt.Sprintf("rule %s could not be evaluated, so it does not promote: %s", r.name, what))
			continue
		case in.SecretInEnv && r.then == Promote && !r.envOK:
			held = append(held, r.name)
			continue
		case in.Session && r.then == Promote && !r.sessionOK:
			heldSession = append(heldSession, r.name)
			continue
		}
		d := &promote
		if r.then == Park {
			d = &park
		}
		if d.Rule == "" {
			d.Rule = r.name
		}
		if o == unknown {
			d.Reasons = append(d.Reasons, fmt.Sprintf("rule %s could not be evaluated, so it parks: %s", r.name, what))
		} else {
			d.Reasons = append(d.Reasons, fmt.Sprintf("rule %s: %s", r.name, what))
		}
		if r.looksAtResult {
			d.Checked = append(d.Checked, record.Check{Rule: r.name, Pointer: r.pointer})
		}
	}
	switch {
	case park.Rule != "":
		park.Action = Park
		park.Reasons = append(park.Reasons, notes...)
		return park
	case promote.Rule != "":
		promote.Action = Promote
		promote.Reasons = append(promote.Reasons, notes...)
		return promote
	case in.SecretInEnv && (len(held) > 0 || p.def == Promote):
		return envHeld(in, held, p.def, notes)
	case in.Session && (len(heldSession) > 0 || p.def == Promote):
		return sessionHeld(heldSession, p.def, notes)
	}
	return Decision{Action: p.def, Reasons: append([]string{"no rule matched: the policy's default is " + string(p.def)}, notes...), Rule: RuleDefault}
}

// match evaluates every condition of r: fails as soon as one fails;
// otherwise unknown, with why, when one could not be evaluated; otherwise
// holds, with what held.
func (r *rule) match(f *facts) (outcome, string) {
	whats := make([]string, 0, len(r.conds))
	var whys []string
	for _, c := range r.conds {
		o, what := c(f)
		switch o {
		case fails:
			return fails, ""
		case unknown:
			whys = append(whys, what)
		default:
			whats = append(whats, what)
		}
	}
	if len(whys) > 0 {
		return unknown, strings.Join(whys, "; ")
	}
	return holds, strings.Join(whats, " and ")
}

// The conditions, built by the parser.

func queueCond(queues []string) cond {
	return func(f *facts) (outcome, string) {
		return yes(contains(queues, f.Queue), fmt.Sprintf("queue is %s", quote(f.Queue)))
	}
}

// principalCond holds when the run's principal is in the list; a run
// that names no principal never matches.
func principalCond(principals []string) cond {
	return func(f *facts) (outcome, string) {
		return yes(f.Principal != "" && contains(principals, f.Principal), fmt.Sprintf("principal is %s", quote(f.Principal)))
	}
}

func actionCond(actions []string) cond {
	return func(f *facts) (outcome, string) {
		return yes(contains(actions, f.Action), fmt.Sprintf("action is %s", quote(f.Action)))
	}
}

func bytesOverCond(n int64) cond {
	return func(f *facts) (outcome, string) {
		return yes(f.ArtifactBytes > n, fmt.Sprintf("artifacts hold %d bytes > %d", f.ArtifactBytes, n))
	}
}

func flagCond(get func(*facts) bool, want bool, on, off string) cond {
	return func(f *facts) (outcome, string) {
		if want {
			return yes(get(f) == want, on)
		}
		return yes(get(f) == want, off)
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

// eval evaluates the condition on the result. It is unknown, never
// false, when the comparison cannot be made: no JSON result, no value at
// the pointer (but for exists, where that is a plain no), a value of
// another type than the rule's (a string where a number is compared), a
// number beyond float64's range.
func (c *resultCond) eval(f *facts) (outcome, string) {
	doc, ok := f.result()
	if !ok {
		if c.op == "exists" {
			return fails, ""
		}
		if f.Result == nil {
			return unknown, fmt.Sprintf("%s: the run has no result", c.name())
		}
		return unknown, fmt.Sprintf("%s: the result is not one JSON value", c.name())
	}
	v, found := lookup(doc, c.tokens)
	if c.op == "exists" {
		return yes(found, fmt.Sprintf("%s exists", c.name()))
	}
	if !found {
		return unknown, fmt.Sprintf("%s is missing", c.name())
	}
	got := scalar(v)
	if n, isNum := v.(json.Number); isNum {
		if _, isFloat := got.(float64); !isFloat {
			return unknown, fmt.Sprintf("%s is %s, beyond float64's range", c.name(), cutText(n.String()))
		}
	}
	mismatch := func(want any) (outcome, string) {
		return unknown, fmt.Sprintf("%s is %s (%s), not %s like %s", c.name(), render(got), kind(got), kind(want), render(want))
	}
	var ok2 bool
	switch c.op {
	case "==", "!=":
		if kind(got) != kind(c.value) {
			return mismatch(c.value)
		}
		ok2 = equal(got, c.value) == (c.op == "==")
	case "in", "not_in":
		in, comparable := false, false
		for _, w := range c.list {
			if kind(got) == kind(w) {
				comparable = true
				in = in || equal(got, w)
			}
		}
		if !comparable {
			return unknown, fmt.Sprintf("%s is %s (%s), of no type in %s", c.name(), render(got), kind(got), render(c.list))
		}
		ok2 = in == (c.op == "in")
	default: // > >= < <=
		n, isNum := got.(float64)
		if !isNum {
			return mismatch(c.value)
		}
		w := c.value.(float64)
		switch c.op {
		case ">":
			ok2 = n > w
		case ">=":
			ok2 = n >= w
		case "<":
			ok2 = n < w
		case "<=":
			ok2 = n <= w
		}
	}
	want := render(c.value)
	if c.list != nil {
		want = render(c.list)
	}
	return yes(ok2, fmt.Sprintf("%s is %s %s %s", c.name(), render(got), c.op, want))
}

// kind names the JSON type of a scalar as scalar returns it.
func kind(v any) string {
	switch v.(type) {
	case float64:
		return "a number"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a number" // json.Number beyond float64: caught before
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
	return cutText(string(b))
}

func quote(s string) string { return render(s) }

// cutText bounds a text quoted in a reason to maxRendered bytes.
func cutText(s string) string {
	if len(s) <= maxRendered {
		return s
	}
	i := maxRendered
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
