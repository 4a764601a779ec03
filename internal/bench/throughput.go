//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/airlock-run/airlock/internal/redis/wake"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// Producer settings: enqueuers run in several goroutines, and keep at most
// maxAhead tasks waiting in the queue.
const (
	producers = 8
	maxAhead  = 5000
)

// counts reads how many tasks of queue asynq has processed (succeeded or
// failed) and how many failed, from its cumulative counters: one round trip.
func counts(ctx context.Context, rdb redis.UniversalClient, queue string) (done, failed int64, err error) {
	vs, err := rdb.MGet(ctx, "asynq:{"+queue+"}:processed", "asynq:{"+queue+"}:failed").Result()
	if err != nil {
		return 0, 0, err
	}
	n := func(v any) int64 {
		s, _ := v.(string)
		x, _ := strconv.ParseInt(s, 10, 64)
		return x
	}
	return n(vs[0]), n(vs[1]), nil
}

// feeder enqueues total tasks of a workload into a queue from several
// goroutines, never more than maxAhead ahead of what is done.
type feeder struct {
	h      *harness
	sys    string // whose server takes the tasks (harness.enqueue)
	wl     workload
	queue  string
	total  int
	next   atomic.Int64 // tasks handed out to producers
	done   atomic.Int64 // tasks processed, as last polled
	runIDs string       // run id prefix
}

func (h *harness) newFeeder(sys string, wl workload, queue string, total int) *feeder {
	return &feeder{h: h, sys: sys, wl: wl, queue: queue, total: total, runIDs: queue + "-"}
}

// fill enqueues tasks until upto of them are enqueued (at most total).
func (f *feeder) fill(ctx context.Context, upto int) error {
	upto = min(upto, f.total)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = func() error {
				for {
					i := f.next.Add(1) - 1
					if i >= int64(upto) {
						f.next.Add(-1)
						return nil
					}
					for i-f.done.Load() >= maxAhead {
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-time.After(time.Millisecond):
						}
					}
					spec := f.wl.spec(f.queue, f.runIDs+strconv.FormatInt(i, 10))
					if err := f.h.enqueue(ctx, f.sys, spec); err != nil {
						cancel()
						return err
					}
				}
			}()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitDone polls the queue's counters every interval until target tasks
// are processed, calling tick (when not nil) after each poll. It fails
// early when a task fails or the server dies.
func (f *feeder) waitDone(ctx context.Context, srv *child, target int, interval time.Duration, limit time.Duration, tick func()) error {
	deadline := time.Now().Add(limit)
	for {
		done, failed, err := counts(ctx, f.h.rdb, f.queue)
		if err != nil {
			return err
		}
		f.done.Store(done)
		if failed > 0 {
			return fmt.Errorf("%d task(s) failed: %s", failed, f.h.failureSample(f.queue))
		}
		if done >= int64(target) {
			return nil
		}
		if tick != nil {
			tick()
		}
		if err := srv.alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d tasks done after %s", done, target, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// failureSample describes one failed task of queue.
func (h *harness) failureSample(queue string) string {
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){h.insp.ListArchivedTasks, h.insp.ListRetryTasks} {
		ts, err := list(queue, asynq.PageSize(1))
		if err == nil && len(ts) > 0 {
			if len(ts[0].Result) > 0 {
				return string(ts[0].Result)
			}
			return ts[0].LastErr
		}
	}
	return "(no failed task found)"
}

// throughput measures one system on one workload at one concurrency:
// tasks are enqueued into a paused queue, the server is started, the queue
// unpaused, and the window runs until every task is processed.
func (h *harness) throughput(ctx context.Context, sys string, wl workload, conc, round int) (result, error) {
	n := h.tasksFor(wl)
	q := h.queue(fmt.Sprintf("tp-%s-c%d-%s", wl.name, conc, sys))
	v, err := h.timedRun(ctx, sys, wl, conc, q, n, nil)
	if err != nil {
		return v, err
	}
	h.logf("  throughput %-8s %-7s c=%d: %7.1f tasks/s (%d tasks), %.2f ms CPU/task", sys, wl.name, conc, v.perSec, n, v.cpuMS)
	return v, nil
}

// timedRun runs n tasks of wl through a fresh server and returns tasks/s.
func (h *harness) timedRun(ctx context.Context, sys string, wl workload, conc int, q string, n int, extra []string) (result, error) {
	if err := h.insp.PauseQueue(q); err != nil {
		return result{}, err
	}
	srv, root, err := h.startServer(ctx, sys, conc, q, extra...)
	if err != nil {
		return result{}, err
	}
	defer h.forget(srv, root)
	f := h.newFeeder(sys, wl, q, n)
	if err := f.fill(ctx, maxAhead); err != nil {
		return result{}, fmt.Errorf("enqueue: %w", err)
	}
	rest := make(chan error, 1)
	cpu0 := treeCPU(srv.cmd.Process.Pid)
	start := time.Now()
	if err := h.insp.UnpauseQueue(q); err != nil {
		return result{}, err
	}
	// An unpause wakes nobody: the idle Airlock worker learns of its runs
	// at its next idle poll (up to -idle-wait, 2s), unless told. The
	// feeder's enqueues told it before fair share; now a principal's runs
	// past its first two are held in its line, and their enqueues wake
	// nobody: wake it as an operator's unpause would. (The baselines poll
	// every 10 ms and listen to nothing.)
	if err := wake.Notify(ctx, h.rdb, "", q); err != nil {
		return result{}, err
	}
	go func() { rest <- f.fill(ctx, n) }()
	// asynq's processed counter also counts the promote tasks a worker
	// may queue (the approval sweeper catching a promotion in flight), so
	// once it says n, the records are counted, and counted again until
	// every run is there; the window ends when a count starts that finds
	// them all.
	limit := time.Duration(n)*time.Second + time.Minute
	err = f.waitDone(ctx, srv, n, 5*time.Millisecond, limit, nil)
	elapsed := time.Since(start)
	others := 0
	for err == nil {
		var runs int
		if runs, others, err = h.checkRecords(ctx, sys, wl, q); err != nil || runs >= n {
			break
		}
		if err = srv.alive(); err != nil {
			break
		}
		if time.Since(start) > limit {
			err = fmt.Errorf("only %d of %d runs completed after %s", runs, n, limit)
			break
		}
		select {
		case <-ctx.Done():
			return result{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		elapsed = time.Since(start)
	}
	if ferr := <-rest; err == nil && ferr != nil {
		err = fmt.Errorf("enqueue: %w", ferr)
	}
	if err != nil {
		return result{}, err
	}
	h.promoteTasks += others
	if err := srv.stop(); err != nil {
		return result{}, err
	}
	cpu := srv.cpuUsed() - cpu0
	return result{perSec: float64(n) / elapsed.Seconds(), cpuMS: ms(cpu) / float64(n)}, nil
}

// result is a throughput run's figures: tasks per second, and CPU
// milliseconds per task of the server's whole process tree.
type result struct {
	perSec, cpuMS float64
}

// startServer starts a server process of sys for queue q, in a fresh
// workspace root.
func (h *harness) startServer(ctx context.Context, sys string, conc int, q string, extra ...string) (*child, string, error) {
	root, err := h.dir("ws-" + sys)
	if err != nil {
		return nil, "", err
	}
	if sys == systemAirlock && outputSupport {
		store, err := h.dir("store")
		if err != nil {
			return nil, "", err
		}
		extra = append(extra, "-store", store)
	}
	if sys == systemAirlock {
		root += "/root" // created by the worker's tmpfs.Manager
	}
	if sys == systemDurable {
		store, err := h.dir("results")
		if err != nil {
			return nil, "", err
		}
		extra = append(extra, "-durable", store)
	}
	srv, err := h.startChild(ctx, sys, conc, q, root, extra...)
	return srv, root, err
}

// forget kills a server that was not stopped (after an error).
func (h *harness) forget(srv *child, root string) {
	select {
	case <-srv.done:
	default:
		srv.kill()
		srv.logs.remove()
	}
}

// checkRecords reads the records of completed tasks of q: every one must
// be ok, and Airlock's must have the state the workload leads to. It keeps
// the approval ids of promoted runs for cleanup and the isolation tiers of
// the first Airlock record for the report.
func (h *harness) checkRecords(ctx context.Context, sys string, wl workload, q string) (runs, others int, err error) {
	others, err = eachCompletedRun(h.insp, q, func(t *asynq.TaskInfo) error {
		runs++
		var rec recordView
		if err := json.Unmarshal(t.Result, &rec); err != nil {
			return fmt.Errorf("task %s: result is not a record: %w", t.ID, err)
		}
		if rec.Verdict != record.VerdictOK {
			return fmt.Errorf("task %s: verdict %s (%s)", t.ID, rec.Verdict, rec.Error)
		}
		want := record.StateCompleted
		if sys == systemAirlock && wl.name == "script" && outputSupport {
			want = record.StatePromoted
		}
		if rec.State != want {
			return fmt.Errorf("task %s: state %s, want %s (%s)", t.ID, rec.State, want, rec.Error)
		}
		if sys == systemAirlock && h.rep.Machine.Tiers == nil {
			h.rep.Machine.Tiers = rec.Isolation
			h.rep.Machine.Quota = rec.Isolation.Quota
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return runs, others, nil
}

// eachCompletedRun hands f each completed task of queue q that is a run,
// once, and returns how many other completed tasks q holds (promotions).
// Pages are ranges of a sorted set that may grow meanwhile: a task can
// show on two pages.
func eachCompletedRun(insp *asynq.Inspector, q string, f func(t *asynq.TaskInfo) error) (others int, err error) {
	seen := map[string]bool{}
	for page := 1; ; page++ {
		ts, err := insp.ListCompletedTasks(q, asynq.PageSize(1000), asynq.Page(page))
		if err != nil {
			return 0, err
		}
		for _, t := range ts {
			if seen[t.ID] {
				continue
			}
			seen[t.ID] = true
			if t.Type != tasks.TypeRun {
				others++
				continue
			}
			if err := f(t); err != nil {
				return 0, err
			}
		}
		if len(ts) < 1000 {
			return others, nil
		}
	}
}

// recordView is what checkRecords reads of a run record.
type recordView struct {
	State     record.State     `json:"state"`
	Verdict   record.Verdict   `json:"verdict"`
	Error     string           `json:"error"`
	Isolation record.Isolation `json:"isolation"`
}

// rss runs many trivial tasks through one server process and samples its
// resident memory.
func (h *harness) rss(ctx context.Context, sys string, conc int) (RSSRow, error) {
	row := RSSRow{System: sys, Concurrency: conc, Tasks: h.sz.RSS}
	q := h.queue("rss-" + sys)
	srv, root, err := h.startServer(ctx, sys, conc, q)
	if err != nil {
		return row, err
	}
	defer h.forget(srv, root)
	pid := srv.cmd.Process.Pid
	if row.StartKB, _, err = procRSS(pid); err != nil {
		return row, err
	}
	wl := workload{name: "trivial", spec: trivialSpec}
	total := h.sz.RSSWarmup + h.sz.RSS
	f := h.newFeeder(sys, wl, q, total)
	// Warm-up: the first tasks grow pools and caches to their working size.
	if err := f.fill(ctx, h.sz.RSSWarmup); err != nil {
		return row, err
	}
	if err := f.waitDone(ctx, srv, h.sz.RSSWarmup, 20*time.Millisecond, 10*time.Minute, nil); err != nil {
		return row, fmt.Errorf("warm-up: %w", err)
	}
	if row.BeforeKB, _, err = procRSS(pid); err != nil {
		return row, err
	}
	if sys == systemAirlock {
		row.HelpersBeforeKB = childrenRSS(pid)
	}
	h.logf("  rss %-8s c=%d: %d KiB at start, %d KiB after %d warm-up tasks; running %d tasks", sys, conc, row.StartKB, row.BeforeKB, h.sz.RSSWarmup, h.sz.RSS)

	start := time.Now()
	fillErr := make(chan error, 1)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { fillErr <- f.fill(fctx, total) }()
	var lastSample, lastTrim time.Time
	row.MaxKB = row.BeforeKB
	step := max(h.sz.RSS/20, 1)
	nextMark := int64(h.sz.RSSWarmup + step)
	tick := func() {
		now := time.Now()
		if now.Sub(lastSample) >= 250*time.Millisecond {
			lastSample = now
			if r, _, err := procRSS(pid); err == nil {
				row.MaxKB = max(row.MaxKB, r)
				if f.done.Load() >= nextMark {
					row.SamplesKB = append(row.SamplesKB, r)
					if sys == systemAirlock {
						row.HelperSamplesKB = append(row.HelperSamplesKB, childrenRSS(pid))
					}
					nextMark += int64(step)
				}
			}
		}
		// Completed tasks are kept (for Wait): drop them as we go so
		// that a long run does not fill Redis.
		if now.Sub(lastTrim) >= 2*time.Second {
			lastTrim = now
			_, _ = h.insp.DeleteAllCompletedTasks(q)
		}
	}
	err = f.waitDone(ctx, srv, total, 20*time.Millisecond, time.Duration(h.sz.RSS)*time.Second+time.Minute, tick)
	elapsed := time.Since(start)
	cancel()
	if ferr := <-fillErr; err == nil && ferr != nil && !errors.Is(ferr, context.Canceled) {
		err = ferr
	}
	if err != nil {
		return row, err
	}
	if row.AfterKB, row.HWMKB, err = procRSS(pid); err != nil {
		return row, err
	}
	row.MaxKB = max(row.MaxKB, row.AfterKB)
	if sys == systemAirlock {
		row.HelpersKB = childrenRSS(pid)
	}
	row.Seconds = elapsed.Seconds()
	row.TasksPerSec = float64(h.sz.RSS) / row.Seconds
	_, _ = h.insp.DeleteAllCompletedTasks(q)
	if err := srv.stop(); err != nil {
		return row, err
	}
	h.logf("  rss %-8s c=%d: %d KiB after %d tasks (max sampled %d KiB, VmHWM %d KiB) in %.0fs", sys, conc, row.AfterKB, h.sz.RSS, row.MaxKB, row.HWMKB, row.Seconds)
	return row, nil
}

// profile runs each workload but the CPU-bound one through Airlock's
// worker and its baseline (the durable one for a workload with a result)
// with a CPU profile: FILE and FILE.baseline for the trivial workload,
// FILE.<workload> and FILE.<workload>.<baseline> for the others.
func (h *harness) profile(ctx context.Context) error {
	conc := 0
	for _, c := range h.opt.Concurrency {
		conc = max(conc, c)
	}
	for _, wl := range h.workloads() {
		if wl.cpu {
			continue
		}
		n := max(h.sz.Throughput, 2000)
		base := systemBaseline
		if wl.result {
			base = systemDurable
		}
		for _, sys := range []string{base, systemAirlock} {
			file := profileFile(h.opt.CPUProfile, wl.name, sys)
			v, err := h.timedRun(ctx, sys, wl, conc, h.queue("profile-"+wl.name+"-"+sys), n, []string{"-cpuprofile", file})
			if err != nil {
				return err
			}
			h.logf("  profiled %s %s run: %.1f tasks/s, %.2f ms CPU/task (%d tasks, c=%d); CPU profile in %s", sys, wl.name, v.perSec, v.cpuMS, n, conc, file)
		}
	}
	return nil
}

// profileFile names the CPU profile of a system's run of a workload.
func profileFile(base, wl, sys string) string {
	if wl != "trivial" {
		base += "." + wl
	}
	if sys != systemAirlock {
		base += "." + sys
	}
	return base
}

// throughputAcc gathers throughput samples by workload, concurrency and
// system, in the order met.
type throughputAcc struct {
	mu   sync.Mutex
	keys []tpKey
	vals map[tpKey]map[string][]float64
	cpu  map[tpKey]map[string][]float64
	wls  map[tpKey]workload
}

type tpKey struct {
	wl   string
	conc int
}

func newThroughputAcc() *throughputAcc {
	return &throughputAcc{vals: map[tpKey]map[string][]float64{}, cpu: map[tpKey]map[string][]float64{}, wls: map[tpKey]workload{}}
}

func (a *throughputAcc) add(wl workload, conc int, sys string, v result) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := tpKey{wl.name, conc}
	if a.vals[k] == nil {
		a.keys = append(a.keys, k)
		a.vals[k] = map[string][]float64{}
		a.cpu[k] = map[string][]float64{}
		a.wls[k] = wl
	}
	a.vals[k][sys] = append(a.vals[k][sys], v.perSec)
	a.cpu[k][sys] = append(a.cpu[k][sys], v.cpuMS)
}

func (a *throughputAcc) rows(h *harness) []ThroughputRow {
	var out []ThroughputRow
	ratios := func(num, den []float64) []float64 {
		var out []float64
		for i := range min(len(num), len(den)) {
			out = append(out, num[i]/den[i])
		}
		return out
	}
	for _, k := range a.keys {
		b, al := a.vals[k][systemBaseline], a.vals[k][systemAirlock]
		wl := a.wls[k]
		row := ThroughputRow{Workload: wl.label, Concurrency: k.conc, Tasks: h.tasksFor(wl),
			Baseline: newStat(b), Airlock: newStat(al), Ratio: newStat(ratios(al, b)),
			BaselineCPU: newStat(a.cpu[k][systemBaseline]), AirlockCPU: newStat(a.cpu[k][systemAirlock])}
		if d := a.vals[k][systemDurable]; len(d) > 0 {
			ds, dr, dc := newStat(d), newStat(ratios(al, d)), newStat(a.cpu[k][systemDurable])
			row.Durable, row.DurableRatio, row.DurableCPU = &ds, &dr, &dc
		}
		if wl.name == "script" && !outputSupport {
			row.Note = "no output contract: not validated, not promoted"
		}
		out = append(out, row)
	}
	return out
}
