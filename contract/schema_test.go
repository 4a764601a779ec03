package contract_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/contract"
)

func TestMain(m *testing.M) {
	contract.MaybeValidator() // the test binary is the validation child too
	goleak.VerifyTestMain(m)
}

const invoiceSchema = `{
	"$schema": "http://json-schema.org/draft-07/schema#",
	"type": "object",
	"required": ["id", "amount", "lines"],
	"additionalProperties": false,
	"properties": {
		"id": {"type": "string", "pattern": "^inv-[0-9]+$"},
		"amount": {"type": "number", "minimum": 0},
		"currency": {"enum": ["EUR", "USD"]},
		"lines": {
			"type": "array",
			"items": {
				"type": "object",
				"required": ["sku", "qty"],
				"properties": {
					"sku": {"type": "string"},
					"qty": {"type": "integer", "minimum": 1}
				}
			}
		}
	}
}`

func mustCompile(t testing.TB, schema string) *contract.Schema {
	t.Helper()
	s, err := contract.Compile([]byte(schema))
	if err != nil {
		t.Fatalf("Compile(%s): %v", schema, err)
	}
	return s
}

func TestValidate(t *testing.T) {
	s := mustCompile(t, invoiceSchema)
	tests := []struct {
		name string
		doc  string
		want []contract.Violation
	}{
		{
			name: "valid",
			doc:  `{"id": "inv-42", "amount": 12.5, "currency": "EUR", "lines": [{"sku": "a", "qty": 2}]}`,
		},
		{
			name: "valid without optional fields",
			doc:  `{"id": "inv-1", "amount": 0, "lines": []}`,
		},
		{
			name: "wrong type at the root",
			doc:  `[1, 2]`,
			want: []contract.Violation{{Path: "", Message: "Invalid type. Expected: object, given: array"}},
		},
		{
			name: "several violations, sorted by path then message",
			doc: `{"id": "INV-42", "amount": -1, "currency": "GBP", "extra": true,
				"lines": [{"sku": "a", "qty": 1}, {"sku": 7, "qty": 0}, {"qty": 1.5}]}`,
			want: []contract.Violation{
				{Path: "", Message: "Additional property extra is not allowed"},
				{Path: "/amount", Message: "Must be greater than or equal to 0"},
				{Path: "/currency", Message: `currency must be one of the following: "EUR", "USD"`},
				{Path: "/id", Message: "Does not match pattern '^inv-[0-9]+$'"},
				{Path: "/lines/1/qty", Message: "Must be greater than or equal to 1"},
				{Path: "/lines/1/sku", Message: "Invalid type. Expected: string, given: integer"},
				{Path: "/lines/2", Message: "sku is required"},
				{Path: "/lines/2/qty", Message: "Invalid type. Expected: integer, given: number"},
			},
		},
		{
			name: "missing required properties",
			doc:  `{}`,
			want: []contract.Violation{
				{Path: "", Message: "amount is required"},
				{Path: "", Message: "id is required"},
				{Path: "", Message: "lines is required"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Validate([]byte(tt.doc))
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate(%s) violations (-want +got):\n%s", tt.doc, diff)
			}
		})
	}
}

func TestValidateAtMost20Deterministic(t *testing.T) {
	s := mustCompile(t, `{"type": "object", "additionalProperties": {"type": "integer"}}`)
	var b strings.Builder
	b.WriteString("{")
	for i := range 50 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%02d": "not a number"`, 49-i)
	}
	b.WriteString("}")
	var want []contract.Violation
	for i := range contract.MaxViolations {
		want = append(want, contract.Violation{
			Path:    fmt.Sprintf("/k%02d", i),
			Message: "Invalid type. Expected: integer, given: string",
		})
	}
	for range 10 { // map order in gojsonschema varies from run to run
		got, err := s.Validate([]byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("violations (-want +got):\n%s", diff)
		}
	}
}

func TestValidatePointerEscaping(t *testing.T) {
	s := mustCompile(t, `{"additionalProperties": {"type": "array", "items": {"type": "string"}}}`)
	got, err := s.Validate([]byte(`{"a/b": ["x", 1], "c~d": 3, "nul\u0000key": [2], "long": "` + strings.Repeat("é", 2000) + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []contract.Violation{
		{Path: "/a~1b/1", Message: "Invalid type. Expected: string, given: integer"},
		{Path: "/c~0d", Message: "Invalid type. Expected: array, given: integer"},
		{Path: "/long", Message: "Invalid type. Expected: array, given: string"},
		{Path: "/nul\x00key/0", Message: "Invalid type. Expected: string, given: integer"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}

func TestValidateLongTextIsCut(t *testing.T) {
	key := strings.Repeat("é", 3000) // 6000 bytes
	for _, tt := range []struct {
		schema string
		field  func(contract.Violation) string
	}{
		{`{"additionalProperties": false}`, func(v contract.Violation) string { return v.Message }},
		{`{"additionalProperties": {"type": "string"}}`, func(v contract.Violation) string { return v.Path }},
	} {
		got, err := mustCompile(t, tt.schema).Validate([]byte(`{"` + key + `": 1}`))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("violations = %v, want 1", got)
		}
		f := tt.field(got[0])
		if len(f) > 1024+len("…") || !strings.HasSuffix(f, "…") || !strings.Contains(f, "éé") || !utf8.ValidString(f) {
			t.Errorf("%s: field of %d bytes %.40q..., want at most 1 KiB of UTF-8, cut with …", tt.schema, len(f), f)
		}
	}
}

func TestValidateNotJSON(t *testing.T) {
	s := mustCompile(t, `{"type": "object"}`)
	for _, doc := range []string{``, `{`, `{"a": 1} {"b": 2}`, `nope`} {
		v, err := s.Validate([]byte(doc))
		if !errors.Is(err, contract.ErrResultNotJSON) || v != nil {
			t.Errorf("Validate(%q) = %v, %v; want ErrResultNotJSON", doc, v, err)
		}
	}
}

func TestCheckSchema(t *testing.T) {
	valid := []string{
		`{}`,
		`true`,
		`false`,
		invoiceSchema,
		`{"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "properties": {"n": {"maximum": 3, "exclusiveMaximum": true}}}`,
		`{"$schema": "http://json-schema.org/draft-06/schema", "type": "string"}`,
		// A recursive schema whose recursion goes through the document.
		`{"definitions": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}}, "$ref": "#/definitions/node"}`,
		`{"$id": "http://example.com/invoice.json", "definitions": {"sku": {"$id": "#sku", "type": "string"}}, "properties": {"a": {"$ref": "#sku"}, "b": {"$ref": "#/definitions/sku"}, "c": {"$ref": "invoice.json#/definitions/sku"}}}`,
		`{"$ref": "http://json-schema.org/draft-07/schema#"}`,
		`{"properties": {"$ref": {"type": "string"}}, "default": {"$ref": "not a reference"}}`,
		`{"propertyNames": {"$ref": "#"}}`,
	}
	for _, s := range valid {
		if err := contract.CheckSchema([]byte(s)); err != nil {
			t.Errorf("CheckSchema(%s) = %v, want nil", s, err)
		}
	}
	invalid := []struct{ schema, want string }{
		{``, "not JSON"},
		{`{"type": "object"`, "not JSON"},
		{`[]`, "must be an object or a boolean"},
		{`"string"`, "must be an object or a boolean"},
		{`{"type": "strin"}`, "strin"},
		{`{"minimum": "3"}`, "minimum must be of a number"},
		{`{"required": "id"}`, "required must be of an array"},
		{`{"pattern": "("}`, "pattern"},
		{`{"title": 5}`, "title"},
		{`{"properties": {"a": {"type": "string", "maxLength": 2.5}}}`, "maxLength"},
		{`{"properties": {"a": {"examples": {}}}}`, "/properties/a/examples: Invalid type. Expected: array, given: object"},
		{`{"$schema": "http://json-schema.org/draft-2020-12/schema"}`, `"$schema" is "http://json-schema.org/draft-2020-12/schema"`},
		{`{"$schema": "file:///etc/passwd"}`, `"$schema" is "file:///etc/passwd"`},
		{`{"$schema": 7}`, `"$schema" must be a string`},
		// Nothing is fetched or read.
		{`{"$ref": "https://example.com/schema.json"}`, "references to other documents are not loaded"},
		{`{"$ref": "file:///etc/passwd"}`, "references to other documents are not loaded"},
		{`{"$id": "http://example.com/a.json", "properties": {"x": {"$ref": "b.json"}}}`, `"http://example.com/b.json"`},
		{`{"$ref": "#/definitions/missing"}`, "no key 'definitions'"},
		// Cycles that would recurse until the stack overflows.
		{`{"$ref": "#"}`, "the schema applies itself to the same value"},
		{`{"allOf": [{"$ref": "#"}]}`, "the schema applies itself"},
		{`{"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"anyOf": [{"$ref": "#/definitions/a"}]}}, "properties": {"x": {"$ref": "#/definitions/a"}}}`, "applies itself to the same value"},
		{`{"definitions": {"a": {"not": {"$ref": "#/definitions/a"}}}}`, "subschema #/definitions/a applies itself"},
		{`{"if": {"$ref": "#"}}`, "applies itself"},
		{`{"dependencies": {"x": {"$ref": "#"}}}`, "applies itself"},
		{`{"$id": "http://example.com/r.json", "definitions": {"a": {"$id": "#a", "oneOf": [{"$ref": "r.json#a"}]}}}`, "applies itself"},
		// Exponentially many subschemas applied to one value.
		{explosive(16), fmt.Sprintf("applies more than %d subschemas", contract.MaxApplied)},
	}
	for _, tt := range invalid {
		err := contract.CheckSchema([]byte(tt.schema))
		if !errors.Is(err, contract.ErrBadSchema) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckSchema(%.80s) = %v, want ErrBadSchema containing %q", tt.schema, err, tt.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "is not a valid JSON Schema: ") {
			t.Errorf("CheckSchema(%.80s) = %q, want it to read as a field message", tt.schema, err)
		}
	}
}

func TestCompileFetchesNothing(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"type": "string"}`))
	}))
	defer srv.Close()
	for _, schema := range []string{
		`{"$ref": "` + srv.URL + `/s.json"}`,
		`{"properties": {"a": {"$ref": "` + srv.URL + `/s.json#/definitions/x"}}}`,
		`{"$id": "` + srv.URL + `/root.json", "properties": {"a": {"$ref": "other.json"}}}`,
		`{"$schema": "` + srv.URL + `/meta.json"}`,
	} {
		if err := contract.CheckSchema([]byte(schema)); !errors.Is(err, contract.ErrBadSchema) {
			t.Errorf("CheckSchema(%s) = %v, want ErrBadSchema", schema, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the schema server was asked %d times, want never", n)
	}
}

// explosive returns a schema whose definitions d0..dn each apply the next
// twice to the same value: 2^n subschemas in all.
func explosive(n int) string {
	var b strings.Builder
	b.WriteString(`{"$ref": "#/definitions/d0", "definitions": {`)
	for i := range n {
		fmt.Fprintf(&b, `"d%d": {"allOf": [{"$ref": "#/definitions/d%d"}, {"$ref": "#/definitions/d%d"}]}, `, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"d%d": {"type": "string"}}}`, n)
	return b.String()
}

func TestDraftFromSchemaKeyword(t *testing.T) {
	// exclusiveMaximum is a boolean in draft-04, a number since draft-06.
	for _, tt := range []struct {
		schema string
		doc    string
		want   int
	}{
		{`{"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 3, "exclusiveMaximum": true}`, `3`, 1},
		{`{"$schema": "https://json-schema.org/draft-04/schema", "maximum": 3, "exclusiveMaximum": true}`, `3`, 1},
		{`{"$schema": "https://json-schema.org/draft-04/schema#", "maximum": 3, "exclusiveMaximum": true}`, `2`, 0},
		{`{"exclusiveMaximum": 3}`, `3`, 1},
		{`{"$schema": "https://json-schema.org/draft-07/schema#", "exclusiveMaximum": 3}`, `2.5`, 0},
	} {
		got, err := mustCompile(t, tt.schema).Validate([]byte(tt.doc))
		if err != nil || len(got) != tt.want {
			t.Errorf("%s: Validate(%s) = %v, %v; want %d violations", tt.schema, tt.doc, got, err, tt.want)
		}
	}
	if err := contract.CheckSchema([]byte(`{"exclusiveMaximum": true}`)); !errors.Is(err, contract.ErrBadSchema) {
		t.Errorf("a draft-04 keyword in a draft-07 schema: %v, want ErrBadSchema", err)
	}
}

func TestExplosiveBelowTheBoundCompiles(t *testing.T) {
	// d0 applies 253 subschemas (itself, and 2^k allOf items, $refs and
	// definitions at each level k): just below MaxApplied (256); one
	// level more is 509, above it.
	if err := contract.CheckSchema([]byte(explosive(6))); err != nil {
		t.Errorf("explosive(6): %v", err)
	}
	if err := contract.CheckSchema([]byte(explosive(7))); err == nil {
		t.Errorf("explosive(7): compiled, want refused above %d", contract.MaxApplied)
	}
}

func TestCompileCache(t *testing.T) {
	schema := []byte(`{"type": "object", "properties": {"cache": {"const": "hit"}}}`)
	a := mustCompile(t, string(schema))
	b := mustCompile(t, string(schema))
	if a != b {
		t.Errorf("Compile of the same bytes twice gave %p and %p, want the same *Schema", a, b)
	}
	c := mustCompile(t, string(schema)+" ") // other bytes, same meaning: compiled again
	if c == a {
		t.Error("Compile of other bytes returned the cached schema")
	}
	if a.SHA256() == c.SHA256() || len(a.SHA256()) != 64 {
		t.Errorf("SHA256() = %s and %s, want two 64-digit sums", a.SHA256(), c.SHA256())
	}
	// Concurrent compiles of new bytes all end up with one *Schema.
	fresh := []byte(`{"type": "object", "properties": {"concurrent": {"type": "integer"}}}`)
	var wg sync.WaitGroup
	got := make([]*contract.Schema, 16)
	for i := range got {
		wg.Go(func() {
			s, err := contract.Compile(fresh)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = s
			if v, err := s.Validate([]byte(`{"concurrent": "no"}`)); err != nil || len(v) != 1 {
				t.Errorf("Validate = %v, %v; want one violation", v, err)
			}
		})
	}
	wg.Wait()
	again := mustCompile(t, string(fresh))
	for i, s := range got {
		if s != again {
			t.Errorf("goroutine %d got %p, want the cached %p", i, s, again)
		}
	}
}

func TestCacheIsBounded(t *testing.T) {
	for i := range contract.CacheMaxEntries + 10 {
		mustCompile(t, fmt.Sprintf(`{"title": "schema %d"}`, i))
	}
	n, bytes := contract.CacheLen()
	if n > contract.CacheMaxEntries || bytes > contract.CacheMaxBytes {
		t.Errorf("cache holds %d schemas of %d bytes, above the bounds %d and %d", n, bytes, contract.CacheMaxEntries, contract.CacheMaxBytes)
	}

	c := contract.NewTestLRU(3, 100)
	c.Add(1, 10)
	c.Add(2, 10)
	c.Add(3, 10)
	c.Has(1) // 1 is now the most recently used
	c.Add(4, 10)
	if !c.Has(1) || c.Has(2) || !c.Has(3) || !c.Has(4) {
		t.Error("entry bound: want the least recently used (2) evicted")
	}
	c.Add(5, 85) // 4 entries: evicts 3; 10+10+85 > 100 bytes: evicts 1
	if n, b := c.Len(); n != 2 || b != 95 || !c.Has(4) || !c.Has(5) {
		t.Errorf("byte bound: %d entries of %d bytes, want 4 and 5 (95 bytes)", n, b)
	}
	if c.Add(6, 101) {
		if c.Has(6) {
			t.Error("a schema larger than the byte bound was cached")
		}
	} else {
		t.Error("Add of an uncacheable schema did not return it")
	}
}

// result1K is a result of about 1 KiB that satisfies invoiceSchema.
func result1K() []byte {
	var b strings.Builder
	b.WriteString(`{"id": "inv-1234", "amount": 1999.99, "currency": "EUR", "lines": [`)
	for i := 0; b.Len() < 1000; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"sku": "SKU-%06d", "qty": %d}`, i, i+1)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

func BenchmarkValidateCached(b *testing.B) {
	s := mustCompile(b, invoiceSchema)
	doc := result1K()
	if v, err := s.Validate(doc); err != nil || len(v) != 0 {
		b.Fatalf("Validate = %v, %v", v, err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Validate(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileCached(b *testing.B) {
	schema := []byte(invoiceSchema)
	first := mustCompile(b, invoiceSchema)
	b.ReportAllocs()
	for b.Loop() {
		s, err := contract.Compile(schema)
		if err != nil || s != first {
			b.Fatalf("Compile = %p, %v; want the cached %p", s, err, first)
		}
	}
}

// BenchmarkCompileUncached is for comparison: a compile that misses the
// cache (the bytes differ every time).
func BenchmarkCompileUncached(b *testing.B) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if _, err := contract.Compile([]byte(invoiceSchema + strings.Repeat(" ", i%4096))); err != nil {
			b.Fatal(err)
		}
	}
}
