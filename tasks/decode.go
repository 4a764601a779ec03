package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/airlock-run/airlock/contract"
)

// strictDecode decodes data into v (a pointer to a struct) and fails on the
// first unknown field, badly typed value or key given twice in one object
// with a *FieldError naming its JSON path ("steps[1].timeout").
func strictDecode(data []byte, v any) error {
	// Syntax and trailing data first: walk would report both as "want a
	// JSON object", and Decoder.More misses a trailing '}' or ']'. A valid
	// document is checked in one scan; the decoder below names the error
	// of an invalid one.
	raw := json.RawMessage(data)
	if !json.Valid(data) {
		return syntaxError(data)
	}
	t := reflect.TypeOf(v).Elem()
	// A key twice in one object, anywhere (output.schema, params and env
	// included): the decoder below keeps the last value, other readers of
	// the same spec the first.
	if err := contract.CheckDuplicateKeys(data); err != nil {
		var de *contract.DuplicateKeyError
		if errors.As(err, &de) {
			return &FieldError{Field: fieldPath(t, de.In), Msg: fmt.Sprintf("duplicate key %q", clipKey(de.Key))}
		}
		return &FieldError{Field: "spec", Msg: err.Error()}
	}
	// Keys first, case-sensitively (encoding/json matches field names
	// without case); values are checked one by one only when the decode
	// fails, to name the bad one: the worker's hot path decodes once.
	if err := walk(raw, t, "", false); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if werr := walk(raw, t, "", true); werr != nil {
			return werr
		}
		return &FieldError{Field: "spec", Msg: err.Error()}
	}
	return nil
}

// fieldPath names, as walk does ("steps[0].env", "files[\"a.sh\"]"), the
// object at path in a document decoded into t: struct fields joined with
// dots, map keys and keys inside raw JSON (output.schema, params) in
// brackets.
func fieldPath(t reflect.Type, path []contract.PathStep) string {
	name := ""
	for _, st := range path {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t != nil && (t == rawMessageType || reflect.PointerTo(t).Implements(unmarshalerType)) {
			t = nil // raw JSON from here on
		}
		switch {
		case st.InArray:
			name = fmt.Sprintf("%s[%d]", name, st.Index)
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				t = t.Elem()
			} else {
				t = nil
			}
		case t != nil && t.Kind() == reflect.Struct:
			name = join(name, st.Key)
			if f, ok := fieldByTag(t, st.Key); ok {
				t = f.Type
			} else {
				t = nil
			}
		default:
			name = fmt.Sprintf("%s[%q]", name, clipKey(st.Key))
			if t != nil && t.Kind() == reflect.Map {
				t = t.Elem()
			} else {
				t = nil
			}
		}
	}
	if name == "" {
		return "spec"
	}
	return name
}

// maxKeyText bounds a key as an error names it.
const maxKeyText = 256

func clipKey(k string) string {
	if len(k) <= maxKeyText {
		return k
	}
	return strings.ToValidUTF8(k[:maxKeyText], "") + "…"
}

// syntaxError names what is wrong with a document json.Valid refused, and
// where: "line 3, column 14: invalid character ...".
func syntaxError(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		var se *json.SyntaxError
		switch {
		case err == io.EOF:
			return &FieldError{Field: "spec", Msg: "empty document"}
		case errors.As(err, &se):
			// Offset is past the character that is wrong.
			return &FieldError{Field: "spec", Msg: at(data, se.Offset-1) + cleanJSONError(err)}
		case err == io.ErrUnexpectedEOF:
			return &FieldError{Field: "spec", Msg: at(data, int64(len(data))) + "unexpected end of the document", Hint: "a brace, bracket or quote is not closed"}
		}
		return &FieldError{Field: "spec", Msg: cleanJSONError(err)}
	}
	off := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		for off < int64(len(data)) && strings.ContainsRune(" \t\r\n", rune(data[off])) {
			off++
		}
		return &FieldError{Field: "spec", Msg: at(data, off) + "trailing data after the JSON object"}
	}
	return &FieldError{Field: "spec", Msg: "not a valid JSON document"}
}

// at says where byte off of data is, as an editor counts: "line 3,
// column 14: " (lines and columns from 1, columns in characters).
func at(data []byte, off int64) string {
	off = max(0, min(off, int64(len(data))))
	before := data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Sprintf("line %d, column %d: ", line, col)
}

var rawMessageType = reflect.TypeOf(json.RawMessage{})

// walk checks raw against the shape of t, naming the path of the first
// mismatch. Leaves are decoded into a fresh value of their type, so that
// the decoder's own message (or a custom UnmarshalJSON's) is kept.
func walk(raw json.RawMessage, t reflect.Type, path string, leaves bool) error {
	name := path
	if name == "" {
		name = "spec"
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return nil
	}
	if t == rawMessageType || reflect.PointerTo(t).Implements(unmarshalerType) {
		if !leaves {
			return nil
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			return fileFieldError(name, err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return walk(raw, t.Elem(), path, leaves)
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return &FieldError{Field: name, Msg: "want a JSON object"}
		}
		for key, val := range obj {
			f, ok := fieldByTag(t, key)
			if !ok {
				return &FieldError{Field: join(path, key), Msg: "unknown field", Hint: "known fields: " + strings.Join(tags(t), ", ")}
			}
			if err := walk(val, f.Type, join(path, key), leaves); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if !leaves && !holdsStruct(t.Elem()) {
			return nil // no keys to check below: the decode checks the rest
		}
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return &FieldError{Field: name, Msg: "want a JSON array"}
		}
		for i, it := range items {
			if err := walk(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i), leaves); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if !leaves && !holdsStruct(t.Elem()) {
			return nil
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return &FieldError{Field: name, Msg: "want a JSON object"}
		}
		for k, val := range obj {
			if err := walk(val, t.Elem(), fmt.Sprintf("%s[%q]", path, k), leaves); err != nil {
				return err
			}
		}
		return nil
	default:
		if !leaves {
			return nil
		}
		if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
			return &FieldError{Field: name, Msg: cleanJSONError(err)}
		}
		return nil
	}
}

func cleanJSONError(err error) string {
	if te, ok := err.(*json.UnmarshalTypeError); ok {
		return fmt.Sprintf("want %s, got a JSON %s", kindName(te.Type), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	}
	return t.String()
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// fieldsByTag caches, per struct type, its fields by JSON name.
var fieldsByTag sync.Map // reflect.Type → map[string]reflect.StructField

func fieldByTag(t reflect.Type, key string) (reflect.StructField, bool) {
	m, ok := fieldsByTag.Load(t)
	if !ok {
		fields := map[string]reflect.StructField{}
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if n := tagName(f); n != "" && n != "-" {
				fields[n] = f
			}
		}
		m, _ = fieldsByTag.LoadOrStore(t, fields)
	}
	f, ok := m.(map[string]reflect.StructField)[key]
	return f, ok
}

// holdsStruct reports whether a value of t may hold a struct that walk
// decodes itself (one with JSON keys to check), through pointers, slices
// and maps.
func holdsStruct(t reflect.Type) bool {
	for {
		if t == rawMessageType || reflect.PointerTo(t).Implements(unmarshalerType) {
			return false
		}
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct:
			return true
		default:
			return false
		}
	}
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func tags(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if n := tagName(t.Field(i)); n != "" && n != "-" {
			out = append(out, n)
		}
	}
	return out
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}
