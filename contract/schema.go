package contract

import (
	"bytes"
	"cmp"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/xeipuuv/gojsonreference"
	"github.com/xeipuuv/gojsonschema"
)

// Schema is a compiled JSON Schema. It is immutable and may be used from
// several goroutines.
type Schema struct {
	sum    [sha256.Size]byte
	size   int // an estimate of the bytes it holds, compiled (weightOf)
	schema *gojsonschema.Schema
	plan   *plan  // what drives the cost of validating against it (cost.go)
	src    []byte // the schema's bytes, for a validation child
	// bigNumbers: the root says "x-airlock-big-numbers": true, so numbers
	// beyond float64's range are accepted (within Bounds; see scan.go).
	bigNumbers bool
}

// SHA256 returns the hex SHA-256 of the schema's bytes, its cache key.
func (s *Schema) SHA256() string { return fmt.Sprintf("%x", s.sum) }

// The compiled-schema cache is an LRU bounded both in entries and in the
// bytes its schemas hold compiled (estimated by weightOf from their source
// and the programs of their regular expressions): a worker sees few
// distinct schemas, each the constant of an app's action, but schemas come
// from enqueuers, so the cache must not grow without bound.
const (
	cacheMaxEntries = 256
	cacheMaxBytes   = 64 << 20
)

var cache = newLRU(cacheMaxEntries, cacheMaxBytes)

// Compile compiles a JSON Schema (draft-07 unless its "$schema" names draft-04
// or draft-06; any other "$schema" is an error). Schemas are cached by the
// SHA-256 of their bytes, so the same bytes are compiled once per process and
// give the same *Schema, while they stay among the 256 most recently used
// schemas and 64 MiB of compiled schemas in all (an estimate: 128 bytes per
// byte of source, 64 per instruction of the programs of its regular
// expressions; a schema above 64 MiB alone, 512 KiB of source, is compiled
// every time). Only successes are cached.
//
// The regular expressions of a schema ("pattern", "patternProperties") are
// bounded before anything compiles them: each at most MaxPatternBytes long
// and MaxPatternInsts instructions, all together at most MaxSchemaInsts,
// MaxPatterns and MaxSchemaRunes (regex.go); the error names the first
// one past a bound by its JSON pointer.
//
// Schemas must be self-contained: a "$ref" is resolved only within the
// schema itself (or to the draft-04/06/07 meta-schemas, which are built in);
// a reference to any other document fails to compile, and nothing is ever
// fetched over the network or read from a file. The schema is also checked
// against its draft's meta-schema, and refused when its $ref, allOf, anyOf,
// oneOf, not, if/then/else or dependencies apply it to the same value in a
// cycle (gojsonschema would recurse until the stack overflows, killing the
// process) or more than 4096 times. Every error matches ErrBadSchema.
func Compile(schema []byte) (*Schema, error) {
	sum := sha256.Sum256(schema)
	if s := cache.get(sum); s != nil {
		return s, nil
	}
	s, err := compile(schema)
	if err != nil {
		return nil, err
	}
	s.sum, s.src = sum, append([]byte(nil), schema...)
	// Another goroutine may have compiled the same bytes meanwhile: add
	// keeps the first, so every caller gets the same *Schema.
	return cache.add(s), nil
}

// CheckSchema reports whether schema compiles, for checking a spec at
// enqueue. Its error reads as the end of a sentence about the field, e.g.
// "is not a valid JSON Schema: ...", for the caller to wrap as a
// tasks.FieldError on "output.schema". A schema that passes is cached.
func CheckSchema(schema []byte) error {
	_, err := Compile(schema)
	return err
}

// schemaError is the error of a schema that does not compile.
type schemaError struct{ msg string }

func (e *schemaError) Error() string { return "is not a valid JSON Schema: " + e.msg }

func (e *schemaError) Is(target error) bool { return target == ErrBadSchema }

func badSchema(format string, args ...any) error {
	return &schemaError{msg: fmt.Sprintf(format, args...)}
}

// metaSchemas are the meta-schemas a schema may name in "$schema" (with or
// without a trailing "#", over http or https), which gojsonschema has built
// in, and their drafts.
var metaSchemas = map[string]gojsonschema.Draft{
	"http://json-schema.org/draft-04/schema": gojsonschema.Draft4,
	"http://json-schema.org/draft-06/schema": gojsonschema.Draft6,
	"http://json-schema.org/draft-07/schema": gojsonschema.Draft7,
}

// metaURL returns the built-in meta-schema URL that s names, if any.
func metaURL(s string) (string, bool) {
	u := strings.TrimSuffix(s, "#")
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		u = "http://" + rest
	}
	_, ok := metaSchemas[u]
	return u, ok
}

func compile(schema []byte) (*Schema, error) {
	doc, err := decodeJSON(schema)
	if err != nil {
		return nil, badSchema("not JSON: %v", err)
	}
	var meta string
	var big bool
	switch v := doc.(type) {
	case bool:
	case map[string]any:
		if raw, ok := v[BigNumbersKeyword]; ok {
			b, isBool := raw.(bool)
			if !isBool {
				return nil, badSchema("%q must be true or false", BigNumbersKeyword)
			}
			big = b
		}
		if raw, ok := v["$schema"]; ok {
			s, ok := raw.(string)
			if !ok {
				return nil, badSchema(`"$schema" must be a string`)
			}
			u, ok := metaURL(s)
			if !ok {
				return nil, badSchema(`"$schema" is %q; use "http://json-schema.org/draft-07/schema#" (or draft-04, draft-06) or leave it out`, s)
			}
			meta = u
		}
	default:
		return nil, badSchema("must be an object or a boolean")
	}
	if meta == "" {
		meta = "http://json-schema.org/draft-07/schema"
	}
	// The loader's factory, which resolves every reference the schema makes
	// to another document, refuses all but the meta-schemas. The
	// SchemaLoader's own meta-schema check (Validate) is not used: it
	// replaces that factory with one that reads files and fetches URLs.
	// The shape and the regular expressions are bounded before anything
	// walks or compiles them (shape.go, regex.go).
	if err := checkShape(doc); err != nil {
		return nil, err
	}
	g := newRefGraph(doc)
	rx, err := checkRegexps(g)
	if err != nil {
		return nil, err
	}
	sl := gojsonschema.NewSchemaLoader()
	sl.Draft = metaSchemas[meta] // what AutoDetect falls back on, as for https
	sl.AutoDetect = true
	sl.Validate = false
	compiled, err := sl.Compile(&rootLoader{doc: doc})
	if err != nil {
		return nil, badSchema("%v", err)
	}
	if err := checkRefs(g); err != nil {
		return nil, err
	}
	if _, isBool := doc.(bool); !isBool {
		if err := checkMeta(meta, doc); err != nil {
			return nil, err
		}
	}
	return &Schema{schema: compiled, plan: buildPlan(g, rx), bigNumbers: big, size: weightOf(len(schema), rx.total)}, nil
}

// checkMeta validates doc against the meta-schema named meta.
func checkMeta(meta string, doc any) error {
	ms, err := metaSchema(meta)
	if err != nil {
		return badSchema("meta-schema %s: %v", meta, err)
	}
	res, err := ms.Validate(gojsonschema.NewRawLoader(doc))
	if err != nil {
		return badSchema("%v", err)
	}
	if res.Valid() {
		return nil
	}
	vs := violations(res.Errors(), doc)
	msgs := make([]string, 0, min(len(vs), 3))
	for _, v := range vs[:min(len(vs), 3)] {
		msgs = append(msgs, v.String())
	}
	more := ""
	if len(vs) > 3 {
		more = fmt.Sprintf(" (and %d more)", len(vs)-3)
	}
	return badSchema("%s%s", strings.Join(msgs, "; "), more)
}

var (
	metaMu       sync.Mutex
	metaCompiled = map[string]*gojsonschema.Schema{}
)

// metaSchema returns the compiled meta-schema of url, one of metaSchemas.
func metaSchema(url string) (*gojsonschema.Schema, error) {
	metaMu.Lock()
	defer metaMu.Unlock()
	if s := metaCompiled[url]; s != nil {
		return s, nil
	}
	s, err := gojsonschema.NewSchemaLoader().Compile(&refLoader{source: url})
	if err != nil {
		return nil, err
	}
	metaCompiled[url] = s
	return s, nil
}

// rootLoader is the gojsonschema.JSONLoader of a schema given as bytes,
// already decoded (numbers as json.Number).
type rootLoader struct{ doc any }

func (l *rootLoader) JsonSource() any                               { return l.doc }
func (l *rootLoader) LoadJSON() (any, error)                        { return l.doc, nil }
func (l *rootLoader) LoaderFactory() gojsonschema.JSONLoaderFactory { return refusingFactory{} }
func (l *rootLoader) JsonReference() (gojsonreference.JsonReference, error) {
	return gojsonreference.NewJsonReference("#")
}

// refusingFactory makes the loaders of the documents a schema refers to.
type refusingFactory struct{}

func (refusingFactory) New(source string) gojsonschema.JSONLoader { return &refLoader{source: source} }

// refLoader loads a document a schema refers to: only the built-in
// meta-schemas, never a file or a URL.
type refLoader struct{ source string }

func (l *refLoader) JsonSource() any                               { return l.source }
func (l *refLoader) LoaderFactory() gojsonschema.JSONLoaderFactory { return refusingFactory{} }
func (l *refLoader) JsonReference() (gojsonreference.JsonReference, error) {
	return gojsonreference.NewJsonReference(l.source)
}

func (l *refLoader) LoadJSON() (any, error) {
	ref, err := gojsonreference.NewJsonReference(l.source)
	if err != nil {
		return nil, err
	}
	u := *ref.GetUrl()
	u.Fragment = ""
	if _, ok := metaSchemas[u.String()]; !ok {
		return nil, fmt.Errorf("$ref %q: references to other documents are not loaded; make the schema self-contained (use #/definitions/...)", l.source)
	}
	// gojsonschema returns its built-in copy of a meta-schema without
	// fetching it: u is one of metaSchemas.
	return gojsonschema.NewReferenceLoader(u.String()).LoadJSON()
}

// decodeJSON decodes exactly one JSON value, numbers as json.Number (as
// gojsonschema wants them).
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if err == io.EOF {
			return nil, errors.New("empty")
		}
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the JSON value at offset %d", dec.InputOffset())
	}
	return v, nil
}

// Validate validates doc, a JSON document, against the schema, in the
// calling process and within the bounds of Checker (it is Check of a zero
// Checker with no deadline). It returns no violation when doc is valid;
// otherwise the first MaxViolations of them, sorted by Path (a missing
// required property first) then Message, without duplicates. The error is
// for a doc that is not one JSON value (ErrResultNotJSON), holds a number
// out of range (ErrNumber), or would cost too much to validate
// (ErrTooCostly).
func (s *Schema) Validate(doc []byte) ([]Violation, error) {
	if !json.Valid(doc) {
		_, err := decodeJSON(doc)
		return nil, fmt.Errorf("%w: %v", ErrResultNotJSON, err)
	}
	var c *Checker
	return c.Check(context.Background(), s, doc, time.Time{})
}

func gojsonschemaLoader(v any) gojsonschema.JSONLoader { return gojsonschema.NewRawLoader(v) }

// maxText bounds a violation's Path and Message: both may quote the
// document, which is untrusted.
const maxText = 1024

// violations converts gojsonschema's errors, sorted (by Path, a missing
// required property first, then by Message) and without duplicates.
func violations(errs []gojsonschema.ResultError, doc any) []Violation {
	vs := make([]Violation, 0, len(errs))
	for _, e := range errs {
		vs = append(vs, Violation{Path: cut(pointer(e.Context(), doc)), Message: cut(e.Description())})
	}
	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Path, b.Path), MissingFirst(a, b), strings.Compare(a.Message, b.Message))
	})
	return slices.Compact(vs)
}

// cut bounds s to maxText bytes, on a rune boundary, marking the cut.
func cut(s string) string {
	if len(s) <= maxText {
		return s
	}
	i := maxText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// pointer returns the JSON pointer of a gojsonschema context such as
// "(root).items.0". The context is a list of object keys and array indexes;
// its tokens are recovered by printing it with NUL separators and, since a
// key may itself hold a NUL, matching them against the document.
func pointer(ctx *gojsonschema.JsonContext, doc any) string {
	if ctx == nil {
		return ""
	}
	toks := strings.Split(ctx.String("\x00"), "\x00")[1:] // [0] is "(root)"
	if resolved, ok := resolve(doc, toks); ok {
		toks = resolved
	}
	var b strings.Builder
	for _, t := range toks {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// resolve walks doc along toks, joining consecutive tokens with NUL where an
// object has no key equal to one token alone, and returns the real tokens.
func resolve(doc any, toks []string) ([]string, bool) {
	out := make([]string, 0, len(toks))
	for i := 0; i < len(toks); {
		switch v := doc.(type) {
		case map[string]any:
			key, j := toks[i], i+1
			for {
				if child, ok := v[key]; ok {
					doc = child
					break
				}
				if j == len(toks) {
					return nil, false
				}
				key += "\x00" + toks[j]
				j++
			}
			out = append(out, key)
			i = j
		case []any:
			n, err := strconv.Atoi(toks[i])
			if err != nil || n < 0 || n >= len(v) {
				return nil, false
			}
			doc = v[n]
			out = append(out, toks[i])
			i++
		default:
			return nil, false
		}
	}
	return out, true
}

// lru is the compiled-schema cache.
type lru struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int
	bytes      int
	order      *list.List // of *Schema, most recently used first
	bySum      map[[sha256.Size]byte]*list.Element
}

func newLRU(maxEntries, maxBytes int) *lru {
	return &lru{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), bySum: map[[sha256.Size]byte]*list.Element{}}
}

func (c *lru) get(sum [sha256.Size]byte) *Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.bySum[sum]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*Schema)
	}
	return nil
}

// add caches s unless a schema of the same sum is there, which it returns
// instead, and evicts the least recently used schemas beyond the bounds. A
// schema larger than the byte bound alone is returned without being cached.
func (c *lru) add(s *Schema) *Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.bySum[s.sum]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*Schema)
	}
	if s.size > c.maxBytes {
		return s
	}
	c.bySum[s.sum] = c.order.PushFront(s)
	c.bytes += s.size
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		old := c.order.Remove(c.order.Back()).(*Schema)
		delete(c.bySum, old.sum)
		c.bytes -= old.size
	}
	return s
}

func (c *lru) len() (entries, bytes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len(), c.bytes
}
