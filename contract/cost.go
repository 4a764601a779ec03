package contract

import (
	"regexp"
	"strconv"
)

// gojsonschema validates with no bound on its work and no way to stop it:
// a 1 KiB schema and a small document can cost minutes of CPU and
// gigabytes (each failed check is a formatted error, ~1 KiB, kept until the
// end). Before a document is validated in the worker, its cost is
// estimated from the schema's plan (below) and the document itself: an
// upper bound, in units of one subschema applied to one value, of what
// gojsonschema will do, walking the same keywords over the same values.
// Cheap documents are validated in the worker; costly ones in a child
// process with a deadline and a memory bound (see validate.go).
//
// Measured on the machine this was written on: ~0.5–1.1 µs per unit when
// the checks pass, ~2–3.5 µs and ~1.1 KiB allocated (~0.7 KiB kept) per
// unit when they fail.

// plan is a schema's subschema reduced to what drives gojsonschema's work.
type plan struct {
	pass     bool  // a boolean schema, or one with nothing to apply below
	ref      *plan // $ref: the target, applied alone (siblings ignored)
	metaRef  bool  // $ref to a built-in meta-schema: its cost is estimated
	same     []*plan
	props    map[string]*plan
	patterns []pattern
	addProps *plan
	deps     map[string]*plan // schema dependencies, applied to the object itself
	propName *plan
	items    *plan   // one schema for every item
	tuple    []*plan // items as a list
	addItems *plan
	contains *plan
	marshal  bool // const, enum or uniqueItems: the value is marshalled
	strings  bool // pattern, format, length: linear in a string's length
	// pattern is the program size of "pattern" (0: none): matching a
	// string costs that times its length.
	pattern int64
	// format is the cost of checking a string against its "format", in
	// units per 64 bytes (formatCost).
	format int64
}

type pattern struct {
	re    *regexp.Regexp // nil when it does not compile (gojsonschema then never matches it)
	insts int64          // its program size: gojsonschema compiles it, then runs it, for every key
	sub   *plan
}

// buildPlan builds the plan of every subschema reachable from the root of
// g, whose refs checkRefs has already resolved and bounded, and whose
// regular expressions checkRegexps has parsed and bounded (rx).
func buildPlan(g *refGraph, rx *regexps) *plan {
	b := &planBuilder{g: g, rx: rx, done: map[string]*plan{}}
	return b.node("")
}

type planBuilder struct {
	g    *refGraph
	rx   *regexps
	done map[string]*plan
}

func (b *planBuilder) node(ptr string) *plan {
	if p, ok := b.done[ptr]; ok {
		return p
	}
	p := &plan{}
	b.done[ptr] = p // before the children: descents may come back here
	m, ok := b.g.get(ptr).(map[string]any)
	if !ok {
		p.pass = true // a boolean schema: one check
		return p
	}
	if ref, isRef := m["$ref"].(string); isRef {
		target, ok, err := b.g.resolve(ptr, ref)
		switch {
		case err != nil:
			p.pass = true // cannot happen: checkRefs resolved it
		case !ok:
			p.metaRef = true
		default:
			p.ref = b.node(target)
		}
		return p
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := m[k].([]any); ok {
			for i := range l {
				p.same = append(p.same, b.node(ptr+"/"+k+"/"+strconv.Itoa(i)))
			}
		}
	}
	for _, k := range []string{"not", "if", "then", "else"} {
		if _, ok := m[k]; ok {
			p.same = append(p.same, b.node(ptr+"/"+k))
		}
	}
	if deps, ok := m["dependencies"].(map[string]any); ok {
		for name, d := range deps {
			if _, isList := d.([]any); !isList {
				if p.deps == nil {
					p.deps = map[string]*plan{}
				}
				p.deps[name] = b.node(ptr + "/dependencies/" + escapeToken(name))
			}
		}
	}
	if props, ok := m["properties"].(map[string]any); ok {
		p.props = make(map[string]*plan, len(props))
		for name := range props {
			p.props[name] = b.node(ptr + "/properties/" + escapeToken(name))
		}
	}
	if pats, ok := m["patternProperties"].(map[string]any); ok {
		for _, expr := range sortedKeys(pats) {
			info := b.rx.size(expr)
			var re *regexp.Regexp
			if info.ok && info.insts <= MaxPatternInsts {
				re, _ = regexp.Compile(expr)
			}
			p.patterns = append(p.patterns, pattern{re: re, insts: info.insts, sub: b.node(ptr + "/patternProperties/" + escapeToken(expr))})
		}
	}
	if sub, ok := schemaAt(m, "additionalProperties"); ok {
		p.addProps = b.node(ptr + "/" + sub)
	}
	if sub, ok := schemaAt(m, "propertyNames"); ok {
		p.propName = b.node(ptr + "/" + sub)
	}
	switch items := m["items"].(type) {
	case []any:
		for i := range items {
			p.tuple = append(p.tuple, b.node(ptr+"/items/"+strconv.Itoa(i)))
		}
		if sub, ok := schemaAt(m, "additionalItems"); ok {
			p.addItems = b.node(ptr + "/" + sub)
		}
	case map[string]any, bool:
		p.items = b.node(ptr + "/items")
	}
	if sub, ok := schemaAt(m, "contains"); ok {
		p.contains = b.node(ptr + "/" + sub)
	}
	_, hasConst := m["const"]
	_, hasEnum := m["enum"]
	unique, _ := m["uniqueItems"].(bool)
	p.marshal = hasConst || hasEnum || unique
	for _, k := range []string{"pattern", "format", "minLength", "maxLength"} {
		if _, ok := m[k]; ok {
			p.strings = true
		}
	}
	if expr, ok := m["pattern"].(string); ok {
		if info := b.rx.size(expr); info.ok {
			p.pattern = info.insts
		}
	}
	if f, ok := m["format"].(string); ok {
		p.format = formatCost[f]
		if p.format == 0 {
			p.format = defaultFormatCost
		}
	}
	return p
}

// formatCost is the cost of checking a string against a format, in units
// per 64 bytes, measured on adversarial strings: up to ~131 ns per byte
// for "uri-template", ~40 for "date-time", ~28 for "json-pointer", ~18
// for "email"; "regex" parses the string (regexFormat), at up to ~8 µs
// per byte. A string longer than MaxPatternBytes fails "regex" unparsed;
// "hostname" runs its expression on 255 bytes at most (hostnameFormat).
var formatCost = map[string]int64{
	"uri-template": 9,
	"date-time":    3,
	"regex":        regexParseCost * 64,
	"hostname":     1,
	"uuid":         1,
	"ipv4":         1,
	"ipv6":         1,
}

// defaultFormatCost is formatCost's for the other formats (≤ 32 ns per byte).
const defaultFormatCost = 2

// regexParseCost is what parsing one byte of a regular expression may
// cost, in units: up to ~8 µs and ~4.4 KiB (\pL).
const regexParseCost = 8

// matchCost is the cost in units of running a program of insts
// instructions over n bytes: ~15 ns per instruction and byte at worst.
func matchCost(insts int64, n int) int64 { return insts*int64(n+1)/64 + 1 }

// schemaAt reports whether m[k] is a schema (an object or a boolean).
func schemaAt(m map[string]any, k string) (string, bool) {
	switch m[k].(type) {
	case map[string]any, bool:
		return k, true
	}
	return "", false
}

// metaRefPerValue is what a $ref to a meta-schema is taken to cost per
// value of the document below the value it applies to: the draft-07
// meta-schema applies a few dozen subschemas to each.
const metaRefPerValue = 64

// estimator adds up the units of a document's validation, and stops as
// soon as they pass its budget.
type estimator struct {
	units  int64
	budget int64
}

func (e *estimator) over() bool { return e.units > e.budget }

// add charges n units and reports whether the budget still holds.
func (e *estimator) add(n int64) bool {
	e.units += n
	return e.units <= e.budget
}

// cost charges the validation of v against p; false once over budget.
func (e *estimator) cost(p *plan, v any) bool {
	if !e.add(1) {
		return false
	}
	for p.ref != nil { // a chain of $refs: one unit each
		p = p.ref
		if !e.add(1) {
			return false
		}
	}
	if p.metaRef {
		// The meta-schemas parse the "pattern" values and the
		// "patternProperties" keys they meet as regular expressions:
		// every string is charged as one.
		values, text := e.size(v)
		return e.add(metaRefPerValue*values) && e.add(regexParseCost*text)
	}
	if p.pass {
		return true
	}
	for _, s := range p.same {
		if !e.cost(s, v) {
			return false
		}
	}
	if p.marshal {
		if values, _ := e.size(v); !e.add(values) {
			return false
		}
	}
	switch v := v.(type) {
	case map[string]any:
		return e.object(p, v)
	case []any:
		return e.array(p, v)
	case string:
		if p.strings && !e.add(int64(len(v)/64+1)) {
			return false
		}
		if p.pattern > 0 && !e.add(matchCost(p.pattern, len(v))) {
			return false
		}
		if p.format > 0 {
			return e.add(p.format * int64(len(v)/64+1))
		}
	}
	return true
}

func (e *estimator) object(p *plan, v map[string]any) bool {
	// For every key, gojsonschema loops over all "properties", and
	// compiles and runs every pattern (charged below, before the estimate
	// runs it too).
	perKey := int64(len(p.props)/8 + 1)
	if !e.add(perKey * int64(len(v))) {
		return false
	}
	for k, val := range v {
		matched := false
		if sub, ok := p.props[k]; ok {
			matched = true
			if !e.cost(sub, val) {
				return false
			}
		}
		for _, pt := range p.patterns {
			if !e.add(pt.insts + matchCost(pt.insts, len(k))) {
				return false
			}
			if pt.re != nil && pt.re.MatchString(k) {
				matched = true
				if !e.cost(pt.sub, val) {
					return false
				}
			}
		}
		if !matched && p.addProps != nil && !e.cost(p.addProps, val) {
			return false
		}
		if p.propName != nil && !e.cost(p.propName, k) {
			return false
		}
		if dep, ok := p.deps[k]; ok && !e.cost(dep, v) {
			return false
		}
	}
	return true
}

func (e *estimator) array(p *plan, v []any) bool {
	for i, item := range v {
		var sub *plan
		switch {
		case p.items != nil:
			sub = p.items
		case i < len(p.tuple):
			sub = p.tuple[i]
		default:
			sub = p.addItems
		}
		if sub != nil && !e.cost(sub, item) {
			return false
		}
		if p.contains != nil && !e.cost(p.contains, item) {
			return false
		}
	}
	return true
}

// size counts the values of v (itself included), and the bytes of its
// strings and keys, stopping once the count alone would pass the budget.
func (e *estimator) size(v any) (values, text int64) {
	left := e.budget - e.units + 1
	var n int64
	var walk func(any) bool
	walk = func(v any) bool {
		n++
		if n > left {
			return false
		}
		switch v := v.(type) {
		case string:
			text += int64(len(v))
		case map[string]any:
			for k, c := range v {
				text += int64(len(k))
				if !walk(c) {
					return false
				}
			}
		case []any:
			for _, c := range v {
				if !walk(c) {
					return false
				}
			}
		}
		return true
	}
	walk(v)
	return n, text
}
