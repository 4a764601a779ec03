//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// SecCeiling measures the ceiling of one Redis for a fleet: a fleet of
// Airlock workers on a private redis-server (then on a private 3-shard
// Redis Cluster), fed as fast as the machine allows for a fixed window,
// and what that costs Redis: its CPU, its commands, hence how many runs
// per second one Redis core would sustain.
const SecCeiling = "ceiling"

// Defaults of the ceiling section at full scale (-n FullN).
const (
	ceilWorkers = 8
	ceilConc    = 2 // -concurrency of each worker
	ceilWindow  = 20 * time.Second
	ceilWarmup  = 3 * time.Second
	// ceilProducers enqueue from that many goroutines, over the queues.
	ceilProducers = 8
)

// CeilingReport is the ceiling section's result.
type CeilingReport struct {
	Redis       string  `json:"redis_version"`
	Workers     int     `json:"workers"`
	Concurrency int     `json:"concurrency_per_worker"`
	Producers   int     `json:"enqueuers"`
	WarmupS     float64 `json:"warmup_s"`
	WindowS     float64 `json:"window_s"`
	// Ahead: the runs kept enqueued but not processed, per queue: twice
	// the slots serving it. Principals: the runs are spread over that
	// many principals per queue (one per slot), so that fair share (two
	// pending runs per principal) does not starve the fleet.
	Ahead      string         `json:"ahead"`
	Principals string         `json:"principals"`
	Rows       []CeilingRow   `json:"rows"`
	Cluster    *CeilingLayout `json:"cluster,omitempty"`
}

// CeilingRow is one topology and kind of run over the window.
type CeilingRow struct {
	Topology string  `json:"topology"` // "single" or "cluster-3"
	Kind     string  `json:"kind"`     // "trivial" or "promoted"
	How      string  `json:"how"`
	Error    string  `json:"error,omitempty"`
	WindowS  float64 `json:"window_s"`
	// Runs: tasks asynq counted processed in the window; Enqueued and
	// Verified: runs of this kind enqueued in all, and whose record was
	// read after the drain with its verdict ok and the state the kind
	// leads to (they must be equal: none lost, none failed). Others:
	// tasks besides runs (promotions the approval sweeper queued).
	Runs     int64   `json:"runs_in_window"`
	RunsPerS float64 `json:"runs_per_s"`
	Enqueued int64   `json:"enqueued"`
	Verified int64   `json:"verified"`
	Others   int     `json:"other_tasks"`
	// RedisCPUPct: the Redis servers' CPU (utime+stime from /proc, summed
	// over nodes), % of one core; INFOCPUPct: the same from INFO cpu.
	RedisCPUPct float64 `json:"redis_cpu_pct_of_core"`
	INFOCPUPct  float64 `json:"redis_info_cpu_pct_of_core"`
	// CommandsPerS: INFO stats total_commands_processed; CallsPerS: the
	// commandstats calls, summed (both count a script's own commands).
	CommandsPerS    float64 `json:"commands_per_s"`
	CallsPerS       float64 `json:"commandstats_calls_per_s"`
	CommandsPerRun  float64 `json:"commands_per_run"`
	RedisCPUUSPerRn float64 `json:"redis_cpu_us_per_run"`
	// RunsPerCore: runs/s ÷ the Redis CPU in cores (summed over nodes);
	// HottestCeiling: runs/s ÷ the busiest node's CPU fraction, where the
	// fleet would stop growing (the same for one node).
	RunsPerCore    float64 `json:"runs_per_s_per_redis_core"`
	HottestCeiling float64 `json:"runs_per_s_at_busiest_node_saturated"`
	// The other processes over the window, % of one core: the workers'
	// process trees (server, slot helpers, steps), this process (the
	// enqueuers); MachineBusyPct: every CPU's busy time, % of all cores.
	WorkersCPUPct  float64            `json:"workers_cpu_pct_of_core"`
	BenchCPUPct    float64            `json:"bench_cpu_pct_of_core"`
	MachineBusyPct float64            `json:"machine_busy_pct"`
	Nodes          []CeilingNode      `json:"nodes"`
	TopCommands    map[string]float64 `json:"top_commands_per_run"`
}

// CeilingNode is one Redis server's share of a row's load.
type CeilingNode struct {
	Addr         string  `json:"addr"`
	Queue        string  `json:"queue,omitempty"` // the queue whose slot it owns
	CPUPct       float64 `json:"cpu_pct_of_core"`
	CPUShare     float64 `json:"cpu_share"`
	CommandsPerS float64 `json:"commands_per_s"`
	CallsPerS    float64 `json:"commandstats_calls_per_s"`
}

// CeilingLayout is the cluster: its nodes, the queue each owns, and the
// keys without a hash tag each holds after the runs.
type CeilingLayout struct {
	URL    string              `json:"url"`
	Queues []CeilingQueue      `json:"queues"`
	Keys   map[string]int64    `json:"keys_by_node"`
	Global map[string][]string `json:"untagged_keys_by_node"`
}

// CeilingQueue is a queue of the cluster run and the node owning its slot.
type CeilingQueue struct {
	Name    string `json:"name"`
	Slot    int    `json:"slot"`
	Node    string `json:"node"`
	Workers int    `json:"workers"`
}

// ceilKind is a kind of run the fleet is fed.
type ceilKind struct {
	name, how string
	want      record.State
	spec      func(queue, runID string) *tasks.Spec
}

var ceilKinds = []ceilKind{
	{name: "trivial", how: "/bin/true, no output", want: record.StateCompleted, spec: trivialSpec},
	{name: "promoted", how: `sh -c 'printf {"total": 3} > out/result.json', output.result, policy {"default":"promote"}, FS sink`,
		want: record.StatePromoted, spec: ceilPromotedSpec},
}

// ceilPromotedSpec writes a small JSON result that the bench worker's
// policy promotes.
func ceilPromotedSpec(queue, runID string) *tasks.Spec {
	return &tasks.Spec{Version: 1, RunID: runID, Queue: queue,
		Steps:  []tasks.Step{{Name: "result", Run: []string{"sh", "-c", `printf '{"total": 3}' > out/result.json`}}},
		Output: &tasks.Output{Result: "out/result.json"}}
}

// ceilSizes are the section's window, warm-up and fleet size at h's scale.
func (h *harness) ceilSizes() (window, warmup time.Duration, workers int) {
	scale := float64(h.opt.N) / FullN
	window = max(2*time.Second, time.Duration(scale*float64(ceilWindow)))
	warmup = max(time.Second, time.Duration(scale*float64(ceilWarmup)))
	workers = min(ceilWorkers, max(2, h.opt.N/125))
	if h.opt.CeilingWindow > 0 {
		window = h.opt.CeilingWindow
	}
	if h.opt.CeilingWorkers > 0 {
		workers = h.opt.CeilingWorkers
	}
	return window, min(warmup, window), workers
}

// ceiling runs the section: the single server, then the cluster.
func (h *harness) ceiling(ctx context.Context) (*CeilingReport, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		h.skip("ceiling: no redis-server on PATH to start a private Redis with")
		return nil, nil
	}
	window, warmup, workers := h.ceilSizes()
	rep := &CeilingReport{Workers: workers, Concurrency: ceilConc, Producers: ceilProducers,
		WarmupS: warmup.Seconds(), WindowS: window.Seconds(),
		Ahead: "2 × the slots serving each queue", Principals: "one per slot serving the queue, round robin"}
	h.logf("ceiling: %d workers × concurrency %d, %s warm-up, %s window per kind", workers, ceilConc, warmup, window)

	// One server.
	dir, err := h.dir("ceiling-single")
	if err != nil {
		return nil, err
	}
	node, err := startCeilNode(ctx, h, bin, dir, false)
	if err != nil {
		return nil, err
	}
	rep.Redis = redisVersion(ctx, node.rdb)
	q := h.prefix + "-ceil"
	rows, err := h.ceilTopology(ctx, "single", "redis://"+node.addr+"/0", []*ceilNode{node},
		[]CeilingQueue{{Name: q, Node: node.addr}}, workers, window, warmup)
	node.stop()
	rep.Rows = append(rep.Rows, rows...)
	if err != nil {
		return rep, err
	}

	// A 3-shard cluster.
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		h.skip("ceiling: no redis-cli on PATH to create a Redis Cluster with")
		return rep, nil
	}
	layout, rows, err := h.ceilCluster(ctx, bin, cli, workers, window, warmup)
	rep.Cluster = layout
	rep.Rows = append(rep.Rows, rows...)
	if err != nil {
		// What failed on Cluster is a finding: the report says it.
		if len(rows) == 0 || rows[len(rows)-1].Error == "" {
			rep.Rows = append(rep.Rows, CeilingRow{Topology: "cluster-3", Error: err.Error()})
		}
		h.note("ceiling on Redis Cluster failed: " + firstLine(err.Error()))
		h.logf("  ceiling cluster-3: %v", err)
	}
	return rep, nil
}

// ceilCluster starts three cluster-mode servers, joins them, and runs the
// fleet with a queue per node.
func (h *harness) ceilCluster(ctx context.Context, bin, cli string, workers int, window, warmup time.Duration) (*CeilingLayout, []CeilingRow, error) {
	var nodes []*ceilNode
	defer func() {
		for _, n := range nodes {
			n.stop()
		}
	}()
	for i := range 3 {
		dir, err := h.dir("ceiling-node" + strconv.Itoa(i))
		if err != nil {
			return nil, nil, err
		}
		n, err := startCeilNode(ctx, h, bin, dir, true)
		if err != nil {
			return nil, nil, err
		}
		nodes = append(nodes, n)
	}
	if err := createCluster(ctx, cli, nodes); err != nil {
		return nil, nil, err
	}
	queues, err := clusterQueues(ctx, nodes[0].rdb, h.prefix, nodes)
	if err != nil {
		return nil, nil, err
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	layout := &CeilingLayout{URL: "redis+cluster://" + strings.Join(addrs, ","), Queues: queues}
	// Every queue needs a worker.
	if workers < len(queues) {
		h.logf("  ceiling cluster-3: %d workers, one per queue, rather than %d", len(queues), workers)
		workers = len(queues)
	}
	for i, q := range queues {
		h.logf("  ceiling cluster-3: queue %s → slot %d on node %d (%s)", q.Name, q.Slot, i+1, q.Node)
	}
	rows, err := h.ceilTopology(ctx, "cluster-3", layout.URL, nodes, queues, workers, window, warmup)
	for i := range queues {
		queues[i].Workers = (workers + len(queues) - 1 - i) / len(queues)
	}
	layout.Keys, layout.Global = map[string]int64{}, map[string][]string{}
	for _, n := range nodes {
		keys, total := untaggedKeys(ctx, n.rdb, 40)
		layout.Keys[n.addr], layout.Global[n.addr] = total, keys
	}
	return layout, rows, err
}

// ceilTopology starts the fleet on url, worker i serving queues[i mod
// len], and measures each kind; a kind that fails ends the topology with
// its row's Error set.
func (h *harness) ceilTopology(ctx context.Context, topo, url string, nodes []*ceilNode, queues []CeilingQueue, workers int, window, warmup time.Duration) ([]CeilingRow, error) {
	fl, err := h.startFleet(ctx, url, nodes, queues, workers)
	if err != nil {
		return nil, fmt.Errorf("%s: starting the fleet: %w", topo, err)
	}
	defer fl.close()
	var rows []CeilingRow
	for _, k := range ceilKinds {
		if k.want == record.StatePromoted && !outputSupport {
			h.skip("ceiling: promoted runs: this build has no output contract")
			continue
		}
		row, err := fl.measure(ctx, k, window, warmup)
		row.Topology = topo
		if err != nil {
			row.Error = err.Error()
			rows = append(rows, row)
			return rows, fmt.Errorf("%s %s: %w", topo, k.name, err)
		}
		h.logf("  ceiling %-9s %-8s: %6.1f runs/s, Redis %5.1f%% of a core (%s), %6.0f commands/s, %5.1f commands/run → %6.0f runs/s per Redis core; workers %.0f%%, machine busy %.0f%%",
			topo, k.name, row.RunsPerS, row.RedisCPUPct, nodeShares(row.Nodes), row.CommandsPerS, row.CommandsPerRun, row.RunsPerCore, row.WorkersCPUPct, row.MachineBusyPct)
		rows = append(rows, row)
	}
	if err := fl.stop(); err != nil {
		return rows, fmt.Errorf("%s: stopping the fleet: %w", topo, err)
	}
	return rows, nil
}

func nodeShares(ns []CeilingNode) string {
	if len(ns) < 2 {
		return "one node"
	}
	var parts []string
	for _, n := range ns {
		parts = append(parts, fmt.Sprintf("%.0f%%", 100*n.CPUShare))
	}
	return "shares " + strings.Join(parts, "/")
}

// fleet is the workers of one topology and the clients the section
// enqueues and reads with.
type fleet struct {
	h       *harness
	s       harness // a copy of the run's harness, on the private Redis
	nodes   []*ceilNode
	queues  []CeilingQueue
	slots   map[string]int // per queue
	workers []*child
	rdb     redis.UniversalClient
	client  *airlock.Client
	insp    *asynq.Inspector
	others  map[string]int // tasks besides runs seen per queue (verify)
}

// startFleet starts workers Airlock workers on url, each with its own
// workspace root and store, sharing the harness's uid range and lock
// directory (each slot leases a uid there, so no two share one).
func (h *harness) startFleet(ctx context.Context, url string, nodes []*ceilNode, queues []CeilingQueue, workers int) (*fleet, error) {
	conf, err := redisconn.Parse(url)
	if err != nil {
		return nil, err
	}
	conf.PoolSize = 64
	fl := &fleet{h: h, s: *h, nodes: nodes, queues: queues, slots: map[string]int{}, others: map[string]int{}}
	fl.rdb = conf.Client()
	fl.client = airlock.NewClient(fl.rdb, airlock.ClientOptions{Retention: 2 * time.Hour})
	fl.insp = asynq.NewInspectorFromRedisClient(fl.rdb)
	fl.s.opt.RedisURL, fl.s.rdb, fl.s.client, fl.s.insp, fl.s.queues = url, fl.rdb, fl.client, fl.insp, nil
	if err := fl.rdb.Ping(ctx).Err(); err != nil {
		fl.close()
		return nil, err
	}
	// Directories first (harness.dir is not safe for concurrent use),
	// then the workers all at once.
	type spec struct{ queue, root, store string }
	var specs []spec
	for i := range workers {
		q := queues[i%len(queues)].Name
		root, err := h.dir("ceiling-ws")
		if err != nil {
			fl.close()
			return nil, err
		}
		sp := spec{queue: q, root: root + "/root"} // created by the worker's tmpfs.Manager
		if outputSupport {
			if sp.store, err = h.dir("ceiling-store"); err != nil {
				fl.close()
				return nil, err
			}
		}
		specs = append(specs, sp)
		fl.slots[q] += ceilConc
	}
	fl.workers = make([]*child, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for i, sp := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var extra []string
			if sp.store != "" {
				extra = []string{"-store", sp.store}
			}
			fl.workers[i], errs[i] = fl.s.startChild(ctx, systemAirlock, ceilConc, sp.queue, sp.root, extra...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		fl.close()
		return nil, err
	}
	h.logf("  ceiling: %d workers ready in %.1fs on %s", workers, time.Since(start).Seconds(), redisconn.Redact(url))
	return fl, nil
}

// stop ends the workers gracefully.
func (fl *fleet) stop() error {
	errs := make([]error, len(fl.workers))
	var wg sync.WaitGroup
	for i, w := range fl.workers {
		if w == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.stop() }()
	}
	wg.Wait()
	fl.workers = nil
	return errors.Join(errs...)
}

// close kills what stop did not end and closes the clients.
func (fl *fleet) close() {
	for _, w := range fl.workers {
		if w != nil {
			fl.h.forget(w, "")
		}
	}
	fl.workers = nil
	if fl.client != nil {
		fl.client.Close()
	}
	fl.rdb.Close()
}

// redisVersion is INFO server's redis_version.
func redisVersion(ctx context.Context, rdb *redis.Client) string {
	info, _ := rdb.Info(ctx, "server").Result()
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
			return v
		}
	}
	return ""
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
