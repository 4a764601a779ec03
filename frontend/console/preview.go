package console

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"
)

// Kinds of preview.
const (
	KindTable    = "table"    // CSV or TSV: Header and Rows
	KindText     = "text"     // UTF-8 text: Text
	KindJSON     = "json"     // JSON: Text, which the page shows as a tree
	KindImage    = "image"    // a raster image the page shows from the artifact's route
	KindDownload = "download" // anything else: a download only
)

// Bounds of a preview: what the page shows, not what it may download.
const (
	// MaxRows is how many rows of a table a preview holds.
	MaxRows = 1000
	// MaxCell bounds one cell of a table, in bytes.
	MaxCell = 1024
	// MaxText bounds the text of a text or JSON preview, in bytes.
	MaxText = 256 << 10
	// MaxColumns bounds the cells of a row a table keeps.
	MaxColumns = 100
	// MaxTableText bounds the bytes of the cells a table keeps: past
	// them it keeps fewer than MaxRows rows.
	MaxTableText = 4 << 20
	// MaxSeparators bounds the separators of one line of a table (quoted
	// ones too): a line with more is not read as a table, so that no row
	// costs more than a few KiB of fields to read.
	MaxSeparators = 4096
)

// Preview is what the console shows of one artifact.
type Preview struct {
	Name        string `json:"name"`
	Bytes       int64  `json:"bytes"`
	SHA256      string `json:"sha256"`
	ContentType string `json:"content_type"`
	Kind        string `json:"kind"`
	// Header and Rows are a table's first line and its next rows (at
	// most MaxRows); RowCount counts every row of the file but the
	// header.
	Header   []string   `json:"header,omitempty"`
	Rows     [][]string `json:"rows,omitempty"`
	RowCount int        `json:"row_count,omitempty"`
	// Text is a text's or JSON's content, cut at MaxText.
	Text string `json:"text,omitempty"`
	// Truncated: the preview shows only part of the artifact.
	Truncated bool `json:"truncated,omitempty"`
	// Note says why the artifact is shown as it is (an SVG or HTML page
	// shown as its source, a download only).
	Note string `json:"note,omitempty"`
}

// ImageType returns the content type of b when it is a raster image the
// console shows (PNG, JPEG, GIF, WebP), judged by its bytes alone, or "".
// SVG is never one: it is a document that may hold script.
func ImageType(b []byte) string {
	switch t := http.DetectContentType(b); t {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return t
	}
	return ""
}

// Separator returns the field separator of a table artifact named name
// with content type ct: ',' for CSV, '\t' for TSV, 0 for neither.
func Separator(name, ct string) rune {
	ct, _, _ = strings.Cut(strings.ToLower(ct), ";")
	switch ext := strings.ToLower(path.Ext(name)); {
	case ext == ".tsv" || ct == "text/tab-separated-values":
		return '\t'
	case ext == ".csv" || ct == "text/csv":
		return ','
	}
	return 0
}

// NewPreview returns the preview of an artifact named name, of declared
// content type ct, whose bytes are b. The declared type only chooses
// between table, JSON and text; an image is an image by its bytes.
func NewPreview(name, ct string, b []byte) Preview {
	p := Preview{Name: name, Bytes: int64(len(b)), ContentType: ct}
	lower := strings.ToLower(name)
	switch {
	case ImageType(b) != "":
		p.Kind = KindImage
		return p
	case !textual(b):
		p.Kind, p.Note = KindDownload, "not text: download it to look at it"
		return p
	}
	if sep := Separator(name, ct); sep != 0 {
		t, err := ReadTable(b, sep, MaxRows)
		if err == nil {
			p.Kind, p.Header, p.Rows, p.RowCount = KindTable, t.Header, t.Rows, t.Count
			p.Truncated = t.Count > len(t.Rows) || t.Cut
			if t.Cut {
				p.Note = fmt.Sprintf("cells longer than %d bytes are cut, and columns past %d not shown: download it for the whole", MaxCell, MaxColumns)
			}
			return p
		}
		p.Note = "not read as a table (" + err.Error() + "): shown as text"
	}
	p.Kind = KindText
	switch {
	case strings.HasSuffix(lower, ".json") || strings.HasPrefix(strings.ToLower(ct), "application/json"):
		switch {
		case !json.Valid(b) || len(b) > MaxText:
		case Depth(b) > MaxTreeDepth:
			p.Note = "nested too deep to show as a tree: shown as text"
		default:
			p.Kind = KindJSON
		}
	case strings.HasSuffix(lower, ".svg") || strings.HasSuffix(lower, ".html") || strings.HasSuffix(lower, ".htm"):
		p.Note = "shown as its source: the console never renders an artifact as a page or a picture that may hold script"
	}
	p.Text, p.Truncated = Clip(string(b[:min(len(b), MaxText+utf8.UTFMax)]), MaxText)
	return p
}

// textual reports whether b reads as UTF-8 text: valid UTF-8 (but for a
// rune cut at the end of a long file) with no NUL byte in its first 8 KiB.
func textual(b []byte) bool {
	head := b[:min(len(b), 8192)]
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		b = b[n:]
	}
	return true
}

// Clip bounds s to max bytes, on a rune's start, into a string of its
// own (what it keeps does not keep the rest of s in memory); it reports
// whether it cut.
func Clip(s string, max int) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return strings.Clone(s[:i]), true
}

// Table is a CSV or TSV file as the console reads it.
type Table struct {
	Header []string
	// Cut: a kept cell was cut, or a kept row lost columns.
	Cut bool
	// Rows are the first rows after the header: as many as asked while
	// their cells hold less than MaxTableText bytes, each row its first
	// MaxColumns cells, each cut at MaxCell bytes.
	Rows [][]string
	// Count counts every row after the header.
	Count int
}

// ReadTable reads b as a table separated by sep, keeping its header and
// its first keep rows and counting them all. Quotes are read leniently
// and rows may differ in length, as exports do; a file that is not a
// table at all is an error.
func ReadTable(b []byte, sep rune, keep int) (Table, error) {
	var t Table
	kept := 0 // bytes of the cells kept
	err := eachRow(b, sep, func(header, row []string) bool {
		if row == nil {
			t.Header, t.Cut = cells(header)
			return true
		}
		if len(t.Rows) < keep && kept < MaxTableText {
			c, cut := cells(row)
			for _, s := range c {
				kept += len(s)
			}
			t.Rows, t.Cut = append(t.Rows, c), t.Cut || cut
		}
		t.Count++
		return true
	})
	return t, err
}

// eachRow reads b as a table separated by sep and calls fn with its
// header (row nil), then with each row (valid until fn returns), until fn
// returns false. Quotes are read strictly (RFC 4180), as most readers do:
// a lenient reader could see fewer rows than another program reading the
// same file. Rows may differ in length. An empty file, a bare quote, or a
// line of more than MaxSeparators separators is an error.
func eachRow(b []byte, sep rune, fn func(header, row []string) bool) error {
	if n := maxSeparators(b, sep); n > MaxSeparators {
		return fmt.Errorf("a line holds %d separators, more than %d", n, MaxSeparators)
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.Comma, r.FieldsPerRecord, r.ReuseRecord = sep, -1, true
	for first := true; ; first = false {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			if first {
				return errors.New("empty")
			}
			return nil
		}
		if err != nil {
			return err
		}
		if first {
			if !fn(rec, nil) {
				return nil
			}
			continue
		}
		if !fn(nil, rec) {
			return nil
		}
	}
}

// cells copies a record (ReuseRecord reuses it, and a cell's string
// would keep its whole line): its first MaxColumns cells, each cut at
// MaxCell bytes; cut says whether it left anything out.
func cells(rec []string) (out []string, cut bool) {
	out = make([]string, min(len(rec), MaxColumns))
	cut = len(rec) > MaxColumns
	for i := range out {
		var c bool
		out[i], c = Clip(rec[i], MaxCell)
		cut = cut || c
	}
	return out, cut
}

// maxSeparators counts the separators of b's longest line in them, quoted
// or not.
func maxSeparators(b []byte, sep rune) int {
	most := 0
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		most = max(most, bytes.Count(line, []byte(string(sep))))
	}
	return most
}
