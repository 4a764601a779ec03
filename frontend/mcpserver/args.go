package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-run/airlock/tasks"
)

// arg is one field of a tool's arguments and where it is decoded to.
type arg struct {
	name string
	dst  any // pointer: *string, *bool, *json.RawMessage
}

// decodeArgs decodes a tool's arguments (a JSON object) into args,
// strictly: an unknown field or a value of the wrong type gives a
// *tasks.FieldError naming the field, as the CLIs do. A null value
// leaves its field unset.
func decodeArgs(raw json.RawMessage, args ...arg) error {
	obj := map[string]json.RawMessage{}
	if t := bytes.TrimSpace(raw); len(t) > 0 && !bytes.Equal(t, []byte("null")) {
		if err := json.Unmarshal(t, &obj); err != nil {
			return &tasks.FieldError{Field: "arguments", Msg: "want a JSON object"}
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	known := make([]string, len(args))
	for i, a := range args {
		known[i] = a.name
	}
	for _, k := range keys {
		i := slices.IndexFunc(args, func(a arg) bool { return a.name == k })
		if i < 0 {
			return &tasks.FieldError{Field: k, Msg: "unknown field", Hint: "known fields: " + strings.Join(known, ", ")}
		}
		v := obj[k]
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		if err := json.Unmarshal(v, args[i].dst); err != nil {
			return &tasks.FieldError{Field: k, Msg: want(args[i].dst)}
		}
	}
	return nil
}

// want says what type a field takes.
func want(dst any) string {
	switch dst.(type) {
	case *string:
		return "want a string"
	case *bool:
		return "want true or false"
	}
	return fmt.Sprintf("want a JSON value of type %T", dst)
}

// waitFor parses a wait's timeout: def when s is empty, else a positive Go
// duration, capped at max.
func waitFor(field, s string, def, max time.Duration) (time.Duration, error) {
	d := def
	if s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, &tasks.FieldError{Field: field, Msg: fmt.Sprintf("%q is not a Go duration", s), Hint: "e.g. 30s, 2m"}
		}
		if d <= 0 {
			return 0, &tasks.FieldError{Field: field, Msg: fmt.Sprintf("%q: must be positive", s)}
		}
	}
	return min(d, max), nil
}
