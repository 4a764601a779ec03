package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/record"
)

// The server's resources: what its tools' answers and schemas refer to
// rather than repeat.
//
//   - SpecSchemaURI: the task spec's JSON Schema (tasks.SpecSchema but
//     principal, which the server stamps), the full form of run_action's
//     and open_session's spec;
//   - IsolationURI: the isolation tiers of the runs this server answered
//     about, by id; IsolationURI/{id}: one of them, as a compact record's
//     isolation.uri names it.

// SpecSchemaURI is the resource holding the task spec's JSON Schema.
const SpecSchemaURI = "airlock://spec-schema"

// addResources registers the resources on srv; specSchema is the spec's
// schema as served.
func (s *server) addResources(srv *mcp.Server, specSchema []byte) {
	srv.AddResource(&mcp.Resource{
		URI: SpecSchemaURI, Name: "spec-schema", Title: "Airlock task spec v1: JSON Schema", MIMEType: "application/schema+json",
		Description: "The draft-07 JSON Schema of a whole task spec (docs/spec.md), what run_action's and open_session's spec take. " +
			"principal is not in it: the server stamps it.",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return contents(req.Params.URI, "application/schema+json", specSchema), nil
	})
	srv.AddResource(&mcp.Resource{
		URI: IsolationURI, Name: "isolation", Title: "Isolation tiers of the runs answered about", MIMEType: "application/json",
		Description: "{id: tiers}: the isolation (each confinement tier's mechanism, or off and why) of the runs this server's answers held, " +
			"which a compact record names as isolation.uri (" + IsolationURI + "/{id}).",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		b, err := json.Marshal(s.iso.all())
		if err != nil {
			return nil, err
		}
		return contents(req.Params.URI, "application/json", b), nil
	})
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: IsolationURI + "/{id}", Name: "isolation-tiers", Title: "Isolation tiers of a run", MIMEType: "application/json",
		Description: "The isolation tiers a compact run record names (isolation.uri): each tier's mechanism, or off and why. " +
			"The same as the record's isolation with full: true.",
	}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		id, ok := strings.CutPrefix(req.Params.URI, IsolationURI+"/")
		var iso record.Isolation
		if ok {
			iso, ok = s.iso.get(id)
		}
		if !ok {
			return nil, &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Data: json.RawMessage(fmt.Sprintf(`{"uri":%q}`, req.Params.URI)),
				Message: fmt.Sprintf("Resource not found: this server keeps the isolation of the last %d it answered about; get_run with full: true has a run's", maxIsolations)}
		}
		b, err := json.Marshal(iso)
		if err != nil {
			return nil, err
		}
		return contents(req.Params.URI, "application/json", b), nil
	})
}

// contents is a resource read's answer: b as text.
func contents(uri, mime string, b []byte) *mcp.ReadResourceResult {
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: string(b)}}}
}
