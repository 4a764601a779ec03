//go:build linux

package worker

import (
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/airlock-run/airlock/record"
)

// The run record is stored in Redis as the task's result, read by every
// Wait and kept for the task's retention: what it holds of the steps'
// output is bounded, all steps and both streams together, by the run's
// max_record_bytes (the worker's -max-record-bytes, or the spec's when
// lower). The bound applies twice: while reading, each step's capture
// takes from the run's budget of raw bytes (sandbox.KeepBudget), so the
// worker never holds more than that of a run's output; then, on the
// record, boundOutput measures the streams as JSON encodes them (escapes
// and base64 can make text up to six times longer) and cuts what is past
// the bound. The rest of the record is bounded by the spec (argv, inputs)
// and by fixed caps: the first 20 schema violations, maxListed entries of
// out/ within maxListedBytes of paths, the egress proxy's entries.

// maxListedBytes bounds the paths of out/ a record lists, together.
const maxListedBytes = 64 << 10

// boundOutput cuts the steps' stdout and stderr of rec, in order (each
// step's stdout, then its stderr), so that their JSON encoding holds at
// most rec.KeptOutput.MaxBytes, and fills in the rest of rec.KeptOutput
// (its Reached may already say that the capture's budget cut the output
// while reading). A record without KeptOutput (a spec rejected before its
// bound was known, hence without steps) is left as it is.
func boundOutput(rec *record.Run) {
	k := rec.KeptOutput
	if k == nil {
		return
	}
	limit := k.MaxBytes
	k.Bytes = 0
	var written, kept int64
	for i := range rec.Steps {
		st := &rec.Steps[i]
		for _, s := range []struct {
			data, enc *string
			cut       *bool
			total     int64
		}{
			{&st.Stdout, &st.StdoutEncoding, &st.StdoutTruncated, st.StdoutBytes},
			{&st.Stderr, &st.StderrEncoding, &st.StderrTruncated, st.StderrBytes},
		} {
			was := len(*s.data)
			var n int64
			*s.data, n = cutEncoded(*s.data, *s.enc, limit-k.Bytes)
			if len(*s.data) < was {
				k.Reached = true
				if *s.data == "" {
					*s.enc = ""
				}
			}
			k.Bytes += n
			raw := rawLen(*s.data, *s.enc)
			if raw < s.total {
				*s.cut = true
			}
			written += s.total
			kept += raw
		}
	}
	k.DroppedBytes = max(written-kept, 0)
}

// cutEncoded returns s cut so that its JSON encoding (without the quotes)
// takes at most room bytes, and that length: text is cut at a character
// boundary, base64 at a multiple of four characters (a prefix of the
// bytes it encodes).
func cutEncoded(s, enc string, room int64) (string, int64) {
	if room <= 0 {
		return "", 0
	}
	if enc == "base64" {
		if int64(len(s)) <= room {
			return s, int64(len(s))
		}
		n := room / 4 * 4
		return s[:n], n
	}
	var n int64
	for i, r := range s {
		w := runeEncodedLen(s, i, r)
		if n+w > room {
			return s[:i], n
		}
		n += w
	}
	return s, n
}

// encodedLen is the length of s in a record's JSON, without the quotes.
func encodedLen(s, enc string) int64 {
	if enc == "base64" {
		return int64(len(s))
	}
	var n int64
	for i, r := range s {
		n += runeEncodedLen(s, i, r)
	}
	return n
}

// runeEncodedLen is how many bytes encoding/json (json.Marshal, with its
// HTML escaping) writes for the rune r at s[i].
func runeEncodedLen(s string, i int, r rune) int64 {
	switch {
	case r == utf8.RuneError:
		if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
			return 6 // \ufffd
		}
		return 3
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t' || r == '\b' || r == '\f':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return int64(utf8.RuneLen(r))
}

// rawLen is how many of the step's bytes s holds.
func rawLen(s, enc string) int64 {
	if enc == "base64" {
		return int64(base64.StdEncoding.DecodedLen(len(s)) - paddingOf(s))
	}
	return int64(len(s))
}

func paddingOf(s string) int {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '='; i-- {
		n++
	}
	return n
}

// Bounds of the parts of a record other than the steps' output, each
// measured as JSON encodes it: with the schema violations (20), the
// egress entries and the artifacts (the operator's -max-artifacts) they
// are the record's fixed overhead above max_record_bytes, whatever the
// steps wrote or the spec asked.
const (
	maxTextBytes    = 4 << 10  // one error or reason string
	maxArgvBytes    = 4 << 10  // one step's argv as the record lists it
	maxRefused      = 256      // entries of refused
	maxRefusedBytes = 64 << 10 // their paths together
)

// boundRest bounds what else of rec a step or a server could make large:
// error strings, argv, the lists of out/ and of refused artifact matches.
func boundRest(rec *record.Run) {
	rec.Error = clipText(rec.Error)
	for i := range rec.Steps {
		st := &rec.Steps[i]
		st.Error = clipText(st.Error)
		st.Argv = clipArgv(st.Argv)
	}
	for i := range rec.Inputs {
		in := &rec.Inputs[i]
		in.Error, in.URL, in.FinalURL = clipText(in.Error), clipText(in.URL), clipText(in.FinalURL)
	}
	for i := range rec.Egress {
		rec.Egress[i].Reason = clipText(rec.Egress[i].Reason)
	}
	rec.Files = boundFiles(rec, rec.Files, maxListed, maxListedBytes, "out/ lists")
	rec.Refused = boundFiles(rec, rec.Refused, maxRefused, maxRefusedBytes, "refused lists")
}

// clipText cuts s to maxTextBytes as encoded, at a character boundary.
func clipText(s string) string {
	if int64(len(s)) <= maxTextBytes/6 || encodedLen(s, "") <= maxTextBytes {
		return s
	}
	cut, _ := cutEncoded(s, "", maxTextBytes-16)
	return cut + "… (cut)"
}

// clipArgv keeps the arguments of argv that fit maxArgvBytes as encoded,
// and says how many it left out in a last element.
func clipArgv(argv []string) []string {
	var n int64
	for i, a := range argv {
		n += encodedLen(a, "") + 3
		if n > maxArgvBytes {
			out := append([]string(nil), argv[:i]...)
			return append(out, fmt.Sprintf("… (%d more arguments not listed)", len(argv)-i))
		}
	}
	return argv
}

// boundFiles cuts a list of files to max entries and maxBytes of encoded
// paths, and says so in rec's error.
func boundFiles(rec *record.Run, files []record.File, max int, maxBytes int64, what string) []record.File {
	var n int64
	for i, f := range files {
		n += encodedLen(f.Path, "")
		if i >= max || n > maxBytes {
			rec.Error = joinErr(rec.Error, fmt.Sprintf("%s more than %d entries or %d bytes of paths; truncated at %d", what, max, maxBytes, i))
			return files[:i]
		}
	}
	return files
}
