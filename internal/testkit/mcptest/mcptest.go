// Package mcptest checks an MCP server's answers against what its tools
// declare: each call's structured content against the tool's output
// schema (draft-07), for the server's unit tests and the e2e tests of the
// real binary alike.
package mcptest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/xeipuuv/gojsonschema"
)

// CompileSchema compiles schema, checked against the draft-07
// meta-schema; name says whose it is in a failure.
func CompileSchema(t testing.TB, name string, schema any) *gojsonschema.Schema {
	t.Helper()
	raw, err := json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	sl := gojsonschema.NewSchemaLoader()
	sl.Draft = gojsonschema.Draft7
	sl.Validate = true
	s, err := sl.Compile(gojsonschema.NewBytesLoader(raw))
	if err != nil {
		t.Fatalf("%s: not a valid draft-07 JSON Schema: %v\n%s", name, err, raw)
	}
	return s
}

// schemas are the compiled output schemas of each session's tools, listed
// once per session.
var schemas struct {
	sync.Mutex
	by map[*mcp.ClientSession]map[string]*gojsonschema.Schema
}

// CheckOutput checks a call of tool name on cs: its structured content
// must satisfy the output schema the tool declares in tools/list, and
// every tool must declare one.
func CheckOutput(t testing.TB, cs *mcp.ClientSession, name string, res *mcp.CallToolResult) {
	t.Helper()
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	r, err := outputSchema(t, cs, name).Validate(gojsonschema.NewBytesLoader(structured))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Valid() {
		t.Errorf("%s: structured content does not satisfy its output schema: %v\n%s", name, r.Errors(), structured)
	}
}

// outputSchema is tool name's compiled output schema on cs.
func outputSchema(t testing.TB, cs *mcp.ClientSession, name string) *gojsonschema.Schema {
	t.Helper()
	schemas.Lock()
	defer schemas.Unlock()
	if schemas.by == nil {
		schemas.by = map[*mcp.ClientSession]map[string]*gojsonschema.Schema{}
	}
	if s := schemas.by[cs][name]; s != nil {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*gojsonschema.Schema{}
	for _, tool := range list.Tools {
		if tool.OutputSchema == nil {
			t.Fatalf("%s declares no output schema", tool.Name)
		}
		m[tool.Name] = CompileSchema(t, tool.Name, tool.OutputSchema)
	}
	schemas.by[cs] = m
	s := m[name]
	if s == nil {
		t.Fatalf("no tool %s listed", name)
	}
	return s
}

// ReadResource reads the resource at uri on cs: its text, which must be
// one content of that uri, of MIME type mime unless mime is ""; an error
// the server answered is returned.
func ReadResource(t testing.TB, cs *mcp.ClientSession, uri, mime string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return "", err
	}
	if len(res.Contents) != 1 || res.Contents[0].URI != uri || mime != "" && res.Contents[0].MIMEType != mime {
		t.Fatalf("read %s: %+v", uri, res.Contents)
	}
	return res.Contents[0].Text, nil
}
