package actions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// setSpec checks the spec template of d and keeps it: a spec that leaves
// who asks and where to the call (no action, params, queue, run_id,
// idempotency_key or principal), whose ${param:NAME} appear only in its
// inputs' URLs (after the host) and headers and name required params, and
// that prepares against p once expanded.
func (d *Definition) setSpec(raw json.RawMessage, p limits.Policy) error {
	fail := func(field, format string, args ...any) error {
		return &Error{File: d.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fail("spec", "want a mapping (a task spec)")
	}
	for _, k := range []string{"action", "params", "queue", "run_id", "idempotency_key", "principal"} {
		if _, ok := fields[k]; ok {
			return fail("spec."+k, "is the caller's to give, not the definition's")
		}
	}
	if _, ok := fields["version"]; !ok {
		fields["version"] = json.RawMessage("1")
	}
	full, err := json.Marshal(fields)
	if err != nil {
		return fail("spec", "%v", err)
	}
	tmpl, err := tasks.Decode(full)
	if err != nil {
		return specError(d.Name, err)
	}
	if _, ok := tmpl.Files[ParamsFile]; ok {
		return fail("spec.files", "%s is where the run finds its params: the definition may not write it", ParamsFile)
	}
	if err := d.checkRefs(tmpl); err != nil {
		return err
	}
	d.spec = tmpl
	// Expanded with placeholder params, the template must prepare against
	// the worker's limits: a definition that asks more than they allow is
	// refused at load, not at each call.
	probe := map[string]string{}
	for _, n := range d.refs {
		probe[n] = "x"
	}
	s, err := d.expand(probe, []byte("{}"))
	if err != nil {
		return specError(d.Name, err)
	}
	s.Action = d.Name
	if err := s.PrepareExpanded(p); err != nil {
		return specError(d.Name, err)
	}
	d.Timeout, d.MaxRetry = s.Timeout, *s.MaxRetry
	return nil
}

// specError names a template's field as the definition's.
func specError(name string, err error) error {
	if fe, ok := err.(*tasks.FieldError); ok {
		msg := fe.Msg
		if fe.Hint != "" {
			msg += " (" + fe.Hint + ")"
		}
		return &Error{File: name, Field: "spec." + strings.TrimPrefix(fe.Field, "spec"), Msg: msg}
	}
	return &Error{File: name, Field: "spec", Msg: err.Error()}
}

// checkRefs finds the params the template uses and checks where: only in
// inputs' URLs, after the host, and in their headers' values; each must be
// a required property of the params schema.
func (d *Definition) checkRefs(t *tasks.Spec) error {
	fail := func(field, format string, args ...any) error {
		return &Error{File: d.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var schema struct {
		Required []string `json:"required"`
	}
	_ = json.Unmarshal(d.Params, &schema)
	use := func(field, v string) error {
		for _, n := range tasks.ParamRefs(v) {
			if !slices.Contains(schema.Required, n) {
				return fail(field, "uses ${param:%s}, which params does not require", n)
			}
			if !slices.Contains(d.refs, n) {
				d.refs = append(d.refs, n)
			}
		}
		return nil
	}
	nowhere := func(field, v string) error {
		if strings.Contains(v, "${param:") {
			return fail(field, "a parameter may be used only in inputs[].url (after the host) and inputs[].headers: params reach steps as the file %s", ParamsFile)
		}
		return nil
	}
	for i, in := range t.Inputs {
		f := fmt.Sprintf("spec.inputs[%d]", i)
		if scheme, rest, ok := strings.Cut(in.URL, "://"); ok {
			host, _, _ := strings.Cut(rest, "/")
			host, _, _ = strings.Cut(host, "?")
			if err := nowhere(f+".url", scheme+"://"+host); err != nil {
				return err
			}
		}
		if err := use(f+".url", in.URL); err != nil {
			return err
		}
		if err := nowhere(f+".path", in.Path); err != nil {
			return err
		}
		for k, v := range in.Headers {
			if err := use(fmt.Sprintf("%s.headers[%q]", f, k), v); err != nil {
				return err
			}
		}
	}
	for i, st := range t.Steps {
		f := fmt.Sprintf("spec.steps[%d]", i)
		for j, a := range st.Run {
			if err := nowhere(fmt.Sprintf("%s.run[%d]", f, j), a); err != nil {
				return err
			}
		}
		for k, v := range st.Env {
			if err := nowhere(fmt.Sprintf("%s.env[%q]", f, k), v); err != nil {
				return err
			}
		}
		if err := nowhere(f+".stdin", st.Stdin); err != nil {
			return err
		}
	}
	for p, c := range t.Files {
		if err := nowhere(fmt.Sprintf("spec.files[%q]", p), string(c)); err != nil {
			return err
		}
	}
	return nil
}

// CheckParams checks params (a JSON object, or empty for {}) against the
// action's schema. Errors are *tasks.FieldError naming "params" or the
// offending member ("params.day"); one that violates the schema lists
// every violation (paramsError).
func (d *Definition) CheckParams(params json.RawMessage) (canonical []byte, vals map[string]string, err error) {
	doc, err := validate(d.params, params)
	if err != nil {
		return nil, nil, err
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, nil, &tasks.FieldError{Field: "params", Msg: "want a JSON object"}
	}
	vals = map[string]string{}
	for _, n := range d.refs {
		s, err := scalar(m[n])
		if err != nil {
			return nil, nil, &tasks.FieldError{Field: "params." + n, Msg: err.Error()}
		}
		vals[n] = s
	}
	canonical, err = json.Marshal(m)
	if err != nil {
		return nil, nil, &tasks.FieldError{Field: "params", Msg: err.Error()}
	}
	return canonical, vals, nil
}

// validate checks params (a JSON object, or empty for {}) against s and
// returns the document validated.
func validate(s *contract.Schema, params json.RawMessage) ([]byte, error) {
	if err := tasks.CheckParams(params); err != nil {
		return nil, err
	}
	doc := bytes.TrimSpace(params)
	if len(doc) == 0 || string(doc) == "null" {
		doc = []byte("{}")
	}
	vs, err := s.Validate(doc)
	if err != nil {
		return nil, &tasks.FieldError{Field: "params", Msg: err.Error()}
	}
	if len(vs) > 0 {
		return nil, paramsError(vs)
	}
	return doc, nil
}

// MaxParamsViolations is how many violations a params error lists at
// most; it says how many more there are.
const MaxParamsViolations = 10

// paramsError is the error of params that violate the schema: every
// violation (at most MaxParamsViolations), each naming its field, a missing
// required property first ("params: day is required; params: additional
// property date is not allowed"). Its Field is the first one's.
func paramsError(vs []contract.Violation) *tasks.FieldError {
	missingFirst := slices.Clone(vs)
	slices.SortStableFunc(missingFirst, contract.MissingFirst)
	field := func(v contract.Violation) string { return "params" + strings.ReplaceAll(v.Path, "/", ".") }
	listed := missingFirst[:min(len(missingFirst), MaxParamsViolations)]
	msgs := make([]string, 0, len(listed)+1)
	for i, v := range listed {
		if i == 0 {
			msgs = append(msgs, contract.Sentence(v))
		} else {
			msgs = append(msgs, field(v)+": "+contract.Sentence(v))
		}
	}
	if more := len(vs) - len(listed); more > 0 {
		// The schema's validation returns contract.MaxViolations at most.
		atLeast := ""
		if len(vs) >= contract.MaxViolations {
			atLeast = "at least "
		}
		msgs = append(msgs, fmt.Sprintf("and %s%d more", atLeast, more))
	}
	return &tasks.FieldError{Field: field(listed[0]), Msg: strings.Join(msgs, "; ")}
}

// CheckParams checks params against the schema of the action i
// describes, as an enqueuer can before the worker does it again. Errors
// are *tasks.FieldError naming "params" or the offending member.
func (i Info) CheckParams(params json.RawMessage) error {
	s, err := contract.Compile(i.Params)
	if err != nil {
		return &tasks.FieldError{Field: "action", Msg: fmt.Sprintf("the published params schema of %q does not compile: %v", i.Name, err)}
	}
	_, err = validate(s, params)
	return err
}

// scalar is a param's value as it goes into a URL or a header.
func scalar(v any) (string, error) {
	var s string
	switch t := v.(type) {
	case string:
		s = t
	case json.Number:
		s = t.String()
	case bool:
		s = strconv.FormatBool(t)
	default:
		return "", fmt.Errorf("is used in the action's inputs: want a string, a number or true/false")
	}
	if strings.ContainsAny(s, "\r\n\x00") || strings.Contains(s, "${") {
		return "", fmt.Errorf("is used in the action's inputs: a line break, NUL or \"${\" is not allowed")
	}
	return s, nil
}

// Expand returns the spec a call of the action runs: the definition's
// template with the call's params (checked here), the call's queue,
// run_id, idempotency_key and principal, prepared against p. call is a
// prepared call (tasks.Spec.Prepare) of this action.
func (d *Definition) Expand(call *tasks.Spec, p limits.Policy) (*tasks.Spec, error) {
	if call.Action != d.Name {
		return nil, &tasks.FieldError{Field: "action", Msg: fmt.Sprintf("%q is not %q", call.Action, d.Name)}
	}
	canon, vals, err := d.CheckParams(call.Params)
	if err != nil {
		return nil, err
	}
	s, err := d.expand(vals, canon)
	if err != nil {
		return nil, err
	}
	s.Action, s.Queue, s.RunID, s.IdempotencyKey, s.Principal = d.Name, call.Queue, call.RunID, call.IdempotencyKey, call.Principal
	if err := s.PrepareExpanded(p); err != nil {
		return nil, fmt.Errorf("action %s's definition: %w", d.Name, err)
	}
	return s, nil
}

// expand returns a copy of the template with vals in its inputs and
// params in its ParamsFile.
func (d *Definition) expand(vals map[string]string, params []byte) (*tasks.Spec, error) {
	s := d.spec.Clone()
	if s.Files == nil {
		s.Files = map[string]tasks.File{}
	}
	s.Files[ParamsFile] = tasks.File(params)
	for i := range s.Inputs {
		in := &s.Inputs[i]
		// Escaped as a query value, with spaces as %20: the same in a path
		// and a query, and no '/', '?', '#', '&' or '@' of the caller's
		// ever reads as the URL's structure.
		tmpl := in.URL
		in.URL = tasks.ExpandParams(tmpl, func(n string) string {
			return strings.ReplaceAll(url.QueryEscape(vals[n]), "+", "%20")
		})
		if err := checkSegments(tmpl, in.URL); err != nil {
			return nil, err
		}
		for k, v := range in.Headers {
			out := tasks.ExpandParams(v, func(n string) string { return vals[n] })
			// The worker expands ${secret:NAME} in headers after this: params
			// must not form a reference of their own ("$" + "{secret:X}").
			// A value holds no "${" (scalar), so any more of them than the
			// template's own were formed across a value's edge.
			if strings.Count(out, "${") != strings.Count(v, "${")-len(tasks.ParamRefs(v)) {
				return nil, &tasks.FieldError{Field: "params", Msg: fmt.Sprintf("would form a secret reference in the action's input header %s", k),
					Hint: `a parameter's "$", "{" and "}" may not make "${" with the definition's text or another parameter`}
			}
			in.Headers[k] = out
		}
	}
	return s, nil
}

// checkSegments refuses params that make a path segment of an input's URL
// empty, "." or "..": escaping keeps a parameter from adding a '/', but a
// segment that is all parameter could still climb out of the path the
// definition wrote (/api/${param:id}/delete with id "..").
func checkSegments(tmpl, expanded string) error {
	path := func(u string) []string {
		_, rest, _ := strings.Cut(u, "://")
		_, p, _ := strings.Cut(rest, "/")
		p, _, _ = strings.Cut(p, "?")
		p, _, _ = strings.Cut(p, "#")
		return strings.Split(p, "/")
	}
	ts, es := path(tmpl), path(expanded)
	if len(ts) != len(es) {
		return &tasks.FieldError{Field: "params", Msg: "would change the path of the action's input URL"}
	}
	for i, seg := range es {
		refs := tasks.ParamRefs(ts[i])
		if len(refs) > 0 && (seg == "" || seg == "." || seg == "..") {
			return &tasks.FieldError{Field: "params." + refs[0], Msg: fmt.Sprintf("would make a path segment of the action's input URL %q", seg),
				Hint: `a parameter that fills a path segment may not be empty, "." or ".."`}
		}
	}
	return nil
}
