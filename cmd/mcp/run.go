package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/frontend/mcpserver"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/tasks"
)

// Exit codes of Run.
const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitError // Redis, listening, anything else
	exitUsage = cli.ExitUsage // bad flags or token file
)

// minToken is the shortest bearer token accepted in -token-file.
const minToken = 16

const usageText = `usage: mcp [flags]                 serve MCP on stdin/stdout (an agent host starts it)
       mcp -http ADDR [flags]      serve MCP over streamable HTTP at http://ADDR/mcp

Airlock's MCP server for agents. Tools: run_action (enqueue a task spec, or
the simple form: command + files; optionally wait for the record), get_run,
wait_run, get_result and cancel_run (the runs of -principal only); sessions
(open_session, run_in_session, write_file, read_file, close_session). It never approves: no tool accepts or rejects an
output, and a parked run is reported as waiting for a human approver.

Over HTTP, -token-file is required unless ADDR is a loopback address
(127.0.0.1, [::1], localhost): clients then send "Authorization: Bearer
TOKEN". Logs (zerolog JSON) go to stderr; on stdio, stdout is the protocol.

exit status: 0 when the client closed stdin or after SIGINT/SIGTERM,
1 error, 2 bad flags or token file

flags:
`

type options struct {
	redis                     *cli.Redis // -redis, -prefix
	store                     string     // -store: where get_result reads
	principal                 string
	queues                    []string
	httpAddr, tokenFile       string
	tlsCert, tlsKey           string
	maxWait, retention        time.Duration
	shutdownTimeout           time.Duration
	logFormat, logLevel       string
	token                     string // read from tokenFile
	tokenFileWorldOrGroupRead bool
}

// Run runs the command with args (without the program name) and returns its
// exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return cli.FlagsExit(stdout, stderr, "mcp", false, err)
	}
	log, err := cli.NewLogger(o.logFormat, o.logLevel, stderr)
	if err != nil {
		cli.PrintError(stdout, stderr, "mcp", false, err, "", exitUsage)
		return exitUsage
	}
	if o.tokenFileWorldOrGroupRead {
		log.Warn().Str("file", o.tokenFile).Msg("the token file is readable by others: chmod 600 it")
	}
	if err := serve(ctx, o, stdin, stdout, log); err != nil {
		cli.PrintError(stdout, stderr, "mcp", false, err, "", exitError)
		return exitError
	}
	return exitOK
}

func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("mcp", usageText)
	var queues string
	o.redis = cli.RedisFlags(fs)
	fs.StringVar(&queues, "queue", mcpserver.DefaultQueue, "queue run_action enqueues in, and the tools read, by default; a comma-separated list allows a spec or a call to name one of the others (the first is the default; no other queue can be reached)")
	fs.StringVar(&o.principal, "principal", mcpserver.DefaultPrincipal, "who asks for every run this server enqueues: stamped as the spec's principal (run record, events, approvals; policy rules on principal match it); agents cannot set it. 1-64 of [A-Za-z0-9._@+-]")
	fs.StringVar(&o.store, "store", "", "where get_result reads promoted outputs: the workers' -store as seen from here (a directory, or s3://bucket/prefix); default: where each run's record says, in the store its queue's workers announce")
	fs.StringVar(&o.httpAddr, "http", "", "serve streamable HTTP at http://ADDR/mcp instead of stdio (port 0: a free port, logged)")
	fs.StringVar(&o.tokenFile, "token-file", "", "with -http: file holding the bearer token clients must send (at least 16 characters); required unless ADDR is loopback")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "with -http: serve HTTPS with this PEM certificate (chain) file; needs -tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of -tls-cert")
	fs.DurationVar(&o.maxWait, "max-wait", mcpserver.DefaultMaxWait, "cap of every wait (run_action's wait_timeout, wait_run's timeout); a call without one waits 30s at most")
	fs.DurationVar(&o.retention, "retention", airlock.DefaultRetention, "how long a run record is kept after its task ends")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 5*time.Second, "with -http: on SIGTERM, wait this long for calls in flight")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or console")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return o, err
	}
	for _, q := range strings.Split(queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			o.queues = append(o.queues, q)
		}
	}
	switch {
	case fs.NArg() != 0:
		return o, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	case len(o.queues) == 0:
		return o, errors.New("-queue: want at least one queue")
	case !tasks.ValidPrincipal(o.principal):
		return o, fmt.Errorf("-principal %q: want 1-64 of [A-Za-z0-9._@+-], starting with a letter or digit", o.principal)
	case o.maxWait <= 0:
		return o, errors.New("-max-wait: must be positive")
	case o.retention <= 0:
		return o, errors.New("-retention: must be positive (the run record must be kept to be read)")
	case o.shutdownTimeout <= 0:
		return o, errors.New("-shutdown-timeout: must be positive")
	case o.redis.CheckPrefix() != nil:
		return o, o.redis.CheckPrefix()
	case o.httpAddr == "" && (o.tokenFile != "" || o.tlsCert != "" || o.tlsKey != ""):
		return o, errors.New("-token-file, -tls-cert and -tls-key go with -http")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return o, errors.New("-tls-cert and -tls-key go together")
	}
	for _, q := range o.queues {
		if !queueRE(q) {
			return o, fmt.Errorf("-queue %q: 1-64 of [A-Za-z0-9_-], starting with a letter or digit", q)
		}
	}
	if o.httpAddr != "" {
		loop, err := loopback(o.httpAddr)
		if err != nil {
			return o, fmt.Errorf("-http %q: %w", o.httpAddr, err)
		}
		if o.tokenFile == "" && !loop {
			return o, fmt.Errorf("-http %s is not a loopback address: -token-file is required (whoever reaches the port could run actions and read run records)", o.httpAddr)
		}
	}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return o, fmt.Errorf("-token-file: %w", err)
		}
		o.token = strings.TrimSpace(string(b))
		if len(o.token) < minToken || strings.ContainsAny(o.token, " \t\r\n") {
			return o, fmt.Errorf("-token-file %s: want one token of at least %d characters, without blanks", o.tokenFile, minToken)
		}
		if fi, err := os.Stat(o.tokenFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
			o.tokenFileWorldOrGroupRead = true
		}
	}
	return o, nil
}

// queueRE checks a queue name as the spec's schema does.
func queueRE(q string) bool {
	if len(q) == 0 || len(q) > 64 {
		return false
	}
	for i, r := range q {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && (r == '_' || r == '-'))
		if !ok {
			return false
		}
	}
	return true
}

// loopback reports whether addr (HOST:PORT) listens on loopback only.
func loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// serve runs the server on stdio, or over HTTP with -http, until the
// client goes (stdio) or ctx ends.
func serve(ctx context.Context, o options, stdin io.Reader, stdout io.Writer, log zerolog.Logger) error {
	rdb, cfg, err := o.redis.Open()
	if err != nil {
		return err
	}
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: o.redis.Prefix, Retention: o.retention, Principal: o.principal, Store: o.store})
	defer rdb.Close()
	defer c.Close()
	srv, err := mcpserver.New(c, mcpserver.Options{Queues: o.queues, MaxWait: o.maxWait, Log: log, Principal: o.principal})
	if err != nil {
		return err
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	if err := rdb.Ping(pctx).Err(); err != nil {
		// Not fatal: Redis may come later; every call says so meanwhile.
		log.Warn().Str("redis", cfg.String()).Str("redis_from", o.redis.Source().String()).Err(o.redis.Explain(err)).Msg("Redis does not answer (yet): tool calls fail until it does")
	}
	pcancel()
	if o.httpAddr == "" {
		log.Info().Str("transport", "stdio").Str("redis", cfg.String()).Str("redis_from", o.redis.Source().String()).Strs("queues", o.queues).
			Dur("max_wait", o.maxWait).Msg("mcp started")
		err := srv.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}})
		if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("stdio: %w", err)
		}
		log.Info().Msg("mcp stopped")
		return nil
	}
	return serveHTTP(ctx, o, srv, cfg.String(), log)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// serveHTTP serves streamable HTTP at /mcp until ctx ends.
func serveHTTP(ctx context.Context, o options, srv *mcp.Server, redis string, log zerolog.Logger) error {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
	if o.token != "" {
		want := sha256.Sum256([]byte(o.token))
		verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
			got := sha256.Sum256([]byte(token))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				return nil, fmt.Errorf("%w: not the token of -token-file", auth.ErrInvalidToken)
			}
			// One user: sessions are bound to it.
			return &auth.TokenInfo{UserID: "token-file"}, nil
		}
		h = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	}
	// Browsers' cross-origin requests are refused (the SDK also refuses
	// a non-loopback Host header on a loopback connection: DNS rebinding).
	h = http.NewCrossOriginProtection().Handler(h)
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	ln, scheme, err := cli.Listen("-http", o.httpAddr, o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	if loop, _ := loopback(o.httpAddr); scheme == "http" && !loop {
		log.Warn().Msg("serving plain HTTP off loopback: the bearer token crosses the network in clear; use -tls-cert/-tls-key or a TLS proxy")
	}
	hs := &http.Server{
		Handler:           logRequests(mux, log),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: a wait lasts up to -max-wait, and event
		// streams longer.
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info().Str("transport", "http").Str("addr", ln.Addr().String()).
		Str("url", scheme+"://"+ln.Addr().String()+"/mcp").Bool("token", o.token != "").
		Str("redis", redis).Str("redis_from", o.redis.Source().String()).Strs("queues", o.queues).Dur("max_wait", o.maxWait).Msg("mcp started")
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	log.Info().Msg("mcp stopping")
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	err = hs.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// Streams still open (a client's GET stream, a long wait): cut.
		err = hs.Close()
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info().Msg("mcp stopped")
	return nil
}

// logRequests logs one line per HTTP request: never a header's value.
func logRequests(h http.Handler, log zerolog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		ev := log.Info()
		if sw.status >= 400 {
			ev = log.Warn()
		}
		ev.Str("method", r.Method).Str("path", r.URL.Path).Int("status", sw.status).
			Float64("duration_ms", float64(time.Since(start).Microseconds())/1000).Msg("request")
	})
}

// statusWriter records the status of a response; Flush and Unwrap keep
// the SDK's event streams working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
