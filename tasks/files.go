package tasks

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// File is the content of one of a spec's files: any bytes. In JSON it is a
// string (UTF-8 text, written as is), {"base64": "..."} (any bytes, written
// byte for byte) or {"text": "..."}; either object may add "mode" (see
// FileMode), which Decode keeps in Spec.FileModes. It is encoded as a
// string when it is valid UTF-8, else as base64.
type File string

// FileMode is the permission bits a spec's file is written with: at most
// 0777 (no setuid, setgid or sticky bit), DefaultFileMode when the spec
// gives none. In JSON it is a string of three octal digits, optionally led
// by 0: "0755", "644" (a JSON number would be read in decimal, so none is
// taken).
type FileMode uint32

// DefaultFileMode is the mode of a file whose spec gives none: readable
// and writable by the step, not executable.
const DefaultFileMode FileMode = 0o600

// String is the mode as a spec writes it: "0755".
func (m FileMode) String() string { return fmt.Sprintf("%04o", uint32(m)) }

// modeHint says how a mode is written.
const modeHint = `a string of octal digits at most "0777", e.g. "0755" for a script a step runs as ./run.sh`

var modeRE = regexp.MustCompile(`^0?[0-7]{3}$`)

// ParseFileMode reads a mode as a spec writes it ("0755" or "755").
func ParseFileMode(s string) (FileMode, error) {
	if !modeRE.MatchString(s) {
		if n, err := strconv.ParseUint(s, 8, 32); err == nil && n > 0o777 && n <= 0o7777 {
			return 0, errors.New("setuid, setgid and sticky bits are not allowed")
		}
		return 0, fmt.Errorf("%q is not a file mode", clipKey(s))
	}
	n, _ := strconv.ParseUint(s, 8, 32)
	return FileMode(n), nil
}

// check reports a mode a spec may not give (set from Go, past ParseFileMode).
func (m FileMode) check() error {
	if m > 0o777 {
		return fmt.Errorf("%#o has bits above 0777 (setuid, setgid, sticky or a file type)", uint32(m))
	}
	return nil
}

// memberError is an error of one member of an object that decodes itself
// (a file's "mode"): walk names the field as the object's path, a dot and
// the member.
type memberError struct {
	member, msg, hint string
}

func (e *memberError) Error() string {
	if e.member == "" {
		return e.msg
	}
	return e.member + ": " + e.msg
}

// fileKeys are the members of a file's object form.
var fileKeys = []string{"text", "base64", "mode"}

// parseFile reads a file's JSON: a string, or an object with text or
// base64 and an optional mode (hasMode then true).
func parseFile(data []byte) (content string, mode FileMode, hasMode bool, err error) {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		return s, 0, false, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		return "", 0, false, &memberError{msg: `want a string, or an object: {"text": "..."} or {"base64": "..."} (bytes that are not UTF-8 text), either with an optional "mode"`}
	}
	for k := range obj {
		if !slices.Contains(fileKeys, k) {
			return "", 0, false, &memberError{member: clipKey(k), msg: "unknown field", hint: "known fields: " + strings.Join(fileKeys, ", ")}
		}
	}
	text, hasText := obj["text"]
	b64, hasB64 := obj["base64"]
	switch {
	case hasText && hasB64:
		return "", 0, false, &memberError{msg: `give "text" or "base64", not both`}
	case hasText:
		if err := json.Unmarshal(text, &content); err != nil {
			return "", 0, false, &memberError{member: "text", msg: "want a string"}
		}
	case hasB64:
		var enc string
		if err := json.Unmarshal(b64, &enc); err != nil {
			return "", 0, false, &memberError{member: "base64", msg: "want a string"}
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return "", 0, false, &memberError{member: "base64", msg: err.Error(), hint: "standard base64 (RFC 4648, padded)"}
		}
		content = string(raw)
	default:
		return "", 0, false, &memberError{msg: `want "text" or "base64" in a file's object form`}
	}
	if m, ok := obj["mode"]; ok {
		var ms string
		if err := json.Unmarshal(m, &ms); err != nil {
			return "", 0, false, &memberError{member: "mode", msg: `want a string of octal digits such as "0755"`, hint: "a JSON number would be read in decimal"}
		}
		if mode, err = ParseFileMode(ms); err != nil {
			return "", 0, false, &memberError{member: "mode", msg: err.Error(), hint: modeHint}
		}
		hasMode = true
	}
	return content, mode, hasMode, nil
}

// UnmarshalJSON reads a string, or the object form; the mode, if any, is
// checked here and kept by Decode in Spec.FileModes.
func (f *File) UnmarshalJSON(data []byte) error {
	s, _, _, err := parseFile(data)
	if err != nil {
		return err
	}
	*f = File(s)
	return nil
}

// MarshalJSON writes a string when the content is UTF-8, else base64.
func (f File) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(string(f)) {
		return json.Marshal(string(f))
	}
	return json.Marshal(map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(f))})
}

// withMode is f's object form with mode m.
func (f File) withMode(m FileMode) map[string]string {
	if utf8.ValidString(string(f)) {
		return map[string]string{"text": string(f), "mode": m.String()}
	}
	return map[string]string{"base64": base64.StdEncoding.EncodeToString([]byte(f)), "mode": m.String()}
}

// readModes fills s.FileModes from the files of data, a document that
// strictDecode accepted into s. Only an object form holds a mode, and its
// key is written "mode" in the document, or with one of its letters
// escaped (\u006d, \u006f, \u0064, \u0065, hex digits in either case: all
// begin \u006): a document with neither is not read again. So a spec whose
// argv holds & < > (which Go's encoder escapes as \u0026, \u003c, \u003e)
// or words such as "model" costs no second read.
func (s *Spec) readModes(data []byte) error {
	if len(s.Files) == 0 || !bytes.Contains(data, []byte(`"mode"`)) && !bytes.Contains(data, []byte(`\u006`)) {
		return nil
	}
	var doc struct {
		Files map[string]json.RawMessage `json:"files"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return &FieldError{Field: "files", Msg: cleanJSONError(err)}
	}
	for p, raw := range doc.Files {
		if len(raw) == 0 || raw[0] != '{' {
			continue
		}
		_, m, ok, err := parseFile(raw)
		if err != nil {
			return fileFieldError(fmt.Sprintf("files[%q]", p), err)
		}
		if ok {
			if s.FileModes == nil {
				s.FileModes = map[string]FileMode{}
			}
			s.FileModes[p] = m
		}
	}
	return nil
}

// fileFieldError names err, an error of the file at field, as a field.
func fileFieldError(field string, err error) *FieldError {
	var me *memberError
	if errors.As(err, &me) {
		if me.member != "" {
			field += "." + me.member
		}
		return &FieldError{Field: field, Msg: me.msg, Hint: me.hint}
	}
	return &FieldError{Field: field, Msg: cleanJSONError(err)}
}

// prepareFiles checks the files' paths and modes.
func (s *Spec) prepareFiles() error {
	if len(s.Files) > maxFiles {
		return &FieldError{Field: "files", Msg: fmt.Sprintf("%d files, at most %d", len(s.Files), maxFiles)}
	}
	for p := range s.Files {
		if err := CheckPath(fmt.Sprintf("files[%q]", p), p); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(s.FileModes)) {
		f := fmt.Sprintf("files[%q].mode", p)
		if _, ok := s.Files[p]; !ok {
			return &FieldError{Field: f, Msg: "a mode for a file the spec does not have", Hint: "give the file's content in files too"}
		}
		if err := s.FileModes[p].check(); err != nil {
			return &FieldError{Field: f, Msg: err.Error(), Hint: modeHint}
		}
	}
	return nil
}

// Mode returns the mode file p is written with.
func (s *Spec) Mode(p string) FileMode {
	if m, ok := s.FileModes[p]; ok {
		return m
	}
	return DefaultFileMode
}

// MarshalJSON writes the spec; a file with a mode in FileModes is written
// in its object form with that mode.
func (s Spec) MarshalJSON() ([]byte, error) {
	type plain Spec
	if len(s.FileModes) == 0 {
		return json.Marshal(plain(s))
	}
	files := make(map[string]any, len(s.Files))
	for p, f := range s.Files {
		if m, ok := s.FileModes[p]; ok {
			files[p] = f.withMode(m)
		} else {
			files[p] = f
		}
	}
	return json.Marshal(struct {
		plain
		Files map[string]any `json:"files,omitempty"`
	}{plain(s), files})
}
