//go:build linux

package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/contract"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/policy"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/tmpfs"
	"github.com/airlock-run/airlock/worker"
)

// outputSupport: this build has the output contract, the risk policy and
// the approval store, so the script workload is validated and promoted.
const outputSupport = true

// promoteAll is the risk policy of the bench's workers: every valid output
// is accepted and published at once.
const promoteAll = `{"default":"promote"}`

// configureOutput gives a worker the promote-everything policy and a store
// directory.
func configureOutput(cfg *worker.Config, store string) error {
	p, err := policy.Parse([]byte(promoteAll), "json")
	if err != nil {
		return err
	}
	cfg.RiskPolicy = p
	cfg.Sink = &promote.FS{Dir: store}
	return nil
}

// measureValidate times, on a 1 KiB result in ws, what the worker does
// with a run's output before the policy: read the result, compile its
// schema (a cache hit after the first time) and validate.
func measureValidate(ws *tmpfs.Workspace, iters int, acc *overheadAcc) error {
	if _, err := ws.WriteFiles(map[string]string{"out/result.json": ResultJSON}); err != nil {
		return err
	}
	schema := []byte(ResultSchema)
	if _, err := contract.Compile(schema); err != nil {
		return err
	}
	var tr, tc, tv time.Duration
	for range iters {
		t0 := time.Now()
		res, err := contract.ReadResult(ws, "out/result.json", 0)
		if err != nil {
			return err
		}
		t1 := time.Now()
		s, err := contract.Compile(schema)
		if err != nil {
			return err
		}
		t2 := time.Now()
		vs, err := s.Validate(res)
		if err != nil {
			return err
		}
		if len(vs) > 0 {
			return fmt.Errorf("the bench result breaks its schema: %v", vs)
		}
		tr, tc, tv = tr+t1.Sub(t0), tc+t2.Sub(t1), tv+time.Since(t2)
	}
	acc.add("read_result", tr, iters)
	acc.add("compile", tc, iters)
	acc.add("validate", tv, iters)
	// A schema the process has not seen: the cost of a cache miss.
	k := max(iters/50, 5)
	var tn time.Duration
	stamp := time.Now().UnixNano()
	for i := range k {
		fresh := []byte(fmt.Sprintf(`{"$comment":"bench %d-%d",%s`, stamp, i, ResultSchema[1:]))
		t0 := time.Now()
		if _, err := contract.Compile(fresh); err != nil {
			return err
		}
		tn += time.Since(t0)
	}
	acc.add("compile_new", tn, k)
	return nil
}

// approvalSet is a set of pending approvals parked under a prefix of the
// run's own, for timing their listing.
type approvalSet struct {
	h      *harness
	store  *approve.Store
	n      int
	parkMS float64
	listed int
	noCLI  bool
	cliBin string
}

// parkApprovals parks n pending approvals, from several goroutines.
func (h *harness) parkApprovals(ctx context.Context, n int) (*approvalSet, error) {
	prefix := h.prefix + ":"
	a := &approvalSet{h: h, n: n, store: approve.NewStore(h.rdb, approve.Options{Prefix: prefix})}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, producers)
	t0 := time.Now()
	code := 0
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || errs[p] != nil {
					return
				}
				ap := &approve.Approval{
					ID: fmt.Sprintf("ap-bench-%06d", i), TaskID: fmt.Sprintf("%s-task-%d", h.prefix, i),
					RunID: fmt.Sprintf("%s-run-%d", h.prefix, i), State: approve.StatePending,
					Reasons: []string{"default: park"}, Result: []byte(ResultJSON),
					Run: approve.RunSummary{Queue: "default", Attempt: 1, StartedAt: time.Now().UTC(), StepsMS: 12.5,
						Worker: "bench", Steps: []approve.StepSummary{{Name: "gen", Argv: []string{"sh", "gen.sh"},
							Verdict: "ok", ExitCode: &code, CPUMS: 1.5, MaxRSSKB: 1800}}},
				}
				if _, _, err := a.store.Park(ctx, ap, nil); err != nil {
					errs[p] = err
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		a.cleanup(context.WithoutCancel(ctx))
		return nil, err
	}
	a.parkMS = ms(time.Since(t0))
	h.logf("approvals: parked %d pending under prefix %s in %.0f ms", n, prefix, a.parkMS)
	return a, nil
}

// list times Store.List of every pending approval.
func (a *approvalSet) list(ctx context.Context) (float64, error) {
	t0 := time.Now()
	as, err := a.store.List(ctx, approve.StatePending, 0)
	d := ms(time.Since(t0))
	if err != nil {
		return 0, err
	}
	if len(as) != a.n {
		return 0, fmt.Errorf("listed %d pending approvals, want %d", len(as), a.n)
	}
	a.listed = len(as)
	a.h.logf("  approvals: Store.List(pending) of %d: %.1f ms", len(as), d)
	return d, nil
}

// cli times the approve command listing every pending approval, built once
// from the module's source (skipped when the source or go is not there).
func (a *approvalSet) cli(ctx context.Context, h *harness) (float64, bool, error) {
	if a.noCLI {
		return 0, false, nil
	}
	if a.cliBin == "" {
		dir, ok := moduleDir()
		if !ok {
			a.noCLI = true
			h.skip("approve CLI: the module's source is not above the working directory, so cmd/approve was not built")
			return 0, false, nil
		}
		bin := filepath.Join(h.tmp, "approve")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/approve")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, false, fmt.Errorf("go build ./cmd/approve: %v: %s", err, out)
		}
		a.cliBin = bin
	}
	cmd := exec.CommandContext(ctx, a.cliBin, "-redis", h.opt.RedisURL, "-prefix", a.store.Prefix(), "list", "-state", "pending", "-limit", "0")
	var out countWriter
	cmd.Stdout = &out
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	d := ms(time.Since(t0))
	if err != nil {
		return 0, false, fmt.Errorf("approve list: %v: %s", err, stderr.String())
	}
	if out.lines < a.n {
		return 0, false, fmt.Errorf("approve list printed %d lines for %d pending approvals", out.lines, a.n)
	}
	h.logf("  approvals: approve list -limit 0 (CLI): %.1f ms", d)
	return d, true, nil
}

// countWriter counts lines and drops them.
type countWriter struct{ lines int }

func (c *countWriter) Write(p []byte) (int, error) {
	c.lines += strings.Count(string(p), "\n")
	return len(p), nil
}

// moduleDir finds the module's source above the working directory.
func moduleDir() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/airlock-run/airlock\n") {
			if _, err := os.Stat(filepath.Join(dir, "cmd", "approve")); err == nil {
				return dir, true
			}
			return "", false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// cleanup deletes every key under the set's prefix.
func (a *approvalSet) cleanup(ctx context.Context) {
	ctx, cancel := withTimeout(ctx, time.Minute)
	defer cancel()
	if err := deletePrefix(ctx, a.h.rdb, a.store.Prefix()); err != nil {
		a.h.logf("cleanup of approvals: %v", err)
	}
}

func (a *approvalSet) row(list, cli []float64) *ApprovalsRow {
	r := &ApprovalsRow{Pending: a.n, ParkMS: a.parkMS, ListMS: newStat(list), Listed: a.listed}
	if len(cli) > 0 {
		s := newStat(cli)
		r.CLIMS = &s
		r.Note = "the CLI figure includes starting the process, connecting and printing every line"
	}
	return r
}

// deletePrefix unlinks every key that starts with prefix.
func deletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	var keys []string
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) >= 1000 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(keys) > 0 {
		return rdb.Unlink(ctx, keys...).Err()
	}
	return nil
}

// Shared streams the worker appends to: the run events (the approval
// store's audit stream is approve.Store.Purge's).
var sharedStreams = []string{events.Key}

// eventsPosition marks the end of the shared streams before the run, as
// "stream=id" pairs separated by newlines.
func eventsPosition(ctx context.Context, rdb redis.UniversalClient) string {
	var b strings.Builder
	for _, s := range sharedStreams {
		id := "0"
		if msgs, err := rdb.XRevRangeN(ctx, s, "+", "-", 1).Result(); err == nil && len(msgs) > 0 {
			id = msgs[0].ID
		}
		fmt.Fprintf(&b, "%s=%s\n", s, id)
	}
	return b.String()
}

// cleanupOutput deletes what the run's Airlock tasks added outside their
// queues: the approvals of its runs, with their index entries and audit
// entries (approve.Store.Purge, by run_id prefix, from the run's start),
// and its entries in the events stream (events whose run_id has the run's
// prefix).
func cleanupOutput(ctx context.Context, rdb redis.UniversalClient, prefix, marks string, since time.Time) error {
	var errs []error
	if _, err := approve.NewStore(rdb, approve.Options{}).Purge(ctx, prefix, since); err != nil {
		errs = append(errs, fmt.Errorf("approvals: %w", err))
	}
	for _, l := range strings.Split(strings.TrimSpace(marks), "\n") {
		stream, start, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		match := func(v map[string]any) bool {
			s, _ := v["run_id"].(string)
			return strings.HasPrefix(s, prefix+"-")
		}
		if err := xdelMatching(ctx, rdb, stream, start, match); err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", stream, err))
		}
	}
	return errors.Join(errs...)
}

// xdelMatching deletes the entries of stream after id start that match.
func xdelMatching(ctx context.Context, rdb redis.UniversalClient, stream, start string, match func(map[string]any) bool) error {
	for {
		msgs, err := rdb.XRangeN(ctx, stream, "("+start, "+", 1000).Result()
		if err != nil {
			return err
		}
		var del []string
		for _, m := range msgs {
			if match(m.Values) {
				del = append(del, m.ID)
			}
		}
		if len(del) > 0 {
			if err := rdb.XDel(ctx, stream, del...).Err(); err != nil {
				return err
			}
		}
		if len(msgs) < 1000 {
			return nil
		}
		start = msgs[len(msgs)-1].ID
	}
}
