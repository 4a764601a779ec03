// Package actions is the operator's catalog of actions: runs an agent or
// an app asks for by name and parameters, whose steps, files, inputs,
// secrets, limits, network and output contract only the operator writes.
//
// A worker loads its catalog from a directory (worker -actions DIR), one
// file per action, DIR/NAME.yaml, NAME.yml or NAME.json:
//
//	description: Fetch the partner's export and summarize it.
//	params:                  # a JSON Schema (draft-07) of the caller's params: an object
//	  type: object
//	  properties:
//	    day: {type: string, pattern: "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
//	  required: [day]
//	  additionalProperties: false
//	spec:                    # a task spec without action, params, queue, run_id,
//	  secrets: [PARTNER_TOKEN]   # idempotency_key or principal
//	  inputs:
//	    - url: "https://partner.example/export.csv?day=${param:day}"
//	      path: in/export.csv
//	      headers: {Authorization: "Bearer ${secret:PARTNER_TOKEN}"}
//	  steps:
//	    - run: [sh, clean.sh]
//
// A caller enqueues {"version": 1, "action": "NAME", "params": {...}}
// (with a queue, run_id and idempotency_key if it likes, nothing else).
// The worker expands the call from its own catalog, never from anything
// the caller sent: the params are checked against the definition's
// schema, and reach the run only as the file in/params.json and, where
// the definition says so, as ${param:NAME} in its inputs' URLs (escaped,
// after the host: a parameter never chooses where a download goes) and
// headers. Never in argv, environment, stdin or files: a parameter cannot
// change what runs. The record says which action ran and the digest of
// its definition.
//
// Workers publish what callers need of their catalog (name, description,
// params schema, digest, timeout, retries; never the spec) to Redis
// (internal/redis/queuepolicy, with their limits and grants), so
// that the Go client, enqueue, the HTTP API and the MCP server can list
// the actions and check params before enqueue. As with published limits,
// the last worker to start wins: workers that share a Redis should share
// a catalog.
package actions

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/tasks"
)

// ParamsFile is where a run of an action finds its call's params, relative
// to its workspace.
const ParamsFile = "in/params.json"

// Limits on a catalog.
const (
	maxDefinitions   = 256
	maxDefinitionLen = 1 << 20
	maxDescription   = 4096
)

// Info is what callers see of an action: everything but its spec.
type Info struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Params      json.RawMessage `json:"params"`
	// Digest is "sha256:" and the hex SHA-256 of the definition's
	// canonical JSON (keys sorted): the record's action_digest.
	Digest string `json:"digest"`
	// Timeout and MaxRetry are the definition's, as the worker prepared
	// them: the enqueuer's asynq deadline and retries of a call.
	Timeout  limits.Duration `json:"timeout"`
	MaxRetry int             `json:"max_retry"`
}

// Definition is one action of a catalog.
type Definition struct {
	Info
	spec   *tasks.Spec      // the spec template, decoded once; expand clones it
	params *contract.Schema // compiled Info.Params
	// refs are the params the definition's inputs use (${param:NAME}).
	refs []string
}

// Catalog is a set of definitions by name. A nil *Catalog holds none.
type Catalog struct {
	defs map[string]*Definition
}

// Error is a definition that does not load: its file and what is wrong.
type Error struct {
	File  string // the definition's file, or its name
	Field string // "spec.steps[0].run", "params", ...; "" for the file
	Msg   string
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("action %s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("action %s: %s: %s", e.File, e.Field, e.Msg)
}

// LoadDir loads every *.yaml, *.yml and *.json file of dir as a
// definition named after the file, prepared against p (the worker's
// limits). Any file that does not load fails the whole catalog: a worker
// does not start with half of it.
func LoadDir(dir string, p limits.Policy) (*Catalog, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("actions: %w", err)
	}
	c := &Catalog{defs: map[string]*Definition{}}
	for _, e := range ents {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := readBounded(path)
		if err != nil {
			return nil, &Error{File: path, Msg: err.Error()}
		}
		d, err := Parse(strings.TrimSuffix(e.Name(), ext), data, ext, p)
		if err != nil {
			if ae, ok := err.(*Error); ok {
				ae.File = path
			}
			return nil, err
		}
		if err := c.Add(d); err != nil {
			return nil, &Error{File: path, Msg: err.Error()}
		}
	}
	return c, nil
}

// readBounded reads a regular file of at most maxDefinitionLen bytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxDefinitionLen {
		return nil, fmt.Errorf("not a regular file of at most %d bytes", maxDefinitionLen)
	}
	b := make([]byte, st.Size()+1)
	n, _ := f.Read(b)
	for n < len(b) {
		m, err := f.Read(b[n:])
		if m == 0 || err != nil {
			break
		}
		n += m
	}
	if n > maxDefinitionLen {
		return nil, fmt.Errorf("larger than %d bytes", maxDefinitionLen)
	}
	return b[:n], nil
}

// NewCatalog returns a catalog of defs; it fails on a name used twice.
func NewCatalog(defs ...*Definition) (*Catalog, error) {
	c := &Catalog{defs: map[string]*Definition{}}
	for _, d := range defs {
		if err := c.Add(d); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Add adds d to the catalog; it fails when the name is taken or the
// catalog is full.
func (c *Catalog) Add(d *Definition) error {
	if _, dup := c.defs[d.Name]; dup {
		return fmt.Errorf("action %q is defined twice (one file per action: NAME.yaml, NAME.yml or NAME.json)", d.Name)
	}
	if len(c.defs) >= maxDefinitions {
		return fmt.Errorf("more than %d actions", maxDefinitions)
	}
	c.defs[d.Name] = d
	return nil
}

// Lookup returns the definition of name.
func (c *Catalog) Lookup(name string) (*Definition, bool) {
	if c == nil {
		return nil, false
	}
	d, ok := c.defs[name]
	return d, ok
}

// Len is the number of actions.
func (c *Catalog) Len() int {
	if c == nil {
		return 0
	}
	return len(c.defs)
}

// Infos lists the actions, by name.
func (c *Catalog) Infos() []Info {
	if c == nil {
		return nil
	}
	out := make([]Info, 0, len(c.defs))
	for _, d := range c.defs {
		out = append(out, d.Info)
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Find returns the action called name in infos.
func Find(infos []Info, name string) (Info, bool) {
	for _, i := range infos {
		if i.Name == name {
			return i, true
		}
	}
	return Info{}, false
}

// Names lists the actions' names, sorted.
func (c *Catalog) Names() []string {
	var out []string
	for _, i := range c.Infos() {
		out = append(out, i.Name)
	}
	return out
}

// defaultParams is the params schema of an action that declares none: it
// takes no parameter.
var defaultParams = json.RawMessage(`{"additionalProperties":false,"type":"object"}`)

// Parse reads one definition named name from data, in format "yaml" or
// "json" (a leading dot is allowed), and prepares it against p. Errors are
// *Error naming the field.
func Parse(name string, data []byte, format string, p limits.Policy) (*Definition, error) {
	fail := func(field, format string, args ...any) error {
		return &Error{File: name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if !tasks.ValidActionName(name) {
		return nil, fail("", "the name (the file's, without extension) must be 1-64 characters of letters, digits, '.', '_' or '-'")
	}
	canon, err := canonical(data, strings.TrimPrefix(format, "."))
	if err != nil {
		return nil, fail("", "%v", err)
	}
	var doc struct {
		Description *string         `json:"description"`
		Params      json.RawMessage `json:"params"`
		Spec        json.RawMessage `json:"spec"`
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fail("", "%s (a definition holds description, params and spec)", strings.TrimPrefix(err.Error(), "json: "))
	}
	d := &Definition{Info: Info{Name: name, Params: doc.Params}}
	sum := sha256.Sum256(canon)
	d.Digest = "sha256:" + hex.EncodeToString(sum[:])
	if doc.Description != nil {
		d.Description = strings.TrimSpace(*doc.Description)
	}
	if len(d.Description) > maxDescription {
		return nil, fail("description", "longer than %d bytes", maxDescription)
	}
	if d.Description == "" {
		d.Description = "Run the operator's action " + name + "."
	}
	if len(d.Params) == 0 || string(d.Params) == "null" {
		d.Params = defaultParams
	}
	if err := d.compileParams(); err != nil {
		return nil, fail("params", "%v", err)
	}
	if len(doc.Spec) == 0 || string(doc.Spec) == "null" {
		return nil, fail("spec", "missing: the spec template is what the action runs")
	}
	if err := d.setSpec(doc.Spec, p); err != nil {
		return nil, err
	}
	return d, nil
}

// canonical returns data as compact JSON with sorted keys: the form the
// digest is taken of.
func canonical(data []byte, format string) ([]byte, error) {
	switch format {
	case "yaml", "yml", "json":
	default:
		return nil, fmt.Errorf("unknown format %q: a definition is .yaml, .yml or .json", format)
	}
	// JSON is read as YAML, of which it is a subset: one reader, which
	// refuses duplicate keys in both.
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	v = jsonable(v)
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("want a mapping of description, params and spec")
	}
	return json.Marshal(v)
}

// jsonable turns what yaml.v3 decodes into what encoding/json encodes:
// mappings with non-string keys become string-keyed.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = jsonable(e)
		}
		return t
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range t {
			t[i] = jsonable(e)
		}
		return t
	}
	return v
}

// compileParams checks and compiles the params schema: a draft-07 schema
// of an object.
func (d *Definition) compileParams() error {
	var top struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(d.Params, &top); err != nil {
		return fmt.Errorf("want a JSON Schema object")
	}
	if top.Type != "object" {
		return fmt.Errorf(`want "type": "object": params are a JSON object (they are an MCP tool's input schema too)`)
	}
	s, err := contract.Compile(d.Params)
	if err != nil {
		return err
	}
	d.params = s
	return nil
}
