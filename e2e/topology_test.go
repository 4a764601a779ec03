//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestRedisTopologies runs the whole flow — enqueue, run, park, accept,
// promote exactly once, Wait and WaitFinal, the CLIs — on every kind of
// Redis a user may have, each a real server started by the test: TLS with
// a client certificate and an ACL user limited to redistest.ACLCommands,
// Sentinel (master, replica, three sentinels), and a 3-master Cluster.
// The standalone server is every other e2e test's.
func TestRedisTopologies(t *testing.T) {
	needRoot(t)
	cases := []struct {
		name string
		url  func(testing.TB) string
		// what the worker says at start of the servers' persistence
		// (none of them persists; the ACL user may not run CONFIG)
		durability string
	}{
		{"tls-acl", redistest.TLSACL, "could not tell whether Redis persists"},
		{"sentinel", func(t testing.TB) string { return redistest.Sentinel(t).URL }, "neither AOF (appendonly) nor RDB snapshots"},
		{"cluster", redistest.Cluster, "neither AOF (appendonly) nor RDB snapshots"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url := c.url(t)
			b := bundleAt(t, url)
			store := t.TempDir()
			b.worker = b.startWorker("-store", store)
			flowOn(t, b, store)
			if !strings.Contains(b.worker.logs.String(), c.durability) {
				t.Errorf("the worker's start does not say %q", c.durability)
			}
			logCommandStats(t, url)
		})
	}
}

// TestSentinelFailover: the master dies; once the sentinels promote its
// replica, the same worker (without a restart) and client carry on.
func TestSentinelFailover(t *testing.T) {
	needRoot(t)
	t.Parallel()
	set := redistest.Sentinel(t)
	b := bundleAt(t, set.URL)
	b.worker = b.startWorker()
	if rec := b.run(`{"version": 1, "steps": [{"run": ["echo", "before"]}]}`); rec.State != record.StateCompleted {
		t.Fatalf("before the failover:\n%s", mustJSON(t, rec))
	}
	// Wait for the replica to have caught up, then kill the master.
	time.Sleep(500 * time.Millisecond)
	if err := set.Master.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var e airlock.Enqueued
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		e, err = b.client.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["echo", "after"]}]}`))
		cancel()
		if err == nil {
			break
		}
		if time.Since(killed) > 90*time.Second {
			t.Fatalf("no new master within 90 s: %v\nworker logs:\n%s", err, b.worker.logs.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := b.client.Wait(ctx, b.queue, e.TaskID)
	if err != nil || rec.State != record.StateCompleted || stepOf(t, rec, 0).Stdout != "after\n" {
		t.Fatalf("after the failover: %v\n%s\nworker logs:\n%s", err, mustJSON(t, rec), b.worker.logs.String())
	}
	t.Logf("a task enqueued and run %.1f s after the master was killed", time.Since(killed).Seconds())
	if !strings.Contains(b.worker.logs.String(), "sentinel: new master") {
		t.Errorf("the worker's log does not say it switched masters")
	}
}

// bundleAt is newBundle on the Redis at url.
func bundleAt(t *testing.T, url string) *bundle {
	t.Helper()
	b := &bundle{t: t, queue: redistest.Queue(t), url: url}
	c, err := airlock.Dial(url, airlock.ClientOptions{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b.client = c
	t.Cleanup(func() { c.Close() })
	tmp := t.TempDir()
	for _, d := range []string{filepath.Dir(tmp), tmp} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	b.root = filepath.Join(tmp, "ws")
	return b
}

// flowOn: two runs park (one through the Go client, one through enqueue
// -wait); concurrent approvers accept each: one wins, the other is told;
// each is published once; a duplicate idempotency key gives the same task;
// Result reads the publication.
func flowOn(t *testing.T, b *bundle, store string) {
	ctx := context.Background()
	spec := b.spec(reportSpec(`{"total": 7}`, `"run_id": "topo", "idempotency_key": "topo-1",`))
	e, err := b.client.Enqueue(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := b.client.Enqueue(ctx, spec); err != nil || again.TaskID != e.TaskID || !again.Duplicate {
		t.Fatalf("same idempotency key: %+v, %v; want task %s, duplicate", again, err, e.TaskID)
	}
	code, out, stderr := b.enqueueCLI(strings.Replace(reportSpec(`{"total": 8}`, `"run_id": "topo",`), `"version": 1,`, `"version": 1, "queue": "`+b.queue+`",`, 1), "-wait", "-")
	if code != 0 {
		t.Fatalf("enqueue -wait: exit %d\n%s\n%s", code, out, stderr)
	}
	var cliRec record.Run
	if err := json.Unmarshal([]byte(out), &cliRec); err != nil || cliRec.State != record.StateParked {
		t.Fatalf("enqueue -wait printed %q (%v); want a parked record", out, err)
	}
	rec := b.wait(e.TaskID)
	if rec.State != record.StateParked || rec.ApprovalID == "" {
		t.Fatalf("want parked:\n%s", mustJSON(t, rec))
	}
	code, out, _ = b.approveCLI("list")
	if code != 0 || !strings.Contains(out, rec.ApprovalID) || !strings.Contains(out, cliRec.ApprovalID) {
		t.Fatalf("approve list: exit %d, want both approvals:\n%s", code, out)
	}
	for _, r := range []*record.Run{rec, &cliRec} {
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i, who := range []string{"alice", "bob"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i], _, _ = b.approveCLI("accept", r.ApprovalID, "-by", who)
			}()
		}
		wg.Wait()
		sort.Ints(codes)
		if codes[0] != 0 || codes[1] == 0 {
			t.Errorf("two approvers of %s: exit codes %v, want one 0 and one failure", r.ApprovalID, codes)
		}
		final := b.waitFinal(r.TaskID)
		if final.State != record.StatePromoted {
			t.Fatalf("want promoted:\n%s", mustJSON(t, final))
		}
	}
	// Published once each, and readable through the client.
	ents, err := filepath.Glob(filepath.Join(store, "topo", "*", "manifest.json"))
	if err != nil || len(ents) != 2 {
		t.Fatalf("manifests %v (%v), want 2", ents, err)
	}
	p, err := b.client.Result(ctx, e.TaskID)
	if err != nil || string(p.Result) != `{"total": 7}` {
		t.Fatalf("Result: %v, %v", p, err)
	}
	// asynq's own tools (its Inspector, asynqmon) read Airlock's queues.
	rdb, _, err := redisconn.Open(b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	qi, err := insp.GetQueueInfo(b.queue)
	if err != nil || qi.Completed != 4 || qi.Failed != 0 {
		t.Errorf("asynq GetQueueInfo: %+v, %v; want 4 completed (2 runs, 2 promotions)", qi, err)
	}
	done, err := insp.ListCompletedTasks(b.queue)
	types := map[string]int{}
	for _, ti := range done {
		types[ti.Type]++
	}
	if diff := cmp.Diff(map[string]int{tasks.TypeRun: 2, approve.TypePromote: 2}, types); err != nil || diff != "" {
		t.Errorf("asynq ListCompletedTasks (-want +got): %v\n%s", err, diff)
	}
	// The worker ran each task once.
	if n := strings.Count(b.worker.logs.String(), `"message":"task start"`); n != 2 {
		t.Errorf("%d task starts, want 2", n)
	}
}

// logCommandStats logs the commands the flow sent to url's servers, the
// list docs/redis.md's "Managed Redis" gives.
func logCommandStats(t *testing.T, url string) {
	rdb, _, err := redisconn.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := context.Background()
	var infos []string
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			s, err := c.Info(ctx, "commandstats").Result()
			mu.Lock()
			infos = append(infos, s)
			mu.Unlock()
			return err
		})
	} else if s, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
		infos = append(infos, s)
	} else if !errors.Is(err, context.Canceled) {
		t.Logf("INFO commandstats: %v", err)
	}
	calls := map[string]bool{}
	total := 0
	for _, s := range infos {
		for _, line := range strings.Split(s, "\n") {
			if name, ok := strings.CutPrefix(line, "cmdstat_"); ok {
				name, rest, _ := strings.Cut(name, ":")
				calls[name] = true
				if v, ok := strings.CutPrefix(rest, "calls="); ok {
					v, _, _ = strings.Cut(v, ",")
					n, _ := strconv.Atoi(v)
					total += n
				}
			}
		}
	}
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("commands used: %s", strings.Join(names, " "))
	t.Logf("%s: %d commands in all for the 2 runs of the flow, idle polling included (worker, client, CLIs and test; scripts' inner calls counted)", t.Name(), total)
}
