package contract

import (
	"strconv"
	"strings"
)

// The checks of a schema walk it by JSON pointer (refs.go, cost.go,
// regex.go): each subschema is named by the path from the root, so their
// work grows with the sum of those paths' lengths, which nesting makes
// quadratic in the schema's size: 9,000 nested "items" (90 KB) cost 12 s
// and 3.8 GB before this bound. checkShape bounds the depth and that sum
// first, in one walk that allocates nothing.

// Bounds of a schema document's shape.
const (
	// MaxSchemaDepth bounds how deep a schema nests objects and arrays.
	MaxSchemaDepth = 128
	// MaxSchemaPaths bounds the sum of the lengths of the JSON pointers of
	// all the values of a schema: a schema of 1 MiB of properties sums to
	// ~600 KiB; checking one at the bound allocates ~35 MiB (~0.1 s).
	MaxSchemaPaths = 2 << 20
)

// checkShape refuses a schema document nested deeper than MaxSchemaDepth,
// or whose values' pointers add up to more than MaxSchemaPaths bytes.
func checkShape(doc any) error {
	var sum int64
	var walk func(v any, depth int, path int64) (string, bool)
	walk = func(v any, depth int, path int64) (string, bool) {
		sum += path
		if sum > MaxSchemaPaths {
			return "", false
		}
		switch v := v.(type) {
		case map[string]any:
			if depth == MaxSchemaDepth {
				return "", false
			}
			for k, c := range v {
				if at, ok := walk(c, depth+1, path+1+int64(len(k))); !ok {
					return "/" + escapeToken(cutToken(k)) + at, false
				}
			}
		case []any:
			if depth == MaxSchemaDepth {
				return "", false
			}
			for i, c := range v {
				if at, ok := walk(c, depth+1, path+1+int64(digits(i))); !ok {
					return "/" + strconv.Itoa(i) + at, false
				}
			}
		}
		return "", true
	}
	if at, ok := walk(doc, 0, 0); !ok {
		if sum > MaxSchemaPaths {
			return badSchema("the JSON pointers of its values add up to more than %d bytes (long keys nested deep), at #%s", MaxSchemaPaths, cutPath(at))
		}
		return badSchema("it nests objects and arrays more than %d deep, at #%s", MaxSchemaDepth, cutPath(at))
	}
	return nil
}

// cutToken and cutPath keep a path in an error message short.
func cutToken(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}

func cutPath(p string) string {
	if n := strings.Count(p, "/"); n > 12 {
		parts := strings.Split(p, "/")
		return strings.Join(parts[:7], "/") + "/…(" + strconv.Itoa(n-12) + " more)…/" + strings.Join(parts[len(parts)-6:], "/")
	}
	return p
}

func digits(i int) int {
	n := 1
	for ; i >= 10; i /= 10 {
		n++
	}
	return n
}
