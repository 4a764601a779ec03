package contract

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strconv"

	"github.com/xeipuuv/gojsonreference"
	"github.com/xeipuuv/gojsonschema"
)

// Regular expressions are the part of a schema whose cost does not follow
// its size: "a{1000}" is 7 bytes and a program of 1,002 instructions, and
// Go's regexp package accepts programs of up to 3.3 million. gojsonschema
// compiles every "pattern" when it loads a schema (again for each $ref to
// the subschema that holds it), compiles every "patternProperties" key for
// every key of every object it validates, and compiles every string that
// "format": "regex" applies to. A schema of 3,000 "a{1000}" patterns (84
// KB) cost the enqueue CLI 19 s and 1.8 GB in issue 20's measurements (1.3
// s and 300 MB on this machine); three 21 KB strings under "format":
// "regex" took a worker from 31 MB to 596 MB.
//
// So, before gojsonschema sees a schema, checkRegexps parses each of its
// regular expressions (without compiling it) and bounds its program size,
// the size of all of them together and their number; the validation cost
// model (cost.go) charges a program's size times the length of what it is
// matched against; and "format": "regex" parses a string without compiling
// it, and only up to MaxPatternBytes.
//
// Measured on the machine this was written on (Go 1.26): a program runs at
// up to ~15 ns per instruction and input byte (the NFA, when many threads
// are live); compiling takes ~0.1–1 µs per instruction, allocates ~110–240
// bytes and keeps ~50 per instruction; parsing takes up to ~8 µs and
// allocates up to ~4.4 KiB per byte of the expression (\pL, each a class of
// 1,292 runes).

// Bounds of the regular expressions of a schema: "pattern" values and
// "patternProperties" keys.
const (
	// MaxPatternBytes bounds one expression's source, and the strings that
	// "format": "regex" accepts: parsing 4 KiB allocates at most ~18 MiB.
	MaxPatternBytes = 4 << 10
	// MaxPatternInsts bounds one expression's program, in instructions:
	// ~40 ms to compile at most.
	MaxPatternInsts = 50_000
	// MaxSchemaInsts bounds the programs of all the expressions of a
	// schema together, each counted as many times as gojsonschema compiles
	// it when it loads the schema (once, and once more for each $ref to a
	// subschema that holds it): ~5 MiB kept, ~25 MiB allocated, ~100 ms.
	MaxSchemaInsts = 100_000
	// MaxPatterns bounds how many expressions a schema holds, counted the
	// same way.
	MaxPatterns = 1_000
	// MaxSchemaRunes bounds the runes of the character classes and
	// literals of all the expressions of a schema (1 MiB).
	MaxSchemaRunes = 1 << 18
)

// regexInfo is what parsing one expression found.
type regexInfo struct {
	insts int64 // an upper bound of its compiled program's instructions
	runes int64 // runes held by its character classes and literals
	ok    bool  // it parses; else gojsonschema refuses it, or never matches it
	err   error // why it does not parse
}

// sizeOf parses expr as regexp.Compile does (Perl syntax) and bounds its
// program without building it. An expression longer than MaxPatternBytes
// is not parsed: insts is then MaxPatternInsts+1.
func sizeOf(expr string) regexInfo {
	if len(expr) > MaxPatternBytes {
		return regexInfo{insts: MaxPatternInsts + 1, runes: int64(len(expr))}
	}
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return regexInfo{err: err}
	}
	var runes int64
	insts := progSize(re, &runes) + 2 // and the program's fail and match
	return regexInfo{insts: insts, runes: runes, ok: true}
}

// maxCount saturates the sizes progSize adds up.
const maxCount = 1 << 40

// progSize bounds the instructions Go compiles re to, by the rules of
// regexp/syntax's own size check (calcSize): a repeat x{n,m} is m copies
// of x. It adds the runes of re's nodes to runes.
func progSize(re *syntax.Regexp, runes *int64) int64 {
	*runes += int64(len(re.Rune))
	var size int64
	switch re.Op {
	case syntax.OpLiteral:
		size = int64(len(re.Rune))
	case syntax.OpCapture, syntax.OpStar:
		size = 2 + progSize(re.Sub[0], runes)
	case syntax.OpPlus, syntax.OpQuest:
		size = 1 + progSize(re.Sub[0], runes)
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			size = min(maxCount, size+progSize(sub, runes))
		}
		if re.Op == syntax.OpAlternate && len(re.Sub) > 1 {
			size += int64(len(re.Sub)) - 1
		}
	case syntax.OpRepeat:
		sub := progSize(re.Sub[0], runes)
		switch {
		case re.Max == -1 && re.Min == 0: // x*
			size = 2 + sub
		case re.Max == -1: // xxx+
			size = min(maxCount, 1+int64(re.Min)*sub)
		default: // x{2,5} = xx(x(x(x)?)?)?
			size = min(maxCount, int64(re.Max)*sub+int64(re.Max-re.Min))
		}
	}
	return min(maxCount, max(1, size))
}

// regexps is what checkRegexps found of a schema's expressions.
type regexps struct {
	byExpr map[string]regexInfo // each distinct expression, parsed once
	total  regexTotals          // of all, as gojsonschema compiles them
}

// size returns what parsing expr found (it was seen by checkRegexps; an
// expression that was not, as one of a meta-schema, is parsed now).
func (r *regexps) size(expr string) regexInfo {
	if info, ok := r.byExpr[expr]; ok {
		return info
	}
	return sizeOf(expr)
}

// regexTotals adds up expressions.
type regexTotals struct {
	insts, runes, count int64
}

func (t *regexTotals) add(o regexTotals, times int64) {
	t.insts = min(maxCount, t.insts+o.insts*times)
	t.runes = min(maxCount, t.runes+o.runes*times)
	t.count = min(maxCount, t.count+o.count*times)
}

// regexWalk walks a schema's subschemas, as gojsonschema parses them.
type regexWalk struct {
	g       *refGraph
	r       *regexps
	targets map[string]bool        // pointers that a $ref names
	totals  map[string]regexTotals // of each target, once walked
	seen    regexTotals            // everything parsed so far, each once
}

// checkRegexps bounds the regular expressions of the schema g holds
// before anything compiles them, and returns them parsed. Its errors name
// the expression's place in the schema (a JSON pointer) and match
// ErrBadSchema.
func checkRegexps(g *refGraph) (*regexps, error) {
	w := &regexWalk{g: g, r: &regexps{byExpr: map[string]regexInfo{}}, targets: map[string]bool{}, totals: map[string]regexTotals{}}
	// gojsonschema parses the root, then the target of each $ref it has
	// not seen, by the reference's text.
	mult := map[string]int64{}
	for _, ref := range g.refs {
		target, ok, err := g.resolve(ref.at, ref.text)
		if err == nil && ok {
			mult[target]++
			w.targets[target] = true
		}
	}
	total, err := w.schema(g.root, "")
	if err != nil {
		return nil, err
	}
	targets := make([]string, 0, len(mult))
	for t := range mult {
		targets = append(targets, t)
	}
	slices.Sort(targets)
	for _, t := range targets {
		sub, ok := w.totals[t]
		if !ok {
			if sub, err = w.schema(g.get(t), t); err != nil {
				return nil, err
			}
		}
		total.add(sub, mult[t])
	}
	if err := total.check("the schema's regular expressions", "in all, each counted once more for every $ref to a subschema that holds it"); err != nil {
		return nil, err
	}
	w.r.total = total
	return w.r, nil
}

// check reports the first of t's bounds that t passes.
func (t regexTotals) check(what, how string) error {
	switch {
	case t.count > MaxPatterns:
		return badSchema("%s number more than %d (%s)", what, MaxPatterns, how)
	case t.insts > MaxSchemaInsts:
		return badSchema("%s compile to more than %d instructions (%s)", what, MaxSchemaInsts, how)
	case t.runes > MaxSchemaRunes:
		return badSchema("%s hold character classes of more than %d runes (%s)", what, MaxSchemaRunes, how)
	}
	return nil
}

// schema walks the subschema node at ptr and returns the totals of the
// expressions it and its subschemas hold; it stops at the first bound
// passed.
func (w *regexWalk) schema(node any, ptr string) (regexTotals, error) {
	if t, ok := w.totals[ptr]; ok && w.targets[ptr] {
		return t, nil
	}
	var t regexTotals
	m, ok := node.(map[string]any)
	if !ok {
		return t, nil
	}
	if expr, ok := m["pattern"].(string); ok {
		if err := w.expr(expr, ptr+"/pattern", &t); err != nil {
			return t, err
		}
	}
	sub := func(node any, ptr string) error {
		st, err := w.schema(node, ptr)
		t.add(st, 1)
		return err
	}
	for _, k := range sortedKeys(m) {
		v := m[k]
		var err error
		switch k {
		case "patternProperties":
			pp, _ := v.(map[string]any)
			for _, expr := range sortedKeys(pp) {
				at := ptr + "/patternProperties/" + escapeToken(expr)
				if err = w.expr(expr, at, &t); err == nil {
					err = sub(pp[expr], at)
				}
				if err != nil {
					break
				}
			}
		case "properties", "definitions", "dependencies":
			children, _ := v.(map[string]any)
			for _, name := range sortedKeys(children) {
				if err = sub(children[name], ptr+"/"+k+"/"+escapeToken(name)); err != nil {
					break
				}
			}
		case "items", "allOf", "anyOf", "oneOf":
			if l, isList := v.([]any); isList {
				for i, c := range l {
					if err = sub(c, ptr+"/"+k+"/"+strconv.Itoa(i)); err != nil {
						break
					}
				}
				break
			}
			if k == "items" {
				err = sub(v, ptr+"/items")
			}
		case "not", "if", "then", "else", "additionalProperties", "additionalItems", "contains", "propertyNames":
			err = sub(v, ptr+"/"+k)
		}
		if err != nil {
			return t, err
		}
	}
	if w.targets[ptr] {
		w.totals[ptr] = t
	}
	return t, nil
}

// expr checks the expression at ptr and adds it to t.
func (w *regexWalk) expr(expr, ptr string, t *regexTotals) error {
	info, parsed := w.r.byExpr[expr]
	if !parsed {
		info = sizeOf(expr)
		w.r.byExpr[expr] = info
	}
	switch {
	case len(expr) > MaxPatternBytes:
		return badSchema("#%s: the regular expression is %d bytes long, more than %d", cutPath(ptr), len(expr), MaxPatternBytes)
	case info.insts > MaxPatternInsts:
		return badSchema("#%s: the regular expression compiles to more than %d instructions (%d); a repeat x{n} is n copies of x", cutPath(ptr), MaxPatternInsts, info.insts)
	case !info.ok:
		// gojsonschema would refuse it too (it parses every subschema
		// this walk reaches); refusing it now bounds the work spent
		// parsing expressions that do not count against the bounds.
		return badSchema("#%s: not a valid regular expression: %v", cutPath(ptr), info.err)
	}
	one := regexTotals{insts: info.insts, runes: info.runes, count: 1}
	t.add(one, 1)
	w.seen.add(one, 1)
	return w.seen.check(fmt.Sprintf("the regular expressions up to #%s", cutPath(ptr)), "each counted once")
}

// refText is a "$ref" of a schema document: its text and where it is.
type refText struct {
	at, text string
}

// collectRefs lists the "$ref" strings of a document, once per distinct
// reference (gojsonschema parses a reference's target once per text), in
// document order.
func collectRefs(node any, ptr string, seen map[string]bool, out *[]refText) {
	switch v := node.(type) {
	case []any:
		for i, c := range v {
			collectRefs(c, ptr+"/"+strconv.Itoa(i), seen, out)
		}
	case map[string]any:
		if s, ok := v["$ref"].(string); ok {
			key := s
			if r, err := gojsonreference.NewJsonReference(s); err == nil {
				key = r.String()
			}
			if !seen[key] {
				seen[key] = true
				*out = append(*out, refText{at: ptr, text: s})
			}
		}
		for _, k := range sortedKeys(v) {
			collectRefs(v[k], ptr+"/"+escapeToken(k), seen, out)
		}
	}
}

// regexFormat is gojsonschema's "regex" format, bounded: a string is a
// regular expression when Go's parser accepts it (which is what
// regexp.Compile checks before compiling) and it is at most
// MaxPatternBytes long; it is parsed, never compiled.
type regexFormat struct{}

func (regexFormat) IsFormat(input any) bool {
	s, ok := input.(string)
	if !ok {
		return false
	}
	if len(s) > MaxPatternBytes {
		return false
	}
	_, err := syntax.Parse(s, syntax.Perl)
	return err == nil
}

// hostnameFormat is gojsonschema's "hostname" format with its length test
// first: its expression is not run on a string longer than a hostname.
type hostnameFormat struct{}

func (hostnameFormat) IsFormat(input any) bool {
	s, ok := input.(string)
	if !ok || len(s) >= 256 {
		return false
	}
	return gojsonschema.HostnameFormatChecker{}.IsFormat(s)
}

func init() {
	gojsonschema.FormatCheckers.Add("regex", regexFormat{})
	gojsonschema.FormatCheckers.Add("hostname", hostnameFormat{})
}

// Measured weights of a compiled schema (see weightOf).
const (
	weightPerByte = 128 // per byte of the schema's source (measured: 9 for an enum, 34 for properties, 106 for nested items)
	weightPerInst = 64  // per instruction of its regular expressions' programs (measured: 14 to 50)
	weightPerRune = 4   // per rune of their character classes and literals
)

// weightOf estimates the bytes a compiled schema holds: its source, what
// gojsonschema builds from it, and the programs of its regular
// expressions, which a short source can make large.
func weightOf(source int, t regexTotals) int {
	return source*weightPerByte + int(t.insts)*weightPerInst + int(t.runes)*weightPerRune
}
