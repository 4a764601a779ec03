package contract_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp/syntax"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/contract"
)

// TestProgSizeBoundsTheProgram: the size checkRegexps takes for an
// expression is never below the program Go compiles, and not far above.
func TestProgSizeBoundsTheProgram(t *testing.T) {
	for _, expr := range []string{
		"a", "abc", "^inv-[0-9]+$", "a{1000}", strings.Repeat("a{1000}", 40), "(a|b){1000}", `\pL{1000}`,
		".{0,1000}", "(?:x+y+){1000}", "x*", "(x)*", "x{2,5}", "x{3,}", "(?i)hello", "[a-z]{1,63}(\\.[a-z]{1,63}){0,10}",
		`^[a-zA-Z0-9.!#$%&'*+/=?^_{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`,
		"(a?){1000}", "(?:(?:a*)*){500}c", `\b\B^$`, "", "(|a)", "a|b|c|d", "((a{10}){10}){10}",
	} {
		re, err := syntax.Parse(expr, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		real := int64(len(prog.Inst))
		got, ok := contract.ProgSize(expr)
		if !ok || got < real || got > 3*real+8 {
			t.Errorf("ProgSize(%.40q) = %d, %v; the program has %d instructions", expr, got, ok, real)
		}
	}
	if _, ok := contract.ProgSize("(a"); ok {
		t.Error("ProgSize of an expression that does not parse: ok")
	}
}

// patternsSchema is a schema of n properties, each with pattern expr.
func patternsSchema(n int, expr string) []byte {
	props := map[string]any{}
	for i := range n {
		props[fmt.Sprintf("p%04d", i)] = map[string]any{"pattern": expr}
	}
	b, _ := json.Marshal(map[string]any{"properties": props})
	return b
}

// TestCompileBomb: a schema of 3,000 "a{1000}" patterns (84 KB), which
// cost the enqueue CLI 19 s and 1.8 GB (issue 20), is refused in
// milliseconds, naming the pattern past the bound.
func TestCompileBomb(t *testing.T) {
	bomb := patternsSchema(3000, "a{1000}")
	if len(bomb) < 80_000 {
		t.Fatalf("the bomb is %d bytes", len(bomb))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := contract.CheckSchema(bomb)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, contract.ErrBadSchema) || !strings.Contains(err.Error(), "#/properties/p0099/pattern") ||
		!strings.Contains(err.Error(), fmt.Sprint(contract.MaxSchemaInsts)) {
		t.Fatalf("CheckSchema(bomb) = %v, want ErrBadSchema naming #/properties/p0099/pattern and %d", err, contract.MaxSchemaInsts)
	}
	if !strings.HasPrefix(err.Error(), "is not a valid JSON Schema: ") {
		t.Errorf("%q does not read as a field message", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 || took > time.Second {
		t.Errorf("refusing the bomb took %s and allocated %d MiB", took, alloc>>20)
	}
	t.Logf("bomb of %d bytes refused in %s, %d KiB allocated: %v", len(bomb), took, (after.TotalAlloc-before.TotalAlloc)>>10, err)
}

func TestRegexBounds(t *testing.T) {
	forty := strings.Repeat("a{1000}", 40) // 40,002 instructions
	for _, tt := range []struct {
		name, schema, errHas string
	}{
		{"40 x a{1000}", `{"pattern": "` + forty + `"}`, ""},
		{"60 x a{1000}", `{"properties": {"x": {"pattern": "` + strings.Repeat("a{1000}", 60) + `"}}}`, "#/properties/x/pattern: the regular expression compiles to more than 50000 instructions (60002)"},
		{"patternProperties key", `{"patternProperties": {"` + strings.Repeat("b{1000}", 51) + `": {}}}`, "#/patternProperties/" + strings.Repeat("b{1000}", 51) + ": the regular expression compiles"},
		{"too long", `{"pattern": "` + strings.Repeat("a", contract.MaxPatternBytes+1) + `"}`, "is 4097 bytes long, more than 4096"},
		{"too many", string(patternsSchema(contract.MaxPatterns+1, "a")), "number more than 1000"},
		{"two of 40k", `{"properties": {"a": {"pattern": "` + forty + `"}, "b": {"pattern": "` + forty + `"}}}`, ""},
		{"three of 40k", `{"properties": {"a": {"pattern": "` + forty + `"}, "b": {"pattern": "` + forty + `"}, "c": {"pattern": "` + forty + `"}}}`, "up to #/properties/c/pattern compile to more than 100000"},
		// gojsonschema compiles a subschema again for each $ref to it.
		{"one $ref", `{"definitions": {"p": {"pattern": "` + forty + `"}}, "properties": {"a": {"$ref": "#/definitions/p"}, "b": {"$ref": "#/definitions/p"}}}`, ""},
		{"$refs multiply", `{"definitions": {"p": {"allOf": [{"pattern": "` + forty + `"}]}}, "properties": {"a": {"$ref": "#/definitions/p"}, "b": {"$ref": "#/definitions/p/allOf/0"}}}`, "in all, each counted once more for every $ref"},
		{"$ref into a keyword gojsonschema does not walk", `{"x-data": {"p": {"pattern": "` + forty + `"}}, "properties": {"a": {"$ref": "#/x-data/p"}, "b": {"pattern": "` + forty + `"}, "c": {"pattern": "` + forty + `"}}}`, "compile to more than 100000"},
		{"runes", `{"pattern": "` + strings.Repeat(`\\pL`, 250) + `"}`, "character classes of more than 262144 runes"},
		{"not a regex: gojsonschema says so", `{"pattern": "("}`, "pattern"},
		{"a pattern in const is data", `{"const": {"pattern": "` + strings.Repeat("a{1000}", 60) + `"}}`, ""},
	} {
		err := contract.CheckSchema([]byte(tt.schema))
		switch {
		case tt.errHas == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.errHas != "" && (!errors.Is(err, contract.ErrBadSchema) || !strings.Contains(err.Error(), tt.errHas)):
			t.Errorf("%s: %v, want ErrBadSchema with %q", tt.name, err, tt.errHas)
		}
	}
}

// TestFormatRegexIsParsedNotCompiled: "format": "regex" accepts what Go
// parses, up to MaxPatternBytes, without compiling it: three strings of
// 21 KB, which took a process from 31 MB to 596 MB, cost nothing.
func TestFormatRegexIsParsedNotCompiled(t *testing.T) {
	s := mustCompile(t, `{"type": "array", "items": {"type": "string", "format": "regex"}}`)
	for _, tt := range []struct {
		doc  string
		want int
	}{
		{`["^a+$", "", "(?i)x{2,5}"]`, 0},
		{`["(", "a{1001}"]`, 2},
		{`["` + strings.Repeat("a{1000}", 140) + `"]`, 0}, // 140,002 instructions: parsed, never compiled
	} {
		vs, err := s.Validate([]byte(tt.doc))
		if err != nil || len(vs) != tt.want {
			t.Errorf("Validate(%.40s) = %v, %v; want %d violations", tt.doc, vs, err, tt.want)
		}
	}
	big := `["` + strings.Repeat("a{1000}", 3000) + `", "` + strings.Repeat("a{1000}", 3000) + `", "` + strings.Repeat("a{1000}", 3000) + `"]`
	// Parsing 63 KB may cost up to half a second: not in the caller.
	if _, err := s.Validate([]byte(big)); !errors.Is(err, contract.ErrTooCostly) {
		t.Errorf("3 x 21 KB in process: %v, want ErrTooCostly", err)
	}
	child := &contract.Checker{Child: &contract.Child{UID: -1, GID: -1}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	vs, err := child.Check(context.Background(), s, []byte(big), time.Now().Add(10*time.Second))
	runtime.ReadMemStats(&after)
	if err != nil || len(vs) != 3 || !strings.Contains(vs[0].Message, "regex") {
		t.Fatalf("3 x 21 KB in a child: %v, %v; want 3 violations of format regex (longer than %d bytes)", vs, err, contract.MaxPatternBytes)
	}
	if took, alloc := time.Since(start), after.TotalAlloc-before.TotalAlloc; took > 5*time.Second || alloc > 8<<20 {
		t.Errorf("took %s, the caller allocated %d MiB", took, alloc>>20)
	}
}

// TestRegexCost: matching a pattern costs its program size times the
// string's length in the estimate, so that a costly match never runs in
// the caller.
func TestRegexCost(t *testing.T) {
	forty := mustCompile(t, `{"type": "string", "pattern": "`+strings.Repeat("a{1000}", 40)+`"}`)
	doc := []byte(`"` + strings.Repeat("a", 100_000) + `"`)
	want := int64(40_002) * 100_000 / 64
	if units, ok := contract.Estimate(forty, doc, 1<<50); !ok || units < want {
		t.Errorf("estimate %d units, want at least %d", units, want)
	}
	start := time.Now()
	var inProcess *contract.Checker
	if _, err := inProcess.Check(context.Background(), forty, doc, time.Time{}); !errors.Is(err, contract.ErrTooCostly) {
		t.Errorf("in process: %v, want ErrTooCostly", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusing took %s", d)
	}
	// patternProperties: gojsonschema compiles every pattern for every key.
	pp := mustCompile(t, `{"patternProperties": {"`+strings.Repeat("(a|b){1000}", 3)+`": {}}}`)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf(`"k%d": 1`, i)
	}
	if units, _ := contract.Estimate(pp, []byte("{"+strings.Join(keys, ",")+"}"), 1<<50); units < 100*3000 {
		t.Errorf("100 keys x a 3,000-instruction pattern: %d units, want at least %d (one compile per key)", units, 100*3000)
	}
	// Run in a child, a slow match ends at the deadline.
	slow := mustCompile(t, `{"type": "string", "pattern": "`+strings.Repeat("(a|b){1000}", 10)+`c"}`)
	child := &contract.Checker{Child: &contract.Child{UID: -1, GID: -1}}
	start = time.Now()
	_, err := child.Check(context.Background(), slow, []byte(`"`+strings.Repeat("a", 40_000)+`"`), time.Now().Add(time.Second))
	if !errors.Is(err, contract.ErrDeadline) {
		t.Errorf("slow match in a child: %v, want ErrDeadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a deadline of 1s ended the child after %s", d)
	}
}

// TestCheckCanceled: canceling the context kills the child at once.
func TestCheckCanceled(t *testing.T) {
	slow := mustCompile(t, `{"type": "string", "pattern": "`+strings.Repeat("(a|b){1000}", 10)+`c"}`)
	child := &contract.Checker{Child: &contract.Child{UID: -1, GID: -1}}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	_, err := child.Check(ctx, slow, []byte(`"`+strings.Repeat("a", 40_000)+`"`), time.Now().Add(time.Minute))
	if !errors.Is(err, contract.ErrCanceled) {
		t.Errorf("canceled: %v, want ErrCanceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("canceled after 500ms, returned after %s", d)
	}
}

// TestCacheWeighsCompiledSize: the cache counts what a schema holds
// compiled, its regular expressions' programs included, not its source.
func TestCacheWeighsCompiledSize(t *testing.T) {
	small := mustCompile(t, `{"type": "string", "title": "weight"}`)
	big := mustCompile(t, `{"type": "string", "title": "weight", "pattern": "`+strings.Repeat("a{1000}", 40)+`"}`)
	if w := contract.Weight(big) - contract.Weight(small); w < 40_000*64 {
		t.Errorf("a pattern of 40,002 instructions weighs %d bytes more, want at least %d", w, 40_000*64)
	}
}

// TestSchemaShapeBounds: a schema nested deep, whose checks would walk
// quadratically many pointer bytes (9,000 nested "items", 90 KB: 12 s and
// 3.8 GB before), is refused at once.
func TestSchemaShapeBounds(t *testing.T) {
	nest := func(n int) string {
		return `{"items":` + strings.Repeat(`{"items":`, n) + "{}" + strings.Repeat("}", n+1)
	}
	long := strings.Repeat("k", 1000)
	var leaves []string
	for i := range 200 {
		leaves = append(leaves, fmt.Sprintf(`"l%d": {}`, i))
	}
	deepLong := strings.Repeat(`{"properties": {"`+long+`": `, 60) + `{"properties": {` + strings.Join(leaves, ", ") + `}}` + strings.Repeat("}}", 60)
	for _, tt := range []struct {
		name, schema, errHas string
	}{
		{"50 nested items", nest(50), ""},
		{"9,000 nested items", nest(9000), "nests objects and arrays more than 128 deep, at #/items/items/items"},
		{"long keys nested deep", deepLong, "add up to more than"},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		err := contract.CheckSchema([]byte(tt.schema))
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		switch {
		case tt.errHas == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.errHas != "" && (!errors.Is(err, contract.ErrBadSchema) || !strings.Contains(err.Error(), tt.errHas)):
			t.Errorf("%s: %v, want ErrBadSchema with %q", tt.name, err, tt.errHas)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; took > time.Second || alloc > 64<<20 {
			t.Errorf("%s: took %s and %d MiB", tt.name, took, alloc>>20)
		}
	}
}
