//go:build linux

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/record"
)

// ceilPoll is how often the section reads the queues' processed counters
// (one MGET per queue: 100 commands/s per queue, in the figures).
const ceilPoll = 10 * time.Millisecond

// ceilDrain bounds the wait, after the window, for every run enqueued to
// be processed and its record read.
const ceilDrain = 2 * time.Minute

// ceilFeed enqueues runs of one kind into one queue, keeping ahead runs
// enqueued and not yet processed.
type ceilFeed struct {
	queue      string
	ahead      int64
	principals int
	base       int64        // asynq's processed counter when the kind started
	baseFailed int64        // and its failed counter
	next       atomic.Int64 // run indices handed out
	enq        atomic.Int64 // runs enqueued
	done       atomic.Int64 // processed since base, as last polled
}

// ceilSnap is one point of the window.
type ceilSnap struct {
	at        time.Time
	cpu       []time.Duration // per node, utime+stime from /proc
	stats     []nodeStats     // per node, INFO
	processed int64           // over the queues
	workers   time.Duration   // the workers' process trees
	self      time.Duration
	busy, all uint64 // the machine's ticks
}

func (fl *fleet) snap(ctx context.Context, feeds []*ceilFeed) (ceilSnap, error) {
	s := ceilSnap{at: time.Now()}
	for _, n := range fl.nodes {
		s.cpu = append(s.cpu, procCPU(n.pid()))
	}
	for _, w := range fl.workers {
		s.workers += treeCPU(w.cmd.Process.Pid)
	}
	s.self = ownCPU()
	s.busy, s.all = machineTicks()
	for _, f := range feeds {
		done, _, err := counts(ctx, fl.rdb, f.queue)
		if err != nil {
			return s, err
		}
		s.processed += done
	}
	for _, n := range fl.nodes {
		st, err := readStats(ctx, n.rdb)
		if err != nil {
			return s, fmt.Errorf("INFO on %s: %w", n.addr, err)
		}
		s.stats = append(s.stats, st)
	}
	return s, nil
}

// measure feeds the fleet runs of kind k from several goroutines, a
// warm-up then the window, measures the window, then drains the queues
// and checks every run's record.
func (fl *fleet) measure(ctx context.Context, k ceilKind, window, warmup time.Duration) (CeilingRow, error) {
	row := CeilingRow{Kind: k.name, How: k.how}
	feeds := make([]*ceilFeed, len(fl.queues))
	for i, q := range fl.queues {
		done, failed, err := counts(ctx, fl.rdb, q.Name)
		if err != nil {
			return row, err
		}
		slots := fl.slots[q.Name]
		feeds[i] = &ceilFeed{queue: q.Name, ahead: int64(2 * slots), principals: max(slots, 1), base: done, baseFailed: failed}
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for p := range ceilProducers {
		f := feeds[p%len(feeds)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fl.produce(fctx, &stop, f, k); err != nil {
				fail(err)
			}
		}()
	}
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		if err := fl.poll(fctx, feeds); err != nil {
			fail(err)
		}
	}()
	defer func() { cancel(); stop.Store(true); wg.Wait(); <-pollDone }()

	sleep := func(d time.Duration) error {
		select {
		case <-fctx.Done():
			if err := failed(); err != nil {
				return err
			}
			return fctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	// cause prefers the failure that ended fctx to what it made fail.
	cause := func(err error) error {
		if f := failed(); f != nil {
			return f
		}
		return err
	}
	if err := sleep(warmup); err != nil {
		return row, err
	}
	a, err := fl.snap(fctx, feeds)
	if err != nil {
		return row, cause(err)
	}
	if err := sleep(window); err != nil {
		return row, err
	}
	b, err := fl.snap(fctx, feeds)
	if err != nil {
		return row, cause(err)
	}
	stop.Store(true)
	wg.Wait()
	if err := failed(); err != nil {
		return row, err
	}
	fl.fill(&row, a, b)

	// Drain: every run enqueued processed, and its record there and ok.
	deadline := time.Now().Add(ceilDrain)
	for _, f := range feeds {
		row.Enqueued += f.enq.Load()
		for f.done.Load() < f.enq.Load() {
			if err := failed(); err != nil {
				return row, err
			}
			if time.Now().After(deadline) {
				return row, fmt.Errorf("queue %s: %d of %d runs processed %s after the window (lost?): %s", f.queue, f.done.Load(), f.enq.Load(), ceilDrain, fl.queueState(f.queue))
			}
			time.Sleep(ceilPoll)
		}
	}
	for _, f := range feeds {
		for {
			runs, others, err := fl.verify(fctx, f.queue, k)
			if err != nil {
				return row, cause(err)
			}
			if int64(runs) >= f.enq.Load() {
				row.Verified += int64(runs)
				row.Others += others
				break
			}
			if time.Now().After(deadline) {
				return row, fmt.Errorf("queue %s: %d of %d records found %s after the window: %s", f.queue, runs, f.enq.Load(), ceilDrain, fl.queueState(f.queue))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if row.Verified != row.Enqueued {
		return row, fmt.Errorf("%d runs enqueued, %d records ok", row.Enqueued, row.Verified)
	}
	return row, failed()
}

// produce enqueues runs into f's queue with Airlock's client until stop,
// never more than f.ahead beyond what is processed; the runs' principals
// go round robin.
func (fl *fleet) produce(ctx context.Context, stop *atomic.Bool, f *ceilFeed, k ceilKind) error {
	for !stop.Load() {
		i := f.next.Add(1) - 1
		for i-f.done.Load() >= f.ahead {
			if stop.Load() {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(500 * time.Microsecond):
			}
		}
		spec := k.spec(f.queue, f.queue+"-"+k.name+"-"+strconv.FormatInt(i, 10))
		spec.Principal = "agent-" + strconv.Itoa(int(i)%f.principals)
		if _, err := fl.client.Enqueue(ctx, spec); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("Client.Enqueue of %s in %s: %w", spec.RunID, f.queue, err)
		}
		f.enq.Add(1)
	}
	return nil
}

// poll reads the queues' counters every ceilPoll until ctx ends; it fails
// when a run fails, a worker exits or a Redis server does.
func (fl *fleet) poll(ctx context.Context, feeds []*ceilFeed) error {
	last := time.Now()
	for {
		for _, f := range feeds {
			done, failed, err := counts(ctx, fl.rdb, f.queue)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("reading the counters of %s: %w", f.queue, err)
			}
			f.done.Store(done - f.base)
			if failed > f.baseFailed {
				return fmt.Errorf("queue %s: %d run(s) failed: %s", f.queue, failed-f.baseFailed, fl.s.failureSample(f.queue))
			}
		}
		if time.Since(last) >= 100*time.Millisecond {
			last = time.Now()
			for _, w := range fl.workers {
				if err := w.alive(); err != nil {
					return fmt.Errorf("a worker: %w", err)
				}
			}
			for _, n := range fl.nodes {
				if err := n.alive(); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(ceilPoll):
		}
	}
}

// ceilRecord is what verify reads of a run record.
type ceilRecord struct {
	RunID   string         `json:"run_id"`
	State   record.State   `json:"state"`
	Verdict record.Verdict `json:"verdict"`
	Error   string         `json:"error"`
}

// verify reads the completed tasks of queue q: the records of kind k's
// runs must be ok and in the state k leads to. It returns how many there
// are, and the tasks besides runs.
func (fl *fleet) verify(ctx context.Context, q string, k ceilKind) (runs, others int, err error) {
	prefix := q + "-" + k.name + "-"
	others, err = eachCompletedRun(fl.insp, q, func(t *asynq.TaskInfo) error {
		var rec ceilRecord
		if err := json.Unmarshal(t.Result, &rec); err != nil {
			return fmt.Errorf("task %s: result is not a record: %w", t.ID, err)
		}
		if !strings.HasPrefix(rec.RunID, prefix) {
			return nil
		}
		if rec.Verdict != record.VerdictOK || rec.State != k.want {
			return fmt.Errorf("run %s: state %s, verdict %s, want %s, ok (%s)", rec.RunID, rec.State, rec.Verdict, k.want, rec.Error)
		}
		runs++
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	o := others - fl.others[q]
	fl.others[q] = others
	return runs, o, nil
}

// queueState describes a queue, for an error.
func (fl *fleet) queueState(q string) string {
	qi, err := fl.insp.GetQueueInfo(q)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("pending %d, active %d, aggregating (held by fair share) %d in %d groups, retry %d, archived %d, completed %d",
		qi.Pending, qi.Active, qi.Aggregating, qi.Groups, qi.Retry, qi.Archived, qi.Completed)
}

// fill computes the row's figures over the window a–b.
func (fl *fleet) fill(row *CeilingRow, a, b ceilSnap) {
	wall := b.at.Sub(a.at).Seconds()
	row.WindowS = wall
	row.Runs = b.processed - a.processed
	row.RunsPerS = float64(row.Runs) / wall
	var sum, hottest, infoCPU time.Duration
	var cmds, calls int64
	by := map[string]int64{}
	for i, n := range fl.nodes {
		dc := b.cpu[i] - a.cpu[i]
		sum, hottest = sum+dc, max(hottest, dc)
		infoCPU += b.stats[i].cpu - a.stats[i].cpu
		dt, dk := b.stats[i].total-a.stats[i].total, b.stats[i].calls-a.stats[i].calls
		cmds, calls = cmds+dt, calls+dk
		for c, v := range b.stats[i].by {
			by[c] += v - a.stats[i].by[c]
		}
		node := CeilingNode{Addr: n.addr, CPUPct: 100 * dc.Seconds() / wall,
			CommandsPerS: float64(dt) / wall, CallsPerS: float64(dk) / wall}
		for _, q := range fl.queues {
			if q.Node == n.addr {
				node.Queue = q.Name
			}
		}
		row.Nodes = append(row.Nodes, node)
	}
	for i := range row.Nodes {
		if sum > 0 {
			row.Nodes[i].CPUShare = (b.cpu[i] - a.cpu[i]).Seconds() / sum.Seconds()
		}
	}
	row.RedisCPUPct = 100 * sum.Seconds() / wall
	row.INFOCPUPct = 100 * infoCPU.Seconds() / wall
	row.CommandsPerS, row.CallsPerS = float64(cmds)/wall, float64(calls)/wall
	if row.Runs > 0 {
		row.CommandsPerRun = float64(cmds) / float64(row.Runs)
		row.RedisCPUUSPerRn = float64(sum.Microseconds()) / float64(row.Runs)
		type kv struct {
			c string
			n int64
		}
		var top []kv
		for c, n := range by {
			if n > 0 {
				top = append(top, kv{c, n})
			}
		}
		slices.SortFunc(top, func(x, y kv) int { return int(y.n - x.n) })
		row.TopCommands = map[string]float64{}
		for _, t := range top[:min(len(top), 8)] {
			row.TopCommands[t.c] = float64(t.n) / float64(row.Runs)
		}
	}
	if sum > 0 {
		row.RunsPerCore = row.RunsPerS / (sum.Seconds() / wall)
		row.HottestCeiling = row.RunsPerS / (hottest.Seconds() / wall)
	}
	row.WorkersCPUPct = 100 * (b.workers - a.workers).Seconds() / wall
	row.BenchCPUPct = 100 * (b.self - a.self).Seconds() / wall
	if b.all > a.all {
		row.MachineBusyPct = 100 * float64(b.busy-a.busy) / float64(b.all-a.all)
	}
}
