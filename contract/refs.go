package contract

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/xeipuuv/gojsonreference"
)

// gojsonschema validates a value against a "$ref" by recursing into its
// target, and against allOf, anyOf, oneOf, not, if/then/else and schema
// dependencies by recursing into them, all on the same value, with no bound.
// A cycle of those ({"$ref": "#"}, or two definitions that refer to each
// other) recurses until the goroutine's stack overflows, which is fatal to
// the whole process, not a panic. And acyclic chains can still apply
// exponentially many subschemas to one value (a → allOf[b, b], b → allOf[c,
// c]...). checkRefs rejects both before a schema is used: it rebuilds the
// graph of those same-value edges, resolving "$ref" as gojsonschema does,
// and counts how many subschemas each one applies to a value. Edges into a
// value's children (properties, items...) need no bound: the document is
// finite.

// maxApplied bounds how many subschemas a schema may apply to one value.
// Real schemas apply a handful (a oneOf of a few dozen variants at most);
// the bound keeps the cost of each value of a document small (see cost.go).
const maxApplied = 256

// refGraph is a schema document seen as the graph of its subschemas, each
// named by its JSON pointer from the root.
type refGraph struct {
	root  any
	scope map[string]gojsonreference.JsonReference // pointer -> base URI in force there
	ids   map[string]string                        // resolved "$id" (or "id") -> pointer
	state map[string]int                           // DFS: 1 on the stack, 2 done
	count map[string]int                           // subschemas applied, itself included
	refs  []refText                                // every distinct "$ref" of the document
}

// newRefGraph records the base URIs, "$id"s and "$ref"s of a schema
// document, for resolving its references.
func newRefGraph(doc any) *refGraph {
	root, _ := gojsonreference.NewJsonReference("#")
	g := &refGraph{
		root:  doc,
		scope: map[string]gojsonreference.JsonReference{},
		ids:   map[string]string{"": "", "#": ""},
		state: map[string]int{},
		count: map[string]int{},
	}
	g.scopes(doc, "", root)
	collectRefs(doc, "", map[string]bool{}, &g.refs)
	return g
}

// checkRefs checks the same-value edges of g's schema (see above).
func checkRefs(g *refGraph) error {
	nodes, err := g.schemas()
	if err != nil {
		return err
	}
	for _, ptr := range nodes {
		if _, err := g.visit(ptr); err != nil {
			return err
		}
	}
	return nil
}

// schemas returns the pointers of the subschemas reachable from the root,
// in the order found: through keywords that hold schemas and through $ref.
func (g *refGraph) schemas() ([]string, error) {
	seen := map[string]bool{"": true}
	order := []string{""}
	for i := 0; i < len(order); i++ {
		ptr := order[i]
		next, err := g.edges(ptr)
		if err != nil {
			return nil, err
		}
		m, _ := g.get(ptr).(map[string]any)
		if _, isRef := m["$ref"].(string); !isRef {
			next = append(next, children(m, ptr)...)
		}
		for _, c := range next {
			if !seen[c] {
				seen[c] = true
				order = append(order, c)
			}
		}
	}
	return order, nil
}

// children returns the subschemas of the schema m at ptr that apply to
// other values than its own (its properties, items...), and its definitions.
func children(m map[string]any, ptr string) []string {
	var out []string
	for _, k := range []string{"properties", "patternProperties", "definitions"} {
		if sub, ok := m[k].(map[string]any); ok {
			for _, name := range sortedKeys(sub) {
				out = append(out, ptr+"/"+k+"/"+escapeToken(name))
			}
		}
	}
	switch items := m["items"].(type) {
	case []any:
		for i := range items {
			out = append(out, ptr+"/items/"+strconv.Itoa(i))
		}
	case map[string]any, bool:
		out = append(out, ptr+"/items")
	}
	for _, k := range []string{"additionalItems", "additionalProperties", "contains", "propertyNames"} {
		switch m[k].(type) {
		case map[string]any, bool:
			out = append(out, ptr+"/"+k)
		}
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// scopes records the base URI of every object below node, and the pointer
// of every "$id", walking the document as gojsonschema's schema pool does:
// everything but const and enum, and the values (not the keys) of
// properties, patternProperties and dependencies.
func (g *refGraph) scopes(node any, ptr string, base gojsonreference.JsonReference) {
	switch v := node.(type) {
	case []any:
		for i, c := range v {
			g.scopes(c, ptr+"/"+strconv.Itoa(i), base)
		}
	case map[string]any:
		key := "$id"
		if _, ok := v["id"]; ok {
			key = "id"
		}
		if id, ok := v[key].(string); ok {
			if ref, err := gojsonreference.NewJsonReference(id); err == nil {
				if abs, err := base.Inherits(ref); err == nil {
					base = *abs
					if _, dup := g.ids[abs.String()]; !dup {
						g.ids[abs.String()] = ptr
					}
				}
			}
		}
		g.scope[ptr] = base
		for k, c := range v {
			switch k {
			case "const", "enum":
			case "properties", "patternProperties", "dependencies":
				if m, ok := c.(map[string]any); ok {
					for name, cc := range m {
						g.scopes(cc, ptr+"/"+k+"/"+escapeToken(name), base)
					}
				}
			default:
				g.scopes(c, ptr+"/"+escapeToken(k), base)
			}
		}
	}
}

// edges returns the subschemas the schema at ptr applies to the same value.
func (g *refGraph) edges(ptr string) ([]string, error) {
	m, ok := g.get(ptr).(map[string]any)
	if !ok {
		return nil, nil
	}
	if ref, ok := m["$ref"].(string); ok {
		// gojsonschema applies the target alone, ignoring the siblings.
		target, ok, err := g.resolve(ptr, ref)
		if err != nil || !ok {
			return nil, err
		}
		return []string{target}, nil
	}
	var out []string
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if l, ok := m[k].([]any); ok {
			for i := range l {
				out = append(out, ptr+"/"+k+"/"+strconv.Itoa(i))
			}
		}
	}
	for _, k := range []string{"not", "if", "then", "else"} {
		if _, ok := m[k]; ok {
			out = append(out, ptr+"/"+k)
		}
	}
	if deps, ok := m["dependencies"].(map[string]any); ok {
		for _, name := range sortedKeys(deps) {
			if _, isList := deps[name].([]any); !isList {
				out = append(out, ptr+"/dependencies/"+escapeToken(name))
			}
		}
	}
	return out, nil
}

// visit walks the same-value edges from ptr depth first, failing on a cycle
// or when ptr applies more than maxApplied subschemas; it returns how many
// it applies.
func (g *refGraph) visit(ptr string) (int, error) {
	switch g.state[ptr] {
	case 1:
		return 0, badSchema("%s applies itself to the same value through $ref/allOf/anyOf/oneOf/not/if/then/else/dependencies, which never ends; a $ref cycle must go through properties, items or the like", pointerName(ptr))
	case 2:
		return g.count[ptr], nil
	}
	g.state[ptr] = 1
	next, err := g.edges(ptr)
	if err != nil {
		return 0, err
	}
	n := 1
	for _, c := range next {
		k, err := g.visit(c)
		if err != nil {
			return 0, err
		}
		n += k
		if n > maxApplied {
			return 0, badSchema("%s applies more than %d subschemas to one value through $ref/allOf/anyOf/oneOf/not/if/then/else/dependencies", pointerName(ptr), maxApplied)
		}
	}
	g.state[ptr], g.count[ptr] = 2, n
	return n, nil
}

// resolve returns the pointer of the subschema that ref, found at ptr,
// names; ok is false for a built-in meta-schema (which has no such cycle).
func (g *refGraph) resolve(ptr, ref string) (target string, ok bool, err error) {
	r, err := gojsonreference.NewJsonReference(ref)
	if err != nil {
		return "", false, badSchema("%s: $ref %q: %v", pointerName(ptr), ref, err)
	}
	base, known := g.scope[ptr]
	if !known { // ptr is a target gojsonschema's pool walk did not reach
		base, _ = gojsonreference.NewJsonReference("#")
	}
	abs, err := base.Inherits(r)
	if err != nil {
		return "", false, badSchema("%s: $ref %q: %v", pointerName(ptr), ref, err)
	}
	if p, ok := g.ids[abs.String()]; ok {
		return p, true, nil
	}
	u := *abs.GetUrl()
	frag := u.Fragment
	u.Fragment = ""
	doc, ok := g.ids[u.String()]
	if !ok {
		if _, ok := metaSchemas[u.String()]; ok {
			return "", false, nil
		}
		return "", false, badSchema("%s: $ref %q names another document", pointerName(ptr), ref)
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return "", false, badSchema("%s: $ref %q names no subschema", pointerName(ptr), ref)
	}
	target = doc + frag
	if g.get(target) == nil {
		return "", false, badSchema("%s: $ref %q names no subschema", pointerName(ptr), ref)
	}
	return target, true, nil
}

// get returns the value at the JSON pointer ptr of the root, nil if none.
func (g *refGraph) get(ptr string) any {
	node := g.root
	if ptr == "" {
		return node
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := node.(type) {
		case map[string]any:
			node = v[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil
			}
			node = v[i]
		default:
			return nil
		}
	}
	return node
}

func escapeToken(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// pointerName names the subschema at ptr for an error message.
func pointerName(ptr string) string {
	if ptr == "" {
		return "the schema"
	}
	return fmt.Sprintf("subschema #%s", ptr)
}
