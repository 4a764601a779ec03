// Package httpapi is Airlock's HTTP JSON API, for backends in any
// language: enqueue a spec, read or long-poll its run record, follow its
// state changes as Server-Sent Events, read its promoted result; and, for
// approvers, list, show, accept and reject parked outputs. It is a thin
// layer over the Go API (airlock.Client), the approval store
// (approve.Store) and the events stream (events.Stream): the same checks,
// the same exactly-once decisions, the same messages as the CLIs.
//
// Every route under /v1 takes a bearer token of a token file (Tokens) that
// holds the route's scope; the token's name is who asks (every run it
// enqueues is stamped with it as its principal, every decision it makes
// is recorded as its), a token reads only its own runs unless it holds
// runs:read:any (reads.go), and a token bound to queues or actions may
// use only those (bind.go). Every error is application/problem+json (RFC
// 9457) and names the field that was wrong. The routes, their parameters
// and their responses are described by the OpenAPI 3.1 document OpenAPI
// (openapi.json, served at /openapi.json); the spec's JSON Schema
// (tasks.SpecSchema) is served at /spec.schema.json.
//
// With Options.UI, the Handler also serves the approval console (package
// console's page) at /ui/, whose routes take a session cookie instead of
// a bearer header (console.go).
//
// cmd/api serves it; a Go program may mount Handler in its own server.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/live"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// Defaults and bounds of Options.
const (
	// MaxWait bounds a long poll (?wait=) and an event stream: a client
	// that wants more asks again.
	MaxWait = 5 * time.Minute
	// DefaultKeepAlive is how often an idle event stream sends a comment.
	DefaultKeepAlive = 15 * time.Second
	// maxDecisionBody caps the body of an accept or reject.
	maxDecisionBody = 64 << 10
)

// Options configure a Handler. Tokens is required.
type Options struct {
	// Prefix of Airlock's keys in Redis: the workers' -prefix ("" is
	// "airlock:").
	Prefix string
	// Retention of a run record (airlock.ClientOptions.Retention).
	Retention time.Duration
	// MaxPayload caps the request body of POST /v1/runs and the encoded
	// spec (airlock.ClientOptions.MaxPayload); 0 is
	// tasks.DefaultMaxPayload.
	MaxPayload int
	// Store is where the result route reads promoted outputs
	// (airlock.ClientOptions.Store, api -store); "" reads where each run's
	// record says.
	Store string
	// Tokens are the bearer tokens accepted.
	Tokens *Tokens
	// Log receives one line per request, and the errors; nil logs nothing.
	Log *zerolog.Logger
	// MaxStream bounds an event stream (MaxWait when 0 or more).
	MaxStream time.Duration
	// KeepAlive is the interval of an event stream's comments
	// (DefaultKeepAlive when 0).
	KeepAlive time.Duration
	// TracerProvider makes the requests' spans, and the decisions'
	// (trace.go); nil: the global provider.
	TracerProvider trace.TracerProvider
	// MaxBodyBytesInFlight bounds the bytes of request bodies the API
	// reads at once (body.go; api -max-body-bytes-in-flight): a body past
	// it is answered 503 with Retry-After, unread. 0 is
	// DefaultMaxBodyBytesInFlight; it must hold the largest body a route
	// takes (MaxPayload, session.MaxFileBytes).
	MaxBodyBytesInFlight int64
	// MaxWaiters bounds the long polls and event streams the server holds
	// open at once, every token together (api -max-waiters): past it a
	// request is answered 503 with Retry-After. 0 is DefaultMaxWaiters.
	// Each principal's share is its quota's max_waiters.
	MaxWaiters int
	// UI serves the approval console at /ui/ (console.go; api -ui).
	UI bool
}

// Handler serves the API. Create it with New; call Close before the
// server's Shutdown so that long polls and event streams end at once.
type Handler struct {
	rdb        redis.UniversalClient
	client     *airlock.Client
	store      *approve.Store
	events     *events.Stream
	promotions *asynq.Client
	tokens     *Tokens
	maxPayload int
	maxStream  time.Duration
	keepAlive  time.Duration
	log        zerolog.Logger
	mux        *http.ServeMux
	tracer     trace.Tracer
	bodies     *shares       // bytes of request bodies in flight (body.go)
	sessions   *session.Conn // a call's room, before its body is read
	live       *live.Conn    // steps' output while they run (sse.go)
	prefix     string        // Options.Prefix
	waiters    *shares       // long polls, event streams and session calls open (waiters.go)
	quotas     quotaCache    // max_waiters as read for holdWaiter (waiters.go)
	calls      sessionCalls  // calls with a body in progress per session (sessioncall.go)
	ui         bool          // Options.UI
	// consoleBytes: artifact bytes the console's pages hold at once
	// (console_approval.go).
	consoleBytes *shares
	// signIns: bytes of console sign-ins read at once, before a token is
	// known (console.go).
	signIns *shares

	stopCtx context.Context // canceled by Close
	stop    context.CancelFunc
}

// New returns a Handler that keeps its runs, approvals and events in rdb,
// which the caller keeps and closes after the Handler.
func New(rdb redis.UniversalClient, opts Options) (*Handler, error) {
	if opts.Tokens == nil || opts.Tokens.Len() == 0 {
		return nil, errors.New("httpapi: no tokens")
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("httpapi: prefix %q holds a brace", opts.Prefix)
	}
	if opts.MaxPayload <= 0 {
		opts.MaxPayload = tasks.DefaultMaxPayload
	}
	if opts.MaxStream <= 0 || opts.MaxStream > MaxWait {
		opts.MaxStream = MaxWait
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = DefaultKeepAlive
	}
	if opts.MaxWaiters <= 0 {
		opts.MaxWaiters = DefaultMaxWaiters
	}
	// The largest body a route takes must fit in the bytes in flight.
	switch largest := int64(max(opts.MaxPayload, session.MaxFileBytes)); {
	case opts.MaxBodyBytesInFlight == 0:
		opts.MaxBodyBytesInFlight = max(DefaultMaxBodyBytesInFlight, largest)
	case opts.MaxBodyBytesInFlight < largest:
		return nil, fmt.Errorf("httpapi: MaxBodyBytesInFlight %d is below the largest body a route takes (%d: the payload cap, or a session file's)", opts.MaxBodyBytesInFlight, largest)
	}
	h := &Handler{
		rdb: rdb,
		client: airlock.NewClient(rdb, airlock.ClientOptions{
			Retention: opts.Retention, MaxPayload: opts.MaxPayload, Prefix: opts.Prefix, Store: opts.Store,
		}),
		store:      approve.NewStore(rdb, approve.Options{Prefix: opts.Prefix, TracerProvider: opts.TracerProvider}),
		events:     events.NewStream(rdb, opts.Prefix),
		promotions: asynq.NewClientFromRedisClient(rdb),
		tokens:     opts.Tokens,
		maxPayload: opts.MaxPayload,
		maxStream:  opts.MaxStream,
		keepAlive:  opts.KeepAlive,
		log:        zerolog.Nop(),
		tracer:     tracing.Tracer(opts.TracerProvider),
		bodies:     newBodies(opts.MaxBodyBytesInFlight, int64(max(opts.MaxPayload, session.MaxFileBytes))),
		sessions:   session.NewConn(rdb, opts.Prefix),
		live:       live.NewConn(rdb, opts.Prefix),
		prefix:     opts.Prefix,
		waiters:    newWaiters(opts.MaxWaiters),
		ui:         opts.UI,
		// Half each: a token's page holds an artifact and the version it
		// is compared with.
		consoleBytes: newShares(maxConsoleBytes, maxConsoleBytes/2),
		signIns:      newShares(maxSignIns*maxSignInBody, maxSignIns*maxSignInBody),
	}
	h.stopCtx, h.stop = context.WithCancel(context.Background())
	if opts.Log != nil {
		h.log = *opts.Log
	}
	h.routes()
	return h, nil
}

// Close ends the long polls (they answer with the run as it is) and the
// event streams (with an "end" event) in progress and to come. It does
// not close the Redis client.
func (h *Handler) Close() {
	h.stop()
}

// routes registers every route; a path with a route for another method
// answers 405 naming the methods it takes (GET brings HEAD), any other path
// 404, both as problems.
func (h *Handler) routes() {
	m := http.NewServeMux()
	h.mux = m
	var paths []string
	allow := map[string][]string{}
	handle := func(pattern string, f http.HandlerFunc) {
		method, path, _ := strings.Cut(pattern, " ")
		if allow[path] == nil {
			paths = append(paths, path)
		}
		allow[path] = append(allow[path], method)
		if method == http.MethodGet {
			allow[path] = append(allow[path], http.MethodHead)
		}
		m.HandleFunc(pattern, f)
	}
	handle("GET /openapi.json", h.serveOpenAPI)
	handle("GET /spec.schema.json", h.serveSpecSchema)
	handle("GET /healthz", h.healthz)

	handle("POST /v1/runs", h.auth(ScopeRunsWrite, h.enqueue))
	handle("GET /v1/actions", h.auth(ScopeRunsWrite, h.listActions))
	handle("POST /v1/actions/{name}/runs", h.auth(ScopeRunsWrite, h.runAction))
	handle("GET /v1/runs/{task_id}", h.auth(ScopeRunsRead, h.getRun))
	handle("DELETE /v1/runs/{task_id}", h.auth(ScopeRunsWrite, h.cancelRun))
	handle("GET /v1/runs/{task_id}/events", h.auth(ScopeRunsRead, h.runEvents))
	handle("GET /v1/runs/{task_id}/result", h.auth(ScopeRunsRead, h.runResult))

	handle("POST /v1/sessions", h.auth(ScopeRunsWrite, h.openSession))
	handle("POST /v1/sessions/{id}/steps", h.auth(ScopeRunsWrite, h.sessionStep))
	handle("PUT /v1/sessions/{id}/files/{path...}", h.auth(ScopeRunsWrite, h.putSessionFile))
	handle("GET /v1/sessions/{id}/files/{path...}", h.auth(ScopeRunsWrite, h.getSessionFile))
	handle("POST /v1/sessions/{id}/close", h.auth(ScopeRunsWrite, h.closeSession))
	handle("POST /v1/sessions/{id}/pause", h.auth(ScopeRunsWrite, h.pauseSession))
	handle("POST /v1/sessions/{id}/resume", h.auth(ScopeRunsWrite, h.resumeSession))
	handle("DELETE /v1/sessions/{id}", h.auth(ScopeRunsWrite, h.deleteSession))

	handle("GET /v1/approvals", h.auth(ScopeApprovalsRead, h.listApprovals))
	handle("GET /v1/approvals/{id}", h.auth(ScopeApprovalsRead, h.getApproval))
	handle("GET /v1/approvals/{id}/history", h.auth(ScopeApprovalsRead, h.approvalHistory))
	handle("GET /v1/approvals/{id}/artifacts/{name...}", h.auth(ScopeApprovalsRead, h.approvalArtifact))
	handle("POST /v1/approvals/{id}/accept", h.auth(ScopeApprovalsWrite, h.accept))
	handle("POST /v1/approvals/{id}/reject", h.auth(ScopeApprovalsWrite, h.reject))

	if h.ui {
		h.consoleRoutes(handle) // the page's routes, not the API's (console.go)
	}

	for _, path := range paths {
		allow := strings.Join(allow[path], ", ")
		m.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, r, &Problem{Type: ProblemMethodNotAllowed, Status: http.StatusMethodNotAllowed,
				Detail: fmt.Sprintf("%s %s: this path takes %s", r.Method, r.URL.Path, allow)})
		})
	}
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, &Problem{Type: ProblemNotFound, Status: http.StatusNotFound,
			Detail: fmt.Sprintf("no route %s %s (see /openapi.json)", r.Method, r.URL.Path)})
	})
}

// ServeHTTP serves a request, logging it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &responseWriter{ResponseWriter: w, status: http.StatusOK}
	if h.ui && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
		consoleHeaders(rw)
	}
	r, span := h.startSpan(r)
	defer func() { endSpan(span, r, rw.status) }()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.Error().Str("method", r.Method).Str("path", r.URL.Path).Msgf("panic: %v", v)
			if !rw.wrote {
				writeProblem(rw, r, &Problem{Type: ProblemInternal, Status: http.StatusInternalServerError, Detail: "internal error"})
			}
		}
		ev := h.log.Info()
		if rw.status >= 500 {
			ev = h.log.Error()
		}
		ev = ev.Str("method", r.Method).Str("path", r.URL.Path).Int("status", rw.status).
			Int64("bytes", rw.bytes).Float64("duration_ms", float64(time.Since(start).Microseconds())/1000)
		if name := tokenName(rw.token); name != "" {
			ev = ev.Str("token", name)
		}
		if rw.problem != "" {
			ev = ev.Str("error", rw.problem)
		}
		if id := traceID(span); id != "" {
			ev = ev.Str("trace_id", id)
		}
		ev.Msg("http")
	}()
	h.mux.ServeHTTP(rw, r)
}

// responseWriter records what the log line says of a response.
type responseWriter struct {
	http.ResponseWriter
	status  int
	bytes   int64
	wrote   bool
	token   *Token
	problem string
	// bodyRead: the request's body was read whole (closeUnread).
	bodyRead bool
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	w.wrote = true
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the server's writer (Flush,
// write deadlines).
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func tokenName(t *Token) string {
	if t == nil {
		return ""
	}
	return t.Name
}

type tokenKey struct{}

// tokenOf returns the token that authenticated r.
func tokenOf(r *http.Request) *Token {
	t, _ := r.Context().Value(tokenKey{}).(*Token)
	return t
}

// auth wraps next: it answers 401 to a request without a known bearer
// token, 403 to one whose token lacks scope (Token.Grants).
func (h *Handler) auth(scope Scope, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		authz := r.Header.Get("Authorization")
		scheme, presented, _ := strings.Cut(authz, " ")
		presented = strings.TrimSpace(presented)
		if authz == "" || !strings.EqualFold(scheme, "Bearer") || presented == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			h.fail(w, r, &Problem{Type: ProblemUnauthorized, Status: http.StatusUnauthorized, Field: "Authorization",
				Detail: "missing bearer token: send Authorization: Bearer TOKEN"})
			return
		}
		t := h.tokens.Lookup(presented)
		if t == nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock", error="invalid_token"`)
			h.fail(w, r, &Problem{Type: ProblemUnauthorized, Status: http.StatusUnauthorized, Field: "Authorization",
				Detail: "unknown bearer token"})
			return
		}
		h.authorized(w, r, t, scope, next)
	}
}

// authorized calls next with token t, which authenticated r, or answers
// 403 when t lacks scope.
func (h *Handler) authorized(w http.ResponseWriter, r *http.Request, t *Token, scope Scope, next http.HandlerFunc) {
	if rw, ok := w.(*responseWriter); ok {
		rw.token = t
	}
	if !t.Grants(scope) {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="airlock", error="insufficient_scope", scope="%s"`, scope))
		detail := fmt.Sprintf("token %s does not hold the scope %s", t.Name, scope)
		if scope == ScopeRunsRead {
			detail += " (nor " + string(ScopeRunsReadAny) + ")"
		}
		h.fail(w, r, &Problem{Type: ProblemForbidden, Status: http.StatusForbidden, RequiredScope: scope, Detail: detail})
		return
	}
	next(w, r.WithContext(context.WithValue(r.Context(), tokenKey{}, t)))
}

// fail writes p, and keeps its detail for the log line.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, p *Problem) {
	if rw, ok := w.(*responseWriter); ok {
		rw.problem = p.Detail
	}
	closeUnread(w, r)
	writeProblem(w, r, p)
}

// internal answers an error of Redis or of the store: 503 when Redis
// cannot be reached, else 500. The error's text goes to the API's log
// line, not to the caller: it may name the store's paths, the API's own
// directory or Redis's address.
func (h *Handler) internal(w http.ResponseWriter, r *http.Request, err error) {
	if h.quotaRefused(w, r, err) {
		return
	}
	p := &Problem{Type: ProblemInternal, Status: http.StatusInternalServerError,
		Detail: "the API could not read Redis or the store; its log has the cause"}
	if errors.Is(err, airlock.ErrStoreUnreadable) {
		// The store, not Redis, whatever the error says (an S3 endpoint
		// that refuses connections is no Redis outage).
		p.Detail = "the API could not read the run's publication in the store; its log has the cause"
	} else if redisconn.Unreachable(err) {
		p.Type, p.Status, p.Detail = ProblemUnavailable, http.StatusServiceUnavailable, "Redis cannot be reached; the API's log has the cause"
	}
	h.failLogged(w, r, p, err)
}

// failLogged writes p, and keeps cause, not p's detail, for the log line.
func (h *Handler) failLogged(w http.ResponseWriter, r *http.Request, p *Problem, cause error) {
	closeUnread(w, r)
	writeProblem(w, r, p)
	if rw, ok := w.(*responseWriter); ok {
		rw.problem = cause.Error()
	}
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.rdb.Ping(ctx).Err(); err != nil {
		h.failLogged(w, r, &Problem{Type: ProblemUnavailable, Status: http.StatusServiceUnavailable, Detail: "Redis cannot be reached"}, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
