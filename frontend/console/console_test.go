package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/record"
)

func TestPreviewKinds(t *testing.T) {
	var pngBytes bytes.Buffer
	if err := png.Encode(&pngBytes, image.NewRGBA(image.Rect(0, 0, 2, 2))); err != nil {
		t.Fatal(err)
	}
	svg := `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>`
	for _, c := range []struct {
		name, ct string
		b        []byte
		kind     string
		note     bool
	}{
		{"out/clean.csv", "text/csv", []byte("a,b\n1,2\n3,4\n"), KindTable, false},
		{"out/x.tsv", "", []byte("a\tb\n1\t2\n"), KindTable, false},
		{"out/r.json", "application/json", []byte(`{"a": [1, 2]}`), KindJSON, false},
		{"out/bad.json", "application/json", []byte(`{"a": `), KindText, false},
		{"out/deep.json", "application/json", []byte(strings.Repeat("[", MaxTreeDepth+1) + strings.Repeat("]", MaxTreeDepth+1)), KindText, true},
		{"notes.txt", "text/plain", []byte("hello\n"), KindText, false},
		{"evil.html", "text/html", []byte("<script>alert(1)</script>"), KindText, true},
		{"evil.svg", "image/svg+xml", []byte(svg), KindText, true},
		{"pic.png", "application/octet-stream", pngBytes.Bytes(), KindImage, false},
		// A PNG that says it is text is still an image by its bytes; an
		// SVG that says it is an image is text.
		{"pic.txt", "text/plain", pngBytes.Bytes(), KindImage, false},
		{"blob.bin", "application/octet-stream", []byte{0, 1, 2, 3}, KindDownload, true},
		// A bare quote that a lenient reader would let swallow the rest
		// of the file, and a line too wide to read as a row: text.
		{"lazy.csv", "text/csv", []byte("id,payee,amount\n1,acme,10\n2,\"globex\"x,20\n3,attacker,99999\n"), KindText, true},
		{"wide.csv", "text/csv", []byte("a\n" + strings.Repeat("a,", MaxSeparators+1) + "\n"), KindText, true},
		{"latin1.txt", "text/plain", []byte{'c', 'a', 'f', 0xe9, '!'}, KindDownload, true},
	} {
		p := NewPreview(c.name, c.ct, c.b)
		if p.Kind != c.kind || (p.Note != "") != c.note {
			t.Errorf("%s: kind %q note %q, want %q (note %v)", c.name, p.Kind, p.Note, c.kind, c.note)
		}
		if p.Bytes != int64(len(c.b)) {
			t.Errorf("%s: bytes %d", c.name, p.Bytes)
		}
	}
	if got := ImageType([]byte(svg)); got != "" {
		t.Errorf("ImageType(svg) = %q, want none", got)
	}
}

func TestPreviewTableBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("id,note\n")
	for i := range 2500 {
		fmt.Fprintf(&b, "%d,\"=HYPERLINK(\"\"http://evil.example\"\",\"\"x\"\")\"\n", i)
	}
	b.WriteString("9999," + strings.Repeat("x", 5000) + "\n")
	p := NewPreview("big.csv", "text/csv", []byte(b.String()))
	if p.Kind != KindTable || p.RowCount != 2501 || len(p.Rows) != MaxRows || !p.Truncated {
		t.Fatalf("kind %s rows %d count %d truncated %v", p.Kind, len(p.Rows), p.RowCount, p.Truncated)
	}
	if diff := cmp.Diff([]string{"id", "note"}, p.Header); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if cutp := NewPreview("c.csv", "text/csv", []byte("a,b\n"+strings.Repeat("x", 2*MaxCell)+",1\n")); !cutp.Truncated || !strings.Contains(cutp.Note, "cut") {
		t.Errorf("a table with a cut cell says nothing: %+v", cutp.Note)
	}
	if got := p.Rows[0][1]; got != `=HYPERLINK("http://evil.example","x")` {
		t.Errorf("a formula cell is kept as its text: %q", got)
	}
	tb, err := ReadTable([]byte(b.String()), ',', 5000)
	if err != nil || len(tb.Rows) != 2501 || len(tb.Rows[2500][1]) != MaxCell {
		t.Fatalf("whole table: %d rows, last cell %d bytes, %v", len(tb.Rows), len(tb.Rows[2500][1]), err)
	}
	long := strings.Repeat("é", MaxText) // 2 bytes each
	p = NewPreview("long.txt", "text/plain", []byte(long))
	if !p.Truncated || len(p.Text) > MaxText || !strings.HasPrefix(long, p.Text) || len(p.Text)%2 != 0 {
		t.Errorf("text cut at %d bytes, truncated %v: not on a rune", len(p.Text), p.Truncated)
	}
	wide := strings.Repeat("c,", 150) + "c\n"
	big := strings.Repeat(strings.Repeat("x", MaxCell)+",", 20) + "\n"
	tb, err = ReadTable([]byte(wide+wide+strings.Repeat(big, 400)), ',', MaxRows)
	if err != nil || len(tb.Header) != MaxColumns || len(tb.Rows[0]) != MaxColumns || tb.Count != 401 ||
		len(tb.Rows) >= 401 || len(tb.Rows) < MaxTableText/(21*MaxCell) {
		t.Errorf("a wide, heavy table: header %d cells, %d rows kept of %d, %v", len(tb.Header), len(tb.Rows), tb.Count, err)
	}
	if _, err := ReadTable(nil, ',', 10); err == nil {
		t.Error("an empty table read without error")
	}
}

func TestDiffResult(t *testing.T) {
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	before := []byte(`{"rows": 500, "refund_rate": 0.0900, "paid_revenue": 100.5, "gone": true, "list": [1, 2], "a/b": {"~": 1}, "n": 1, "big": 1e400, "e": {}}`)
	after := []byte(`{"rows": 500, "refund_rate": 0.0917, "paid_revenue": 100.50, "new": "x", "list": [1], "a/b": {"~": 2}, "n": null, "big": 2e400, "e": []}`)
	d := DiffResult(before, after)
	want := []KeyChange{
		{Pointer: "/a~1b/~0", Change: Changed, Before: raw("1"), After: raw("2")},
		{Pointer: "/big", Change: Changed, Before: raw("1e400"), After: raw("2e400")},
		{Pointer: "/e", Change: Changed, Before: raw("{}"), After: raw("[]")},
		{Pointer: "/gone", Change: Removed, Before: raw("true")},
		{Pointer: "/list/1", Change: Removed, Before: raw("2")},
		{Pointer: "/n", Change: Changed, Before: raw("1"), After: raw("null")},
		{Pointer: "/new", Change: Added, After: raw(`"x"`)},
		{Pointer: "/refund_rate", Change: Changed, Before: raw("0.0900"), After: raw("0.0917")},
	}
	if diff := cmp.Diff(want, d.Keys); diff != "" || d.Cut || d.Note != "" {
		t.Errorf("DiffResult (-want +got), cut %v, note %q:\n%s", d.Cut, d.Note, diff)
	}
	// Not JSON: one value; nothing before: all added.
	d = DiffResult([]byte("not json"), []byte(`{"a": 1}`))
	if len(d.Keys) != 2 || d.Keys[0].Pointer != "" || d.Keys[0].Change != Removed || d.Keys[1].Pointer != "/a" || d.Keys[1].Change != Added {
		t.Errorf("not JSON before: %+v", d.Keys)
	}
	var big strings.Builder
	big.WriteString("{")
	for i := range MaxKeyChanges + 10 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `"k%04d": %d`, i, i)
	}
	big.WriteString("}")
	if d := DiffResult(nil, []byte(big.String())); len(d.Keys) != MaxKeyChanges || !d.Cut {
		t.Errorf("a large diff: %d changes, cut %v", len(d.Keys), d.Cut)
	}
}

// TestDiffResultBounds: a result past the bounds costs little, and its
// diff says what it did not compare, never that nothing changed.
func TestDiffResultBounds(t *testing.T) {
	zeros := strings.TrimSuffix(strings.Repeat("0,", MaxLeaves), ",")
	deep := strings.Repeat(`{"`+strings.Repeat("k", 100)+`":`, 9000) + "1" + strings.Repeat("}", 9000)
	for _, c := range []struct{ name, before, after string }{
		{"a change past MaxLeaves", `{"r": [` + zeros + `, {"amount": 5}]}`, `{"r": [` + zeros + `, {"amount": 5000000}]}`},
		{"deep", deep, strings.Replace(deep, "1", "2", 1)},
		{"long pointers", `{"` + strings.Repeat("k", 2000) + `": 1}`, `{"` + strings.Repeat("k", 2000) + `": 2}`},
	} {
		d := DiffResult([]byte(c.before), []byte(c.after))
		if d.Note == "" || len(d.Keys) != 0 {
			t.Errorf("%s: %d changes, note %q: want a note saying what was not compared", c.name, len(d.Keys), d.Note)
		}
	}
	// Past a bound but the same bytes: no note, no change.
	if d := DiffResult([]byte(deep), []byte(deep)); d.Note != "" || len(d.Keys) != 0 {
		t.Errorf("a deep result against itself: %+v", d)
	}
	// A deep, wide document costs little memory.
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	before := m.TotalAlloc
	DiffResult([]byte(deep), []byte(strings.Replace(deep, "1", "2", 1)))
	runtime.ReadMemStats(&m)
	if grown := m.TotalAlloc - before; grown > 64<<20 {
		t.Errorf("a %d-byte deep result allocated %d MiB", len(deep), grown>>20)
	}
}

func TestDiffTable(t *testing.T) {
	before := []byte("id,amount\n1,10\n2,20\n2,20\n3,30\n")
	after := []byte("id,amount\n3,30\n2,20\n4,40\n1,11\n")
	d := DiffTable("out/clean.csv", before, after, ',')
	want := TableDiff{Name: "out/clean.csv", Change: Changed, Header: []string{"id", "amount"}, RowsAdded: 2, RowsRemoved: 2,
		Added: [][]string{{"4", "40"}, {"1", "11"}}, Removed: [][]string{{"1", "10"}, {"2", "20"}}}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("DiffTable (-want +got):\n%s", diff)
	}
	// Cells that join the same are not the same row.
	d = DiffTable("x.csv", []byte("a,b\n\"1,2\",3\n"), []byte("a,b\n1,\"2,3\"\n"), ',')
	if d.RowsAdded != 1 || d.RowsRemoved != 1 {
		t.Errorf("rows whose cells join alike: %+v", d)
	}
	if d := DiffTable("x.csv", before, before, ','); d.Change != Same || d.RowsAdded+d.RowsRemoved != 0 {
		t.Errorf("a table against itself: %+v", d)
	}
	if d := DiffTable("x.csv", []byte("a\n1\n"), []byte("b\n1\n"), ','); d.Change != Changed || !d.HeaderChanged {
		t.Errorf("a header changed: %+v", d)
	}
	if d := DiffTable("x.csv", nil, after, ','); d.Note == "" || d.Change != Changed {
		t.Errorf("an empty accepted version: %+v", d)
	}
	// A table past MaxDiffRows is not compared row by row.
	big := []byte("a\n" + strings.Repeat("1\n", MaxDiffRows+1))
	for _, c := range [][2][]byte{{big, after}, {after, big}} {
		if d := DiffTable("x.csv", c[0], c[1], ','); d.Note == "" || d.RowsAdded != 0 || d.Added != nil {
			t.Errorf("a table of more than MaxDiffRows rows: %+v", d)
		}
	}
}

func TestHighlights(t *testing.T) {
	checks := []record.Check{{Rule: "high-refund-rate", Pointer: "/refund_rate"}, {Rule: "high", Pointer: "/n"}}
	reasons := []string{
		"spec asks approval: always",
		`rule high-refund-rate: /refund_rate is "rule high: /forged is 1"`,
		"rule high could not be evaluated, so it parks: /n is missing",
	}
	want := []Highlight{
		{Pointer: "/refund_rate", Rule: "high-refund-rate", Reason: reasons[1]},
		{Pointer: "/n", Rule: "high", Reason: reasons[2]},
	}
	if diff := cmp.Diff(want, Highlights(checks, reasons)); diff != "" {
		t.Errorf("Highlights (-want +got):\n%s", diff)
	}
	if got := Highlights(nil, reasons); got == nil || len(got) != 0 {
		t.Errorf("no checks: %#v, want an empty list", got)
	}
}

func TestDepth(t *testing.T) {
	for doc, want := range map[string]int{
		`1`: 0, `"[[["`: 0, `[]`: 1, `{"a": [1, {"b": "]]]}"}]}`: 3, `{"a\"[": [[]]}`: 3,
		strings.Repeat("[", 500) + strings.Repeat("]", 500): 500,
	} {
		if got := Depth([]byte(doc)); got != want {
			t.Errorf("Depth(%.40s) = %d, want %d", doc, got, want)
		}
	}
}
