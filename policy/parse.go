package policy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-run/airlock/record"
)

// ErrInvalid is matched (errors.Is) by every error of a policy that does not
// parse.
var ErrInvalid = errors.New("invalid policy")

// ParseError says what is wrong with a policy, and where.
type ParseError struct {
	File  string // the policy file; "" for Parse
	Line  int    // 1-based; 0 when unknown
	Field string // e.g. "rules[2].when.result.op"; "" for the document
	Msg   string
}

func (e *ParseError) Error() string {
	var parts []string
	switch {
	case e.File != "" && e.Line > 0:
		parts = append(parts, fmt.Sprintf("%s:%d", e.File, e.Line))
	case e.File != "":
		parts = append(parts, e.File)
	case e.Line > 0:
		parts = append(parts, fmt.Sprintf("line %d", e.Line))
	}
	if e.Field != "" {
		parts = append(parts, e.Field)
	}
	return strings.Join(append(parts, e.Msg), ": ")
}

// Is reports whether target is ErrInvalid.
func (e *ParseError) Is(target error) bool { return target == ErrInvalid }

// maxFile bounds a policy file.
const maxFile = 1 << 20

// Load reads the policy file path, JSON or YAML as its extension says
// (.json, .yaml or .yml). A policy that does not parse is a *ParseError
// naming the file, the line when known, and the field.
func Load(path string) (*Policy, error) {
	format := strings.ToLower(filepath.Ext(path))
	switch format {
	case ".json", ".yaml", ".yml":
	default:
		return nil, &ParseError{File: path, Msg: fmt.Sprintf("unknown extension %q: a policy file ends in .json, .yaml or .yml", filepath.Ext(path))}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	if len(data) > maxFile {
		return nil, &ParseError{File: path, Msg: fmt.Sprintf("larger than %d bytes", maxFile)}
	}
	p, err := Parse(data, format)
	if pe := (*ParseError)(nil); errors.As(err, &pe) {
		pe.File = path
	}
	return p, err
}

// Parse parses a policy of format "json" or "yaml" (or "yml"; a leading dot
// is allowed). Unknown keys, wrong types and bad values are *ParseError
// naming the field.
func Parse(data []byte, format string) (*Policy, error) {
	var (
		root *node
		err  error
	)
	switch strings.TrimPrefix(strings.ToLower(format), ".") {
	case "json":
		root, err = jsonTree(data)
	case "yaml", "yml":
		root, err = yamlTree(data)
	default:
		return nil, &ParseError{Msg: fmt.Sprintf("unknown format %q: use json or yaml", format)}
	}
	if err != nil {
		return nil, err
	}
	return parsePolicy(root)
}

// The policy's schema, checked field by field.

func fieldErr(n *node, field, format string, args ...any) error {
	return &ParseError{Line: n.line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// fields checks that n is a mapping whose keys are all known, and returns
// its values by key.
func fields(n *node, field string, known ...string) (map[string]*node, error) {
	if n.kind != mapNode {
		return nil, fieldErr(n, field, "must be a mapping, not %s", n.what())
	}
	m := make(map[string]*node, len(n.keys))
	for i, k := range n.keys {
		if !slices.Contains(known, k) {
			return nil, fieldErr(n.vals[i], join(field, k), "unknown key %q (known: %s)", k, strings.Join(known, ", "))
		}
		m[k] = n.vals[i]
	}
	return m, nil
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	queueRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	// principalRE is the form of a principal (tasks.ValidPrincipal).
	principalRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)
)

func parsePolicy(root *node) (*Policy, error) {
	if root.kind == scalarNode && root.value == nil { // an empty YAML document
		root = &node{kind: mapNode}
	}
	top, err := fields(root, "", "default", "rules", "secrets", "quotas")
	if err != nil {
		return nil, err
	}
	p := &Policy{def: Park}
	if n, ok := top["secrets"]; ok {
		if p.grants, err = parseSecrets(n); err != nil {
			return nil, err
		}
	}
	if n, ok := top["quotas"]; ok {
		if p.quotas, err = parseQuotas(n); err != nil {
			return nil, err
		}
	}
	if n, ok := top["default"]; ok {
		if p.def, err = decision(n, "default"); err != nil {
			return nil, err
		}
	}
	rules, ok := top["rules"]
	if !ok || (rules.kind == scalarNode && rules.value == nil) {
		return p, nil
	}
	if rules.kind != listNode {
		return nil, fieldErr(rules, "rules", "must be a list of rules, not %s", rules.what())
	}
	seen := map[string]int{}
	for i, rn := range rules.items {
		field := fmt.Sprintf("rules[%d]", i)
		r, err := parseRule(rn, field)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[r.name]; dup {
			return nil, fieldErr(rn, field+".name", "%q is the name of rules[%d] too; names must be unique", r.name, j)
		}
		seen[r.name] = i
		p.rules = append(p.rules, r)
	}
	return p, nil
}

// text returns the string of a scalar node. In YAML, an unquoted name that
// looks like a number or a boolean (queue: [2024]) is read as written.
func text(n *node) (string, bool) {
	if n.kind != scalarNode {
		return "", false
	}
	switch v := n.value.(type) {
	case string:
		return v, true
	case number, bool:
		if n.plain != "" {
			return n.plain, true
		}
	}
	return "", false
}

func decision(n *node, field string) (record.Action, error) {
	s, ok := n.value.(string)
	if a := record.Action(s); n.kind == scalarNode && ok && (a == Park || a == Promote) {
		return a, nil
	}
	return "", fieldErr(n, field, "%s is not a decision: use park or promote", n.what())
}

func parseRule(n *node, field string) (*rule, error) {
	m, err := fields(n, field, "name", "when", "then")
	if err != nil {
		return nil, err
	}
	r := &rule{}
	nn, ok := m["name"]
	if !ok {
		return nil, fieldErr(n, field+".name", "is required")
	}
	name, isStr := text(nn)
	switch {
	case !isStr:
		return nil, fieldErr(nn, field+".name", "must be a string, not %s", nn.what())
	case name == RuleDefault || name == RuleSpec || name == RuleNoPolicy || name == RuleSecretInEnv || name == RuleSession:
		return nil, fieldErr(nn, field+".name", "%q is reserved: decisions name it when no rule decided", name)
	case !nameRE.MatchString(name):
		return nil, fieldErr(nn, field+".name", "%q must be 1-64 characters of letters, digits, '.', '_' or '-'", name)
	}
	r.name = name
	tn, ok := m["then"]
	if !ok {
		return nil, fieldErr(n, field+".then", "is required: park or promote")
	}
	if r.then, err = decision(tn, field+".then"); err != nil {
		return nil, err
	}
	wn, ok := m["when"]
	if !ok {
		return nil, fieldErr(n, field+".when", "is required: a rule needs at least one condition")
	}
	if r.conds, err = parseWhen(wn, field+".when", r); err != nil {
		return nil, err
	}
	r.envOK, r.sessionOK = saysTrue(wn, "secret_in_env"), saysTrue(wn, "session")
	return r, nil
}

func parseWhen(n *node, field string, r *rule) ([]cond, error) {
	m, err := fields(n, field, "queue", "principal", "action", "artifact_bytes_over", "result", "network", "stderr", "secret_in_artifacts", "secret_in_env", "session")
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, fieldErr(n, field, "a rule needs at least one condition")
	}
	// Conditions in a fixed order, whatever the file's, so that reasons read
	// the same way.
	var conds []cond
	if c, ok := m["queue"]; ok {
		qs, err := stringList(c, field+".queue", "queue")
		if err != nil {
			return nil, err
		}
		for i, q := range qs {
			if !queueRE.MatchString(q) {
				return nil, fieldErr(c, fmt.Sprintf("%s.queue[%d]", field, i), "%q is not a queue name", q)
			}
		}
		conds = append(conds, queueCond(qs))
	}
	if c, ok := m["principal"]; ok {
		ps, err := stringList(c, field+".principal", "principal")
		if err != nil {
			return nil, err
		}
		for i, p := range ps {
			if !principalRE.MatchString(p) {
				return nil, fieldErr(c, fmt.Sprintf("%s.principal[%d]", field, i), "%q is not a principal (1-64 of [A-Za-z0-9._@+-], as an API token's name)", p)
			}
		}
		conds = append(conds, principalCond(ps))
	}
	if c, ok := m["action"]; ok {
		as, err := stringList(c, field+".action", "action")
		if err != nil {
			return nil, err
		}
		conds = append(conds, actionCond(as))
	}
	if c, ok := m["artifact_bytes_over"]; ok {
		num, isNum := c.value.(number)
		if c.kind != scalarNode || !isNum || !num.isInt || num.i < 0 {
			return nil, fieldErr(c, field+".artifact_bytes_over", "must be a whole number of bytes, at least 0, not %s", c.what())
		}
		conds = append(conds, bytesOverCond(num.i))
	}
	if c, ok := m["result"]; ok {
		rc, err := parseResult(c, field+".result")
		if err != nil {
			return nil, err
		}
		conds = append(conds, rc.eval)
		r.pointer, r.looksAtResult = rc.pointer, true
	}
	flags := []struct {
		key     string
		get     func(*facts) bool
		yes, no string
	}{
		{"network", func(f *facts) bool { return f.Network }, "the run had network", "the run had no network"},
		{"stderr", func(f *facts) bool { return f.Stderr }, "a step wrote to stderr", "no step wrote to stderr"},
		{"secret_in_artifacts", func(f *facts) bool { return f.SecretInArtifacts }, "a secret's value appears in an artifact", "no secret's value appears in an artifact"},
		{"secret_in_env", func(f *facts) bool { return f.SecretInEnv }, "a step saw a secret in its environment", "no step saw a secret in its environment"},
		{"session", func(f *facts) bool { return f.Session }, "the run was a session", "the run was not a session"},
	}
	for _, fl := range flags {
		c, ok := m[fl.key]
		if !ok {
			continue
		}
		b, isBool := c.value.(bool)
		if c.kind != scalarNode || !isBool {
			return nil, fieldErr(c, field+"."+fl.key, "must be true or false, not %s", c.what())
		}
		conds = append(conds, flagCond(fl.get, b, fl.yes, fl.no))
	}
	return conds, nil
}

func stringList(n *node, field, what string) ([]string, error) {
	if n.kind != listNode {
		return nil, fieldErr(n, field, "must be a list of %s names, not %s", what, n.what())
	}
	if len(n.items) == 0 {
		return nil, fieldErr(n, field, "must list at least one %s", what)
	}
	out := make([]string, len(n.items))
	for i, it := range n.items {
		s, ok := text(it)
		if !ok || s == "" {
			return nil, fieldErr(it, fmt.Sprintf("%s[%d]", field, i), "must be a non-empty string, not %s", it.what())
		}
		out[i] = s
	}
	return out, nil
}

var ops = []string{">", ">=", "<", "<=", "==", "!=", "in", "not_in", "exists"}

func parseResult(n *node, field string) (*resultCond, error) {
	m, err := fields(n, field, "pointer", "op", "value")
	if err != nil {
		return nil, err
	}
	c := &resultCond{}
	pn, ok := m["pointer"]
	if !ok {
		return nil, fieldErr(n, field+".pointer", "is required: a JSON pointer such as /amount")
	}
	ptr, isStr := pn.value.(string)
	if pn.kind != scalarNode || !isStr {
		return nil, fieldErr(pn, field+".pointer", "must be a JSON pointer string, not %s", pn.what())
	}
	if c.tokens, err = parsePointer(ptr); err != nil {
		return nil, fieldErr(pn, field+".pointer", "%v", err)
	}
	c.pointer = ptr
	on, ok := m["op"]
	if !ok {
		return nil, fieldErr(n, field+".op", "is required: one of %s", strings.Join(ops, " "))
	}
	op, isStr := on.value.(string)
	if on.kind != scalarNode || !isStr || !slices.Contains(ops, op) {
		v := on.what()
		if isStr {
			v = strconv.Quote(op)
		}
		return nil, fieldErr(on, field+".op", "unknown operator %s: use one of %s", v, strings.Join(ops, " "))
	}
	c.op = op
	vn, hasValue := m["value"]
	switch op {
	case "exists":
		if hasValue {
			return nil, fieldErr(vn, field+".value", "exists takes no value")
		}
	case "in", "not_in":
		if !hasValue || vn.kind != listNode || len(vn.items) == 0 {
			return nil, valueErr(n, vn, field, "%s needs a non-empty list of numbers, strings or booleans", op)
		}
		for i, it := range vn.items {
			v, ok := scalarValue(it)
			if !ok {
				return nil, fieldErr(it, fmt.Sprintf("%s.value[%d]", field, i), "must be a number, string or boolean, not %s", it.what())
			}
			c.list = append(c.list, v)
		}
	case "==", "!=":
		v, ok := scalarValue(orNil(vn))
		if !hasValue || !ok {
			return nil, valueErr(n, vn, field, "%s needs a number, string or boolean", op)
		}
		c.value = v
	default: // > >= < <=
		v, ok := scalarValue(orNil(vn))
		if _, isNum := v.(float64); !hasValue || !ok || !isNum {
			return nil, valueErr(n, vn, field, "%s needs a number", op)
		}
		c.value = v
	}
	return c, nil
}

func orNil(n *node) *node {
	if n == nil {
		return &node{}
	}
	return n
}

// valueErr is the error of a value that is missing or of the wrong type.
func valueErr(parent, vn *node, field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if vn == nil {
		return fieldErr(parent, field+".value", "is required: %s", msg)
	}
	return fieldErr(vn, field+".value", "%s, not %s", msg, vn.what())
}

// scalarValue returns the value of a number, string or boolean node, numbers
// as float64.
func scalarValue(n *node) (any, bool) {
	if n.kind != scalarNode {
		return nil, false
	}
	switch v := n.value.(type) {
	case number:
		return v.f, true
	case string, bool:
		return v, true
	}
	return nil, false
}

// parsePointer splits an RFC 6901 JSON pointer into its unescaped tokens.
func parsePointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("%q is not a JSON pointer: it must be empty or start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		for j := 0; j < len(t); j++ {
			if t[j] == '~' && (j+1 == len(t) || (t[j+1] != '0' && t[j+1] != '1')) {
				return nil, fmt.Errorf("%q is not a JSON pointer: ~ must be followed by 0 or 1", p)
			}
		}
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}
