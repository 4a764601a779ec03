//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// SecRedis measures what one run costs Redis, on a private redis-server
// the section starts (redis-server from PATH, no persistence) so that
// nothing else runs commands there: for each path (bare asynq, Airlock's
// Go client and its HTTP API, trivial to promoted runs) the commands Redis
// executed per run (a script's own commands included), the commands its
// clients sent, the commands' µs and the server's CPU, net of the
// servers' idle background, and which process sent which command.
const SecRedis = "redis"

// Bounds of the redis section.
const (
	opsIdle   = 2 * time.Second       // idle background measured before the runs
	opsSettle = 50 * time.Millisecond // after the last run is processed
	opsWarmup = 3
)

// redisRuns is the runs per path at scale n.
func redisRuns(n int) int { return max(n/10, 50) }

// RedisReport is the redis section's result.
type RedisReport struct {
	Redis string  `json:"redis_version"` // of the private server
	Runs  int     `json:"runs_per_path"`
	IdleS float64 `json:"idle_s"`
	// TotalCountsInner: INFO stats total_commands_processed counts the
	// commands a script runs (a probe EVAL running 3 commands), so the
	// commands sent are counted from MONITOR instead.
	TotalCountsInner bool `json:"total_commands_processed_counts_script_commands"`
	// LuaFirst: MONITOR shows a script's commands before its call
	// (Redis ≥ 7.2) rather than after it.
	LuaFirst bool       `json:"monitor_script_commands_first"`
	Rows     []RedisRow `json:"rows"`
}

// RedisRow is one path's cost per run.
type RedisRow struct {
	Path    string  `json:"path"`
	How     string  `json:"how"`
	WindowS float64 `json:"window_s"` // of the metered pass
	// Executed: commands Redis ran (INFO commandstats calls), a script's
	// own included; Sent: commands its clients sent (MONITOR lines but
	// "[0 lua]"), a script call one; ExecutedMonitor: Executed as MONITOR
	// counted it, a check.
	Executed        RedisFig `json:"executed"`
	Sent            RedisFig `json:"sent"`
	ExecutedMonitor RedisFig `json:"executed_monitor"`
	// CommandUS: commandstats usec, a script's own commands counted once
	// (in the script's call), by MONITOR's share of them; CommandUSSum:
	// the plain sum, which counts them twice.
	CommandUS    RedisFig `json:"command_us"`
	CommandUSSum RedisFig `json:"command_us_sum"`
	// CPUUS: the server's used_cpu_user + used_cpu_sys, less the µs of
	// the meter's own commands.
	CPUUS RedisFig `json:"cpu_us"`
	// ExecutedBy is Executed by command (commandstats, raw per run), and
	// Commands who sent them (MONITOR).
	ExecutedBy map[string]float64 `json:"executed_by_command"`
	Commands   []RedisCmd         `json:"commands"`
}

// RedisFig is a per-run figure: over the window, the idle rate measured
// before it, and net of that rate over the window.
type RedisFig struct {
	Raw      float64 `json:"raw_per_run"`
	IdlePerS float64 `json:"idle_per_s"`
	Net      float64 `json:"net_per_run"`
}

func newFig(total, secs, idleTotal, idleSecs float64, n int) RedisFig {
	f := RedisFig{Raw: total / float64(n)}
	if idleSecs > 0 {
		f.IdlePerS = idleTotal / idleSecs
	}
	f.Net = (total - f.IdlePerS*secs) / float64(n)
	return f
}

// RedisCmd is one client's calls of one command (of one script) per run,
// in the MONITOR pass.
type RedisCmd struct {
	Client   string  `json:"client"`
	Command  string  `json:"command"`
	Script   string  `json:"script,omitempty"`
	PerRun   float64 `json:"per_run"`
	IdlePerS float64 `json:"idle_per_s"`
	// Inner: the commands the script ran, per run, by command.
	InnerPerRun float64            `json:"inner_per_run,omitempty"`
	Inner       map[string]float64 `json:"inner,omitempty"`
}

// opsPath is one row: how a run is asked for and waited for.
type opsPath struct {
	name, how string
	sys       string
	http      bool
	spec      func(queue, runID string) *tasks.Spec
	want      record.State
}

// promotedSpec writes a small JSON result that the bench worker's policy
// promotes.
func promotedSpec(queue, runID string) *tasks.Spec {
	return &tasks.Spec{Version: 1, RunID: runID, Queue: queue,
		Steps:  []tasks.Step{{Name: "result", Run: []string{"sh", "-c", `printf '{"total": 3}' > out/result.json`}}},
		Output: &tasks.Output{Result: "out/result.json"}}
}

// opsRun is the state of the redis section.
type opsRun struct {
	s        harness // a copy of the run's harness, on the private Redis
	base     string  // the private Redis's URL
	addr     string
	meter    *meter
	n        int
	lits     []scriptLit
	names    map[string]string // address → client name
	bodies   map[string]string // sha1 → script
	luaFirst bool
	apiBin   string
	lastID   string // of the events stream, for the bare path's wait
}

// redisOps runs the redis section.
func (h *harness) redisOps(ctx context.Context) (*RedisReport, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		h.skip("redis: no redis-server on PATH to start a private Redis with")
		return nil, nil
	}
	rs, err := startPrivateRedis(ctx, bin, h)
	if err != nil {
		return nil, err
	}
	defer rs.stop()
	o := &opsRun{base: "redis://" + rs.addr + "/0", addr: rs.addr, n: redisRuns(h.opt.N),
		names: map[string]string{}, bodies: map[string]string{}}
	mc, _, err := redisconn.Open(o.url("meter"))
	if err != nil {
		return nil, err
	}
	defer mc.Close()
	o.meter = &meter{rdb: mc.(*redis.Client), marker: h.prefix + "-mark-", own: map[string]int64{}}
	crdb, _, err := redisconn.Open(o.url("client"))
	if err != nil {
		return nil, err
	}
	defer crdb.Close()
	o.s = *h
	o.s.rdb, o.s.queues = crdb, nil
	o.s.client = airlock.NewClient(crdb, airlock.ClientOptions{Retention: 2 * time.Hour})
	o.s.insp = asynq.NewInspectorFromRedisClient(crdb)
	o.s.bare = asynq.NewClientFromRedisClient(crdb)
	defer func() { h.seq = o.s.seq }()
	rep := &RedisReport{Runs: o.n, IdleS: opsIdle.Seconds()}
	if info, err := mc.Info(ctx, "server").Result(); err == nil {
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "redis_version:"); ok {
				rep.Redis = v
			}
		}
	}
	major, _, _ := strings.Cut(rep.Redis, ".")
	if v, err := strconv.Atoi(major); err != nil || v < 7 {
		// INFO of several sections at once, and commandstats by subcommand.
		h.skip("redis: the redis-server on PATH is " + rep.Redis + ", older than 7.0")
		return nil, nil
	}
	if rep.TotalCountsInner, o.luaFirst, err = o.probe(ctx); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	rep.LuaFirst = o.luaFirst
	o.lits = loadScriptLiterals(ctx)
	paths := []opsPath{
		{name: "bare asynq", how: "/bin/true, result kept (Retention); a bare asynq client enqueues, reads nothing", sys: systemBaseline, spec: trivialSpec, want: record.StateCompleted},
		{name: "trivial, Go client", how: "/bin/true; Client.Enqueue, Client.Wait", sys: systemAirlock, spec: trivialSpec, want: record.StateCompleted},
		{name: "script, Go client", how: "the throughput section's script: 1 KiB result, schema, promoted", sys: systemAirlock, spec: scriptSpec, want: record.StatePromoted},
		{name: "promoted, Go client", how: `printf '{"total": 3}' > out/result.json, policy promote; Enqueue, Wait`, sys: systemAirlock, spec: promotedSpec, want: record.StatePromoted},
		{name: "trivial, HTTP API", how: "/bin/true; POST /v1/runs, GET /v1/runs/{id}?queue=&wait=1m&until=done", sys: systemAirlock, http: true, spec: trivialSpec, want: record.StateCompleted},
		{name: "promoted, HTTP API", how: "as promoted, through the api binary", sys: systemAirlock, http: true, spec: promotedSpec, want: record.StatePromoted},
	}
	for _, p := range paths {
		if p.want == record.StatePromoted && !outputSupport {
			h.skip("redis: " + p.name + ": this build has no output contract")
			continue
		}
		row, err := o.path(ctx, p)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", p.name, err)
		}
		h.logf("  redis %-20s: %5.1f commands executed, %5.1f sent, %6.1f µs Redis CPU per run (net of idle)", p.name, row.Executed.Net, row.Sent.Net, row.CPUUS.Net)
		rep.Rows = append(rep.Rows, row)
	}
	return rep, nil
}

// url is the private Redis's URL for a process named name.
func (o *opsRun) url(name string) string { return o.base + "?client_name=" + name }

// probe runs one EVAL that runs 3 commands, under MONITOR and between two
// INFO stats: whether total_commands_processed counts the 3, and whether
// MONITOR shows them before the EVAL.
func (o *opsRun) probe(ctx context.Context) (inner, luaFirst bool, err error) {
	mon, err := openMonitor(ctx, o.addr, o.meter, newMonState(o.meter.marker, false))
	if err != nil {
		return false, false, err
	}
	defer mon.close()
	if _, err := mon.mark(ctx); err != nil {
		return false, false, err
	}
	total := func() (int64, error) {
		s, err := o.meter.rdb.Info(ctx, "stats").Result()
		for _, l := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
				return strconv.ParseInt(v, 10, 64)
			}
		}
		return 0, errors.Join(err, errors.New("no total_commands_processed in INFO stats"))
	}
	t0, err := total()
	if err != nil {
		return false, false, err
	}
	key := o.meter.marker + "probe"
	if err := o.meter.rdb.Eval(ctx, "redis.call('exists', KEYS[1]) redis.call('exists', KEYS[1]) redis.call('exists', KEYS[1]) return 1", []string{key}).Err(); err != nil {
		return false, false, err
	}
	t1, err := total()
	if err != nil {
		return false, false, err
	}
	seg, err := mon.mark(ctx)
	if err != nil {
		return false, false, err
	}
	after, first := 0, 0
	for k, n := range seg.ops {
		if k.inner && k.cmd == "exists" {
			if k.script != "" {
				after += n
			} else {
				first += n
			}
		}
	}
	if after+first != 3 {
		return false, false, fmt.Errorf("MONITOR showed %d of the probe's 3 script commands", after+first)
	}
	// t1 - t0: the first INFO, the EVAL, and the 3 when they count.
	return t1-t0 >= 5, first == 3, nil
}

// path measures one row: the servers started, a few runs to warm up, a
// pass under MONITOR (who sends what), then a metered pass without it
// (INFO commandstats and cpu), each with its idle background first.
func (o *opsRun) path(ctx context.Context, p opsPath) (RedisRow, error) {
	row := RedisRow{Path: p.name, How: p.how}
	s := &o.s
	q := s.queue("redis-" + strings.NewReplacer(",", "", " ", "-").Replace(p.name))
	st := newMonState(o.meter.marker, o.luaFirst)
	st.names, st.bodies = o.names, o.bodies
	mon, err := openMonitor(ctx, o.addr, o.meter, st)
	if err != nil {
		return row, err
	}
	monOpen := true
	defer func() {
		if monOpen {
			mon.close()
		}
	}()
	// Scripts again by EVAL, so that MONITOR sees their text.
	o.meter.count("script|flush")
	if err := o.meter.rdb.ScriptFlush(ctx).Err(); err != nil {
		return row, err
	}
	s.opt.RedisURL = o.url(map[bool]string{true: "worker", false: "baseline"}[p.sys == systemAirlock])
	srv, root, err := s.startServer(ctx, p.sys, latencyConcurrency, q)
	if err != nil {
		return row, err
	}
	defer s.forget(srv, root)
	var api *apiProc
	if p.http {
		if o.apiBin == "" {
			a := &apiAcc{}
			if err := s.buildAPI(ctx, a); err != nil {
				return row, err
			}
			o.apiBin = a.bin
		}
		s.opt.RedisURL = o.url("api")
		if api, err = s.startAPIBinary(ctx, o.apiBin); err != nil {
			return row, err
		}
		defer func() {
			if api != nil {
				api.stop()
			}
		}()
	}
	if p.sys != systemAirlock {
		o.meter.count("xrevrange")
		if o.lastID, err = events.NewStream(o.meter.rdb, "").Last(ctx); err != nil {
			return row, err
		}
	}
	runs := func(pass string, n int) error {
		for i := range n {
			if err := o.runOne(ctx, p, q, fmt.Sprintf("%s-%s-%d", q, pass, i), api); err != nil {
				return fmt.Errorf("%s: %w\n%s", pass, err, srv.logs.String())
			}
		}
		return nil
	}
	processed := func() (int64, error) {
		o.meter.count("get")
		v, err := o.meter.rdb.Get(ctx, "asynq:{"+q+"}:processed").Int64()
		if errors.Is(err, redis.Nil) {
			return 0, nil
		}
		return v, err
	}
	// window runs n runs, then waits until asynq counts them processed
	// (a run's record and event come before asynq marks its task done).
	window := func(pass string) error {
		p0, err := processed()
		if err != nil {
			return err
		}
		if err := runs(pass, o.n); err != nil {
			return err
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			v, err := processed()
			if err != nil {
				return err
			}
			if v >= p0+int64(o.n) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%d of %d runs processed after 30s", v-p0, o.n)
			}
		}
		time.Sleep(opsSettle)
		return nil
	}
	if err := runs("warmup", opsWarmup); err != nil {
		return row, err
	}

	// Pass 1, under MONITOR.
	if _, err := mon.mark(ctx); err != nil {
		return row, err
	}
	time.Sleep(opsIdle)
	idleB, err := mon.mark(ctx)
	if err != nil {
		return row, err
	}
	if err := window("monitor"); err != nil {
		return row, err
	}
	winB, err := mon.mark(ctx)
	if err != nil {
		return row, err
	}
	o.meter.count("client|list")
	list, err := o.meter.rdb.ClientList(ctx).Result()
	if err != nil {
		return row, err
	}
	mon.close()
	monOpen = false
	for _, l := range strings.Split(list, "\n") {
		var addr, name string
		for _, f := range strings.Fields(l) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				addr = v
			} else if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			}
		}
		if addr != "" && name != "" {
			o.names[addr] = name
		}
	}

	// Pass 2, metered.
	snap0, err := o.meter.snapshot(ctx)
	if err != nil {
		return row, err
	}
	time.Sleep(opsIdle)
	snap1, err := o.meter.snapshot(ctx)
	if err != nil {
		return row, err
	}
	if err := window("metered"); err != nil {
		return row, err
	}
	snap2, err := o.meter.snapshot(ctx)
	if err != nil {
		return row, err
	}
	if api != nil {
		api.stop()
		api = nil
	}
	if err := srv.stop(); err != nil {
		return row, err
	}
	idleA, winA := diffSnaps(snap0, snap1), diffSnaps(snap1, snap2)
	o.fill(&row, idleA, winA, idleB, winB)
	return row, nil
}

// runOne asks for one run the path's way and waits for its end: the
// record for Airlock, the baseline's event (read by the meter) for bare
// asynq.
func (o *opsRun) runOne(ctx context.Context, p opsPath, q, runID string, api *apiProc) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	spec := p.spec(q, runID)
	var rec record.Run
	switch {
	case p.sys != systemAirlock:
		if err := o.s.enqueue(ctx, systemBaseline, spec); err != nil {
			return err
		}
		return o.waitEvent(ctx, runID)
	case p.http:
		body, _ := json.Marshal(spec)
		var en httpapi.Enqueued
		if err := api.call(ctx, http.MethodPost, "/v1/runs", string(body), http.StatusCreated, &en); err != nil {
			return err
		}
		if err := api.call(ctx, http.MethodGet, "/v1/runs/"+en.TaskID+"?queue="+en.Queue+"&wait=1m&until=done", "", http.StatusOK, &rec); err != nil {
			return err
		}
	default:
		e, err := o.s.client.Enqueue(ctx, spec)
		if err != nil {
			return err
		}
		r, err := o.s.client.Wait(ctx, e.Queue, e.TaskID)
		if err != nil {
			return err
		}
		rec = *r
	}
	if rec.State != p.want || rec.Verdict != record.VerdictOK {
		return fmt.Errorf("run %s: state %s verdict %s, want %s ok: %s", runID, rec.State, rec.Verdict, p.want, rec.Error)
	}
	return nil
}

// waitEvent blocks on the events stream, as the meter, until the event of
// runID.
func (o *opsRun) waitEvent(ctx context.Context, runID string) error {
	key := events.NewStream(o.meter.rdb, "").Key()
	for {
		o.meter.count("xread")
		res, err := o.meter.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{key, o.lastID}, Count: 16, Block: 30 * time.Second}).Result()
		if err != nil {
			return fmt.Errorf("waiting for the event of %s: %w", runID, err)
		}
		for _, st := range res {
			for _, m := range st.Messages {
				o.lastID = m.ID
				if m.Values["run_id"] == runID {
					return nil
				}
			}
		}
	}
}

// privateRedis is the section's redis-server.
type privateRedis struct {
	cmd  *exec.Cmd
	logs *logFile
	addr string
}

// startPrivateRedis starts redis-server on a free loopback port, without
// persistence, and waits until it answers.
func startPrivateRedis(ctx context.Context, bin string, h *harness) (*privateRedis, error) {
	var last error
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		lf, err := os.CreateTemp(h.tmp, "redis-server-")
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--dir", h.tmp, "--logfile", "")
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		r := &privateRedis{cmd: cmd, logs: &logFile{f: lf, keep: h.opt.KeepLogs}, addr: "127.0.0.1:" + port}
		if err := cmd.Start(); err != nil {
			r.logs.remove()
			return nil, err
		}
		c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if last = c.Ping(ctx).Err(); last == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
		}
		c.Close()
		if last == nil {
			h.logf("  redis: private redis-server on %s", r.addr)
			return r, nil
		}
		last = fmt.Errorf("redis-server on %s: %v\n%s", r.addr, last, r.logs.String())
		r.stop()
	}
	return nil, last
}

// stop kills the server and removes its log.
func (r *privateRedis) stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.logs.remove()
}
