package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/webhook"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/tracing/otlp"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// Exit codes of Run.
const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitError // Redis, listening, anything else
	exitUsage = cli.ExitUsage // bad flags or token file
)

const usageText = `usage: api -tokens FILE [flags]
       api -hash-token < TOKEN       print the sha256: form of a token, for the token file

Serves Airlock's HTTP JSON API (docs/http-api.md; the OpenAPI document is
served at /openapi.json) and the approval console at /ui/ (-ui=false: not;
docs/policy-and-approvals.md). The token file holds one token per line:

  NAME SCOPE[,SCOPE...] TOKEN [queues=Q[,Q...]] [actions=A[,A...]]

with scopes among runs:write, runs:read (the token's own runs),
runs:read:any (every run), approvals:read, approvals:write (none implies
another but runs:read:any, which holds runs:read's routes) and TOKEN
either sha256:HEX (what -hash-token prints) or the token itself (at least
16 characters). Only hashes are kept in memory. Blank lines and lines
starting with # are skipped.

NAME (1-64 of [A-Za-z0-9._@+-]) is who asks: every run the token enqueues
is stamped with it as its principal (a spec may not set one), idempotency
keys are scoped to it, and every decision it makes is recorded as its.
queues= binds the token to those queues (enqueue, read runs, read and
decide approvals: 403 elsewhere); actions= to those catalog actions (no
free-form spec).

exit status: 0 after a clean shutdown (SIGINT, SIGTERM), 1 error,
2 bad flags or token file

flags:
`

type options struct {
	addr, tokens               string
	redis                      *cli.Redis // -redis, -prefix
	store                      string     // -store: where the result route reads
	tlsCert, tlsKey            string
	maxPayload                 int
	maxBodyInFlight            string // -max-body-bytes-in-flight, a size
	bodyInFlight               int64  // its bytes
	maxWaiters                 int    // -max-waiters
	retention, shutdownTimeout time.Duration
	logFormat, logLevel        string
	hashToken                  bool
	ui                         bool // -ui: the approval console at /ui/
	webhooks                   []webhook.Endpoint
}

// Run runs the command with args (without the program name) and returns its
// exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stdout, stderr)
	if err != nil {
		return cli.FlagsExit(stdout, stderr, "api", false, err)
	}
	if o.hashToken {
		return hashToken(stdin, stdout, stderr)
	}
	log, err := cli.NewLogger(o.logFormat, o.logLevel, stderr)
	if err != nil {
		cli.PrintError(stdout, stderr, "api", false, err, "", exitUsage)
		return exitUsage
	}
	tokens, err := httpapi.LoadTokens(o.tokens)
	if err != nil {
		cli.PrintError(stdout, stderr, "api", false, fmt.Errorf("-tokens: %w", err), "", exitUsage)
		return exitUsage
	}
	if fi, err := os.Stat(o.tokens); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn().Str("file", o.tokens).Str("mode", fi.Mode().Perm().String()).
			Msg("the token file is readable by others: chmod 600 it (or keep only sha256: hashes in it)")
	}
	stopTracing, err := otlp.Start(ctx, "airlock-api", airlock.Version, log)
	if err != nil {
		cli.PrintError(stdout, stderr, "api", false, err, "", exitUsage)
		return exitUsage
	}
	defer stopTracing()
	if err := serve(ctx, o, tokens, log); err != nil {
		cli.PrintError(stdout, stderr, "api", false, err, "", exitError)
		return exitError
	}
	return exitOK
}

func parseFlags(args []string, stdout, stderr io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet("api", usageText)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on (port 0: a free port, logged)")
	o.redis = cli.RedisFlags(fs)
	fs.StringVar(&o.tokens, "tokens", "", "token file: NAME SCOPE[,SCOPE...] TOKEN per line (required)")
	fs.StringVar(&o.store, "store", "", "where GET /v1/runs/{id}/result reads promoted outputs: the workers' -store as seen from here (a directory, or s3://bucket/prefix); default: where each run's record says, in the store its queue's workers announce")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain) file; needs -tls-key")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of -tls-cert")
	fs.IntVar(&o.maxPayload, "max-payload", tasks.DefaultMaxPayload, "largest spec accepted, in bytes: caps the body of POST /v1/runs (the worker's -max-payload)")
	fs.StringVar(&o.maxBodyInFlight, "max-body-bytes-in-flight", limits.Bytes(httpapi.DefaultMaxBodyBytesInFlight).String(), "bytes of request bodies the API reads at once (each counted by its Content-Length, or its route's cap when it has none, before it is read); a body past it is answered 503 with Retry-After, unread. At least the largest body a route takes (-max-payload, 4MiB for a session file)")
	fs.IntVar(&o.maxWaiters, "max-waiters", httpapi.DefaultMaxWaiters, "long polls (GET /v1/runs/{id}?wait=), event streams and session calls the server holds open at once, every token together, a token at most a quarter; past it one is answered 503 with Retry-After. A token's quota max_waiters (the workers' policy file) bounds it too (429). The Redis pool grows by it (unless the URL sets pool_size): each holds a connection")
	fs.DurationVar(&o.retention, "retention", airlock.DefaultRetention, "how long a run record is kept after its task ends")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM, wait this long for requests in flight (long polls and event streams end at once)")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or console")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Func("webhook", webhook.FlagUsage, func(v string) error {
		e, err := webhook.ParseFlag(v)
		if err == nil {
			o.webhooks = append(o.webhooks, e)
		}
		return err
	})
	fs.BoolVar(&o.ui, "ui", true, "serve the approval console at /ui/ (sign in with a token that holds approvals:read; its session cookie is Secure: reach it over HTTPS, -tls-cert, or on localhost); -ui=false turns it off")
	fs.BoolVar(&o.hashToken, "hash-token", false, "read a token on stdin and print its sha256: form, for the token file")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() != 0:
		return o, fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	case o.hashToken:
		return o, nil
	case o.tokens == "":
		return o, errors.New("-tokens FILE is required: the API serves nobody without tokens (see -h)")
	case (o.tlsCert == "") != (o.tlsKey == ""):
		return o, errors.New("-tls-cert and -tls-key go together")
	case o.maxPayload <= 0:
		return o, errors.New("-max-payload: must be positive")
	}
	n, err := limits.ParseBytes(o.maxBodyInFlight)
	if err != nil {
		return o, fmt.Errorf("-max-body-bytes-in-flight: %w", err)
	}
	if largest := max(int64(o.maxPayload), session.MaxFileBytes); int64(n) < largest {
		return o, fmt.Errorf("-max-body-bytes-in-flight: %s is below the largest body a route takes (%s: -max-payload, or a session file's 4MiB)", n, limits.Bytes(largest))
	}
	o.bodyInFlight = int64(n)
	switch {
	case o.retention <= 0:
		return o, errors.New("-retention: must be positive (the run record must be kept to be read)")
	case o.shutdownTimeout <= 0:
		return o, errors.New("-shutdown-timeout: must be positive")
	}
	return o, o.redis.CheckPrefix()
}

// hashToken prints the sha256: form of the token on stdin (its first line).
func hashToken(stdin io.Reader, stdout, stderr io.Writer) int {
	line, err := bufio.NewReader(io.LimitReader(stdin, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		cli.PrintError(stdout, stderr, "api", false, err, "", exitError)
		return exitError
	}
	tok := strings.TrimRight(line, "\r\n")
	if len(tok) < httpapi.MinPlainToken || strings.ContainsAny(tok, " \t") {
		cli.PrintError(stdout, stderr, "api", false, fmt.Errorf("-hash-token: want a token of at least %d characters without blanks on stdin", httpapi.MinPlainToken), "", exitUsage)
		return exitUsage
	}
	fmt.Fprintln(stdout, httpapi.HashToken(tok))
	return exitOK
}

// serve runs the server until ctx ends, then shuts it down.
func serve(ctx context.Context, o options, tokens *httpapi.Tokens, log zerolog.Logger) error {
	rdb, cfg, err := o.redis.Open()
	if err != nil {
		return err
	}
	if cfg.PoolSize == 0 {
		// Each long poll and event stream holds a connection (a blocking
		// read): the other requests keep go-redis's default pool beside
		// them, whatever the waiters do.
		_ = rdb.Close() // never connected: Open does not connect
		cfg.PoolSize = 10*runtime.GOMAXPROCS(0) + o.maxWaiters
		cfg.MaxIdleConns = 10 * runtime.GOMAXPROCS(0) // a burst's connections close once idle
		rdb = cfg.Client()
	}
	defer rdb.Close()
	h, err := httpapi.New(rdb, httpapi.Options{
		Prefix: o.redis.Prefix, Retention: o.retention, MaxPayload: o.maxPayload, MaxBodyBytesInFlight: o.bodyInFlight, Tokens: tokens, Log: &log, Store: o.store,
		MaxWaiters: o.maxWaiters, UI: o.ui,
	})
	if err != nil {
		return err
	}
	ln, scheme, err := cli.Listen("-addr", o.addr, o.tlsCert, o.tlsKey)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute, // bodies are at most -max-payload
		IdleTimeout:       2 * time.Minute,
		// No WriteTimeout: long polls and event streams last up to
		// httpapi.MaxWait, and set their own write deadlines.
		ErrorLog: nil,
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	if err := rdb.Ping(pctx).Err(); err != nil {
		// Not fatal: Redis may come later; /healthz and every call say so.
		log.Warn().Str("redis", cfg.String()).Str("redis_from", o.redis.Source().String()).Err(o.redis.Explain(err)).Msg("Redis does not answer (yet): calls fail with 503 until it does")
	}
	pcancel()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// Webhooks: the dispatcher and the delivery server run beside the API
	// until it stops; a failure to start them stops the API too.
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wdone := make(chan error, 1)
	go func() { wdone <- webhook.Run(wctx, rdb, o.redis.Prefix, o.webhooks, log) }()
	werrc := wdone // nil once Run has returned
	defer func() {
		wcancel()
		if werrc != nil {
			<-werrc
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Str("url", scheme+"://"+ln.Addr().String()).
		Str("redis", cfg.String()).Str("redis_from", o.redis.Source().String()).Int("tokens", tokens.Len()).Msg("api started")
	if o.ui {
		log.Info().Str("url", scheme+"://"+ln.Addr().String()+"/ui/").Msg("approval console")
	}
wait:
	for {
		select {
		case err := <-errc:
			h.Close()
			return fmt.Errorf("serving: %w", err)
		case err := <-werrc:
			werrc = nil
			if err != nil {
				h.Close()
				_ = srv.Close()
				<-errc
				return fmt.Errorf("webhooks: %w", err)
			}
			// No endpoints (Run returns at once), or ctx ended.
		case <-ctx.Done():
			break wait
		}
	}
	log.Info().Msg("api stopping")
	h.Close() // long polls answer, event streams end
	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info().Msg("api stopped")
	return nil
}
