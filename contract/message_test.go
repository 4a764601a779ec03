package contract_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/contract"
)

// TestSentence: a violation's message after a field's name starts
// lowercase, unless it starts with a name of the document's, whose case
// is its own.
func TestSentence(t *testing.T) {
	s := mustCompile(t, `{"type": "object", "required": ["Day"], "additionalProperties": false,
		"properties": {"Day": {"type": "string", "pattern": "^[0-9]+$"}, "Mode": {"enum": ["a"]}, "Kind": {"const": "k"},
		"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}}}`)
	for _, c := range []struct{ doc, want string }{
		{`{}`, "Day is required"},
		{`{"Day": "1", "Date": 1}`, "additional property Date is not allowed"},
		{`{"Day": "x"}`, "does not match pattern '^[0-9]+$'"},
		{`{"Day": "1", "n": "x"}`, "invalid type. Expected: integer, given: string"},
		{`{"Day": "1", "Mode": "b"}`, `Mode must be one of the following: "a"`},
		{`{"Day": "1", "Kind": "x"}`, `Kind does not match: "k"`},
		{`{"Day": "1", "tags": ["x", "x"]}`, "array items[0,1] must be unique"},
	} {
		vs, err := s.Validate([]byte(c.doc))
		if err != nil || len(vs) != 1 {
			t.Fatalf("%s: %v, %v: want one violation", c.doc, vs, err)
		}
		if got := contract.Sentence(vs[0]); got != c.want {
			t.Errorf("%s: Sentence(%q) = %q, want %q", c.doc, vs[0].Message, got, c.want)
		}
	}
}

// TestValidateMissingFirst: at one path, a missing required property
// comes before the other violations, so that the first MaxViolations
// keep what the document lacks.
func TestValidateMissingFirst(t *testing.T) {
	s := mustCompile(t, `{"type": "object", "required": ["day"], "additionalProperties": false,
		"properties": {"day": {"type": "string"}, "sub": {"type": "object", "required": ["z"], "additionalProperties": false}}}`)
	got, err := s.Validate([]byte(`{"date": 1, "sub": {"a": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []contract.Violation{
		{Path: "", Message: "day is required"},
		{Path: "", Message: "Additional property date is not allowed"},
		{Path: "/sub", Message: "z is required"},
		{Path: "/sub", Message: "Additional property a is not allowed"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
}
