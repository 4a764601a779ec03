package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCheckDuplicateKeys(t *testing.T) {
	x40 := strings.Repeat("x", 40) // past stringEnd's byte loop
	many := func(dup bool) string {
		var b strings.Builder
		b.WriteString(`{"list": [0, {`)
		for i := range 100 {
			fmt.Fprintf(&b, `"k%03d": %d, `, i, i)
		}
		if dup {
			b.WriteString(`"k050": "again", `)
		}
		b.WriteString(`"last": null}]}`)
		return b.String()
	}
	tests := []struct {
		name string
		doc  string
		key  string // "" when no duplicate is expected
		ptr  string
	}{
		{"the red-team result", `{"amount": 5000000, "amount": 5}`, "amount", "/amount"},
		{"nested in an array", `{"items": [{"amount": 1}, {"amount": 2, "x": 1, "amount": 3}]}`, "amount", "/items/1/amount"},
		{"deep", `{"a": {"b": [[], [{"c": {"d": 1, "d": 2}}]]}}`, "d", "/a/b/1/0/c/d"},
		{"an escape spelling the same key", `{"a": 1, "\u0061": 2}`, "a", "/a"},
		{"escaped quotes", `{"say \"hi\"": 1, "say \u0022hi\u0022": 2}`, `say "hi"`, `/say "hi"`},
		{"invalid UTF-8 decoded alike", "{\"a\xff\": 1, \"a\xfe\": 2}", "a\uFFFD", "/a\uFFFD"},
		{"lone surrogates decoded alike", `{"\ud800": 1, "\udfff": 2}`, "\uFFFD", "/\uFFFD"},
		{"pointer escapes", `{"a/b": {"c~d": 1, "c~d": 2}}`, "c~d", "/a~1b/c~0d"},
		{"the empty key", `{"": 1, "": 2}`, "", "/"},
		{"many keys, one twice", many(true), "k050", "/list/1/k050"},
		{"long keys, escaped late", `{"` + x40 + `\"y": 1, "` + x40 + `\u0022y": 2}`, x40 + `"y`, "/" + x40 + `"y`},
		{"long non-ASCII keys", `{"` + x40 + `é": 1, "` + x40 + `\u00e9": 2}`, x40 + "é", "/" + x40 + "é"},
		{"three times", `{"a": 1, "b": 2, "a": 3, "a": 4}`, "a", "/a"},
		{"a duplicate of a value's object key", `{"x": {"x": 1}, "x": 2}`, "x", "/x"},
		// No duplicate.
		{"case differs", `{"a": 1, "A": 2}`, "", ""},
		{"one key per level", `{"a": {"a": {"a": 1}}}`, "", ""},
		{"sibling objects", `[{"a": 1}, {"a": 2}, {"a": {"a": 3}}]`, "", ""},
		{"long values with escapes", `{"a": "` + x40 + `\"}, \"a\": 1` + x40 + `", "b": "` + x40 + `\\", "c": 1}`, "", ""},
		{"keys inside strings", `{"s": "{\"a\": 1, \"a\": 2}", "t": "\\", "u": "\\\""}`, "", ""},
		{"many keys", many(false), "", ""},
		{"empty containers", `{"a": {}, "b": [], "c": [{}], "d": {"e": []}}`, "", ""},
		{"scalars", `{"n": -1.5e3, "t": true, "f": false, "z": null, "s": "x"}`, "", ""},
		{"a top-level scalar", `  42  `, "", ""},
		{"a top-level string", `"x"`, "", ""},
		{"escaped but different", `{"\u0061": 1, "\u0062": 2, "a\n": 3, "c": 4}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !json.Valid([]byte(tt.doc)) {
				t.Fatalf("the test's document is not JSON: %s", tt.doc)
			}
			err := CheckDuplicateKeys([]byte(tt.doc))
			if tt.ptr == "" {
				if err != nil {
					t.Errorf("CheckDuplicateKeys = %v, want nil", err)
				}
				return
			}
			var de *DuplicateKeyError
			if !errors.As(err, &de) || !errors.Is(err, ErrDuplicateKey) {
				t.Fatalf("CheckDuplicateKeys = %v, want a *DuplicateKeyError", err)
			}
			if de.Key != tt.key || de.Pointer() != tt.ptr {
				t.Errorf("key %q at %q, want %q at %q", de.Key, de.Pointer(), tt.key, tt.ptr)
			}
		})
	}
}

func TestDuplicateKeyErrorText(t *testing.T) {
	err := CheckDuplicateKeys([]byte(`{"items": [{"amount": 5000000, "amount": 5}]}`))
	if got, want := fmt.Sprint(err), `duplicate key "amount" at /items/0/amount`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	want := []PathStep{{Key: "items"}, {Index: 0, InArray: true}}
	var de *DuplicateKeyError
	if !errors.As(err, &de) {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, de.In); diff != "" {
		t.Errorf("In (-want +got):\n%s", diff)
	}
	long := strings.Repeat("k", 5000)
	err = CheckDuplicateKeys([]byte(`{"` + long + `": 1, "` + long + `": 2}`))
	if n := len(err.Error()); n > 2*maxPointerText+64 {
		t.Errorf("the error of a 5000-byte key is %d bytes long", n)
	}
}

func TestCheckDuplicateKeysRefusesBadInput(t *testing.T) {
	deep := strings.Repeat("[", MaxKeyDepth+1) + strings.Repeat("]", MaxKeyDepth+1)
	for _, doc := range []string{"", " ", `{"a": 1`, `{"a" 1}`, `{"a": 1,}`, `[1,]`, `[1 2]`, `{} x`, `{"a": "x}`, `{1: 2}`, `}`, `]`, `{"a": 1]`, `[1}`, `"\"`, deep} {
		if err := CheckDuplicateKeys([]byte(doc)); err == nil || errors.Is(err, ErrDuplicateKey) {
			t.Errorf("CheckDuplicateKeys(%.40q) = %v, want an error that is not ErrDuplicateKey", doc, err)
		}
	}
	ok := strings.Repeat("[", MaxKeyDepth) + strings.Repeat("]", MaxKeyDepth)
	if err := CheckDuplicateKeys([]byte(ok)); err != nil {
		t.Errorf("nesting of %d: %v", MaxKeyDepth, err)
	}
}

// hasDuplicate is a reference: encoding/json's tokens, a map per object.
func hasDuplicate(t *testing.T, doc []byte) bool {
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	type level struct {
		obj    bool
		keys   map[string]bool
		expect bool // the next string token is a key
	}
	var stack []*level
	dup := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return dup
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.obj {
					top.expect = true
				}
				stack = append(stack, &level{obj: v == '{', keys: map[string]bool{}, expect: v == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.obj && top.expect {
				dup = dup || top.keys[v]
				top.keys[v] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.obj {
			top.expect = true
		}
	}
}

// Random documents, checked against the reference.
func TestCheckDuplicateKeysAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := []string{`"a"`, `"b"`, `"\u0061"`, `"A"`, `"a\u0000"`, `"é"`, `"\u00e9"`, `""`}
	var gen func(b *strings.Builder, depth int)
	gen = func(b *strings.Builder, depth int) {
		switch k := r.IntN(6); {
		case depth > 4 || k < 2:
			b.WriteString([]string{`1`, `"s"`, `null`, `"{\"a\":1,\"a\":2}"`, `-2.5e1`, `true`}[r.IntN(6)])
		case k < 4:
			b.WriteByte('{')
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(keys[r.IntN(len(keys))])
				b.WriteString(": ")
				gen(b, depth+1)
			}
			b.WriteByte('}')
		default:
			b.WriteByte('[')
			for i := range r.IntN(4) {
				if i > 0 {
					b.WriteByte(',')
				}
				gen(b, depth+1)
			}
			b.WriteByte(']')
		}
	}
	dups := 0
	for range 5000 {
		var b strings.Builder
		gen(&b, 0)
		doc := []byte(b.String())
		want := hasDuplicate(t, doc)
		err := CheckDuplicateKeys(doc)
		if got := errors.Is(err, ErrDuplicateKey); got != want || err != nil && !got {
			t.Fatalf("CheckDuplicateKeys(%s) = %v, reference says duplicate=%v", doc, err, want)
		}
		if want {
			dups++
		}
	}
	if dups < 100 {
		t.Errorf("only %d of the random documents had a duplicate: the test proves little", dups)
	}
}

// result1MiB is a result of about 1 MiB: an array of records.
func result1MiB() []byte {
	var b strings.Builder
	b.WriteString(`{"rows": [`)
	for i := 0; b.Len() < 1<<20-200; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `{"id": %d, "amount": %d.50, "status": "paid", "customer": "customer-%d \u00e9", "tags": ["a", "b"]}`, i, i%97, i)
	}
	b.WriteString(`], "count": 1}`)
	return []byte(b.String())
}

func BenchmarkCheckDuplicateKeys1MiB(b *testing.B) {
	doc := result1MiB()
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckDuplicateKeys(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// For scale: what ReadResult already does with the same bytes.
func BenchmarkJSONValid1MiB(b *testing.B) {
	doc := result1MiB()
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if !json.Valid(doc) {
			b.Fatal("not valid")
		}
	}
}

// The worst case for memory and sorting: 1 MiB of one object's keys.
func BenchmarkCheckDuplicateKeysFlat1MiB(b *testing.B) {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := 0; sb.Len() < 1<<20-20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"%x":0`, i)
	}
	sb.WriteByte('}')
	doc := []byte(sb.String())
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckDuplicateKeys(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// For scale: what the schema's validation and the policy do with a
// result, decoding it.
func BenchmarkJSONUnmarshalFlat1MiB(b *testing.B) {
	var sb strings.Builder
	sb.WriteByte('{')
	for i := 0; sb.Len() < 1<<20-20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"%x":0`, i)
	}
	sb.WriteByte('}')
	doc := []byte(sb.String())
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// A spec like tasks' BenchmarkDecode's: what the check adds to the
// worker's decode of each task.
func BenchmarkCheckDuplicateKeysSpec(b *testing.B) {
	doc := []byte(`{"version":1,"run_id":"bench-run-1","queue":"default","files":{"gen.sh":"set -eu\ncat > out/result.json <<'EOF'\n{\"rows\": 3}\nEOF\n"},"steps":[{"name":"gen","run":["sh","gen.sh"],"env":{"A":"1"}}],"output":{"result":"out/result.json","schema":{"type":"object","properties":{"rows":{"type":"integer"}},"required":["rows"]}},"timeout":"30s","limits":{"memory":"256MiB"}}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := CheckDuplicateKeys(doc); err != nil {
			b.Fatal(err)
		}
	}
}
