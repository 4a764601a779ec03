// Package mcpserver is Airlock's MCP server for agents (cmd/mcp): ten
// tools over the official Go SDK (github.com/modelcontextprotocol/go-sdk)
// that enqueue an action, read back its run record and published result,
// cancel it, and work in a session call by call:
//
//   - run_action: a whole task spec, or a simple form (command, files...),
//     enqueued with the client's checks; returns the task id, or waits for
//     the record;
//   - get_run: the run record now;
//   - wait_run: the record once the run is done, or final (through the
//     human's decision);
//   - get_result: the published result and manifest of a promoted run;
//   - cancel_run: cancel a run the server's principal enqueued (cancel.go);
//   - open_session, run_in_session, write_file, read_file, close_session:
//     a session, one workspace whose steps arrive call by call, closed
//     into the contract and the approval queue (sessions.go).
//
// Every tool reads and calls the runs and sessions of the server's
// principal (Options.Principal) only: another's reads as unknown
// (reads.go).
//
// Answers are compact: a run record's isolation tiers, the same long
// text for every run of a worker, are said once, in the resource its
// isolation.uri names, and empty fields are left out; full: true asks for
// the whole record (compact.go). The spec's full JSON Schema is a
// resource too (SpecSchemaURI), which run_action's and open_session's
// spec refer to (resources.go); every tool declares an output schema
// (outschema.go).
//
// It never approves. There is no tool that accepts, rejects or otherwise
// decides an approval, nor one that reads a parked output: an agent must
// not sign off its own output. A parked run is reported as waiting for a
// human approver.
//
// Tool errors (a rejected spec, an unknown task, a run not promoted) are
// tool results with isError set, naming the field as the CLIs do; protocol
// errors are left to the SDK.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// Names of the tools: a contract with the agents' prompts and hosts'
// allow-lists. There is no tool that decides an approval.
const (
	ToolRunAction = "run_action"
	ToolGetRun    = "get_run"
	ToolWaitRun   = "wait_run"
	ToolGetResult = "get_result"
	ToolCancelRun = "cancel_run"
)

// Tools are the names of every tool the server has, in the order listed.
var Tools = []string{ToolRunAction, ToolGetRun, ToolWaitRun, ToolGetResult, ToolCancelRun,
	ToolOpenSession, ToolRunInSession, ToolWriteFile, ToolReadFile, ToolCloseSession, ToolPauseSession}

// CannotApprove is said of every parked run: in get_run's and wait_run's
// note, and in get_result's error.
const CannotApprove = "waiting for a human approver; an agent cannot approve"

// Defaults of Options.
const (
	DefaultMaxWait = 5 * time.Minute
	DefaultWait    = 30 * time.Second
	DefaultQueue   = "default"
	// DefaultPrincipal is who asks for the runs of a server given no
	// Options.Principal.
	DefaultPrincipal = "mcp"
)

// Client is what the server needs of *airlock.Client.
type Client interface {
	Enqueue(ctx context.Context, spec *tasks.Spec) (airlock.Enqueued, error)
	Wait(ctx context.Context, queue, taskID string) (*record.Run, error)
	WaitFinal(ctx context.Context, queue, taskID string) (*record.Run, error)
	Status(ctx context.Context, queue, taskID string) (*record.Run, error)
	ResultIn(ctx context.Context, queue, taskID string) (*airlock.Published, error)
	Actions(ctx context.Context, queue string) ([]actions.Info, error)
	Cancel(ctx context.Context, queue, taskID string) (*record.Run, error)
	OpenSession(ctx context.Context, spec *tasks.Spec) (*airlock.Session, error)
	Session(ctx context.Context, id string) (*airlock.Session, *session.Info, error)
}

var _ Client = (*airlock.Client)(nil)

// Options configure the server.
type Options struct {
	// Queues are the queues the server serves: run_action enqueues in the
	// first unless a spec names another of them; the other tools look in
	// the first unless the call names another. A spec or a call naming a
	// queue not listed is refused. Empty: DefaultQueue.
	Queues []string
	// MaxWait caps every wait (run_action's and wait_run's timeout).
	// Zero: DefaultMaxWait.
	MaxWait time.Duration
	// Wait is the wait of a call that gives no timeout, at most MaxWait.
	// Zero: DefaultWait.
	Wait time.Duration
	// Progress is how often a waiting call sends a progress notification
	// to a client that asked for them (a progress token). Zero: 10s.
	Progress time.Duration
	// Log gets one line per tool call; the zero Logger logs nothing.
	Log zerolog.Logger
	// Principal is who asks for every run the server enqueues (the spec's
	// principal, in the record, events and approvals, and what policy
	// rules on principal match): the operator's name for the agents this
	// server serves. An agent cannot set it. Empty: DefaultPrincipal.
	Principal string
}

func (o Options) withDefaults() Options {
	if len(o.Queues) == 0 {
		o.Queues = []string{DefaultQueue}
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Wait <= 0 {
		o.Wait = DefaultWait
	}
	o.Wait = min(o.Wait, o.MaxWait)
	if o.Progress <= 0 {
		o.Progress = 10 * time.Second
	}
	if o.Principal == "" {
		o.Principal = DefaultPrincipal
	}
	return o
}

// server holds the tools' state.
type server struct {
	c   Client
	o   Options
	iso isolations // the isolations the answers referred to, for the resources
}

// instructions are given to the client at initialization.
const instructions = `Airlock runs actions (commands over files) as sandboxed, bounded jobs: no network, resource limits, a deadline, ` +
	`and an honest run record (each step's exit code, stdout, stderr, duration). ` +
	`run_action enqueues one (a whole task spec, or the simple form: command + files); get_run and wait_run read its record; ` +
	`get_result reads its published output; cancel_run cancels a run this server enqueued. ` +
	`To look at a step's output before choosing the next one, open_session opens a workspace that keeps its files, run_in_session runs one command in it, ` +
	`write_file and read_file move files, and close_session ends it (its output then goes to review like any run's). Each action the operator defined (worker -actions) is also a tool of its own: ` +
	`its params are its arguments, and it answers with the run record once done. An output (output_result) is never published by the run itself: ` +
	`the operator's policy publishes it, or it is parked until a human approves it. A parked output is ` + CannotApprove + `: ` +
	`no tool accepts or rejects an output; tell the user it waits for review instead. ` +
	`Run records in answers are compact: isolation is {mode, uid, off, uri}, the tiers' text being the resource at uri (` + IsolationURI + `/ID), ` +
	`the same for every run of a worker; full: true returns the whole record. A whole spec's JSON Schema is the resource ` + SpecSchemaURI + `.`

// New returns the MCP server with its eleven tools (Tools) and its
// resources, using c.
func New(c Client, o Options) (*mcp.Server, error) {
	o = o.withDefaults()
	if !tasks.ValidPrincipal(o.Principal) {
		return nil, fmt.Errorf("mcpserver: principal %q: want 1-64 of [A-Za-z0-9._@+-], starting with a letter or digit", o.Principal)
	}
	sc, err := buildSchemas()
	if err != nil {
		return nil, err
	}
	s := &server{c: c, o: o}
	srv := mcp.NewServer(&mcp.Implementation{Name: "airlock", Title: "Airlock", Version: airlock.Version},
		&mcp.ServerOptions{Instructions: instructions})
	at := &actionTools{s: s, srv: srv, digests: map[string]string{}, output: sc.out["enqueued"]}
	srv.AddReceivingMiddleware(at.middleware)
	no := false
	srv.AddTool(&mcp.Tool{
		Name:  ToolRunAction,
		Title: "Run an action in Airlock's sandbox",
		Description: "Enqueue an action for Airlock's workers, which run it confined (no network, limits, a deadline) in a fresh workspace. " +
			`Give either the simple form: ` +
			`{"command": "sh command" or ["argv", ...], "files": {"path": "content"}, "timeout": "30s", "output_result": "out/result.json"}, ` +
			`or {"spec": {...}}, a whole task spec (docs/spec.md; its JSON Schema: the resource ` + SpecSchemaURI + `). ` +
			`Returns {task_id, queue, run_id, duplicate}; with "wait": true also the run record once the run is parked or done (compact unless "full": true). ` +
			"A result (output_result) is published only by the operator's policy or a human approver, never by the run or by an agent. " +
			"A rejected spec is an error naming the field.",
		InputSchema:  sc.runAction,
		OutputSchema: sc.out[ToolRunAction],
		Annotations:  &mcp.ToolAnnotations{Title: "Run an action", DestructiveHint: &no, OpenWorldHint: &no},
	}, s.handle(ToolRunAction, s.runAction))
	srv.AddTool(&mcp.Tool{
		Name:  ToolGetRun,
		Title: "Read a run's record",
		Description: "The run record of a task this server enqueued (another principal's is not found), now, without waiting: state (pending, active, completed, failed, parked, accepted, promoted, rejected, expired, canceled), " +
			"verdict, error, each step's exit code, stdout and stderr, files, and the approval's fate; compact unless full: true. A note says what the state means. " +
			"A parked run is " + CannotApprove + ".",
		InputSchema:  sc.getRun,
		OutputSchema: sc.out[ToolGetRun],
		Annotations:  &mcp.ToolAnnotations{Title: "Read a run", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.handle(ToolGetRun, s.getRun))
	srv.AddTool(&mcp.Tool{
		Name:  ToolWaitRun,
		Title: "Wait for a run",
		Description: `Wait for the run of a task this server enqueued and return its record: until "done" (parked or finished; the default) or "final" ` +
			"(through the human's decision: promoted, rejected or expired), for at most timeout (default 30s, capped by the server). " +
			"On timeout the current record is returned with timed_out: true; call again to keep waiting. " +
			"A parked run is " + CannotApprove + ".",
		InputSchema:  sc.waitRun,
		OutputSchema: sc.out[ToolWaitRun],
		Annotations:  &mcp.ToolAnnotations{Title: "Wait for a run", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.handle(ToolWaitRun, s.waitRun))
	srv.AddTool(&mcp.Tool{
		Name:  ToolGetResult,
		Title: "Read a run's published result",
		Description: "The published output of a promoted run this server enqueued: {where, manifest, result}. A run that is not promoted is an error saying its state; " +
			"a parked run is " + CannotApprove + ".",
		InputSchema:  sc.getResult,
		OutputSchema: sc.out[ToolGetResult],
		Annotations:  &mcp.ToolAnnotations{Title: "Read a result", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
	}, s.handle(ToolGetResult, s.getResult))
	srv.AddTool(cancelTool(sc), s.handle(ToolCancelRun, s.cancelRun))
	s.addSessionTools(srv, sc)
	s.addResources(srv, sc.specSchema)
	return srv, nil
}

// toolFunc is a tool's own work: its output, or an error that becomes a
// tool error (isError).
type toolFunc func(ctx context.Context, req *mcp.CallToolRequest) (any, error)

// handle wraps a toolFunc into an SDK handler: the output as JSON text and
// structured content, errors as tool errors, one log line per call.
func (s *server) handle(name string, f toolFunc) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		start := time.Now()
		out, err := f(ctx, req)
		ev := s.o.Log.Info()
		if err != nil {
			ev = s.o.Log.Warn().Str("error", err.Error())
		}
		if o, ok := out.(interface{ taskID() string }); ok {
			ev = ev.Str("task_id", o.taskID())
		}
		ev.Str("tool", name).Bool("is_error", err != nil).
			Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).Msg("tool call")
		if err != nil {
			return toolError(err), nil
		}
		b, merr := json.Marshal(out)
		if merr != nil {
			return toolError(fmt.Errorf("encoding the answer: %w", merr)), nil
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
			StructuredContent: json.RawMessage(b),
		}, nil
	}
}

// errorJSON is the structured content of a tool error: as the CLIs' -json
// errors, {"error", "field"}, plus the run's state where one is known.
type errorJSON struct {
	Error string       `json:"error"`
	Field string       `json:"field,omitempty"`
	State record.State `json:"state,omitempty"`
}

// stateError is a tool error about a run in a state that does not allow
// the call.
type stateError struct {
	state record.State
	msg   string
}

func (e *stateError) Error() string { return e.msg }

// toolError is the tool result of err: isError, its text, and
// {"error", "field", "state"} as structured content.
func toolError(err error) *mcp.CallToolResult {
	ej := errorJSON{Error: err.Error()}
	var fe *tasks.FieldError
	var se *stateError
	var sse *session.Error
	switch {
	case errors.As(err, &fe):
		ej.Field = fe.Field
	case errors.As(err, &se):
		ej.State = se.state
	case errors.As(err, &sse):
		// A session call's field is the tool's argument: "step.run" is run.
		ej.Field, ej.State = strings.TrimPrefix(sse.Field, "step."), sse.End
	}
	b, _ := json.Marshal(ej)
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: ej.Error}},
		StructuredContent: json.RawMessage(b),
	}
}

// queue returns the queue a call names, or the default; a queue the
// server does not serve is refused.
func (s *server) queue(field, q string) (string, error) {
	if q == "" {
		return s.o.Queues[0], nil
	}
	if !slices.Contains(s.o.Queues, q) {
		return "", &tasks.FieldError{Field: field, Msg: fmt.Sprintf("queue %q is not one this MCP server serves", q),
			Hint: "its queues: " + strings.Join(s.o.Queues, ", ") + "; leave queue out for " + s.o.Queues[0]}
	}
	return q, nil
}

// enqueued is run_action's answer.
type enqueued struct {
	TaskID    string `json:"task_id"`
	Queue     string `json:"queue"`
	RunID     string `json:"run_id"`
	Duplicate bool   `json:"duplicate"`
	Record    any    `json:"record,omitempty"` // compact or full (answerRecord)
	TimedOut  bool   `json:"timed_out,omitempty"`
	Note      string `json:"note,omitempty"`
}

func (e *enqueued) taskID() string { return e.TaskID }

// runOut is get_run's and wait_run's answer.
type runOut struct {
	Record   any    `json:"record"` // compact or full (answerRecord)
	TimedOut bool   `json:"timed_out,omitempty"`
	Note     string `json:"note"`
	id       string
}

func (r *runOut) taskID() string { return r.id }

// resultOut is get_result's answer, as enqueue -result prints it.
type resultOut struct {
	Where    string          `json:"where"`
	Manifest any             `json:"manifest"`
	Result   json.RawMessage `json:"result"`
	id       string
}

func (r *resultOut) taskID() string { return r.id }

func (s *server) runAction(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var (
		specRaw     json.RawMessage
		wait, full  bool
		waitTimeout string
		simple      simpleForm
	)
	args := append([]arg{{"spec", &specRaw}, {"wait", &wait}, {"wait_timeout", &waitTimeout}, {"full", &full}}, simple.args()...)
	if err := decodeArgs(req.Params.Arguments, args...); err != nil {
		return nil, err
	}
	d, err := waitFor("wait_timeout", waitTimeout, s.o.Wait, s.o.MaxWait)
	if err != nil {
		return nil, err
	}
	isSpec := len(specRaw) > 0
	var spec *tasks.Spec
	if isSpec {
		if f, ok := simple.given(); ok {
			return nil, &tasks.FieldError{Field: f, Msg: "not with spec",
				Hint: "give either a whole task spec as spec, or the simple form (command, files...); put this field inside the spec"}
		}
		if spec, err = tasks.Decode(specRaw); err != nil {
			return nil, specFieldError(err)
		}
		if spec.Principal != "" {
			return nil, specFieldError(&tasks.FieldError{Field: "principal", Msg: "set by the server, not by a spec",
				Hint: "leave principal out: every run this server enqueues is stamped with its operator's -principal"})
		}
		if spec.Queue, err = s.queue("spec.queue", spec.Queue); err != nil {
			return nil, reject(err)
		}
	} else {
		if spec, err = simple.spec(); err != nil {
			return nil, err
		}
		spec.Queue = s.o.Queues[0]
	}
	spec.Principal = s.o.Principal
	e, err := s.c.Enqueue(ctx, spec)
	if err != nil {
		err = specHints.Rehint(err)
		if tasks.IsInvalid(err) {
			if isSpec {
				return nil, specFieldError(err)
			}
			return nil, simpleFieldError(err, simple.commandIsString())
		}
		return nil, fmt.Errorf("enqueue: %w", err)
	}
	out := &enqueued{TaskID: e.TaskID, Queue: e.Queue, RunID: e.RunID, Duplicate: e.Duplicate}
	if e.Duplicate {
		out.Note = fmt.Sprintf("duplicate: idempotency_key %q matches this task, already enqueued; nothing was enqueued", spec.IdempotencyKey)
	}
	if !wait {
		return out, nil
	}
	r, err := s.wait(ctx, req, e.Queue, e.TaskID, false, d, full)
	if err != nil {
		return nil, err
	}
	out.Record, out.TimedOut = r.Record, r.TimedOut
	out.Note = strings.TrimPrefix(out.Note+"; "+r.Note, "; ")
	return out, nil
}

// runArgs decodes the arguments that name a run (task_id, queue), and
// the tool's others (more), and returns its task id and queue.
func (s *server) runArgs(req *mcp.CallToolRequest, more ...arg) (taskID, queue string, err error) {
	if err := decodeArgs(req.Params.Arguments, append([]arg{{"task_id", &taskID}, {"queue", &queue}}, more...)...); err != nil {
		return "", "", err
	}
	queue, err = s.target(taskID, queue)
	return taskID, queue, err
}

func (s *server) getRun(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var full bool
	_, _, rec, err := s.runRecord(ctx, req, arg{"full", &full})
	if err != nil {
		return nil, err
	}
	return &runOut{Record: s.answerRecord(rec, full), Note: note(rec), id: rec.TaskID}, nil
}

// runRecord decodes the arguments that name a run (and the tool's others,
// more) and reads its record now: a run of the server's principal's only
// (ownRun).
func (s *server) runRecord(ctx context.Context, req *mcp.CallToolRequest, more ...arg) (taskID, queue string, rec *record.Run, err error) {
	if taskID, queue, err = s.runArgs(req, more...); err != nil {
		return "", "", nil, err
	}
	if rec, err = s.ownRun(ctx, queue, taskID); err != nil {
		return "", "", nil, err
	}
	return taskID, queue, rec, nil
}

func (s *server) waitRun(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	var taskID, queue, until, timeout string
	var full bool
	if err := decodeArgs(req.Params.Arguments, arg{"task_id", &taskID}, arg{"queue", &queue},
		arg{"until", &until}, arg{"timeout", &timeout}, arg{"full", &full}); err != nil {
		return nil, err
	}
	q, err := s.target(taskID, queue)
	if err != nil {
		return nil, err
	}
	final := false
	switch until {
	case "", "done":
	case "final":
		final = true
	default:
		return nil, &tasks.FieldError{Field: "until", Msg: fmt.Sprintf("%q is not done or final", until),
			Hint: "done: until parked or finished; final: through the human's decision"}
	}
	d, err := waitFor("timeout", timeout, s.o.Wait, s.o.MaxWait)
	if err != nil {
		return nil, err
	}
	// Whose it is, before waiting: another's is unknown at once.
	if _, err := s.ownRun(ctx, q, taskID); err != nil {
		return nil, err
	}
	out, err := s.wait(ctx, req, q, taskID, final, d, full)
	if err != nil {
		return nil, err // not out: a nil *runOut is no nil answer
	}
	return out, nil
}

func (s *server) getResult(ctx context.Context, req *mcp.CallToolRequest) (any, error) {
	// The state first, to say why there is no result in words an agent
	// acts on.
	taskID, q, rec, err := s.runRecord(ctx, req)
	if err != nil {
		return nil, err
	}
	if rec.State != record.StatePromoted {
		return nil, &stateError{state: rec.State, msg: notPublished(rec)}
	}
	p, err := s.c.ResultIn(ctx, q, taskID)
	if err != nil {
		var np *airlock.NotPromotedError
		if errors.As(err, &np) {
			return nil, &stateError{state: np.State, msg: err.Error()}
		}
		return nil, readError(err)
	}
	return &resultOut{Where: p.Where, Manifest: p.Manifest, Result: p.Result, id: taskID}, nil
}

// target checks a read's task id and queue.
func (s *server) target(taskID, queue string) (string, error) {
	if taskID == "" {
		return "", &tasks.FieldError{Field: "task_id", Msg: "missing", Hint: "the task_id run_action returned"}
	}
	return s.queue("queue", queue)
}

// readError is the tool error of a failed read.
func readError(err error) error {
	if errors.Is(err, airlock.ErrNotFound) {
		return errors.New(strings.TrimPrefix(err.Error(), "airlock: "))
	}
	return err
}

// wait waits for the task's run, for at most d; on timeout it answers
// with the run as it is, timed_out set; the record is the whole one when
// full. While it waits it sends progress notifications to a client that
// asked for them.
func (s *server) wait(ctx context.Context, req *mcp.CallToolRequest, queue, taskID string, final bool, d time.Duration, full bool) (*runOut, error) {
	stop := s.progress(ctx, req, taskID)
	defer stop()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	wait := s.c.Wait
	if final {
		wait = s.c.WaitFinal
	}
	rec, err := wait(wctx, queue, taskID)
	timedOut := err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	if err != nil && !timedOut {
		return nil, readError(err)
	}
	// The run as it is now: the approval's fate applied (Wait gives the
	// worker's record, parked even once decided; WaitFinal's has it, and
	// a run without an approval has none to apply).
	if timedOut || (!final && rec.ApprovalID != "") {
		if now, serr := s.c.Status(ctx, queue, taskID); serr == nil {
			rec = now
		} else if rec == nil {
			return nil, readError(serr)
		}
	}
	out := &runOut{Record: s.answerRecord(rec, full), TimedOut: timedOut, Note: note(rec), id: rec.TaskID}
	if timedOut {
		out.Note = fmt.Sprintf("still %s after %s (call wait_run again to keep waiting): %s", rec.State, d, out.Note)
	}
	return out, nil
}

// progress sends a progress notification every Options.Progress while a
// call waits, if the client gave a progress token; stop ends it.
func (s *server) progress(ctx context.Context, req *mcp.CallToolRequest, taskID string) (stop func()) {
	if req == nil || req.Session == nil || req.Params == nil || req.Params.GetProgressToken() == nil {
		return func() {}
	}
	token := req.Params.GetProgressToken()
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.o.Progress)
		defer t.Stop()
		start := time.Now()
		for n := 1; ; n++ {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			_ = req.Session.NotifyProgress(pctx, &mcp.ProgressNotificationParams{
				ProgressToken: token, Progress: float64(n),
				Message: fmt.Sprintf("waiting for task %s (%s)", taskID, time.Since(start).Round(time.Second)),
			})
		}
	}()
	return func() { cancel(); <-done }
}
