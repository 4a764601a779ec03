package contract_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/contract"
)

func TestScanNumbers(t *testing.T) {
	for _, tt := range []struct {
		doc    string
		big    bool
		values int
		errHas string
	}{
		{`{"a": [1, 2.5, -3e10, "1e999", true, null, {"b": "x"}]}`, false, 10, ""},
		{`{"k\"ey": 1, "\\": "\\", "x": "a\"b"}`, false, 4, ""},
		{`[1.7976931348623157e308, 5e-324, 0.0, -0, 0e-999]`, false, 6, ""},
		{`[1e400]`, false, 0, "beyond float64's range"},
		{`[-1e309]`, false, 0, "beyond float64's range"},
		{`[1e-400]`, false, 0, "too small for a float64"},
		{`[0.` + strings.Repeat("0", 120) + `1]`, false, 0, "longer than 100 characters"},
		{`[1e400]`, true, 2, ""},
		{`[1e9999, -1e-9999]`, true, 3, ""},
		{`[1e10000]`, true, 0, "exponent beyond ±9999"},
		{`[1e999999999999999999999]`, true, 0, "exponent beyond"},
	} {
		n, err := contract.Scan([]byte(tt.doc), tt.big)
		switch {
		case tt.errHas == "" && (err != nil || n != tt.values):
			t.Errorf("Scan(%.40s, big=%v) = %d, %v; want %d values", tt.doc, tt.big, n, err, tt.values)
		case tt.errHas != "" && (!errors.Is(err, contract.ErrNumber) || !strings.Contains(err.Error(), tt.errHas)):
			t.Errorf("Scan(%.40s, big=%v) error %v, want ErrNumber with %q", tt.doc, tt.big, err, tt.errHas)
		}
	}
}

// TestEstimateBoundsWork: the estimate is an upper bound of gojsonschema's
// work on the cases that made it explode, and small on ordinary results.
func TestEstimateBoundsWork(t *testing.T) {
	allOf := func(n int, typ string) string {
		return `{"items": {"allOf": [` + strings.TrimSuffix(strings.Repeat(`{"type": "`+typ+`"},`, n), ",") + `]}}`
	}
	zeros := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]" }
	for _, tt := range []struct {
		name     string
		schema   string
		doc      string
		min, max int64
	}{
		{"1 KiB report", `{"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}, "rows": {"type": "array", "items": {"type": "object"}}}}`,
			`{"total": 42, "rows": [{"a": 1}, {"b": 2}, {"c": 3}]}`, 4, 100},
		{"fan-out 255 x 1000", allOf(255, "number"), zeros(1000), 256 * 1000, 260 * 1000},
		{"enum marshals the value", `{"enum": [1, 2]}`, `{"a": [1, 2, 3, [4, 5]]}`, 8, 20},
		{"uniqueItems at every level", `{"uniqueItems": true, "items": {"$ref": "#"}}`, `[[[[1]]]]`, 10, 40},
		{"patternProperties per key", `{"patternProperties": {"^a": {"type": "number"}}, "additionalProperties": false}`, `{"a1": 1, "a2": 2, "b": 3}`, 6, 30},
	} {
		s, err := contract.Compile([]byte(tt.schema))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		units, ok := contract.Estimate(s, []byte(tt.doc), 1<<40)
		if !ok || units < tt.min || units > tt.max {
			t.Errorf("%s: estimate %d units (within budget: %v), want %d to %d", tt.name, units, ok, tt.min, tt.max)
		}
	}
	s, _ := contract.Compile([]byte(allOf(255, "number")))
	if units, ok := contract.Estimate(s, []byte(zeros(10000)), 10000); ok || units > 10000+300 {
		t.Errorf("over budget: %d units, ok=%v; want it to stop just past the budget", units, ok)
	}
}

// TestCheckerBounds: a costly validation never runs in the calling
// process; it runs in a child bounded by the deadline, or is refused.
func TestCheckerBounds(t *testing.T) {
	fanout := func(typ string) *contract.Schema {
		s, err := contract.Compile([]byte(`{"items": {"allOf": [` + strings.TrimSuffix(strings.Repeat(`{"type": "`+typ+`"},`, 255), ",") + `]}}`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	zeros := func(n int) []byte { return []byte("[" + strings.TrimSuffix(strings.Repeat("0,", n), ",") + "]") }
	ctx := context.Background()
	far := time.Now().Add(time.Minute)

	// Cheap: in process, even without a child.
	var inProcess *contract.Checker
	vs, err := inProcess.Check(ctx, fanout("number"), zeros(20), far)
	if err != nil || len(vs) != 0 {
		t.Fatalf("cheap, in process: %v %v", vs, err)
	}
	// Costly without a child: refused, quickly.
	start := time.Now()
	if _, err := inProcess.Check(ctx, fanout("string"), zeros(400), far); !errors.Is(err, contract.ErrTooCostly) {
		t.Fatalf("costly without a child: %v, want ErrTooCostly", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusing took %s", d)
	}
	// Costly with a child: validated there, the caller's heap unmoved.
	child := &contract.Checker{Child: &contract.Child{UID: -1, GID: -1}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	vs, err = child.Check(ctx, fanout("string"), zeros(400), far)
	runtime.ReadMemStats(&after)
	if err != nil || len(vs) != contract.MaxViolations {
		t.Fatalf("costly, in a child: %d violations, %v; want %d", len(vs), err, contract.MaxViolations)
	}
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 16<<20 {
		t.Errorf("the caller allocated %d MiB for a validation its child did", grew>>20)
	}
	// Past the deadline: ErrDeadline, in about the time left.
	start = time.Now()
	_, err = child.Check(ctx, fanout("number"), zeros(20000), time.Now().Add(300*time.Millisecond))
	if !errors.Is(err, contract.ErrDeadline) {
		t.Fatalf("past the deadline: %v, want ErrDeadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the deadline of 300ms was enforced after %s", d)
	}
	// More work than MaxUnits: refused by the child before validating.
	wide := `{"items": {"items": {"allOf": [` + strings.TrimSuffix(strings.Repeat(`{"type": "number"},`, 255), ",") + `]}}}`
	s, err := contract.Compile([]byte(wide))
	if err != nil {
		t.Fatal(err)
	}
	doc := "[" + strings.TrimSuffix(strings.Repeat(string(zeros(1000))+",", 200), ",") + "]" // 200k values × 256
	if _, err := child.Check(ctx, s, []byte(doc), far); !errors.Is(err, contract.ErrTooCostly) {
		t.Errorf("%d units: %v, want ErrTooCostly", 200*1000*256, err)
	}
	// Numbers are checked first, whatever the schema.
	if _, err := child.Check(ctx, nil, []byte(`{"a": 1e400}`), far); !errors.Is(err, contract.ErrNumber) {
		t.Errorf("1e400 without a schema: %v, want ErrNumber", err)
	}
}
