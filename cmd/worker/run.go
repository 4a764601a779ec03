//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/internal/cli"
	"github.com/airlock-run/airlock/internal/metrics"
	"github.com/airlock-run/airlock/internal/network/egress"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/internal/redis/redislog"
	"github.com/airlock-run/airlock/internal/redis/wake"
	"github.com/airlock-run/airlock/internal/tracing/otlp"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/promote/storage"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/worker"
)

// options are the worker's flags.
type options struct {
	redisURL, queues, root, limitsDefault, limitsMax, isolation                string
	uidRange, uidLockDir, logFormat, logLevel, devAddr                         string
	concurrency, maxPayload, maxSessions                                       int
	maxSessionBytes                                                            int64
	sessionStore                                                               string
	timeout, maxTimeout, sessionTimeout, checkInterval, shutdownTimeout, grace time.Duration
	idleWait                                                                   time.Duration
	allowNetwork, landlock, dev, liveOutput                                    bool
	policyFile, storeDir, cgroupMode, storeGroup, prefix                       string
	actionsDir                                                                 string
	approvalTTL, sweepInterval                                                 time.Duration
	maxArtifacts                                                               int
	maxArtifactBytes, maxResultBytes, maxStaged                                string
	maxPending, maxRecord                                                      string
	roBinds, fetchAllow, egressAllow                                           stringList
	egressMax                                                                  string
	egressMaxConns                                                             int
	egressIdle                                                                 time.Duration
	secretsDir, fetchMax                                                       string
	fetchTimeout                                                               time.Duration
	httpAddr                                                                   string // -metrics-addr: health and metrics endpoints
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Run parses args and runs the worker until ctx ends.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	def := limits.DefaultPolicy()
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: worker [flags]

Runs Airlock's worker: takes task specs off Redis, runs their steps
confined, checks and parks or promotes their output. Linux only; strict
isolation needs root. -dev runs with an embedded Redis and a demo task.

exit status: 0 stopped by SIGINT/SIGTERM (or -h), 1 error (isolation tier
missing in strict mode, Redis, a bad policy file...), 2 bad flags

flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.redisURL, "redis", envOr("REDIS_URL", cli.DefaultURL), "Redis URL (env REDIS_URL): redis://, rediss://, redis+sentinel://, redis+cluster://, or HOST:PORT for redis://HOST:PORT/0 (docs/redis.md)")
	fs.StringVar(&o.prefix, "prefix", "airlock:", "prefix of Airlock's keys in Redis (approvals, events, published limits); clients and CLIs must use the same")
	fs.IntVar(&o.concurrency, "concurrency", 2, "tasks run at once (one slot, uid and helper each)")
	fs.IntVar(&o.maxSessions, "max-sessions", 0, "sessions held open at once (0: 1024; -1: no bound but -max-session-bytes); an idle session holds no slot, its workspace parked between calls; an open beyond it answers 429")
	fs.BoolVar(&o.liveOutput, "live-output", true, "send steps' output to whoever listens while they run (SSE output events, the Go client's OnOutput, MCP progress); a step sends nothing while nobody listens")
	fs.StringVar(&o.sessionStore, "session-store", "", "directory of the sessions' checkpoints (workspace and state after each call): a session paused, or whose worker stopped or died, resumes on any worker sharing it (default /var/lib/airlock/sessions as root, else $TMPDIR/airlock-sessions-UID)")
	fs.Int64Var(&o.maxSessionBytes, "max-session-bytes", 0, "bytes the checkpoints of the open sessions hold together in -session-store (0: 8 GiB); an open past it answers 429")
	fs.StringVar(&o.queues, "queues", "default=1", "queues and priorities: name=priority,...")
	fs.StringVar(&o.root, "workspace-root", "", "directory of per-task workspaces (default /var/lib/airlock/workspaces as root)")
	fs.StringVar(&o.limitsDefault, "limits", "", "default limits of a step: key=value,... (built in: "+def.Default.String()+", lowered to -max-limits)")
	fs.StringVar(&o.limitsMax, "max-limits", def.Max.String(), "maximum limits a spec may ask for: key=value,...")
	fs.DurationVar(&o.timeout, "timeout", time.Duration(def.DefaultTimeout), "default task timeout")
	fs.DurationVar(&o.maxTimeout, "max-timeout", time.Duration(def.MaxTimeout), "maximum task timeout a spec may ask for")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", time.Duration(limits.DefaultSessionTimeout), "default life of a session whose spec gives no timeout (lowered to -max-timeout)")
	fs.BoolVar(&o.allowNetwork, "allow-network", false, "let specs that ask for it (network: true) reach what -egress-allow opens, through the worker's HTTP proxy (never the host network)")
	fs.Var(&o.egressAllow, "egress-allow", "IP, CIDR, HOST or *.domain a networked run may reach through the proxy (repeatable; nothing when none; refused ranges only by IP or CIDR)")
	fs.StringVar(&o.egressMax, "egress-max-bytes", "256MiB", "bytes a networked run may move through the proxy, both ways, request heads included")
	fs.IntVar(&o.egressMaxConns, "egress-max-conns", egress.DefaultMaxConns, "connections a networked run may hold open to the proxy at once; past it new ones are refused at once")
	fs.DurationVar(&o.egressIdle, "egress-idle-timeout", egress.DefaultIdleTimeout, "close a proxy connection on which nothing moved, either way, for this long (a request head must arrive within 10s, or this when shorter)")
	fs.StringVar(&o.isolation, "isolation", worker.Strict, "strict: refuse to start when a tier is missing; best-effort: warn and run")
	fs.StringVar(&o.uidRange, "uid-range", "200000-209999", "uids for the slots (each slot takes a free one)")
	fs.StringVar(&o.uidLockDir, "uid-lock-dir", "/run/airlock/uids", "lock files that keep two workers off one uid")
	fs.BoolVar(&o.landlock, "landlock", true, "confine steps' writes with Landlock")
	fs.StringVar(&o.cgroupMode, "cgroup", "auto", "auto: limit each step's memory and processes with a cgroup (v2 where delegated, else v1); off: RLIMIT_AS and RLIMIT_NPROC only (strict isolation refuses it)")
	fs.Var(&o.roBinds, "ro-bind", "SRC[:DST]: add a host directory or file, read-only, to every step's view (repeatable; e.g. /opt/node)")
	fs.IntVar(&o.maxPayload, "max-payload", tasks.DefaultMaxPayload, "largest spec accepted, bytes")
	fs.DurationVar(&o.checkInterval, "task-check-interval", 10*time.Millisecond, "pause after a round of polls that found the queues empty")
	fs.DurationVar(&o.idleWait, "idle-wait", wake.DefaultMaxIdle, "longest a poll of empty queues waits for an enqueuer's wake-up before polling again (0: no waiting, a poll every -task-check-interval)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 3*time.Second, "wait on shutdown before unfinished tasks are handed back")
	fs.DurationVar(&o.grace, "grace", 500*time.Millisecond, "time between SIGTERM and SIGKILL when a step is stopped")
	fs.StringVar(&o.secretsDir, "secrets-dir", "", "directory of secret files, one per name (a spec's secrets come from there, or from $AIRLOCK_SECRET_<NAME>; the file wins)")
	fs.Var(&o.fetchAllow, "fetch-allow", "IP, CIDR, HOST or *.domain the downloads of inputs may reach besides public addresses (repeatable; e.g. 127.0.0.1 for a local server)")
	fs.StringVar(&o.fetchMax, "fetch-max-bytes", limits.DefaultMaxInputBytes.String(), "default and maximum size of one input download")
	fs.DurationVar(&o.fetchTimeout, "fetch-timeout", 5*time.Minute, "bound of one input download (within the task's deadline)")
	fs.StringVar(&o.policyFile, "policy", "", "risk policy file (JSON or YAML); without one every output is parked")
	fs.StringVar(&o.actionsDir, "actions", "", "directory of action definitions, one file per action (NAME.yaml, NAME.yml or NAME.json): the only actions callers may ask for by name")
	fs.StringVar(&o.storeDir, "store", storage.DefaultDir(), "where promoted outputs are published, announced in Redis for readers (enqueue -result, api, mcp): a directory (<store>/<run_id>/<task_id>/, 0700/0600; a relative one is made absolute; default /var/lib/airlock/store as root, else $XDG_DATA_HOME/airlock/store or ~/.local/share/airlock/store), or s3://bucket/prefix, an S3-compatible store configured by the AWS environment (AWS_ENDPOINT_URL_S3, AWS_REGION, AWS_ACCESS_KEY_ID...; docs/policy-and-approvals.md#promotion-exactly-once)")
	fs.StringVar(&o.storeGroup, "store-group", "", "group (name or gid) allowed to read the store: directories 0750, files 0640")
	fs.DurationVar(&o.approvalTTL, "approval-ttl", 72*time.Hour, "pending approvals expire after this")
	fs.DurationVar(&o.sweepInterval, "sweep-interval", 10*time.Second, "how often approvals are expired and promotions caught up")
	fs.IntVar(&o.maxArtifacts, "max-artifacts", 64, "artifacts per run")
	fs.StringVar(&o.maxArtifactBytes, "max-artifact-bytes", "32MiB", "total artifact bytes per run")
	fs.StringVar(&o.maxResultBytes, "max-result-bytes", "1MiB", "size of output.result")
	fs.StringVar(&o.maxStaged, "max-staged-bytes", "32MiB", "artifact bytes staged in Redis per approval")
	fs.StringVar(&o.maxPending, "max-pending-bytes", "256MiB", "bytes (results and artifacts) all approvals not yet decided or published may hold in Redis together; a park past it fails with verdict pending_limit (0: no bound)")
	fs.StringVar(&o.maxRecord, "max-record-bytes", limits.DefaultMaxRecordBytes.String(), "bytes of steps' stdout and stderr a run record keeps, all steps together (a spec may lower it: max_record_bytes); past it output is counted, not kept")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or console")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn, error")
	fs.StringVar(&o.httpAddr, "metrics-addr", "", "serve /healthz, /readyz and /metrics (Prometheus) on this address, e.g. :9090 or 127.0.0.1:9090 (off when empty)")
	fs.BoolVar(&o.dev, "dev", false, devUsage)
	fs.StringVar(&o.devAddr, "dev-addr", "127.0.0.1:6379", "address of the embedded Redis in dev mode")
	if err := cli.Parse(fs, args, stdout, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see -h)", fs.Arg(0))
	}
	logOut := &droppingWriter{w: stderr}
	log, err := cli.NewLogger(o.logFormat, o.logLevel, logOut)
	if err != nil {
		return err
	}
	redislog.To(log)
	stopTracing, err := otlp.Start(ctx, "airlock-worker", airlock.Version, log)
	if err != nil {
		return err
	}
	defer stopTracing()
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	var dev *devMode // dev.go; a build without it refuses -dev
	if o.dev {
		if dev, err = startDev(&o, explicit, log); err != nil {
			return err
		}
		defer dev.close()
	}
	cfg, err := o.config(ctx, log)
	if err != nil {
		return err
	}
	if dev != nil {
		if err := dev.configure(&cfg); err != nil {
			return err
		}
	}
	ready := &readiness{}
	ready.set("starting")
	var m *metrics.Metrics
	if o.httpAddr != "" {
		m = metrics.New(airlock.Version, slices.Sorted(maps.Keys(cfg.Queues))...)
		m.SetPrincipals(slices.Collect(maps.Keys(cfg.RiskPolicy.Quotas())))
		ready.m, cfg.Observer = m, m
		srv, err := serveHTTP(o.httpAddr, m, ready, log)
		if err != nil {
			return err
		}
		defer func() { _ = srv.Shutdown(5 * time.Second) }()
	}
	redisFrom := redisSource(o.dev, explicit["redis"])
	rdb, rconf, err := redisconn.Open(o.redisURL)
	if err != nil {
		return fmt.Errorf("%s: %w", redisFrom.Name(), err)
	}
	redisconn.SetLogger(func(msg string) {
		lvl := zerolog.DebugLevel // failed dials repeat; the worker says what matters
		if strings.Contains(msg, "sentinel:") {
			lvl = zerolog.InfoLevel // a failover: which master now
		}
		log.WithLevel(lvl).Str("from", "go-redis").Msg(msg)
	})
	defer rdb.Close()
	ready.rdb.Store(&rdb)
	ready.set("waiting for Redis at " + rconf.String())
	if err := waitForRedis(ctx, rdb, rconf.String(), log.With().Str("redis_from", redisFromText(o.dev, redisFrom)).Logger(), startRetries(m)); err != nil {
		return nil // stopped (SIGINT/SIGTERM) while Redis was unreachable: a clean stop
	}
	ready.set("starting slots")
	cfg.Redis = rdb
	cfg.RedisNodes = rconf.Nodes(ctx, rdb)
	if warning, known := redisconn.Durability(ctx, rdb); warning != "" {
		log.Warn().Str("redis", rconf.String()).Msg(warning)
	} else if !known {
		log.Info().Str("redis", rconf.String()).Msg("could not tell whether Redis persists its data (CONFIG GET refused): without AOF or RDB snapshots, a restart loses pending approvals")
	}
	w, err := worker.New(cfg)
	if err != nil {
		return err
	}
	ready.worker.Store(w)
	if m != nil {
		m.SetSlots(w.Slots)
		m.SetHelperRestarts(w.HelperRestarts)
		st := approve.NewStore(rdb, approve.Options{Prefix: o.prefix})
		m.SetPending(func() (int64, error) {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return st.Count(c, approve.StatePending)
		})
		m.SetPendingBytes(func() (int64, error) {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			return st.PendingBytes(c)
		})
		m.SetRedis(rdb)
	}
	if dev != nil {
		go dev.demo(ctx, rdb, o.prefix, stdout, log)
	}
	err = w.Run(ctx)
	if n := logOut.dropped.Load(); n > 0 {
		log.Warn().Int64("log_lines_dropped", n).Msg("log lines could not be written")
	}
	return err
}

func (o *options) config(ctx context.Context, log zerolog.Logger) (worker.Config, error) {
	def, err := limits.Parse("-limits", o.limitsDefault)
	if err != nil {
		return worker.Config{}, err
	}
	max, err := limits.Parse("-max-limits", o.limitsMax)
	if err != nil {
		return worker.Config{}, err
	}
	base := limits.DefaultPolicy()
	max = max.Merge(base.Max)
	// Built-in defaults above a lowered maximum follow it down; explicit
	// -limits above -max-limits are an error (Policy.Check).
	egressMax, err := limits.ParseBytes(o.egressMax)
	if err != nil || egressMax <= 0 {
		return worker.Config{}, fmt.Errorf("-egress-max-bytes: %q is not a positive size", o.egressMax)
	}
	if o.egressMaxConns <= 0 {
		return worker.Config{}, fmt.Errorf("-egress-max-conns: %d is not a positive count", o.egressMaxConns)
	}
	if o.egressIdle <= 0 {
		return worker.Config{}, fmt.Errorf("-egress-idle-timeout: %s is not a positive duration", o.egressIdle)
	}
	if o.idleWait < 0 {
		return worker.Config{}, fmt.Errorf("-idle-wait: %s is negative (0: no waiting, a poll every -task-check-interval)", o.idleWait)
	}
	fetchMax, err := limits.ParseBytes(o.fetchMax)
	if err != nil || fetchMax <= 0 {
		return worker.Config{}, fmt.Errorf("-fetch-max-bytes: %q is not a positive size", o.fetchMax)
	}
	recordMax, err := limits.ParseBytes(o.maxRecord)
	if err != nil || recordMax <= 0 {
		return worker.Config{}, fmt.Errorf("-max-record-bytes: %q is not a positive size", o.maxRecord)
	}
	pol := limits.Policy{
		MaxInputBytes: fetchMax, MaxRecordBytes: recordMax,
		Default: def.Merge(base.Default.Clamp(max)), Max: max,
		DefaultTimeout: limits.Duration(min(o.timeout, o.maxTimeout)), MaxTimeout: limits.Duration(o.maxTimeout),
		DefaultSessionTimeout: limits.Duration(min(o.sessionTimeout, o.maxTimeout)),
		AllowNetwork:          o.allowNetwork,
	}
	queues, err := parseQueues(o.queues)
	if err != nil {
		return worker.Config{}, err
	}
	first, count, err := parseRange(o.uidRange)
	if err != nil {
		return worker.Config{}, err
	}
	landlock := o.landlock
	risk := policy.NoPolicy()
	if o.policyFile != "" {
		if risk, err = policy.Load(o.policyFile); err != nil {
			return worker.Config{}, fmt.Errorf("-policy: %w", err)
		}
	}
	var gid int
	if o.storeGroup != "" {
		if storage.IsS3(o.storeDir) {
			return worker.Config{}, fmt.Errorf("-store-group: only for a directory -store, not %s (S3 readers get access through the bucket's policy)", o.storeDir)
		}
		if gid, err = lookupGroup(o.storeGroup); err != nil {
			return worker.Config{}, fmt.Errorf("-store-group: %w", err)
		}
	}
	store, err := storeLocation(o.storeDir)
	if err != nil {
		return worker.Config{}, err
	}
	sink, err := storage.Open(ctx, store, storage.Options{ReadGroup: gid})
	if err != nil {
		return worker.Config{}, fmt.Errorf("-store: %w", err)
	}
	var sizes [4]limits.Bytes
	for i, f := range []struct{ name, v string }{{"-max-artifact-bytes", o.maxArtifactBytes}, {"-max-result-bytes", o.maxResultBytes}, {"-max-staged-bytes", o.maxStaged}, {"-max-pending-bytes", o.maxPending}} {
		if sizes[i], err = limits.ParseBytes(f.v); err != nil {
			return worker.Config{}, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	catalog, err := o.catalog(pol)
	if err != nil {
		return worker.Config{}, err
	}
	return worker.Config{
		Actions: catalog,
		Prefix:  o.prefix, RiskPolicy: risk, Sink: sink, Store: store, ApprovalTTL: o.approvalTTL,
		SweepInterval: o.sweepInterval, MaxStaged: int64(sizes[2]), MaxPending: pendingBound(sizes[3]),
		Artifacts:   contract.Limits{MaxCount: o.maxArtifacts, MaxBytes: int64(sizes[0]), MaxResult: int64(sizes[1])},
		Concurrency: o.concurrency, MaxSessions: o.maxSessions, MaxSessionBytes: o.maxSessionBytes, SessionStore: o.sessionStore, NoLiveOutput: !o.liveOutput, Queues: queues, WorkspaceRoot: o.root, Policy: pol,
		Isolation: o.isolation, UIDFirst: first, UIDCount: count, UIDLockDir: o.uidLockDir,
		Landlock: &landlock, Cgroup: o.cgroupMode, ROBinds: o.roBinds,
		SecretsDir: o.secretsDir, FetchAllow: o.fetchAllow, FetchTimeout: o.fetchTimeout,
		EgressAllow: o.egressAllow, EgressMaxBytes: int64(egressMax), EgressMaxConns: o.egressMaxConns, EgressIdleTimeout: o.egressIdle, MaxPayload: o.maxPayload, TaskCheckInterval: o.checkInterval, IdleWait: idleWait(o.idleWait),
		ShutdownTimeout: o.shutdownTimeout, Grace: o.grace, Logger: log,
	}, nil
}

// catalog loads -actions (dev mode adds its demo's action: devMode.configure).
func (o *options) catalog(pol limits.Policy) (*actions.Catalog, error) {
	c, err := actions.NewCatalog()
	if o.actionsDir != "" {
		if c, err = actions.LoadDir(o.actionsDir, pol); err != nil {
			return nil, fmt.Errorf("-actions: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// pendingBound is worker.Config.MaxPending for -max-pending-bytes: 0 there
// means no bound.
func pendingBound(b limits.Bytes) int64 {
	if b == 0 {
		return -1
	}
	return int64(b)
}

// lookupGroup resolves a group name or number to a gid other than 0.
func lookupGroup(s string) (int, error) {
	gid, err := strconv.Atoi(s)
	if err != nil {
		g, lerr := user.LookupGroup(s)
		if lerr != nil {
			return 0, lerr
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return 0, err
		}
	}
	if gid <= 0 {
		return 0, fmt.Errorf("%q: want a group other than root's", s)
	}
	return gid, nil
}

func parseQueues(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, kv := range strings.Split(s, ",") {
		name, prio, ok := strings.Cut(strings.TrimSpace(kv), "=")
		p := 1
		if ok {
			n, err := strconv.Atoi(prio)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("-queues: priority of %q must be a positive integer", name)
			}
			p = n
		}
		if name == "" {
			return nil, fmt.Errorf("-queues: empty queue name in %q (want name=priority,...)", s)
		}
		out[name] = p
	}
	return out, nil
}

func parseRange(s string) (int, int, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || first < 1 || last < first {
		return 0, 0, fmt.Errorf("-uid-range: %q is not FIRST-LAST with 0 < FIRST <= LAST", s)
	}
	return first, last - first + 1, nil
}

// droppingWriter is the log's writer: a line it cannot write (stderr
// closed, a full disk) is dropped and counted, never an error that would
// stop the worker or make the logger complain on the same stderr.
type droppingWriter struct {
	w       io.Writer
	dropped atomic.Int64
}

func (d *droppingWriter) Write(p []byte) (int, error) {
	if _, err := d.w.Write(p); err != nil {
		d.dropped.Add(1)
	}
	return len(p), nil
}

// storeLocation is -store as the worker announces it: a directory made
// absolute (readers run elsewhere), or an s3:// URL as it is.
func storeLocation(store string) (string, error) {
	switch {
	case store == "":
		return "", errors.New("-store: no default store, as neither $XDG_DATA_HOME nor the home directory is known: give -store DIR or s3://bucket/prefix")
	case strings.Contains(store, "://"):
		return store, nil // storage.Open checks it
	}
	abs, err := filepath.Abs(store)
	if err != nil {
		return "", fmt.Errorf("-store: %w", err)
	}
	return abs, nil
}

// redisSource says where -redis came from, for the log lines of a Redis
// that does not answer (field redis_from) and its URL's errors: -dev (as
// the flag: the embedded Redis's URL; redisFromText says -dev), -redis
// given (explicit),
// $REDIS_URL, or the default. The worker reads no dev-mode URL file: it
// writes one.
func redisSource(dev, explicit bool) cli.RedisSource {
	switch {
	case dev, explicit:
		return cli.RedisSource{From: cli.FromFlag}
	case os.Getenv("REDIS_URL") != "":
		return cli.RedisSource{From: cli.FromEnv}
	}
	return cli.RedisSource{From: cli.FromDefault}
}

// redisFromText is the redis_from log field: src's words, or -dev's.
func redisFromText(dev bool, src cli.RedisSource) string {
	if dev {
		return "-dev (the embedded Redis)"
	}
	return src.String()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// idleWait maps -idle-wait to worker.Config.IdleWait: 0 turns waiting off.
func idleWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
