//go:build linux

package worker

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/record"
)

// encodedStreams is what the steps' stdout and stderr take in the
// record's JSON, quotes aside.
func encodedStreams(t *testing.T, rec *record.Run) int64 {
	t.Helper()
	var n int64
	for _, st := range rec.Steps {
		for _, s := range []string{st.Stdout, st.Stderr} {
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			n += int64(len(b) - 2)
		}
	}
	return n
}

func TestBoundOutput(t *testing.T) {
	ctl := strings.Repeat("\x01", 1000) // 6 bytes each in JSON
	bin := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\xff", 999)))
	for _, tc := range []struct {
		name      string
		limit     int64
		steps     []record.Step
		wantBytes int64
		reached   bool
	}{
		{"under the bound", 1 << 20, []record.Step{
			{Stdout: "hello\n", StdoutBytes: 6, Stderr: "warn\n", StderrBytes: 5},
		}, 7 + 6, false}, // "\n" takes two bytes
		{"text past the bound, later streams emptied", 10, []record.Step{
			{Stdout: "0123456789abc", StdoutBytes: 13, Stderr: "e", StderrBytes: 1},
			{Stdout: "next", StdoutBytes: 4},
		}, 10, true},
		{"escapes count as encoded", 600, []record.Step{
			{Stdout: ctl, StdoutBytes: 1000},
		}, 600, true},
		{"a cut never splits a character", 7, []record.Step{
			{Stdout: "ééééé", StdoutBytes: 10},
		}, 6, true},
		{"base64 cut at four characters", 101, []record.Step{
			{Stdout: bin, StdoutEncoding: "base64", StdoutBytes: 999},
		}, 100, true},
		{"html escapes", 12, []record.Step{
			{Stdout: "<<<", StdoutBytes: 3},
		}, 12, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &record.Run{Steps: tc.steps, KeptOutput: &record.KeptOutput{MaxBytes: tc.limit}}
			var written int64
			for _, st := range tc.steps {
				written += st.StdoutBytes + st.StderrBytes
			}
			boundOutput(rec)
			k := rec.KeptOutput
			if got := encodedStreams(t, rec); got != k.Bytes || got > tc.limit {
				t.Errorf("streams take %d bytes encoded, record says %d, bound %d", got, k.Bytes, tc.limit)
			}
			if k.Bytes != tc.wantBytes || k.Reached != tc.reached {
				t.Errorf("kept %d bytes (reached %v), want %d (%v)", k.Bytes, k.Reached, tc.wantBytes, tc.reached)
			}
			var kept int64
			for _, st := range rec.Steps {
				for _, s := range []struct {
					data, enc string
					total     int64
					cut       bool
				}{{st.Stdout, st.StdoutEncoding, st.StdoutBytes, st.StdoutTruncated}, {st.Stderr, st.StderrEncoding, st.StderrBytes, st.StderrTruncated}} {
					raw := []byte(s.data)
					if s.enc == "base64" {
						var err error
						if raw, err = base64.StdEncoding.DecodeString(s.data); err != nil {
							t.Fatalf("kept base64 does not decode: %v", err)
						}
					}
					if int64(len(raw)) < s.total && !s.cut {
						t.Errorf("a stream kept %d of %d bytes without saying it was truncated", len(raw), s.total)
					}
					kept += int64(len(raw))
				}
			}
			if k.DroppedBytes != written-kept {
				t.Errorf("dropped %d, want %d", k.DroppedBytes, written-kept)
			}
		})
	}
}

func TestBoundOutputKeepsTextValid(t *testing.T) {
	s := "日本語のテキスト, et du français accentué: é à ü. "
	for limit := int64(0); limit <= int64(len(s))+2; limit++ {
		rec := &record.Run{Steps: []record.Step{{Stdout: s, StdoutBytes: int64(len(s))}}, KeptOutput: &record.KeptOutput{MaxBytes: limit}}
		boundOutput(rec)
		got := rec.Steps[0].Stdout
		if !strings.HasPrefix(s, got) || rec.Steps[0].StdoutEncoding != "" || int64(len(got)) > limit {
			t.Fatalf("bound %d kept %q (encoding %q)", limit, got, rec.Steps[0].StdoutEncoding)
		}
		if int64(len(s))-int64(len(got)) >= 4 && limit >= int64(len(s)) {
			t.Fatalf("bound %d cut too much: %q", limit, got)
		}
	}
}

func TestBoundRest(t *testing.T) {
	var files, refused []record.File
	for i := 0; i < 20000; i++ {
		p := "out/" + strings.Repeat("\x01", 240)
		refused = append(refused, record.File{Path: p})
		if i < maxListed {
			files = append(files, record.File{Path: p})
		}
	}
	argv := []string{"sh", "-c"}
	for i := 0; i < 1000; i++ {
		argv = append(argv, strings.Repeat("<", 100))
	}
	rec := &record.Run{Files: files, Refused: refused, Error: strings.Repeat("\x01", 1<<20),
		Steps:  []record.Step{{Argv: argv, Error: strings.Repeat("é", 1<<20)}},
		Inputs: []record.Input{{Error: "status 404 " + strings.Repeat("\x01", 9<<20)}}}
	boundRest(rec)
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 256<<10 {
		t.Errorf("the bounded record is %d bytes", len(b))
	}
	if len(rec.Refused) == 0 || len(rec.Refused) > maxRefused || len(rec.Files) == 0 || len(rec.Files) >= maxListed {
		t.Errorf("kept %d files, %d refused", len(rec.Files), len(rec.Refused))
	}
	if !strings.Contains(rec.Error, "refused lists more than") || !strings.Contains(rec.Error, "out/ lists more than") {
		t.Errorf("the record does not say its lists were cut: %.200q", rec.Error[len(rec.Error)-300:])
	}
	last := rec.Steps[0].Argv[len(rec.Steps[0].Argv)-1]
	if !strings.Contains(last, "more arguments not listed") || rec.Steps[0].Argv[0] != "sh" {
		t.Errorf("argv kept %d elements, last %q", len(rec.Steps[0].Argv), last)
	}
	short := &record.Run{Error: "plain", Steps: []record.Step{{Argv: []string{"true"}}}}
	boundRest(short)
	if short.Error != "plain" || len(short.Steps[0].Argv) != 1 {
		t.Errorf("a small record changed: %+v", short)
	}
}
