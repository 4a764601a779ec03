//go:build linux

package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/isolation/cgroup"
	"github.com/airlock-run/airlock/internal/isolation/sandbox"
	"github.com/airlock-run/airlock/internal/network/egress"
	"github.com/airlock-run/airlock/internal/network/fetch"
	"github.com/airlock-run/airlock/internal/network/netguard"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/redis/redislog"
	"github.com/airlock-run/airlock/internal/redis/wake"
	"github.com/airlock-run/airlock/internal/secrets"
	"github.com/airlock-run/airlock/internal/tracing"
	"github.com/airlock-run/airlock/live"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
	"github.com/airlock-run/airlock/tmpfs"
)

// Isolation modes (sandbox.Plan decides what each allows).
const (
	Strict     = sandbox.Strict     // refuse to start when a tier is missing
	BestEffort = sandbox.BestEffort // start anyway and say loudly what is missing
)

// Worker runs tasks. Create it with New, run it with Run.
type Worker struct {
	cfg   Config
	log   zerolog.Logger
	ws    *tmpfs.Manager
	slots chan *slot
	// helperRestarts counts helpers started again after a slot's first.
	helperRestarts atomic.Int64
	all            []*slot
	isolation      record.Isolation
	plan           *sandbox.Plan // decides the tiers, and how helpers fall back
	name           string
	binds          []sandbox.Bind
	cgroups        *cgroup.Manager // nil: the rlimit fallback

	// approvals parks runs' output: the worker's own transitions append
	// no run event (approve.Store.Quiet), report emits the record's.
	approvals *approve.Store
	// promoter publishes accepted approvals: promote tasks (Promote, whose
	// transitions are the run's events) and a policy's acceptance in the
	// run's own task (PromoteInline, quiet).
	promoter *approve.Promoter
	// completer stores a run's end: record, event and approval updates.
	completer *completer
	asynq     *asynq.Client
	fetcher   *fetch.Fetcher
	secretSrc secrets.Source
	egress    *netguard.Guard // of networked runs' proxy
	// sessions is the wire of the sessions the worker holds, and
	// sessionsHeld how many it holds (at most cfg.MaxSessions).
	sessions     *session.Conn
	sessionsHeld atomic.Int64
	// bells routes calls to the sessions it holds (sessionpark.go), and
	// sessionBytes is what their parked workspaces hold together.
	bells        bells
	sessionBytes atomic.Int64
	// live carries steps' output to their listeners (live.go).
	live *live.Conn
	// holder names the worker as the holder of its sessions.
	holder string
	// gate lets asynq take a task only for a free slot (gate.go).
	gate *gate

	tr trace.Tracer // the worker's spans' (worker/trace.go)

	stopOnce sync.Once
	stopping chan struct{}  // closed when shutdown starts: running steps are canceled
	serving  atomic.Bool    // Run takes tasks: its asynq server started, no shutdown yet
	inflight sync.WaitGroup // handlers of TypeRun under way
	// handedBack holds the queues of the tasks handed back at shutdown,
	// whose idle workers are woken once asynq requeued them.
	handedBack sync.Map

	// ended maps the task id of each running handler to a channel of
	// why asynq failed its task, if it did (cancel.go).
	ended sync.Map
}

// slot is one unit of concurrency.
type slot struct {
	uid     *sandbox.UIDLease
	uidN    int
	area    *tmpfs.Slot   // the slot's workspace
	group   *cgroup.Group // the slot's control group; nil without
	box     *sandbox.Slot // network off
	netBox  *sandbox.Slot // network on, started on first use when allowed
	netCfg  sandbox.SlotConfig
	netOnce sync.Once
	netErr  error
	// egressRun is the egress of the networked run in progress, if any:
	// the proxy serves its steps' connections with it.
	egressRun atomic.Pointer[egress.Run]
}

// New probes the isolation tiers, sweeps what a killed worker left in the
// workspace root, and starts one sandbox helper per slot.
func New(cfg Config) (*Worker, error) {
	cfg.defaults()
	if cfg.Redis == nil {
		return nil, errors.New("worker: Config.Redis is required")
	}
	if cfg.Sink == nil {
		return nil, errors.New("worker: Config.Sink: no default store, as neither $XDG_DATA_HOME nor the home directory is known: give one (worker -store DIR or s3://bucket/prefix)")
	}
	if err := sandbox.CheckMode(cfg.Isolation); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("worker: prefix %q: must not hold '{' or '}' (they would break Redis Cluster hash tags)", cfg.Prefix)
	}
	if cfg.Cgroup != "auto" && cfg.Cgroup != "off" {
		return nil, fmt.Errorf("worker: cgroup %q: want auto or off", cfg.Cgroup)
	}
	if err := cfg.Policy.Check(); err != nil {
		return nil, fmt.Errorf("worker: limits: %w", err)
	}
	host, _ := os.Hostname()
	w := &Worker{
		cfg: cfg, log: cfg.Logger, stopping: make(chan struct{}),
		name: fmt.Sprintf("%s/%d", host, os.Getpid()),
		// The sessions' holder: unique to this process, so that another
		// one of the same host name and pid (a container restarted as
		// pid 1) never beats for the sessions of one that died.
		holder: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8]),
		tr:     tracing.Tracer(cfg.TracerProvider),
	}
	binds, err := sandbox.ParseBinds(cfg.ROBinds)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w.binds = binds
	guard, err := w.guard("-fetch-allow", cfg.FetchAllow, true)
	if err != nil {
		return nil, fmt.Errorf("worker: -fetch-allow %w", err)
	}
	w.fetcher = fetch.New(guard, cfg.FetchTimeout)
	if w.egress, err = w.guard("-egress-allow", cfg.EgressAllow, false); err != nil {
		return nil, fmt.Errorf("worker: -egress-allow %w", err)
	}
	w.secretSrc = secrets.Source{Dir: cfg.SecretsDir}
	if err := w.confine(); err != nil {
		return nil, err
	}
	w.useStore(approve.NewStore(cfg.Redis, approve.Options{Prefix: cfg.Prefix, TTL: cfg.ApprovalTTL, MaxStagedBytes: cfg.MaxStaged, MaxPendingBytes: cfg.MaxPending,
		PrincipalMaxPendingBytes: func(p string) int64 { return int64(cfg.RiskPolicy.QuotaOf(p).MaxPendingBytes) },
		TracerProvider:           cfg.TracerProvider}))
	w.completer = newCompleter(&w.cfg, w.log)
	w.sessions = session.NewConn(w.cfg.Redis, w.cfg.Prefix)
	w.live = live.NewConn(w.cfg.Redis, w.cfg.Prefix)
	w.asynq = asynq.NewClientFromRedisClient(cfg.Redis)
	return w, nil
}

// useStore sets the approval store the worker parks in (quiet) and
// promotes through.
func (w *Worker) useStore(store *approve.Store) {
	w.approvals = store.Quiet()
	w.promoter = &approve.Promoter{Store: store, Sink: w.cfg.Sink, Worker: w.name + " " + airlock.Version}
}

// confine opens the workspace root, asks the isolation plan for the
// memory tier and the slots' helpers, logs the tiers in force ("isolation
// tiers", with what is missing), and undoes it all when the plan's
// verdict refuses to run without them.
func (w *Worker) confine() error {
	cfg := &w.cfg
	root := os.Geteuid() == 0
	if root {
		if err := searchable(cfg.WorkspaceRoot); err != nil {
			return err
		}
	}
	mgr, err := tmpfs.New(cfg.WorkspaceRoot, root)
	if err != nil {
		return fmt.Errorf("worker: workspace root: %w", err)
	}
	w.ws = mgr
	// The sessions' checkpoints: kept across workers (a session resumes
	// from them), swept once older than any session lives.
	if err := openStore(cfg.SessionStore); err != nil {
		return fmt.Errorf("worker: session store: %w", err)
	}
	w.sweepCheckpoints(24*time.Hour + time.Duration(cfg.Policy.MaxTimeout))
	w.plan = &sandbox.Plan{Mode: cfg.Isolation, Root: root, UIDFirst: cfg.UIDFirst,
		Warn: func(err error, msg string) { w.log.Warn().Err(err).Msg(msg) }}
	w.plan.SetQuota(mgr.Mechanism(), mgr.Mounted())
	w.cgroups = w.plan.OpenCgroups(cfg.Cgroup, cfg.CgroupRoot)
	if err := w.startSlots(root); err != nil {
		w.closeSlots()
		w.closeCgroups()
		mgr.Close()
		return err
	}
	w.isolation = w.plan.Tiers(w.all[0].box.Status())
	w.isolation.Validation = w.checker(w.all[0]).Child.Describe()
	missing := w.plan.Missing(w.isolation)
	ev := w.log.Info()
	if len(missing) > 0 {
		ev = w.log.Warn().Strs("missing", missing)
	}
	ev.Interface("isolation", w.isolation).Int("slots", cfg.Concurrency).Str("workspace_root", cfg.WorkspaceRoot).
		Str("version", airlock.Version).Msg("isolation tiers")
	if err := w.plan.Verdict(missing); err != nil {
		w.closeSlots()
		mgr.Close()
		w.closeCgroups()
		return err
	}
	return nil
}

func (w *Worker) closeCgroups() {
	if w.cgroups != nil {
		if err := w.cgroups.Close(); err != nil {
			w.log.Warn().Err(err).Msg("remove the slots' cgroups")
		}
		w.cgroups = nil
	}
}

// searchable checks that every existing ancestor of the workspace root
// lets other users through (x for others): steps run as slot uids and must
// reach their workspaces.
func searchable(root string) error {
	abs, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("worker: -workspace-root %s: %s has mode %04o, so steps (running as slot uids) cannot reach their workspaces (chmod o+x %s, or choose another root)", root, d, fi.Mode().Perm(), d)
		}
		if d == "/" {
			return nil
		}
	}
}

func (w *Worker) closeSlots() {
	for _, s := range w.all {
		s.box.Close()
		if s.netBox != nil {
			s.netBox.Close()
		}
		if err := s.area.Close(); err != nil {
			w.log.Warn().Err(err).Msg("close a slot's workspace")
		}
		if s.uid != nil {
			s.uid.Release()
		}
	}
	w.all = nil
}

// renew replaces the slot's workspace after it could not be emptied, and
// restarts its helpers, which still bind the old one.
func (s *slot) renew(w *Worker) {
	if err := s.area.Renew(); err != nil {
		w.log.Error().Err(err).Msg("renew a slot's workspace")
	}
	s.box.Restart()
	if s.netBox != nil {
		s.netBox.Restart()
	}
}

// serveEgress takes a connection a step made to its proxy port, for the
// egress of the run in progress, which refuses it at once past its limits
// or serves it in a goroutine of its own; without a run, it is closed. It
// never blocks (sandbox.Config.Egress).
func (s *slot) serveEgress(c net.Conn) {
	if r := s.egressRun.Load(); r != nil {
		r.Accept(c)
		return
	}
	c.Close()
}

// sandboxFor returns the slot's sandbox for a spec's network setting.
func (s *slot) sandboxFor(network bool) (*sandbox.Slot, error) {
	if !network {
		return s.box, nil
	}
	s.netOnce.Do(func() { s.netBox, s.netErr = sandbox.NewSlot(s.netCfg) })
	return s.netBox, s.netErr
}

// guard builds an address guard from allow-list entries, those of flag:
// public addresses open (downloads) or not (egress); the worker's own
// Redis is refused whatever the entries say, at every address that
// reaches it. A refusal names flag.
func (w *Worker) guard(flag string, entries []string, openPublic bool) (*netguard.Guard, error) {
	g := &netguard.Guard{OpenPublic: openPublic, Flag: flag}
	for _, e := range entries {
		r, err := netguard.ParseRule(e)
		if err != nil {
			return nil, err
		}
		g.Rules = append(g.Rules, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.Deny = netguard.NewServers(ctx, redisNodes(w.cfg.Redis, w.cfg.RedisNodes), nil)
	return g, nil
}

// redisNodes are the addresses of every Redis server the worker knows:
// a single client's own, and those redisconn found (sentinels, their
// master and replicas, cluster nodes), with each cluster node's bus port
// (its port + 10000, Redis's default: a forged MEET there would rewire
// the cluster). A failover client's Addr, or a unix socket's path, is no
// host:port: NewServers skips it.
func redisNodes(rdb redis.UniversalClient, nodes []string) []string {
	switch c := rdb.(type) {
	case *redis.Client:
		if c.Options().Network != "unix" {
			return append([]string{c.Options().Addr}, nodes...)
		}
	case *redis.ClusterClient:
		out := slices.Clone(nodes)
		for _, n := range nodes {
			host, port, err := net.SplitHostPort(n)
			if p, perr := strconv.Atoi(port); err == nil && perr == nil && p > 0 && p+10000 <= 65535 {
				out = append(out, net.JoinHostPort(host, strconv.Itoa(p+10000)))
			}
		}
		return out
	}
	return nodes
}

// Isolation returns the tiers in force, as written into every run record.
func (w *Worker) Isolation() record.Isolation { return w.isolation }

// Ready returns nil while the worker takes tasks: its slots are up (New
// started them) and Run serves its queues; else why not.
func (w *Worker) Ready() error {
	select {
	case <-w.stopping:
		return errors.New("worker shutting down")
	default:
	}
	if !w.serving.Load() {
		return errors.New("worker not serving its queues (starting or stopping)")
	}
	return nil
}

// HelperRestarts returns how many times a slot started a new helper after
// its first (a helper died or a step changed it).
func (w *Worker) HelperRestarts() int64 { return w.helperRestarts.Load() }

// Slots returns how many slots run a task now, and how many there are.
func (w *Worker) Slots() (busy, total int) {
	total = cap(w.slots)
	return total - len(w.slots), total
}

// Run serves tasks until ctx is canceled, then shuts down gracefully: it
// stops taking tasks, kills running steps' process trees and validation
// children, hands unfinished tasks back to their queue, and removes their
// workspaces. It returns within ShutdownTimeout plus Grace of ctx's end
// (and the removal of the slots), whatever the tasks do: past that it
// returns without closing the slots, whose helpers die with the process.
func (w *Worker) Run(ctx context.Context) error {
	abandoned := false // tasks outlived the shutdown's bound: see below
	defer func() {
		if abandoned {
			// Closing a slot waits for the step it runs. Its helper dies
			// with this process (parent-death signal), and the next
			// worker sweeps what it left, as after a crash.
			return
		}
		w.closeSlots()
		w.closeCgroups()
		if err := w.ws.Close(); err != nil {
			w.log.Warn().Err(err).Msg("workspace root cleanup")
		}
	}()
	queues := make([]string, 0, len(w.cfg.Queues))
	for q := range w.cfg.Queues {
		queues = append(queues, q)
	}
	if err := queuepolicy.Publish(ctx, w.cfg.Redis, w.cfg.Prefix, queues, w.cfg.Policy); err != nil {
		return fmt.Errorf("worker: publish limits: %w", err)
	}
	if err := queuepolicy.PublishGrants(ctx, w.cfg.Redis, w.cfg.Prefix, queues, w.cfg.RiskPolicy.Grants()); err != nil {
		return fmt.Errorf("worker: publish secret grants: %w", err)
	}
	if err := queuepolicy.PublishActions(ctx, w.cfg.Redis, w.cfg.Prefix, queues, w.cfg.Actions.Infos()); err != nil {
		return fmt.Errorf("worker: publish the actions' catalog: %w", err)
	}
	if err := w.publishQuotas(ctx, queues); err != nil {
		return fmt.Errorf("worker: publish the quotas: %w", err)
	}
	withdraw, err := w.announce(ctx, queues) // announce.go
	if err != nil {
		return err
	}
	defer withdraw()
	// An idle worker polls its queues once per -idle-wait, and at once
	// when an enqueuer wakes it.
	var waiter *wake.Waiter
	if w.cfg.IdleWait >= 0 {
		waiter = wake.New(w.cfg.Redis, w.cfg.Prefix, queues, w.cfg.IdleWait)
		if err := waiter.Start(ctx); err != nil {
			return fmt.Errorf("worker: subscribe to the queues' wake-ups: %w", err)
		}
		defer waiter.Stop()
		w.cfg.Redis.AddHook(waiter.Hook())
	}
	// asynq runs a handler per open session besides one per slot; the
	// gate lets it take a task only for a free slot.
	w.gate = newGate(w.cfg.Concurrency, queues, w.stopping)
	w.cfg.Redis.AddHook(w.gate.Hook())
	defer w.gate.Open()
	bellsCtx, stopBells := context.WithCancel(context.Background())
	bellsDone := make(chan struct{})
	first := make(chan struct{}, 1)
	w.bells.mu.Lock()
	w.bells.first = first
	w.bells.mu.Unlock()
	go func() { defer close(bellsDone); w.serveBells(bellsCtx, first) }()
	defer func() { stopBells(); <-bellsDone }()
	srv := asynq.NewServerFromRedisClient(w.cfg.Redis, asynq.Config{
		Concurrency:       w.cfg.Concurrency + max(w.cfg.MaxSessions, 0),
		Queues:            w.cfg.Queues,
		TaskCheckInterval: w.cfg.TaskCheckInterval,
		// Scheduled and retry tasks are moved to their queue within 5s
		// (asynq's default); the move wakes the idle polls (wake).
		DelayedTaskCheckInterval: 5 * time.Second,
		ShutdownTimeout:          w.cfg.ShutdownTimeout,
		RetryDelayFunc:           w.delayRetry,
		// A paused session's task waits in the retry set until a call
		// or its expiry: not a failure, it uses none of its retries.
		IsFailure:    func(err error) bool { return !errors.Is(err, errSessionPaused) },
		ErrorHandler: asynq.ErrorHandlerFunc(w.asynqFailed),
		Logger:       redislog.Asynq(w.log),
		LogLevel:     asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(tasks.TypeRun, w.handle)
	mux.HandleFunc(approve.TypePromote, w.handlePromote)
	if err := srv.Start(mux); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	// The approval lifecycle's clock: expiry and the catch-up of
	// promotions, through the store whose transitions are the run's events.
	sweeper := &approve.Sweeper{Store: w.promoter.Store, Client: w.asynq, Interval: w.cfg.SweepInterval, Log: w.log}
	sweeper.Start(context.Background())
	defer sweeper.Stop()
	shareCtx, stopShares := context.WithCancel(context.Background())
	sharesDone := make(chan struct{})
	go func() { defer close(sharesDone); w.sweepShares(shareCtx, queues) }()
	defer func() { stopShares(); <-sharesDone }()
	w.serving.Store(true)
	w.log.Info().Strs("queues", queues).Msg("worker started")
	<-ctx.Done()
	w.serving.Store(false)
	w.log.Info().Msg("shutting down: no new tasks, running steps are killed and handed back")
	w.stopOnce.Do(func() { close(w.stopping) })
	// Running steps and validation children are killed now; asynq waits
	// up to the shutdown timeout for the handlers, which end within the
	// grace. Whatever still runs past both is left behind: the worker
	// stops in time, always (asynq hands the task back once its lease
	// expires).
	limit := time.NewTimer(w.cfg.ShutdownTimeout + w.cfg.Grace)
	defer limit.Stop()
	stopped := make(chan struct{})
	go func() {
		if waiter != nil {
			waiter.Stop() // a held poll keeps one of asynq's tokens
		}
		srv.Stop()
		srv.Shutdown() // requeues the tasks handed back
		if waiter != nil {
			waiter.Release() // the client may serve another worker
		}
		// asynq requeues a task without waiting for its handler: the
		// handlers have all said which queues they handed back once they
		// returned.
		w.inflight.Wait()
		w.wakeHandedBack()
		close(stopped)
	}()
	select {
	case <-stopped:
		w.log.Info().Msg("worker stopped")
	case <-limit.C:
		if busy, _ := w.Slots(); busy == 0 {
			// No run holds a slot (a handler may still be reporting, its
			// slot given back): only asynq's own shutdown or a report
			// lags (their writes to a Redis that does not answer). The
			// slots and workspaces are cleaned up as on a clean stop.
			w.log.Warn().Dur("after", w.cfg.ShutdownTimeout+w.cfg.Grace).Msg("asynq's shutdown is still waiting on Redis: stopping without it")
			break
		}
		abandoned = true
		w.log.Error().Dur("after", w.cfg.ShutdownTimeout+w.cfg.Grace).Msg("tasks still running past -shutdown-timeout and -grace: stopping without them")
	}
	return nil
}

// wakeHandedBack wakes the idle workers of each queue a task was handed
// back to, so that one of them takes it at once, not at its next idle
// poll (-idle-wait). Bounded: a Redis that does not answer costs the
// shutdown at most a second.
func (w *Worker) wakeHandedBack() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.handedBack.Range(func(q, _ any) bool {
		if err := wake.Notify(ctx, w.cfg.Redis, w.cfg.Prefix, q.(string)); err != nil {
			w.log.Warn().Err(err).Str("queue", q.(string)).Msg("wake the queue's workers for the tasks handed back")
		}
		return ctx.Err() == nil
	})
}

// retryDelay spaces retries of infrastructure failures: 1s, 2s, 4s... 1m.
func retryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	d := time.Second << min(n, 6)
	return min(d, time.Minute)
}
