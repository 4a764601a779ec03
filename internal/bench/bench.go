//go:build linux

package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
)

// FullN is the scale of a full run (-n's default).
const FullN = 1000

// Sections of a run, in the order they are printed.
const (
	SecThroughput = "throughput"
	SecLatency    = "latency"
	SecStart      = "start"
	SecOverhead   = "overhead"
	SecRSS        = "rss"
	SecApprovals  = "approvals"
)

// AllSections is every section, the default of Options.Sections.
var AllSections = []string{SecThroughput, SecLatency, SecIdle, SecOverhead, SecRSS, SecApprovals, SecFetch, SecStart, SecSession, SecAPI, SecFairness, SecLive, SecRedis, SecCeiling}

// Options configure a run. Zero fields take the defaults.
type Options struct {
	RedisURL string // required
	// N scales every measurement: throughput runs take N tasks (CPU-bound
	// ones N/5), idle latency max(N/5, 20) tasks per system and round, the
	// overhead breakdown N iterations, approvals 10×N, the RSS run N²/10
	// tasks (100,000 at FullN), sessions max(N/20, 10) per path and round,
	// the redis section max(N/10, 50) runs per path.
	// 0 means FullN.
	N      int
	Rounds int // interleaved rounds; default 3
	// Concurrency of the throughput runs; default {2, 2×cores+1}.
	Concurrency []int
	// CheckIntervals are the task check intervals the idle section
	// compares; default DefaultCheckIntervals.
	CheckIntervals []time.Duration
	// Sections to run; default AllSections.
	Sections []string
	// Workloads of the throughput runs: "trivial", "script", "cpu";
	// default all three.
	Workloads []string
	// RSSTasks overrides the size of the RSS run when positive.
	RSSTasks int
	// FetchBytes is the size of the fetch section's download; default
	// DefaultFetchBytes.
	FetchBytes int64
	// CPUProfile, when set, adds runs of the trivial and script workloads
	// (those of Workloads) at the highest concurrency, not counted in the
	// table, whose servers write CPU profiles: the worker's there, the
	// baselines' next to it (harness.profile).
	CPUProfile string
	// WorkerLogLevel of the worker processes; default "info", as deployed.
	WorkerLogLevel string
	// KeepLogs, when set, is a directory the servers' logs are moved to
	// when they stop; otherwise they are deleted.
	KeepLogs string
	// Exe is the binary re-executed for the servers; default
	// os.Executable(). It must call MaybeChild (and sandbox.MaybeHelper).
	Exe string
	// CeilingWindow and CeilingWorkers override the ceiling section's
	// window per kind of run (default 20s at FullN, scaled by N, at least
	// 2s) and its fleet's size (default min(8, max(2, N/125)) workers).
	CeilingWindow  time.Duration
	CeilingWorkers int
	// Progress receives one line per measurement; nil discards.
	Progress io.Writer
}

// sizes are the task counts of one run.
type sizes struct {
	Throughput    int `json:"throughput_tasks"`
	ThroughputCPU int `json:"throughput_cpu_tasks"`
	Latency       int `json:"latency_tasks"`
	Overhead      int `json:"overhead_iterations"`
	SlotStarts    int `json:"slot_starts"`
	RSS           int `json:"rss_tasks"`
	RSSWarmup     int `json:"rss_warmup_tasks"`
	Approvals     int `json:"approvals"`
	Sessions      int `json:"sessions"`
}

func sizesFor(n, rssOverride int) sizes {
	s := sizes{
		Throughput:    n,
		ThroughputCPU: max(n/5, 10),
		Latency:       max(n/5, 20),
		Overhead:      n,
		SlotStarts:    max(n/20, 5),
		RSS:           max(n*n/10, 100),
		Approvals:     10 * n,
		Sessions:      max(n/20, 10),
	}
	if rssOverride > 0 {
		s.RSS = rssOverride
	}
	s.RSSWarmup = min(max(s.RSS/20, 20), 2000)
	return s
}

// harness is the state of one run.
type harness struct {
	opt          Options
	sz           sizes
	rdb          redis.UniversalClient
	client       *airlock.Client
	insp         *asynq.Inspector
	bare         *asynq.Client // the baselines' enqueuer (enqueue.go)
	prefix       string        // "bench-<rand>": queues, run ids, keys
	tmp          string        // mode 0711; workspaces and stores below
	uidLock      string
	exe          string
	root         bool
	cores        int
	seq          int
	cpuN         int
	rep          *Report
	queues       []string // created, to delete at the end
	promoteTasks int
	eventsFrom   string
	start        time.Time
}

// Run runs the benchmark and returns its report.
func Run(ctx context.Context, opt Options) (*Report, error) {
	start := time.Now()
	if opt.N <= 0 {
		opt.N = FullN
	}
	if opt.Rounds <= 0 {
		opt.Rounds = 3
	}
	if opt.WorkerLogLevel == "" {
		opt.WorkerLogLevel = "info"
	}
	if len(opt.Sections) == 0 {
		opt.Sections = AllSections
	}
	for _, s := range opt.Sections {
		if !slices.Contains(AllSections, s) {
			return nil, fmt.Errorf("unknown section %q (want %s)", s, strings.Join(AllSections, ","))
		}
	}
	if len(opt.Workloads) == 0 {
		opt.Workloads = AllWorkloads
	}
	if len(opt.CheckIntervals) == 0 {
		opt.CheckIntervals = DefaultCheckIntervals
	}
	for _, w := range opt.Workloads {
		if !slices.Contains(AllWorkloads, w) {
			return nil, fmt.Errorf("unknown workload %q (want %s)", w, strings.Join(AllWorkloads, ","))
		}
	}
	if opt.Progress == nil {
		opt.Progress = io.Discard
	}
	cores := cpuCount()
	if len(opt.Concurrency) == 0 {
		opt.Concurrency = []int{2, 2*cores + 1}
	}
	if opt.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("own executable: %w", err)
		}
		opt.Exe = exe
	}
	rconf, err := redisconn.Parse(opt.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	rconf.PoolSize = 32
	rdb := rconf.Client()
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("PING: %w", err)
	}
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	h := &harness{
		opt: opt, sz: sizesFor(opt.N, opt.RSSTasks), rdb: rdb,
		client: airlock.NewClient(rdb, airlock.ClientOptions{Retention: 2 * time.Hour}),
		insp:   asynq.NewInspectorFromRedisClient(rdb),
		bare:   asynq.NewClientFromRedisClient(rdb),
		prefix: "bench-" + hex.EncodeToString(rb[:]),
		exe:    opt.Exe, root: os.Geteuid() == 0, cores: cores,
		uidLock: filepath.Join(os.TempDir(), "airlock-bench-uids"),
		start:   start,
	}
	defer h.client.Close()
	h.tmp, err = os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return nil, err
	}
	// Steps run as slot uids and must reach their workspaces below it.
	if err := os.Chmod(h.tmp, 0o711); err != nil {
		return nil, err
	}
	defer h.removeTmp()
	h.rep = &Report{
		Machine: h.machine(ctx), Command: strings.Join(os.Args, " "),
		N: opt.N, Rounds: opt.Rounds, Sizes: h.sz,
	}
	h.eventsFrom = eventsPosition(ctx, rdb)
	defer h.cleanup()

	if err := h.run(ctx); err != nil {
		return h.rep, err
	}
	if h.promoteTasks > 0 {
		h.note(fmt.Sprintf("%d promote task(s) ran in the Airlock script runs besides the runs: the worker's approval sweeper (every 10s) queued a promotion for approvals whose inline promotion was still in flight; they are no-ops, but they are tasks", h.promoteTasks))
	}
	h.rep.Elapsed = time.Since(start).Seconds()
	h.rep.Machine.LoadEnd = loadavg()
	return h.rep, nil
}

func (h *harness) want(sec string) bool { return slices.Contains(h.opt.Sections, sec) }

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.opt.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// run interleaves the sections over the rounds: within a round the
// baseline and Airlock alternate which goes first.
func (h *harness) run(ctx context.Context) error {
	if h.want(SecThroughput) && slices.Contains(h.opt.Workloads, "cpu") {
		n, ms, err := calibrateCPU(ctx)
		if err != nil {
			return fmt.Errorf("calibrating the CPU-bound workload: %w", err)
		}
		h.cpuN = n
		h.rep.CPULoop = &CPULoop{Iterations: n, CPUMS: ms}
		h.logf("CPU-bound loop: %d iterations = %.1f ms of CPU (bare exec)", n, ms)
	}
	if !outputSupport && h.want(SecThroughput) && slices.Contains(h.opt.Workloads, "script") {
		h.skip("script workload: run without an output contract (this build has no contract/policy package), so no validation or promotion")
	}
	tp := newThroughputAcc()
	lat := map[string]*latencyAcc{}
	starts := map[string]*startAcc{}
	ovh := newOverheadAcc()
	var sess *sessionAcc
	if h.want(SecSession) {
		sess = newSessionAcc()
	}
	var api *apiAcc
	if h.want(SecAPI) {
		api = &apiAcc{}
	}
	var approvalRounds []float64
	var cliRounds []float64
	var appr *approvalSet
	if h.want(SecApprovals) {
		if !outputSupport {
			h.skip("approvals: this build has no approve.Store")
		} else {
			var err error
			appr, err = h.parkApprovals(ctx, h.sz.Approvals)
			if err != nil {
				return fmt.Errorf("approvals: %w", err)
			}
			defer appr.cleanup(context.WithoutCancel(ctx))
		}
	}
	for r := 0; r < h.opt.Rounds; r++ {
		order := []string{systemBaseline, systemAirlock}
		if r%2 == 1 {
			order = []string{systemAirlock, systemBaseline}
		}
		if h.want(SecThroughput) || h.want(SecLatency) || h.want(SecStart) || h.want(SecOverhead) || sess != nil || api != nil || appr != nil {
			h.logf("round %d/%d (first: %s)", r+1, h.opt.Rounds, order[0])
		}
		if h.want(SecThroughput) {
			for _, wl := range h.workloads() {
				systems := order
				if wl.result {
					// The durable baseline runs second: first or last
					// in a round alternates between the other two.
					systems = []string{order[0], systemDurable, order[1]}
				}
				for _, c := range h.opt.Concurrency {
					for _, sys := range systems {
						v, err := h.throughput(ctx, sys, wl, c, r)
						if err != nil {
							return fmt.Errorf("throughput %s %s c=%d: %w", sys, wl.name, c, err)
						}
						tp.add(wl, c, sys, v)
					}
				}
			}
		}
		if h.want(SecLatency) {
			for _, sys := range order {
				la, err := h.latency(ctx, sys, r)
				if err != nil {
					return fmt.Errorf("latency %s: %w", sys, err)
				}
				if lat[sys] == nil {
					lat[sys] = &latencyAcc{}
				}
				lat[sys].add(la)
			}
		}
		if h.want(SecStart) {
			c := slices.Max(h.opt.Concurrency)
			for _, sys := range order {
				ready, first, err := h.coldStart(ctx, sys, c)
				if err != nil {
					return fmt.Errorf("start %s: %w", sys, err)
				}
				if starts[sys] == nil {
					starts[sys] = &startAcc{}
				}
				starts[sys].ready = append(starts[sys].ready, ready)
				starts[sys].first = append(starts[sys].first, first)
			}
		}
		if h.want(SecOverhead) {
			if err := h.overhead(ctx, ovh, r); err != nil {
				return fmt.Errorf("overhead: %w", err)
			}
		}
		if sess != nil {
			if err := h.sessionRound(ctx, r, sess); err != nil {
				return fmt.Errorf("session: %w", err)
			}
		}
		if api != nil {
			if err := h.apiRound(ctx, r, api); err != nil {
				return fmt.Errorf("api: %w", err)
			}
		}
		if appr != nil {
			ms, err := appr.list(ctx)
			if err != nil {
				return fmt.Errorf("approvals list: %w", err)
			}
			approvalRounds = append(approvalRounds, ms)
			if ms, ok, err := appr.cli(ctx, h); err != nil {
				h.skip("approve CLI: " + err.Error())
				appr.noCLI = true
			} else if ok {
				cliRounds = append(cliRounds, ms)
			}
		}
	}
	h.rep.Throughput = tp.rows(h)
	for _, sys := range []string{systemBaseline, systemAirlock} {
		if a := lat[sys]; a != nil {
			h.rep.Latency = append(h.rep.Latency, a.row(sys, h.sz.Latency))
		}
	}
	for _, sys := range []string{systemBaseline, systemAirlock} {
		if a := starts[sys]; a != nil {
			h.rep.Start = append(h.rep.Start, a.row(sys, slices.Max(h.opt.Concurrency), h.opt.Rounds))
		}
	}
	h.rep.Overhead = ovh.rows()
	if sess != nil {
		h.rep.Session = sess.report(h.sz.Sessions)
	}
	if api != nil {
		h.rep.API = api.report(h.sz.Latency)
	}
	if h.want(SecIdle) {
		rows, err := h.idle(ctx)
		if err != nil {
			return fmt.Errorf("idle: %w", err)
		}
		h.rep.Idle = rows
	}
	if appr != nil {
		h.rep.Approvals = appr.row(approvalRounds, cliRounds)
	}
	if h.want(SecRSS) {
		c := slices.Max(h.opt.Concurrency)
		for _, sys := range []string{systemBaseline, systemAirlock} {
			row, err := h.rss(ctx, sys, c)
			if err != nil {
				return fmt.Errorf("rss %s: %w", sys, err)
			}
			h.rep.RSS = append(h.rep.RSS, row)
		}
	}
	if h.want(SecFetch) {
		row, err := h.fetch(ctx)
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		h.rep.Fetch = row
	}
	if h.want(SecFairness) {
		for _, sys := range []string{systemBaseline, systemAirlock} {
			row, err := h.fairness(ctx, sys)
			if err != nil {
				return fmt.Errorf("fairness %s: %w", sys, err)
			}
			h.rep.Fairness = append(h.rep.Fairness, row)
		}
	}
	if h.want(SecLive) {
		for _, wl := range h.workloads() {
			if wl.name != "trivial" && wl.name != "script" {
				continue
			}
			row, err := h.liveCost(ctx, wl)
			if err != nil {
				return fmt.Errorf("live %s: %w", wl.name, err)
			}
			h.rep.Live = append(h.rep.Live, row)
		}
	}
	if h.want(SecRedis) {
		rep, err := h.redisOps(ctx)
		h.rep.Redis = rep
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	if h.want(SecCeiling) {
		rep, err := h.ceiling(ctx)
		h.rep.Ceiling = rep
		if err != nil {
			return fmt.Errorf("ceiling: %w", err)
		}
	}
	if h.opt.CPUProfile != "" {
		if err := h.profile(ctx); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		h.rep.Profile = h.opt.CPUProfile
	}
	return nil
}

func (h *harness) skip(msg string) {
	if !slices.Contains(h.rep.Skipped, msg) {
		h.rep.Skipped = append(h.rep.Skipped, msg)
	}
}

func (h *harness) note(msg string) {
	if !slices.Contains(h.rep.Notes, msg) {
		h.rep.Notes = append(h.rep.Notes, msg)
	}
}

// queue returns a new queue name of this run, deleted at the end.
func (h *harness) queue(what string) string {
	h.seq++
	q := fmt.Sprintf("%s-%s-%d", h.prefix, what, h.seq)
	h.queues = append(h.queues, q)
	return q
}

// dir returns a new directory below the run's temp dir.
func (h *harness) dir(what string) (string, error) {
	h.seq++
	d := filepath.Join(h.tmp, fmt.Sprintf("%s-%d", what, h.seq))
	return d, os.Mkdir(d, 0o711)
}

func (h *harness) isolation() string {
	if h.root {
		return "strict"
	}
	return "best-effort"
}

func (h *harness) machine(ctx context.Context) Machine {
	m := Machine{Cores: h.cores, Go: runtime.Version(), Root: h.root, Isolation: h.isolation(),
		Output: outputSupport, Date: time.Now().UTC().Format(time.RFC3339), LoadStart: loadavg()}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if info, err := h.rdb.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				m.Redis = v
			}
		}
	}
	return m
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// cpuCount is what nproc prints: the CPUs this process may run on.
func cpuCount() int {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) == nil && set.Count() > 0 {
		return set.Count()
	}
	return runtime.NumCPU()
}

// cleanup deletes what the run left in Redis: its queues, the events its
// runs appended, the approvals its promoted runs made.
func (h *harness) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	for _, q := range h.queues {
		if err := deleteQueue(ctx, h.rdb, h.insp, q); err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", q, err))
		}
	}
	if err := cleanupOutput(ctx, h.rdb, h.prefix, h.eventsFrom, h.start); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		h.logf("cleanup: %v", err)
	}
}

func (h *harness) removeTmp() {
	// A worker killed hard may leave workspace mounts below the temp dir.
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var below []string
		for _, l := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(l)
			if len(f) > 1 && strings.HasPrefix(f[1], h.tmp+"/") {
				below = append(below, f[1])
			}
		}
		slices.SortFunc(below, func(a, b string) int { return len(b) - len(a) })
		for _, m := range below {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(h.tmp); err != nil {
		h.logf("removing %s: %v", h.tmp, err)
	}
}
