package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Bounds of a result diff: what it compares and what it lists.
const (
	// MaxKeyChanges bounds the values a result diff lists.
	MaxKeyChanges = 200
	// MaxLeaves bounds the values of one result a diff compares.
	MaxLeaves = 10000
	// MaxDepth bounds how deep in a result a diff looks.
	MaxDepth = 64
	// MaxPointer bounds the pointer of a value a diff compares, in bytes.
	MaxPointer = 1024
	// maxLeafText bounds a value's JSON text a diff lists.
	maxLeafText = 1024
)

// KeyChange is one value of a result that differs from the last accepted
// result's: Pointer is its RFC 6901 JSON pointer, Before and After its
// JSON text (absent on the side where it is absent; null is "null").
type KeyChange struct {
	Pointer string          `json:"pointer"`
	Change  string          `json:"change"`
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
}

// ResultDiff is how a result differs from the last accepted one.
type ResultDiff struct {
	// Keys are the values added, removed and changed, by pointer: every
	// scalar, empty object and empty array; at most MaxKeyChanges.
	Keys []KeyChange
	// Cut: more values changed than Keys lists.
	Cut bool
	// Note says what was not compared, when a result holds more than
	// MaxLeaves values, deeper than MaxDepth, or pointers longer than
	// MaxPointer: no change listed is then no proof of none.
	Note string
}

// DiffResult compares two results value by value. It reads each as a
// stream of tokens (never a tree: a result's depth costs nothing), within
// the bounds above; a result that is not JSON is one value, its text.
func DiffResult(before, after []byte) ResultDiff {
	b, bErr := leaves(before)
	a, aErr := leaves(after)
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var d ResultDiff
	for _, k := range keys {
		bv, inB := b[k]
		av, inA := a[k]
		c := KeyChange{Pointer: k}
		switch {
		case !inB:
			c.Change, c.After = Added, av
		case !inA:
			c.Change, c.Before = Removed, bv
		case !sameValue(av, bv):
			c.Change, c.Before, c.After = Changed, bv, av
		default:
			continue
		}
		if len(d.Keys) == MaxKeyChanges {
			d.Cut = true
			break
		}
		d.Keys = append(d.Keys, c)
	}
	if err := errors.Join(bErr, aErr); err != nil && !bytes.Equal(before, after) {
		d.Note = fmt.Sprintf("compared in part: %v", err)
	}
	return d
}

// sameValue reports whether two values' JSON texts say the same: the same
// text, or two numbers equal as float64.
func sameValue(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	x, err1 := strconv.ParseFloat(string(a), 64)
	y, err2 := strconv.ParseFloat(string(b), 64)
	return err1 == nil && err2 == nil && x == y
}

// frame is a container being read: an array (its next index) or an
// object (its next key).
type frame struct {
	array    bool
	index    int
	key      string
	children int
}

// leaves maps each scalar of a JSON document (and each empty object or
// array) to its JSON text, by pointer, within the bounds; the error says
// which bound it met, or that the document is not JSON.
func leaves(doc []byte) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(doc)) == 0 {
		return out, nil
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var stack []frame
	var bounds []string // the bounds met, each once
	met := func(format string, n int) {
		if msg := fmt.Sprintf(format, n); !slices.Contains(bounds, msg) {
			bounds = append(bounds, msg)
		}
	}
	// leaf records raw at the current position.
	leaf := func(raw json.RawMessage) {
		switch {
		case len(stack) > MaxDepth:
			met("values deeper than %d levels", MaxDepth)
		case len(out) >= MaxLeaves:
			met("more than %d values", MaxLeaves)
		default:
			if p := pointer(stack); len(p) > MaxPointer {
				met("pointers longer than %d bytes", MaxPointer)
			} else {
				out[p] = raw
			}
		}
	}
	// next moves the current position past one value.
	next := func() {
		if n := len(stack); n > 0 {
			stack[n-1].children++
			if stack[n-1].array {
				stack[n-1].index++
			}
		}
	}
	for {
		// An object's key comes first.
		if n := len(stack); n > 0 && !stack[n-1].array && dec.More() {
			t, err := dec.Token()
			if err != nil {
				return notJSON(doc)
			}
			k, _ := t.(string)
			stack[n-1].key = k
		}
		t, err := dec.Token()
		if errors.Is(err, io.EOF) && len(stack) == 0 {
			break
		}
		if err != nil {
			return notJSON(doc)
		}
		switch v := t.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				stack = append(stack, frame{array: v == '['})
				continue
			default: // the end of a container: an empty one is a value
				f := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if f.children == 0 {
					if f.array {
						leaf(json.RawMessage("[]"))
					} else {
						leaf(json.RawMessage("{}"))
					}
				}
			}
		case json.Number:
			leaf(json.RawMessage(v.String()))
		default: // string, bool, nil
			b, _ := json.Marshal(v)
			if len(b) > maxLeafText {
				s, _ := Clip(string(b), maxLeafText)
				b, _ = json.Marshal(s + "…")
			}
			leaf(b)
		}
		next()
		if len(stack) == 0 {
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return notJSON(doc)
			}
			break
		}
	}
	if len(bounds) > 0 {
		return out, errors.New(strings.Join(bounds, ", "))
	}
	return out, nil
}

// notJSON is a document that is not one JSON value, as one value: its
// text, cut.
func notJSON(doc []byte) (map[string]json.RawMessage, error) {
	s, cutDoc := Clip(string(doc), maxLeafText)
	b, _ := json.Marshal(s)
	var err error
	if cutDoc {
		err = errors.New("not JSON, compared as text, its first bytes listed")
	}
	return map[string]json.RawMessage{"": b}, err
}

// pointer is the JSON pointer of the current position of stack.
func pointer(stack []frame) string {
	var b strings.Builder
	for _, f := range stack {
		b.WriteByte('/')
		if f.array {
			b.WriteString(strconv.Itoa(f.index))
		} else {
			b.WriteString(escapeToken(f.key))
		}
		if b.Len() > MaxPointer+1 {
			break
		}
	}
	return b.String()
}

// escapeToken escapes a key as a JSON pointer's token (RFC 6901).
func escapeToken(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// MaxTreeDepth bounds the nesting of a result the console's page shows as
// a tree: a deeper one is shown as its text (a browser's JSON reader, and
// a page of nested trees, give out long before Go's 10,000 levels).
const MaxTreeDepth = 128

// Depth returns how deeply a JSON document nests its objects and arrays
// (0 for a scalar), reading its bytes once; strings are skipped.
func Depth(doc []byte) int {
	depth, most, inString, escaped := 0, 0, false, false
	for _, c := range doc {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			most = max(most, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return most
}
