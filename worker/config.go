//go:build linux

package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-run/airlock/actions"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/promote/storage"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/network/egress"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// Config configures a Worker. Zero fields take the documented defaults.
type Config struct {
	Redis redis.UniversalClient // required
	// RedisNodes are the addresses (host:port) of every server behind
	// Redis that runs must never reach, besides a single client's own
	// address: sentinels, cluster nodes, replicas (redisconn's Nodes).
	RedisNodes []string
	// Prefix is the prefix of every key Airlock keeps in Redis (approvals,
	// events, published limits); default "airlock:". Clients and CLIs of
	// the same deployment must use the same one.
	Prefix        string
	Concurrency   int            // slots; default 2
	Queues        map[string]int // queue → priority; default {"default": 1}
	WorkspaceRoot string         // default /var/lib/airlock/workspaces (root) or $TMPDIR/airlock-workspaces
	Policy        limits.Policy  // default limits.DefaultPolicy()
	Isolation     string         // Strict (default) or BestEffort
	UIDFirst      int            // first uid of the slots' range; default 200000
	UIDCount      int            // size of the range; default 10000
	UIDLockDir    string         // default /run/airlock/uids
	Landlock      *bool          // default true
	// Cgroup is "auto" (the default: cgroup v2 where delegated, else v1
	// where writable) or "off": memory and processes are then limited by
	// RLIMIT_AS and RLIMIT_NPROC, which strict isolation refuses.
	Cgroup string
	// CgroupRoot is where cgroup hierarchies are mounted; default
	// /sys/fs/cgroup.
	CgroupRoot string
	// ROBinds are host directories or files added read-only to every
	// step's view, "SRC[:DST]" (the -ro-bind flag): an interpreter under
	// /opt, a virtualenv. A source that holds a unix socket is refused: a
	// step could connect to it.
	ROBinds           []string
	MaxPayload        int           // default tasks.DefaultMaxPayload
	TaskCheckInterval time.Duration // asynq's pause after a round of polls that found nothing; default 10ms
	// IdleWait is the longest a poll of empty queues waits for a wake-up
	// from an enqueuer (internal/redis/wake) before it polls again;
	// default wake.DefaultMaxIdle (2s). Negative: no waiting, a poll
	// every TaskCheckInterval.
	IdleWait        time.Duration
	ShutdownTimeout time.Duration // how long shutdown waits before handing tasks back; default 3s
	Grace           time.Duration // SIGTERM to SIGKILL; default 500ms
	Logger          zerolog.Logger

	// Inputs and secrets.
	// SecretsDir holds one file per secret name (-secrets-dir); secrets
	// come from there or from $AIRLOCK_SECRET_<NAME>, the file first.
	SecretsDir string
	// FetchAllow opens destinations the downloads of inputs may not reach
	// by default (-fetch-allow: IP, CIDR, host, *.domain).
	FetchAllow []string
	// FetchTimeout bounds one download, within the task's deadline;
	// default 5m. The size cap is Policy.MaxInputBytes.
	FetchTimeout time.Duration
	// EgressAllow is what a networked run's steps may reach through the
	// worker's proxy (-egress-allow: IP, CIDR, host, *.domain); nothing
	// when empty. EgressMaxBytes caps a run's egress, both ways, request
	// heads included; default 256 MiB. EgressMaxConns caps a run's
	// connections to the proxy open at once; default 64.
	// EgressIdleTimeout closes a connection on which nothing moved for
	// that long; default 30s.
	EgressAllow       []string
	EgressMaxBytes    int64
	EgressMaxConns    int
	EgressIdleTimeout time.Duration

	// Output: contract, risk policy, approvals, promotion.
	RiskPolicy *policy.Policy // default policy.NoPolicy(): every output is parked
	// Actions is the operator's catalog (worker -actions): the only
	// definitions a call ({"action": NAME, "params": ...}) runs. Nil:
	// the worker runs no action, and refuses every call.
	Actions *actions.Catalog
	Sink    approve.Sink // default promote.FS{Dir: storage.DefaultDir()}
	// Store is where Sink publishes, as the worker announces it to
	// readers (queuepolicy.Announce): the store's directory, absolute, or
	// its s3://bucket/prefix URL. Default: the directory of a promote.FS
	// Sink, made absolute; "" (none announced) for another Sink.
	Store       string
	ApprovalTTL time.Duration   // pending approvals expire after it; default 72h
	Artifacts   contract.Limits // caps of result and artifacts; defaults in contract
	MaxStaged   int64           // staged artifact bytes per approval; default 32 MiB
	// MaxPending bounds the staged bytes all approvals that hold them
	// keep in Redis together (approve.Options.MaxPendingBytes); 0 takes
	// its default, negative sets no bound.
	MaxPending    int64
	SweepInterval time.Duration // approval expiry and promotion catch-up; default 10s
	// MaxSessions bounds the sessions the worker holds open at once; an
	// open beyond it is refused (429). An idle session holds no slot (its
	// workspace is parked between calls), only a goroutine and its parked
	// archive. Default DefaultMaxSessions; negative: no bound but
	// MaxSessionBytes (and unboundedSessions handlers).
	MaxSessions int
	// MaxSessionBytes bounds the bytes the parked workspaces of its open
	// sessions hold together, on the disk of the workspace root: an open
	// past it is refused (429). Default DefaultMaxSessionBytes.
	MaxSessionBytes int64
	// SessionStore is the directory of the sessions' checkpoints (their
	// workspace and state after each call): a session resumes on any
	// worker that shares it (a deploy's next worker on the same host, or
	// a shared filesystem). Default /var/lib/airlock/sessions as root,
	// else $TMPDIR/airlock-sessions-UID.
	SessionStore string
	// NoLiveOutput turns live output off (-live-output=false): steps'
	// output then reaches callers only with their records. On, a step
	// sends nothing while nobody listens (live.go).
	NoLiveOutput bool

	// TracerProvider makes the spans of runs, decisions and promotions
	// (package tracing); nil: the global provider, a no-op until a
	// program installs an SDK (cmd/worker does, by internal/tracing/otlp,
	// when OTEL_EXPORTER_OTLP_ENDPOINT is set).
	TracerProvider trace.TracerProvider

	// Observer, when set, is told of every finished attempt, promotion
	// task and Redis error the worker does not otherwise surface
	// (internal/metrics implements it); nil: nothing is measured.
	Observer Observer
}

// Observer receives what the worker measures. Its methods are called on
// the tasks' goroutines, concurrently: they must be cheap, and must not
// keep or change the record.
type Observer interface {
	// RunEnded is called once per attempt the worker finished a record
	// for (its "task end" log line), from the one place that reports it,
	// with that record; an attempt handed back at shutdown has none.
	RunEnded(rec *record.Run)
	// Promotion is called when a promote task ends: "published",
	// "already" (published before), "refused" or "failed" (retried).
	Promotion(result string)
	// RedisError is called when a write the worker only logs fails:
	// "result" (a run's record) or "events".
	RedisError(op string)
}

// Defaults of the sessions' bounds (Config.MaxSessions, MaxSessionBytes).
const (
	DefaultMaxSessions           = 1024
	DefaultMaxSessionBytes int64 = 8 << 30
	// unboundedSessions is what a negative MaxSessions stands for: the
	// handlers asynq may run for sessions.
	unboundedSessions = 1 << 16
)

// ErrIsolation is returned by New in strict mode when a tier is missing.
var ErrIsolation = sandbox.ErrStrict

func (c *Config) defaults() {
	if c.Concurrency <= 0 {
		c.Concurrency = 2
	}
	if c.MaxSessionBytes <= 0 {
		c.MaxSessionBytes = DefaultMaxSessionBytes
	}
	if c.MaxSessions < 0 {
		c.MaxSessions = unboundedSessions
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{"default": 1}
	}
	root := os.Geteuid() == 0
	if c.SessionStore == "" {
		c.SessionStore = "/var/lib/airlock/sessions"
		if os.Geteuid() != 0 {
			c.SessionStore = filepath.Join(os.TempDir(), fmt.Sprintf("airlock-sessions-%d", os.Geteuid()))
		}
	}
	if c.WorkspaceRoot == "" {
		if root {
			c.WorkspaceRoot = "/var/lib/airlock/workspaces"
		} else {
			c.WorkspaceRoot = filepath.Join(os.TempDir(), fmt.Sprintf("airlock-workspaces-%d", os.Geteuid()))
		}
	}
	if c.Policy == (limits.Policy{}) {
		c.Policy = limits.DefaultPolicy()
	}
	if c.Isolation == "" {
		c.Isolation = Strict
	}
	if c.UIDFirst == 0 {
		c.UIDFirst = 200000
	}
	if c.UIDCount == 0 {
		c.UIDCount = 10000
	}
	if c.UIDLockDir == "" {
		c.UIDLockDir = "/run/airlock/uids"
	}
	if c.Landlock == nil {
		t := true
		c.Landlock = &t
	}
	if c.Cgroup == "" {
		c.Cgroup = "auto"
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = tasks.DefaultMaxPayload
	}
	if c.TaskCheckInterval <= 0 {
		c.TaskCheckInterval = 10 * time.Millisecond
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 3 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = 500 * time.Millisecond
	}
	if c.RiskPolicy == nil {
		c.RiskPolicy = policy.NoPolicy()
	}
	if c.Sink == nil {
		if dir := storage.DefaultDir(); dir != "" {
			c.Sink = &promote.FS{Dir: dir}
		}
	}
	if fs, ok := c.Sink.(*promote.FS); ok && c.Store == "" {
		c.Store, _ = filepath.Abs(fs.Dir)
	}
	if c.ApprovalTTL <= 0 {
		c.ApprovalTTL = 72 * time.Hour
	}
	if c.MaxStaged <= 0 {
		c.MaxStaged = 32 << 20
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = 10 * time.Second
	}
	if c.EgressMaxBytes <= 0 {
		c.EgressMaxBytes = 256 << 20
	}
	if c.EgressMaxConns <= 0 {
		c.EgressMaxConns = egress.DefaultMaxConns
	}
	if c.EgressIdleTimeout <= 0 {
		c.EgressIdleTimeout = egress.DefaultIdleTimeout
	}
}
