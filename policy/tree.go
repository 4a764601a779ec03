package policy

// A policy file, JSON or YAML, is first read into one tree of nodes that
// keep their line numbers, so that every error of the schema check
// (parse.go) names the line and the field whatever the format.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// node is a parsed JSON or YAML value.
type node struct {
	kind  nodeKind
	keys  []string // mapNode, in order
	vals  []*node  // mapNode, with keys
	items []*node  // listNode
	value any      // scalarNode: string, bool, nil or number
	plain string   // YAML: the text of an unquoted number or boolean
	line  int
}

type nodeKind int

const (
	scalarNode nodeKind = iota
	mapNode
	listNode
)

// number is a numeric scalar.
type number struct {
	f     float64
	i     int64
	isInt bool
}

func (n *node) what() string {
	switch n.kind {
	case mapNode:
		return "a mapping"
	case listNode:
		return "a list"
	}
	switch v := n.value.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("%t", v)
	case number:
		return "the number " + strconv.FormatFloat(v.f, 'g', -1, 64)
	}
	return "a value"
}

// maxDepth bounds the nesting of a policy document.
const maxDepth = 32

// jsonTree parses one JSON value, keeping the order of keys and rejecting
// duplicates.
func jsonTree(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	fail := func(err error) error {
		pe := &ParseError{Msg: "not JSON: " + err.Error()}
		var se *json.SyntaxError
		off := dec.InputOffset()
		if errors.As(err, &se) {
			off = se.Offset
		}
		if off > int64(len(data)) {
			off = int64(len(data))
		}
		pe.Line = 1 + bytes.Count(data[:off], []byte("\n"))
		return pe
	}
	lineAt := func() int {
		off := min(dec.InputOffset(), int64(len(data)))
		return 1 + bytes.Count(data[:off], []byte("\n"))
	}
	var value func(depth int, field string) (*node, error)
	value = func(depth int, field string) (*node, error) {
		if depth > maxDepth {
			return nil, &ParseError{Line: lineAt(), Field: field, Msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
		}
		tok, err := dec.Token()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fail(err)
		}
		line := lineAt()
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				n := &node{kind: mapNode, line: line}
				for dec.More() {
					kt, err := dec.Token()
					if err != nil {
						return nil, fail(err)
					}
					k := kt.(string) // the decoder checks that keys are strings
					if slices.Contains(n.keys, k) {
						return nil, &ParseError{Line: lineAt(), Field: field, Msg: fmt.Sprintf("key %q appears twice", k)}
					}
					v, err := value(depth+1, join(field, k))
					if err != nil {
						return nil, err
					}
					n.keys, n.vals = append(n.keys, k), append(n.vals, v)
				}
				if _, err := dec.Token(); err != nil {
					return nil, fail(err)
				}
				return n, nil
			case '[':
				n := &node{kind: listNode, line: line}
				for dec.More() {
					v, err := value(depth+1, fmt.Sprintf("%s[%d]", field, len(n.items)))
					if err != nil {
						return nil, err
					}
					n.items = append(n.items, v)
				}
				if _, err := dec.Token(); err != nil {
					return nil, fail(err)
				}
				return n, nil
			}
		case json.Number:
			num, err := parseNumber(string(t))
			if err != nil {
				return nil, &ParseError{Line: line, Field: field, Msg: err.Error()}
			}
			return &node{value: num, line: line}, nil
		}
		return &node{value: tok, line: line}, nil // string, bool or nil
	}
	root, err := value(0, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &ParseError{Line: lineAt(), Msg: "not JSON: data after the policy's object"}
	}
	return root, nil
}

func parseNumber(s string) (number, error) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return number{f: float64(i), i: i, isInt: true}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return number{}, fmt.Errorf("number %s is out of range", s)
	}
	n := number{f: f}
	if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
		n.i, n.isInt = int64(f), true
	}
	return n, nil
}

// yamlLineRE finds the line in a YAML syntax error.
var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlTree parses one YAML document. Anchors, aliases, merge keys and tags
// other than the core schema's are refused: a policy is plain data.
func yamlTree(data []byte) (*node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF { // an empty file
			return &node{kind: mapNode}, nil
		}
		pe := &ParseError{Msg: "not YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			pe.Line, _ = strconv.Atoi(m[1])
			pe.Msg = "not YAML: " + m[2]
		}
		return nil, pe
	}
	var more yaml.Node
	if err := dec.Decode(&more); err != io.EOF {
		return nil, &ParseError{Line: more.Line, Msg: "more than one YAML document"}
	}
	if len(doc.Content) == 0 {
		return &node{kind: mapNode}, nil
	}
	return convertYAML(doc.Content[0], "", 0)
}

func convertYAML(y *yaml.Node, field string, depth int) (*node, error) {
	fail := func(format string, args ...any) error {
		return &ParseError{Line: y.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if depth > maxDepth {
		return nil, fail("nested deeper than %d levels", maxDepth)
	}
	if y.Anchor != "" {
		return nil, fail("anchors (&%s) are not supported", y.Anchor)
	}
	switch y.Kind {
	case yaml.AliasNode:
		return nil, fail("aliases (*%s) are not supported", y.Value)
	case yaml.MappingNode:
		n := &node{kind: mapNode, line: y.Line}
		for i := 0; i+1 < len(y.Content); i += 2 {
			k, v := y.Content[i], y.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
				return nil, &ParseError{Line: k.Line, Field: field, Msg: "keys must be plain strings (no merge keys or complex keys)"}
			}
			if slices.Contains(n.keys, k.Value) {
				return nil, &ParseError{Line: k.Line, Field: field, Msg: fmt.Sprintf("key %q appears twice", k.Value)}
			}
			c, err := convertYAML(v, join(field, k.Value), depth+1)
			if err != nil {
				return nil, err
			}
			n.keys, n.vals = append(n.keys, k.Value), append(n.vals, c)
		}
		return n, nil
	case yaml.SequenceNode:
		n := &node{kind: listNode, line: y.Line}
		for i, item := range y.Content {
			c, err := convertYAML(item, fmt.Sprintf("%s[%d]", field, i), depth+1)
			if err != nil {
				return nil, err
			}
			n.items = append(n.items, c)
		}
		return n, nil
	case yaml.ScalarNode:
		n := &node{line: y.Line}
		if y.Style == 0 {
			n.plain = y.Value
		}
		switch tag := y.ShortTag(); tag {
		case "!!str":
			n.value = y.Value
		case "!!null":
		case "!!bool":
			var b bool
			if err := y.Decode(&b); err != nil {
				return nil, fail("%v", err)
			}
			n.value = b
		case "!!int", "!!float":
			var f float64
			if err := y.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, fail("number %s is out of range", y.Value)
			}
			num := number{f: f}
			var i int64
			if tag == "!!int" && y.Decode(&i) == nil {
				num.i, num.isInt = i, true
			} else if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
				num.i, num.isInt = int64(f), true
			}
			n.value = num
		default:
			return nil, fail("values tagged %s are not supported", tag)
		}
		return n, nil
	}
	return nil, fail("unsupported YAML node")
}

// join returns the field path of key below field.
func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}
