//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// interval is one run's time on a worker, from its record.
type interval struct {
	who        string
	start, end time.Time
}

// maxOverlap is the most intervals of who ("": any) that overlap at once.
func maxOverlap(ivs []interval, who string) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, iv := range ivs {
		if who == "" || iv.who == who {
			es = append(es, edge{iv.start, +1}, edge{iv.end, -1})
		}
	}
	// Ends before starts at the same instant: touching is not overlapping.
	sort.Slice(es, func(i, j int) bool {
		if es[i].at.Equal(es[j].at) {
			return es[i].d < es[j].d
		}
		return es[i].at.Before(es[j].at)
	})
	n, m := 0, 0
	for _, e := range es {
		n += e.d
		m = max(m, n)
	}
	return m
}

// TestQuotaMaxActiveFleet runs a max_active of 2 for agent across two
// API servers and two workers of 2 slots each on one queue: agent enqueues
// 20 runs of 0.3 s through both APIs alternately (two goroutines at once,
// each alternating) while token other enqueues 10 (a third). Never more
// than 2 of agent's run at once
// (its runs' records, and a sampler of the tasks agent holds released,
// say so), all complete, and other's runs take the fleet's other slots
// meanwhile.
func TestQuotaMaxActiveFleet(t *testing.T) {
	t.Parallel()
	needRoot(t)
	const agentRuns, otherRuns, maxActive = 20, 10, 2
	prefix, queue := approvetest.Prefix(t)
	url := redistest.URL(t)
	f := newFleet(t, fleetConfig{
		url: url, queue: queue, prefix: prefix, store: t.TempDir(),
		policy: writePolicy(t, `{"default": "promote", "quotas": {"agent": {"max_active": 2}}}`), workers: 2, concurrency: 2, uidBase: 310000,
	})
	f.startAll(30 * time.Second)
	tokens := quotaTokens(t, "agent", "other")
	b := &bundle{t: t, queue: queue, url: url}
	apis := []string{startAPI(t, b, "-prefix", prefix, "-tokens", tokens), startAPI(t, b, "-prefix", prefix, "-tokens", tokens)}
	rdb := redistest.Client(t)
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	t.Cleanup(func() { c.Close() })
	ctx := waitCtx(t, 3*time.Minute)

	// The sampler: agent's released runs (waiting or running) and those
	// running, as the release script counts them, every 5 ms.
	claim := prefix + "fair:{" + queue + "}:claim:agent"
	var mu sync.Mutex
	maxRunning, maxClaimed, samples := 0, 0, 0
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ids, err := rdb.ZRange(ctx, claim, 0, -1).Result()
			if err != nil {
				continue
			}
			running, claimed := 0, 0
			for _, id := range ids {
				switch st, _ := rdb.HGet(ctx, "asynq:{"+queue+"}:t:"+id, "state").Result(); st {
				case "active":
					running++
					claimed++
				case "pending", "retry", "scheduled":
					claimed++
				}
			}
			mu.Lock()
			maxRunning, maxClaimed, samples = max(maxRunning, running), max(maxClaimed, claimed), samples+1
			mu.Unlock()
		}
	}()

	hc := &http.Client{Timeout: time.Minute}
	postRun := func(api, who string) (string, error) {
		spec := fmt.Sprintf(`{"version": 1, "queue": %q, "steps": [{"run": ["sleep", "0.3"]}]}`, queue)
		req, _ := http.NewRequest("POST", api+"/v1/runs", strings.NewReader(spec))
		req.Header.Set("Authorization", "Bearer "+quotaToken(who))
		req.Header.Set("Content-Type", "application/json")
		res, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		var en httpapi.Enqueued
		if res.StatusCode != 201 || json.Unmarshal(body, &en) != nil {
			return "", fmt.Errorf("POST /v1/runs by %s: %d %s", who, res.StatusCode, body)
		}
		return en.TaskID, nil
	}
	start := time.Now()
	var wg sync.WaitGroup
	ids := map[string]string{} // task id → principal
	var idsMu sync.Mutex
	errs := make(chan error, agentRuns+otherRuns)
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who, n := "agent", agentRuns/2
			if g == 2 {
				who, n = "other", otherRuns
			}
			for i := range n {
				id, err := postRun(apis[(g+i)%2], who)
				if err != nil {
					errs <- err
					return
				}
				idsMu.Lock()
				ids[id] = who
				idsMu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	enqueued := time.Since(start)

	var ivs []interval
	workers := map[string]map[string]int{"agent": {}, "other": {}}
	for id, who := range ids {
		rec, err := c.Wait(ctx, queue, id)
		if err != nil {
			t.Fatalf("wait %s's run %s: %v", who, id, err)
		}
		if rec.State != record.StateCompleted || rec.Principal != who {
			t.Errorf("%s's run: want completed:\n%s", who, mustJSON(t, rec))
		}
		ivs = append(ivs, interval{who, rec.StartedAt, rec.FinishedAt})
		workers[who][rec.Worker]++
	}
	close(stop)
	<-sampled
	took := time.Since(start)
	agentMax, otherMax, allMax := maxOverlap(ivs, "agent"), maxOverlap(ivs, "other"), maxOverlap(ivs, "")
	// other's runs that ran while two of agent's ran.
	beside := 0
	for _, o := range ivs {
		if o.who != "other" {
			continue
		}
		var around []interval
		for _, a := range ivs {
			if a.who == "agent" && a.start.Before(o.end) && o.start.Before(a.end) {
				around = append(around, interval{"agent", maxTime(a.start, o.start), minTime(a.end, o.end)})
			}
		}
		if maxOverlap(around, "agent") >= 2 {
			beside++
		}
	}
	mu.Lock()
	t.Logf("2 APIs, 2 workers × 2 slots, agent max_active %d: %d runs of agent and %d of other enqueued in %s, all done in %s",
		maxActive, len(ids)-otherRuns, otherRuns, enqueued.Round(time.Millisecond), took.Round(time.Millisecond))
	t.Logf("at once, from the records: agent at most %d, other at most %d, all at most %d; %d of other's runs ran beside 2 of agent's; workers of agent's runs %v, of other's %v",
		agentMax, otherMax, allMax, beside, workers["agent"], workers["other"])
	t.Logf("sampler (%d samples): agent's runs running at most %d, released (waiting or running) at most %d", samples, maxRunning, maxClaimed)
	if agentMax > maxActive || maxRunning > maxActive || maxClaimed > maxActive {
		t.Errorf("HOLE: agent ran %d at once (records), %d running and %d released (sampler): want at most its max_active %d", agentMax, maxRunning, maxClaimed, maxActive)
	}
	mu.Unlock()
	if agentMax < maxActive {
		t.Errorf("agent never ran %d at once: the test did not load the quota", maxActive)
	}
	if allMax < 3 || beside == 0 {
		t.Errorf("other's runs did not use the fleet's other slots: all at once at most %d, %d of other's beside two of agent's", allMax, beside)
	}
	if len(workers["agent"]) != 2 {
		t.Errorf("agent's runs ran on workers %v: want both", workers["agent"])
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestQuotaFairShare replays round 4's fairness figure, with no quota
// configured: principal a queues 200 runs of sleep 0.2 on a 2-slot worker,
// then principal b enqueues single runs one at a time while a's backlog
// drains. Before, b's run waited behind the whole backlog (21.5 s); now
// b's enqueue → start is at most 2 s at p99.
func TestQuotaFairShare(t *testing.T) {
	// Not parallel: it measures latencies on a 2-slot worker.
	const backlog, samples = 200, 12
	b, prefix := quotaSetup(t, `{"default": "promote"}`, "-concurrency", "2")
	rdb := redistest.Client(t)
	clientOf := func(who string) *airlock.Client {
		c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour, Principal: who})
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, bc := clientOf("a"), clientOf("b")
	ctx := waitCtx(t, 3*time.Minute)

	start := time.Now()
	var backlogIDs []string
	for i := range backlog {
		e, err := a.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["sleep", "0.2"]}]}`))
		if err != nil {
			t.Fatalf("a's run %d: %v", i, err)
		}
		backlogIDs = append(backlogIDs, e.TaskID)
	}
	enqueued := time.Since(start)

	var lat []time.Duration
	var lastB time.Time
	for i := range samples {
		t0 := time.Now()
		e, err := bc.Enqueue(ctx, b.spec(`{"version": 1, "steps": [{"run": ["true"]}]}`))
		if err != nil {
			t.Fatalf("b's run %d: %v", i, err)
		}
		rec, err := bc.Wait(ctx, b.queue, e.TaskID)
		if err != nil {
			t.Fatalf("b's run %d: %v", i, err)
		}
		if rec.State != record.StateCompleted || rec.Principal != "b" {
			t.Fatalf("b's run %d: want completed:\n%s", i, mustJSON(t, rec))
		}
		lat = append(lat, rec.StartedAt.Sub(t0))
		lastB = rec.StartedAt
		time.Sleep(300 * time.Millisecond)
	}

	var lastA time.Time
	for _, id := range backlogIDs {
		rec, err := a.Wait(ctx, b.queue, id)
		if err != nil {
			t.Fatalf("a's run %s: %v", id, err)
		}
		if rec.State != record.StateCompleted {
			t.Errorf("a's run: want completed:\n%s", mustJSON(t, rec))
		}
		lastA = maxTime(lastA, rec.FinishedAt)
	}
	drain := lastA.Sub(start)
	t.Logf("a: %d runs of sleep 0.2 enqueued in %s, drained by 2 slots in %s", backlog, enqueued.Round(time.Millisecond), drain.Round(time.Millisecond))
	t.Logf("b: %d single runs during a's backlog: enqueue → start p50 %s, p99 %s, max %s (round 4: 21.5 s, behind the whole backlog)",
		len(lat), pct(lat, 0.5).Round(time.Millisecond), pct(lat, 0.99).Round(time.Millisecond), pct(lat, 1).Round(time.Millisecond))
	if !lastB.Before(lastA) {
		t.Errorf("b's last run started at %s, after a's backlog drained (%s): the samples did not meet the backlog", lastB, lastA)
	}
	if p := pct(lat, 0.99); p > 2*time.Second {
		t.Errorf("HOLE: b's enqueue → start p99 %s behind a's backlog, want at most 2s", p)
	}
}
