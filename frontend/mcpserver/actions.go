package mcpserver

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/tasks"
)

// Each action of the catalog the workers of the server's first queue
// published (worker -actions) is a tool of its own: its name, its
// description, its params schema as the tool's input schema. A call
// enqueues the action with the arguments as its params, stamped with the
// server's principal, and waits (Options.Wait) for the run to be done.
// The tools follow the published catalog: it is read again, at most once
// a second, when a client lists or calls tools.

// builtinTools are the server's own tools; an action of one of their
// names is not offered as a tool (run_action still runs it).
var builtinTools = []string{ToolRunAction, ToolGetRun, ToolWaitRun, ToolGetResult, ToolCancelRun}

// actionTools keeps the server's action tools in line with the catalog.
type actionTools struct {
	s      *server
	srv    *mcp.Server
	output object // the tools' output schema: run_action's

	mu      sync.Mutex
	digests map[string]string // tool name → the definition's digest
	checked time.Time
}

// middleware syncs the tools before tools/list and tools/call.
func (a *actionTools) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "tools/list" || method == "tools/call" {
			a.sync(ctx)
		}
		return next(ctx, method, req)
	}
}

// sync reads the published catalog (at most once a second) and adds,
// replaces and removes action tools to match it. A catalog that cannot be
// read leaves the tools as they are.
func (a *actionTools) sync(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.checked) < time.Second {
		return
	}
	a.checked = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	queue := a.s.o.Queues[0]
	infos, err := a.s.c.Actions(ctx, queue)
	if err != nil {
		a.s.o.Log.Warn().Err(err).Str("queue", queue).Msg("reading the actions' catalog; action tools unchanged")
		return
	}
	seen := map[string]bool{}
	for _, i := range infos {
		if slices.Contains(builtinTools, i.Name) {
			a.s.o.Log.Warn().Str("action", i.Name).Msg("an action has the name of one of the server's tools: not offered as a tool (run_action runs it)")
			continue
		}
		seen[i.Name] = true
		if a.digests[i.Name] == i.Digest {
			continue
		}
		var schema map[string]any
		if err := json.Unmarshal(i.Params, &schema); err != nil || schema["type"] != "object" {
			a.s.o.Log.Warn().Str("action", i.Name).Msg("the published params schema is not an object schema: not offered as a tool")
			delete(seen, i.Name)
			continue
		}
		no := false
		a.srv.AddTool(&mcp.Tool{
			Name:  i.Name,
			Title: "Airlock action " + i.Name,
			Description: strings.TrimSpace(i.Description) + " — An action the operator defined: it runs confined in Airlock's sandbox " +
				"with these params only; the answer is its compact run record once done (or parked for a human, who alone can approve it; get_run with full: true has the whole record).",
			InputSchema:  schema,
			OutputSchema: a.output,
			Annotations:  &mcp.ToolAnnotations{Title: i.Name, DestructiveHint: &no, OpenWorldHint: &no},
		}, a.s.handle(i.Name, a.s.callAction(i.Name)))
		a.digests[i.Name] = i.Digest
	}
	var gone []string
	for n := range a.digests {
		if !seen[n] {
			gone = append(gone, n)
			delete(a.digests, n)
		}
	}
	if len(gone) > 0 {
		a.srv.RemoveTools(gone...)
	}
}

// An agent sees the catalog through tools/list alone: the hints of a call
// the catalog refuses name that, for an action's own tool (toolHints) and
// for a call given to run_action as a spec (specHints).
var (
	toolHints = airlock.CatalogHints{
		Actions: "tools/list lists them: each action is a tool of its own",
		Params:  "this tool's input schema in tools/list is the action's params schema",
	}
	specHints = airlock.CatalogHints{
		Actions: toolHints.Actions,
		Params:  "the action's own tool in tools/list has its params schema as input schema",
	}
)

// callAction is the tool of action name: its arguments are the call's
// params.
func (s *server) callAction(name string) toolFunc {
	return func(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
		params := req.Params.Arguments
		if len(params) == 0 || string(params) == "null" {
			params = json.RawMessage("{}")
		}
		spec := &tasks.Spec{Version: tasks.Version, Action: name, Params: params, Queue: s.o.Queues[0], Principal: s.o.Principal}
		e, err := s.c.Enqueue(ctx, spec)
		if err != nil {
			err = toolHints.Rehint(err)
			if tasks.IsInvalid(err) {
				return nil, reject(err)
			}
			return nil, err
		}
		out := &enqueued{TaskID: e.TaskID, Queue: e.Queue, RunID: e.RunID, Duplicate: e.Duplicate}
		r, err := s.wait(ctx, req, e.Queue, e.TaskID, false, s.o.Wait, false)
		if err != nil {
			return nil, err
		}
		out.Record, out.TimedOut, out.Note = r.Record, r.TimedOut, r.Note
		return out, nil
	}
}
