package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Duplicate keys split the truth: encoding/json (the schema's validator,
// the risk policy) keeps an object's last value for a key, while other
// readers of the same bytes keep the first. A result, or a spec, with a
// key twice in one object is refused.

// MaxKeyDepth is how deeply CheckDuplicateKeys follows nested objects and
// arrays: encoding/json's own bound, so that no document it accepts is
// refused for its depth alone.
const MaxKeyDepth = 10000

// ErrDuplicateKey is matched by a *DuplicateKeyError.
var ErrDuplicateKey = errors.New("duplicate key")

// PathStep is one step of the path from a document's root to a value: a
// key of an object, or an index of an array (InArray).
type PathStep struct {
	Key     string
	Index   int
	InArray bool
}

// DuplicateKeyError says that an object of a JSON document holds a key
// more than once.
type DuplicateKeyError struct {
	// Key is the key, as encoding/json decodes it (escapes resolved,
	// invalid UTF-8 as U+FFFD): two spellings it decodes alike are one
	// key.
	Key string
	// In is the path to the object holding it, from the root.
	In []PathStep
}

// maxPointerText bounds the JSON pointer an error's text shows.
const maxPointerText = 1 << 10

// Pointer is the RFC 6901 JSON pointer of the key: "/amount",
// "/items/0/amount".
func (e *DuplicateKeyError) Pointer() string {
	var b strings.Builder
	for _, s := range e.In {
		b.WriteByte('/')
		if s.InArray {
			b.WriteString(strconv.Itoa(s.Index))
		} else {
			b.WriteString(escapeToken(s.Key))
		}
	}
	b.WriteByte('/')
	b.WriteString(escapeToken(e.Key))
	return b.String()
}

func (e *DuplicateKeyError) Error() string {
	key, ptr := e.Key, e.Pointer()
	if len(key) > maxPointerText {
		key = strings.ToValidUTF8(key[:maxPointerText], "") + "…"
	}
	if len(ptr) > maxPointerText {
		ptr = strings.ToValidUTF8(ptr[:maxPointerText], "") + "…"
	}
	return fmt.Sprintf("duplicate key %q at %s", key, ptr)
}

// Is reports whether target is ErrDuplicateKey.
func (e *DuplicateKeyError) Is(target error) bool { return target == ErrDuplicateKey }

// CheckDuplicateKeys returns a *DuplicateKeyError when an object of data,
// a JSON document, holds a key twice (the innermost such object found
// first), and an error when data is not one JSON value (its caller is
// expected to have checked that with json.Valid: the error says little)
// or nests deeper than MaxKeyDepth. It reads data once, and allocates
// nothing in the steady state for a document whose keys hold no escape
// and are valid UTF-8; objects are checked when they close: a small one
// by comparing its keys pairwise, a larger one by sorting their hashes.
func CheckDuplicateKeys(data []byte) error {
	c := keyCheckers.Get().(*keyChecker)
	err := c.check(data)
	c.reset()
	keyCheckers.Put(c)
	return err
}

var keyCheckers = sync.Pool{New: func() any { return new(keyChecker) }}

// maxPooled bounds what a pooled checker keeps of its buffers.
const maxPooled = 64 << 10

// span is a key: data[off:off+n], or arena[off:off+n] when decoded.
// int32 halves what a document of many small keys costs; a document
// above maxKeyDoc is refused (its decoded keys, up to three times its
// invalid bytes, must fit too).
type span struct {
	off, n int32
	arena  bool
}

// frame is an open object or array.
type frame struct {
	array bool
	index int  // arrays: the current element
	key   span // objects: the current key
	keys  int  // objects: where their keys start in keyChecker.keys
}

type keyChecker struct {
	data   []byte
	frames []frame
	keys   []span
	arena  []byte   // keys that escapes or invalid UTF-8 make differ from their bytes
	hashes []uint64 // a large object's keys' hashes
}

// keySeed seeds the keys' hashes: a document cannot be made of
// colliding keys without knowing it (collisions cost comparisons only).
var keySeed = maphash.MakeSeed()

func (c *keyChecker) reset() {
	c.data = nil
	if cap(c.frames) > maxPooled/32 {
		c.frames = nil
	}
	if cap(c.keys) > maxPooled/16 {
		c.keys = nil
	}
	if cap(c.arena) > maxPooled {
		c.arena = nil
	}
	if cap(c.hashes) > maxPooled/8 {
		c.hashes = nil
	}
	c.frames, c.keys, c.arena, c.hashes = c.frames[:0], c.keys[:0], c.arena[:0], c.hashes[:0]
}

// Parser states.
const (
	wantValue = iota
	wantKey
	wantNext // after a value: ',' or the end of its container (or of data)
)

// maxKeyDoc is the largest document CheckDuplicateKeys reads.
const maxKeyDoc = math.MaxInt32 / 4

var errNotJSON = fmt.Errorf("%w (checking keys)", ErrResultNotJSON)

func (c *keyChecker) check(data []byte) error {
	if len(data) > maxKeyDoc {
		return fmt.Errorf("%w: larger than %d bytes", errNotJSON, maxKeyDoc)
	}
	c.data = data
	n := len(data)
	p, state := 0, wantValue
	for {
		p = skipSpace(data, p)
		switch state {
		case wantValue:
			if p >= n {
				return errNotJSON
			}
			switch data[p] {
			case '{', '[':
				if len(c.frames) >= MaxKeyDepth {
					return fmt.Errorf("nested deeper than %d", MaxKeyDepth)
				}
				arr := data[p] == '['
				c.frames = append(c.frames, frame{array: arr, keys: len(c.keys)})
				p = skipSpace(data, p+1)
				if p < n && (arr && data[p] == ']' || !arr && data[p] == '}') {
					c.frames = c.frames[:len(c.frames)-1]
					p, state = p+1, wantNext
				} else if !arr {
					state = wantKey
				}
			case '"':
				end, _, _ := stringEnd(data, p)
				if end < 0 {
					return errNotJSON
				}
				p, state = end, wantNext
			default:
				q := p
				for q < n && !isDelim(data[q]) {
					q++
				}
				if q == p {
					return errNotJSON
				}
				p, state = q, wantNext
			}
		case wantKey:
			if p >= n || data[p] != '"' {
				return errNotJSON
			}
			end, escaped, ascii := stringEnd(data, p)
			if end < 0 {
				return errNotJSON
			}
			k := span{off: int32(p + 1), n: int32(end - p - 2)}
			if escaped || !ascii && !utf8.Valid(data[p+1:end-1]) {
				var s string
				if json.Unmarshal(data[p:end], &s) != nil {
					return errNotJSON
				}
				k = span{off: int32(len(c.arena)), n: int32(len(s)), arena: true}
				c.arena = append(c.arena, s...)
			}
			c.frames[len(c.frames)-1].key = k
			c.keys = append(c.keys, k)
			p = skipSpace(data, end)
			if p >= n || data[p] != ':' {
				return errNotJSON
			}
			p, state = p+1, wantValue
		case wantNext:
			if len(c.frames) == 0 {
				if p != n {
					return errNotJSON
				}
				return nil
			}
			top := &c.frames[len(c.frames)-1]
			if p >= n {
				return errNotJSON
			}
			switch b := data[p]; {
			case b == ',':
				if top.array {
					top.index++
					state = wantValue
				} else {
					state = wantKey
				}
			case b == '}' && !top.array:
				if err := c.closeObject(); err != nil {
					return err
				}
				c.frames = c.frames[:len(c.frames)-1]
			case b == ']' && top.array:
				c.frames = c.frames[:len(c.frames)-1]
			default:
				return errNotJSON
			}
			p++
		}
	}
}

func (c *keyChecker) bytesOf(s span) []byte {
	if s.arena {
		return c.arena[s.off : s.off+s.n]
	}
	return c.data[s.off : s.off+s.n]
}

// closeObject checks the keys of the object that closes (the top frame)
// and forgets them.
func (c *keyChecker) closeObject() error {
	top := c.frames[len(c.frames)-1]
	keys := c.keys[top.keys:]
	defer func() { c.keys = c.keys[:top.keys] }()
	var dup []byte
	if len(keys) <= 8 {
	small:
		for i := 1; i < len(keys); i++ {
			ki := c.bytesOf(keys[i])
			for j := 0; j < i; j++ {
				if bytes.Equal(ki, c.bytesOf(keys[j])) {
					dup = ki
					break small
				}
			}
		}
	} else {
		// Their hashes sorted: equal neighbors are a duplicate or (rarely)
		// a collision, told apart by the keys themselves.
		c.hashes = slices.Grow(c.hashes[:0], len(keys))
		for _, k := range keys {
			c.hashes = append(c.hashes, maphash.Bytes(keySeed, c.bytesOf(k)))
		}
		slices.Sort(c.hashes)
		for i := 1; i < len(c.hashes); i++ {
			if c.hashes[i] == c.hashes[i-1] {
				dup = c.firstDuplicate(keys)
				break
			}
		}
	}
	if dup == nil {
		return nil
	}
	e := &DuplicateKeyError{Key: string(dup), In: make([]PathStep, 0, len(c.frames)-1)}
	for _, f := range c.frames[:len(c.frames)-1] {
		if f.array {
			e.In = append(e.In, PathStep{Index: f.index, InArray: true})
		} else {
			e.In = append(e.In, PathStep{Key: string(c.bytesOf(f.key))})
		}
	}
	return e
}

// firstDuplicate returns the first key of keys (in document order) that
// an earlier one equals, or nil.
func (c *keyChecker) firstDuplicate(keys []span) []byte {
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		b := c.bytesOf(k)
		if _, ok := seen[string(b)]; ok {
			return b
		}
		seen[string(b)] = struct{}{}
	}
	return nil
}

// stringEnd returns the index just past the string that starts with the
// quote at data[p], or -1 when it does not end; whether it holds an
// escape; and ascii, true when its bytes are known to be ASCII (false
// says "unknown" past its first bytes).
func stringEnd(data []byte, p int) (end int, escaped, ascii bool) {
	i := p + 1
	// Short strings, most keys and values: a byte loop.
	var hi byte
	for lim := min(i+shortString, len(data)); i < lim; i++ {
		switch c := data[i]; c {
		case '"':
			return i + 1, escaped, hi < utf8.RuneSelf
		case '\\':
			escaped = true
			i++ // the escaped byte (a \uXXXX's digits hold no quote or backslash)
		default:
			hi |= c
		}
	}
	// Longer ones: the next quote, then whether an escape comes before it.
	for i <= len(data) {
		q := bytes.IndexByte(data[i:], '"')
		if q < 0 {
			return -1, escaped, false
		}
		bs := bytes.IndexByte(data[i:i+q], '\\')
		if bs < 0 {
			return i + q + 1, escaped, false
		}
		escaped = true
		i += bs + 2
	}
	return -1, escaped, false
}

// shortString is how many bytes of a string stringEnd reads one by one.
const shortString = 32

func skipSpace(data []byte, p int) int {
	for p < len(data) {
		switch data[p] {
		case ' ', '\t', '\n', '\r':
			p++
		default:
			return p
		}
	}
	return p
}

func isDelim(b byte) bool {
	switch b {
	case ',', ']', '}', ':', ' ', '\t', '\n', '\r', '"', '{', '[':
		return true
	}
	return false
}
