package mcpserver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/live"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// The session tools: an agent opens a session (one workspace, one slot,
// one record, one deadline), runs a step, looks at what it printed, reads
// and writes files, runs the next step, and closes it into the output
// contract and the approval queue. A session's calls are the server's own:
// one another principal opened is unknown here. None of them approves.

// Names of the session tools.
const (
	ToolOpenSession  = "open_session"
	ToolRunInSession = "run_in_session"
	ToolWriteFile    = "write_file"
	ToolReadFile     = "read_file"
	ToolCloseSession = "close_session"
	ToolPauseSession = "pause_session"
)

// sessionSchemas adds the session tools' input schemas to sc: open_session
// takes a whole spec (wholeSpec: by reference), run_in_session a step's
// fields (step; its run as run_action's command, its name and timeout
// inline: name, duration).
func sessionSchemas(sc *schemas, wholeSpec func(string) object, step, command func(string) object,
	duration func(string) object, name, full object) {
	strict := func(required []string, props object) object {
		return object{"$schema": draft07, "type": "object", "additionalProperties": false,
			"required": toAny(required), "properties": props}
	}
	sid := object{"type": "string", "minLength": 1, "maxLength": 256, "description": "The session id open_session returned."}
	path := object{"type": "string", "minLength": 1, "maxLength": 1024,
		"description": "A path in the session's workspace, relative and clean (e.g. in/data.csv, out/report.json)."}
	sc.openSession = strict([]string{"spec"}, object{"spec": wholeSpec("A whole task spec v1 with a session block ({} takes the defaults: idle_timeout 5m): " +
		"files, inputs, secrets, limits, network, the output contract, timeout (the session's whole life; default 30m, or the worker's -session-timeout). steps are optional: they run before the open answers."),
		"full": full})
	name["description"] = "The step's name: " + fmt.Sprint(name["description"]) + " Default: step-N."
	sc.runInSession = strict([]string{"session_id", "run"}, object{
		"session_id": sid, "run": command("What to run in the session's workspace: a string or an array, as run_action's command."), "name": name, "stdin": step("stdin"), "env": step("env"),
		"timeout": duration("Deadline of this step (Go duration, e.g. 30s), at most the session's. Default: the session's remaining time."),
		"full":    full})
	sc.writeFile = strict([]string{"session_id", "path", "content"}, object{
		"session_id": sid, "path": path,
		"content":  object{"type": "string", "description": fmt.Sprintf("The file's content: text, or base64 with encoding base64 (at most %d bytes decoded).", session.MaxFileBytes)},
		"encoding": object{"enum": []any{"utf-8", "base64"}, "default": "utf-8"}})
	sc.readFile = strict([]string{"session_id", "path"}, object{"session_id": sid, "path": path})
	sc.closeSession = strict([]string{"session_id"}, object{"session_id": sid, "full": full})
	sc.pauseSession = strict([]string{"session_id"}, object{"session_id": sid})
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// addSessionTools registers the session tools on srv.
func (s *server) addSessionTools(srv *mcp.Server, sc schemas) {
	no, yes := false, true
	srv.AddTool(&mcp.Tool{
		Name:  ToolOpenSession,
		Title: "Open a session in Airlock's sandbox",
		Description: "Open a session: one confined workspace (no network unless the spec asks and the operator allows, limits, a deadline) " +
			"that keeps its files across calls, for running steps one at a time and looking at each before the next. " +
			"Returns {session_id, queue, steps (the spec's own, already run), expires_at, idle_until}. " +
			"Close it with close_session when done: its output (output.result) then goes to the operator's policy and, unless a rule allows sessions, a human approver.",
		InputSchema:  sc.openSession,
		OutputSchema: sc.out[ToolOpenSession],
		Annotations:  &mcp.ToolAnnotations{Title: "Open a session", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.handle(ToolOpenSession, s.openSession))
	srv.AddTool(&mcp.Tool{
		Name:  ToolRunInSession,
		Title: "Run a step in a session",
		Description: "Run one command in the session's workspace and return its record (run: a command line such as \"head -3 in/data.csv\", run with sh -c, " +
			"or an argv array such as [\"head\", \"-3\", \"in/data.csv\"], as run_action's command): " +
			"exit_code, verdict (ok, exit, timeout...), stdout and stderr (empty ones left out unless full: true), timings. A failing step does not end the session.",
		InputSchema:  sc.runInSession,
		OutputSchema: sc.out[ToolRunInSession],
		Annotations:  &mcp.ToolAnnotations{Title: "Run in a session", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.handle(ToolRunInSession, s.runInSession))
	srv.AddTool(&mcp.Tool{
		Name: ToolWriteFile, Title: "Write a file in a session",
		Description:  fmt.Sprintf("Write a file (text, or base64 with encoding base64; at most %d bytes) into the session's workspace, within its quota.", session.MaxFileBytes),
		InputSchema:  sc.writeFile,
		OutputSchema: sc.out[ToolWriteFile],
		Annotations:  &mcp.ToolAnnotations{Title: "Write a file", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, s.handle(ToolWriteFile, s.writeFile))
	srv.AddTool(&mcp.Tool{
		Name: ToolReadFile, Title: "Read a file of a session",
		Description: fmt.Sprintf("Read a file a step wrote in the session's workspace (at most %d bytes): {path, size, content, encoding} "+
			"with content as text (utf-8) or base64. Links are never followed.", session.MaxFileBytes),
		InputSchema:  sc.readFile,
		OutputSchema: sc.out[ToolReadFile],
		Annotations:  &mcp.ToolAnnotations{Title: "Read a file", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.handle(ToolReadFile, s.readFile))
	srv.AddTool(&mcp.Tool{
		Name:  ToolCloseSession,
		Title: "Close a session",
		Description: "End the session: its output goes through its contract and the operator's policy, and is parked for a human approver " +
			"unless a rule allows sessions; returns the run record with every step in order (compact unless full: true). A parked output is " + CannotApprove + ". " +
			"To end a session keeping nothing, cancel_run its session_id.",
		InputSchema:  sc.closeSession,
		OutputSchema: sc.out[ToolCloseSession],
		Annotations:  &mcp.ToolAnnotations{Title: "Close a session", DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.handle(ToolCloseSession, s.closeSession))
	srv.AddTool(&mcp.Tool{
		Name: ToolPauseSession, Title: "Pause a session",
		Description: "Pause the session while you think for a long time: its workspace and state go to the worker's store and the worker is freed. " +
			"Any later call (run_in_session, write_file, read_file, close_session) resumes it, files as they were; its deadline keeps running. " +
			"A session also pauses by itself after its spec's session.pause_after (default 2m) without a call.",
		InputSchema:  sc.pauseSession,
		OutputSchema: sc.out[ToolPauseSession],
		Annotations:  &mcp.ToolAnnotations{Title: "Pause a session", DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no},
	}, s.handle(ToolPauseSession, s.pauseSession))
}

// pausedOut is pause_session's answer.
type pausedOut struct {
	SessionID string    `json:"session_id"`
	State     string    `json:"state"`
	ExpiresAt time.Time `json:"expires_at"`
	IdleUntil time.Time `json:"idle_until"`
}

func (s *server) pauseSession(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var id string
	if err := decodeArgs(req.Params.Arguments, arg{"session_id", &id}); err != nil {
		return nil, err
	}
	sess, err := s.ownSession(ctx, id)
	if err != nil {
		return nil, err
	}
	a, err := sess.Pause(ctx)
	if err != nil {
		return nil, err
	}
	return &pausedOut{SessionID: id, State: a.State, ExpiresAt: a.ExpiresAt, IdleUntil: a.IdleUntil}, nil
}

// sessionOut is open_session's answer.
type sessionOut struct {
	SessionID string    `json:"session_id"`
	Queue     string    `json:"queue"`
	Steps     any       `json:"steps"` // []record.Step, or compact
	ExpiresAt time.Time `json:"expires_at"`
	IdleUntil time.Time `json:"idle_until"`
	Note      string    `json:"note"`
}

func (o *sessionOut) taskID() string { return o.SessionID }

func (s *server) openSession(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var raw json.RawMessage
	var full bool
	if err := decodeArgs(req.Params.Arguments, arg{"spec", &raw}, arg{"full", &full}); err != nil {
		return nil, err
	}
	spec, err := tasks.Decode(raw)
	if err != nil {
		return nil, prefixField("spec", err)
	}
	if spec.Principal != "" {
		return nil, &tasks.FieldError{Field: "spec.principal", Msg: "set by the server", Hint: "leave principal out"}
	}
	if spec.Queue, err = s.queue("spec.queue", spec.Queue); err != nil {
		return nil, err
	}
	spec.Principal = s.o.Principal
	sess, err := s.c.OpenSession(ctx, spec)
	if err != nil {
		return nil, prefixField("spec", err)
	}
	a := sess.Opened
	var steps any = a.Steps
	if !full {
		steps = compactSteps(a.Steps)
	}
	return &sessionOut{SessionID: sess.ID(), Queue: sess.Queue(), Steps: steps, ExpiresAt: a.ExpiresAt, IdleUntil: a.IdleUntil,
		Note: fmt.Sprintf("open until %s, or %s without a call; close it with close_session", a.ExpiresAt.Format(time.RFC3339), a.IdleUntil.Format(time.RFC3339))}, nil
}

// prefixField names a spec's field error under field.
func prefixField(field string, err error) error {
	var fe *tasks.FieldError
	if errors.As(err, &fe) {
		return &tasks.FieldError{Field: field + "." + fe.Field, Msg: fe.Msg, Hint: fe.Hint}
	}
	return err
}

// ownSession returns session id when this server opened it (its principal,
// one of its queues); any other is unknown here, in the words of a
// session that does not exist.
func (s *server) ownSession(ctx context.Context, id string) (*airlock.Session, error) {
	sess, in, err := s.c.Session(ctx, id)
	if err == nil && (in.Principal != s.o.Principal || !slices.Contains(s.o.Queues, in.Queue)) {
		err = session.NotFound(id)
	}
	return sess, err
}

func (s *server) runInSession(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var id string
	var st tasks.Step
	var run, env, timeout json.RawMessage
	var full bool
	if err := decodeArgs(req.Params.Arguments, arg{"session_id", &id}, arg{"run", &run}, arg{"name", &st.Name},
		arg{"stdin", &st.Stdin}, arg{"env", &env}, arg{"timeout", &timeout}, arg{"full", &full}); err != nil {
		return nil, err
	}
	if len(run) == 0 {
		return nil, &tasks.FieldError{Field: "run", Msg: "missing", Hint: `a command line such as "head -3 in/data.csv" (run with sh -c), or an argv array`}
	}
	runArgv, err := argv("run", run)
	if err != nil {
		return nil, err
	}
	step := map[string]json.RawMessage{"run": runArgv}
	if len(env) > 0 {
		step["env"] = env
	}
	if len(timeout) > 0 {
		step["timeout"] = timeout
	}
	b, _ := json.Marshal(step)
	if err := tasks.DecodeStep(b, &st); err != nil {
		return nil, err
	}
	sess, err := s.ownSession(ctx, id)
	if err != nil {
		return nil, err
	}
	var opts []airlock.FollowOption
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		// The caller asked for progress: the step's output, as it comes,
		// is its progress notifications' messages (package live).
		n := 0.0
		opts = append(opts, airlock.OnOutput(func(o live.Output) {
			n++
			msg := o.Data
			if o.Encoding != "" {
				msg = o.Stream + " (" + o.Encoding + "): " + o.Data
			} else if o.Stream == "stderr" {
				msg = "stderr: " + o.Data
			}
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: msg})
		}))
	}
	rs, err := sess.Run(ctx, st, opts...)
	if err != nil {
		return nil, lineError(err, isLine(run))
	}
	return answerStep(rs, full), nil
}

// lineError names run, not one of its items, in a session's error about
// a step whose run was a command line: the items are sh -c's
// (step.run[2] is the line).
func lineError(err error, line bool) error {
	var se *session.Error
	if !line || !errors.As(err, &se) || !strings.HasPrefix(se.Field, "step.run[") {
		return err
	}
	out := *se
	out.Field = "step.run"
	return &out
}

// fileOut is write_file's and read_file's answer.
type fileOut struct {
	Path     string `json:"path"`
	Size     int    `json:"size"`
	Content  string `json:"content,omitempty"`
	Encoding string `json:"encoding,omitempty"`
}

func (s *server) writeFile(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var id, path, content, encoding string
	if err := decodeArgs(req.Params.Arguments, arg{"session_id", &id}, arg{"path", &path}, arg{"content", &content}, arg{"encoding", &encoding}); err != nil {
		return nil, err
	}
	data := []byte(content)
	switch encoding {
	case "", "utf-8":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(content); err != nil {
			return nil, &tasks.FieldError{Field: "content", Msg: "not base64: " + err.Error()}
		}
	default:
		return nil, &tasks.FieldError{Field: "encoding", Msg: fmt.Sprintf("%q is not utf-8 or base64", encoding)}
	}
	sess, err := s.ownSession(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := sess.WriteFile(ctx, path, data); err != nil {
		return nil, err
	}
	return &fileOut{Path: path, Size: len(data)}, nil
}

func (s *server) readFile(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var id, path string
	if err := decodeArgs(req.Params.Arguments, arg{"session_id", &id}, arg{"path", &path}); err != nil {
		return nil, err
	}
	sess, err := s.ownSession(ctx, id)
	if err != nil {
		return nil, err
	}
	data, err := sess.ReadFile(ctx, path)
	if err != nil {
		return nil, err
	}
	out := &fileOut{Path: path, Size: len(data), Content: string(data), Encoding: "utf-8"}
	if !utf8.Valid(data) {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(data), "base64"
	}
	return out, nil
}

func (s *server) closeSession(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var id string
	var full bool
	if err := decodeArgs(req.Params.Arguments, arg{"session_id", &id}, arg{"full", &full}); err != nil {
		return nil, err
	}
	sess, err := s.ownSession(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := sess.Close(ctx)
	if err != nil {
		return nil, err
	}
	return &runOut{Record: s.answerRecord(rec, full), Note: note(rec), id: rec.TaskID}, nil
}
