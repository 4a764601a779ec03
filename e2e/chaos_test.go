//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/record"
)

// chaosConfig is the size of a chaos run; CI runs the defaults, and
// $AIRLOCK_CHAOS_* override them (RELIABILITY.md has the full-size
// command).
type chaosConfig struct {
	Tasks       int           // AIRLOCK_CHAOS_TASKS
	Workers     int           // AIRLOCK_CHAOS_WORKERS
	Concurrency int           // AIRLOCK_CHAOS_CONCURRENCY: slots per worker
	KillEvery   time.Duration // AIRLOCK_CHAOS_KILL_EVERY: mean time between two SIGKILLs
	Duration    time.Duration // AIRLOCK_CHAOS_DURATION: the phase with kills (and the Redis restart at its middle)
	Settle      time.Duration // AIRLOCK_CHAOS_SETTLE: how long every task may then take to be final
	Seed        uint64        // AIRLOCK_CHAOS_SEED: of the kills' and approvers' randomness
	Sessions    int           // AIRLOCK_CHAOS_SESSIONS: sessions open and stepping throughout
}

// MarshalJSON writes the durations as Go strings ("3s").
func (c chaosConfig) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{
		"tasks": c.Tasks, "workers": c.Workers, "concurrency": c.Concurrency,
		"kill_every": c.KillEvery.String(), "duration": c.Duration.String(), "settle": c.Settle.String(),
		"seed": c.Seed, "sessions": c.Sessions,
	})
}

func chaosConfigFromEnv(t *testing.T) chaosConfig {
	t.Helper()
	c := chaosConfig{Tasks: 150, Workers: 3, Concurrency: 3, KillEvery: 3 * time.Second, Settle: 5 * time.Minute, Seed: uint64(time.Now().UnixNano()), Sessions: 20}
	ints := map[string]*int{"AIRLOCK_CHAOS_TASKS": &c.Tasks, "AIRLOCK_CHAOS_WORKERS": &c.Workers, "AIRLOCK_CHAOS_CONCURRENCY": &c.Concurrency, "AIRLOCK_CHAOS_SESSIONS": &c.Sessions}
	for k, p := range ints {
		if v := os.Getenv(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				t.Fatalf("$%s: %q is not a positive integer", k, v)
			}
			*p = n
		}
	}
	durs := map[string]*time.Duration{"AIRLOCK_CHAOS_KILL_EVERY": &c.KillEvery, "AIRLOCK_CHAOS_DURATION": &c.Duration, "AIRLOCK_CHAOS_SETTLE": &c.Settle}
	for k, p := range durs {
		if v := os.Getenv(k); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("$%s: %q is not a positive duration", k, v)
			}
			*p = d
		}
	}
	if v := os.Getenv("AIRLOCK_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("$AIRLOCK_CHAOS_SEED: %v", err)
		}
		c.Seed = n
	}
	if c.Duration == 0 {
		// About as long as the slots take to run the tasks (0.85 s of
		// sleep each on average, plus the worker's own time).
		c.Duration = max(20*time.Second, time.Duration(c.Tasks)*1100*time.Millisecond/time.Duration(c.Workers*c.Concurrency))
	}
	return c
}

// chaosKill is one SIGKILL of a worker.
type chaosKill struct {
	at       time.Time
	worker   int
	pid      int
	inFlight []string // run tasks it had started and not ended
}

// chaosFigures is what a chaos run reports.
type chaosFigures struct {
	Config             chaosConfig         `json:"config"`
	Kinds              map[string]int      `json:"kinds"`
	Kills              int                 `json:"kills"`
	WorkerRestarts     int                 `json:"worker_restarts"`
	RedisRestarts      int                 `json:"redis_restarts"`
	RedisDownMS        float64             `json:"redis_down_ms"`
	WallS              float64             `json:"wall_s"`
	KilledInFlight     int                 `json:"tasks_in_flight_at_kills"`
	RecoverMaxS        float64             `json:"time_to_recover_max_s"`
	RecoverP50S        float64             `json:"time_to_recover_p50_s"`
	Unrecovered        int                 `json:"unrecovered"`
	Attempts           map[int]int         `json:"final_attempts"` // final record's attempt → tasks
	ReRunAfterEnd      int                 `json:"tasks_run_again_after_a_task_end"`
	Lost               int                 `json:"lost"`
	DuplicateManifests int                 `json:"duplicate_manifests"`
	BadPublications    int                 `json:"bad_publications"`
	StagingLeft        int                 `json:"staging_dirs_left"`
	PromotedEvents     map[int]int         `json:"promoted_events_per_promoted_task"` // count → tasks
	ApprovalsAccepted  int                 `json:"approvals_accepted_by_approvers"`
	ApproverConflicts  int                 `json:"approver_conflicts"`
	ApprovalsLost      int                 `json:"approvals_lost"`
	EnqueueRetries     int                 `json:"enqueue_retries"`
	EnqueueDuplicates  int                 `json:"enqueue_duplicates"`
	Leftovers          int                 `json:"leftovers"`
	Sessions           chaosSessionFigures `json:"sessions"`
}

// TestChaos: N tasks (a mix that the policy promotes, that park and a
// concurrent approver accepts, that fail, that complete without output)
// on W real workers, one of which is SIGKILLed at random every few
// seconds and started again, with the Redis server (AOF on) restarted
// once in the middle. Then: every task reaches its final state, nothing is
// published twice (manifests and promoted events counted), no approval is
// lost, and no process of the slots' uids, mount, workspace or cgroup is
// left once the workers stopped. Skipped with -short: a killed worker's
// tasks wait for asynq's lease to expire (about a minute).
func TestChaos(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for asynq's lease expiry (about a minute) after each kill")
	}
	needRoot(t)
	cfg := chaosConfigFromEnv(t)
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1))
	var rngMu sync.Mutex
	random := func() float64 { rngMu.Lock(); defer rngMu.Unlock(); return rng.Float64() }
	t.Logf("chaos: %+v", cfg)

	rs := startOwnRedis(t, true)
	const queue, prefix = "chaos", "chaos:"
	store := t.TempDir()
	f := newFleet(t, fleetConfig{
		url: rs.url(0), queue: queue, prefix: prefix, store: store,
		policy: writePolicy(t, fleetPolicy), workers: cfg.Workers, concurrency: cfg.Concurrency, uidBase: 350000,
		extra: []string{"-sweep-interval", "1s"},
	})
	f.startAll(60 * time.Second)
	rdb, _, err := redisconn.Open(rs.url(0))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: 24 * time.Hour})
	st := approve.NewStore(rdb, approve.Options{Prefix: prefix})
	ac := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	ctx := waitCtx(t, cfg.Duration+cfg.Settle+5*time.Minute)
	fig := chaosFigures{Config: cfg, Kinds: map[string]int{}, Attempts: map[int]int{}, PromotedEvents: map[int]int{}, RedisRestarts: 1}
	begin := time.Now()

	// The producer spreads the tasks over the first three quarters of the
	// kill phase; an enqueue that fails (Redis restarting) is tried again
	// with the same idempotency key.
	ids := make([]string, cfg.Tasks)
	kinds := map[string]string{}
	for i := range ids {
		ids[i] = airlock.IdempotentTaskID(queue, fmt.Sprintf("chaos-%d", i))
		kinds[ids[i]] = fleetKind(i)
		fig.Kinds[fleetKind(i)]++
	}
	var enqRetries, enqDups atomic.Int64
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		spread := cfg.Duration * 3 / 4
		for i := range ids {
			if d := time.Until(begin.Add(spread * time.Duration(i) / time.Duration(len(ids)))); d > 0 {
				time.Sleep(d)
			}
			sleep := fmt.Sprintf("%.1f", 0.2+float64(i*37%14)*0.1) // 0.2 to 1.5 s
			js := fleetSpec(fleetKind(i), i, sleep, fmt.Sprintf(`"run_id": "chaos-%d", "idempotency_key": "chaos-%d", "max_retry": 25,`, i, i))
			for {
				s, err := decodeSpec(js, queue)
				if err != nil {
					t.Errorf("spec %d: %v", i, err)
					break
				}
				e, err := c.Enqueue(ctx, s)
				if err == nil {
					if e.Duplicate {
						enqDups.Add(1)
					}
					if e.TaskID != ids[i] {
						t.Errorf("task %d enqueued as %s, want %s", i, e.TaskID, ids[i])
					}
					break
				}
				if ctx.Err() != nil {
					return
				}
				enqRetries.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()

	// Sessions open and stepping throughout the kill phase.
	stopSessions := make(chan struct{})
	sessionsDone := make(chan []*chaosSession, 1)
	go func() { sessionsDone <- chaosSessions(ctx, t, c, queue, cfg.Sessions, stopSessions) }()

	// Two approvers accept every pending approval, concurrently.
	var accepted, conflicts atomic.Int64
	approversCtx, stopApprovers := context.WithCancel(ctx)
	var approvers sync.WaitGroup
	for a := 0; a < 2; a++ {
		approvers.Add(1)
		go func() {
			defer approvers.Done()
			by := fmt.Sprintf("approver-%d", a)
			for approversCtx.Err() == nil {
				pending, err := st.List(approversCtx, approve.StatePending, 0)
				if err == nil {
					for _, p := range pending {
						_, _, err := approve.Accept(approversCtx, st, ac, p.ID, by, "chaos")
						var de *approve.DecidedError
						switch {
						case err == nil:
							accepted.Add(1)
						case errors.As(err, &de):
							conflicts.Add(1)
						}
					}
				}
				select {
				case <-approversCtx.Done():
				case <-time.After(time.Duration(50+100*random()) * time.Millisecond):
				}
			}
		}()
	}

	// The killer: a random worker every KillEvery on average, started
	// again after a short while; Redis restarted once, in the middle.
	var kills []chaosKill
	var restarts atomic.Int64
	var restarting sync.WaitGroup
	redisAt := begin.Add(cfg.Duration / 2)
	redisDone := false
	for time.Since(begin) < cfg.Duration {
		wait := time.Duration(float64(cfg.KillEvery) * (0.5 + random()))
		if !redisDone && time.Now().Add(wait).After(redisAt) {
			time.Sleep(time.Until(redisAt))
			down := time.Now()
			rs.stop()
			time.Sleep(time.Second)
			if err := rs.start(); err != nil {
				t.Fatalf("restarting redis-server: %v", err)
			}
			fig.RedisDownMS = float64(time.Since(down).Microseconds()) / 1000
			t.Logf("redis-server restarted at %s: down %.0f ms", time.Since(begin).Round(time.Millisecond), fig.RedisDownMS)
			redisDone = true
			continue
		}
		time.Sleep(wait)
		var alive []*member
		for _, m := range f.members {
			if m.current() != nil {
				alive = append(alive, m)
			}
		}
		if len(alive) == 0 {
			continue
		}
		m := alive[int(random()*float64(len(alive)))]
		inc := m.kill()
		if inc == nil {
			continue
		}
		k := chaosKill{at: time.Now(), worker: m.idx, pid: inc.pid()}
		for _, id := range f.inFlight(inc) {
			if _, ok := kinds[id]; ok { // the runs: a session's task lives as long as the session
				k.inFlight = append(k.inFlight, id)
			}
		}
		kills = append(kills, k)
		t.Logf("kill %d at %s: worker %d (pid %d), %d run tasks in flight", len(kills), time.Since(begin).Round(time.Millisecond), m.idx, k.pid, len(k.inFlight))
		restarting.Add(1)
		go func() {
			defer restarting.Done()
			time.Sleep(time.Duration(200+1300*random()) * time.Millisecond)
			// A worker started while Redis restarts exits at once (it
			// cannot subscribe to its queues' wake-ups), as a supervisor
			// would see it: started again, as a supervisor would.
			for try := 0; ; try++ {
				m.start()
				restarts.Add(1)
				if err := m.waitReady(30 * time.Second); err == nil || try >= 10 {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
		}()
	}
	restarting.Wait()
	<-produced
	close(stopSessions)
	sessions := <-sessionsDone
	t.Logf("kill phase over at %s: %d kills; waiting for every task to be final", time.Since(begin).Round(time.Millisecond), len(kills))
	for _, m := range f.members {
		if m.current() == nil { // one that exited by itself
			t.Errorf("worker %d was not running at the end of the kill phase: started again", m.idx)
			m.start()
			restarts.Add(1)
		}
	}

	settleCtx, cancelSettle := context.WithTimeout(ctx, cfg.Settle)
	recs, err := waitFinalAll(settleCtx, c, queue, ids, nil)
	// The sessions are read, then deleted: a session idle past its
	// pause_after waits, paused, in asynq's retry set.
	fig.Sessions = checkChaosSessions(ctx, t, c, queue, sessions)
	t.Logf("chaos sessions: %+v", fig.Sessions)
	if err == nil {
		err = waitSettled(settleCtx, insp, queue)
	}
	cancelSettle()
	fig.WallS = time.Since(begin).Seconds()
	stopApprovers()
	approvers.Wait()
	if err != nil {
		fig.Lost = cfg.Tasks - len(recs)
		t.Errorf("after %s: %v", time.Since(begin).Round(time.Second), err)
	}
	f.stopAll(30 * time.Second)

	fig.Kills, fig.WorkerRestarts = len(kills), int(restarts.Load())
	fig.EnqueueRetries, fig.EnqueueDuplicates = int(enqRetries.Load()), int(enqDups.Load())
	fig.ApprovalsAccepted, fig.ApproverConflicts = int(accepted.Load()), int(conflicts.Load())

	// Every task in its final state, at its kind's.
	want := map[string]record.State{"promote": record.StatePromoted, "park": record.StatePromoted, "fail": record.StateFailed, "complete": record.StateCompleted}
	for _, id := range ids {
		rec, ok := recs[id]
		if !ok {
			continue
		}
		fig.Attempts[rec.Attempt]++
		bad := rec.State != want[kinds[id]]
		switch kinds[id] {
		case "fail":
			bad = bad || rec.Verdict != record.VerdictExit
		case "park":
			bad = bad || !strings.HasPrefix(rec.DecidedBy, "approver-")
		case "promote":
			bad = bad || rec.DecidedBy != "policy:default"
		}
		if bad {
			fig.Lost++
			t.Errorf("task %s (%s): state %s verdict %s decided by %q attempt %d: %s", id, kinds[id], rec.State, rec.Verdict, rec.DecidedBy, rec.Attempt, rec.Error)
		}
	}

	// Published once, whole; promoted events.
	pubs, staging := publications(t, store)
	fig.StagingLeft = len(staging)
	promotedEvents := eventCounts(t, rdb, prefix, record.StatePromoted)
	evs := readEvents(t, rdb, prefix)
	for _, id := range ids {
		wantPubs := 0
		if want[kinds[id]] == record.StatePromoted {
			wantPubs = 1
			fig.PromotedEvents[promotedEvents[id]]++
			if promotedEvents[id] != 1 {
				t.Logf("task %s (%s): %d promoted events; its events and log lines:\n%s", id, kinds[id], promotedEvents[id], f.story(id, evs))
			}
		} else if promotedEvents[id] > 0 {
			t.Errorf("task %s (%s): %d promoted events", id, kinds[id], promotedEvents[id])
		}
		manifests := 0
		for _, p := range pubs[id] {
			if p.manifest.TaskID != "" {
				manifests++
			}
		}
		fig.DuplicateManifests += max(0, manifests-1)
		if len(pubs[id]) != wantPubs || manifests != wantPubs {
			t.Errorf("task %s (%s): %d task directories, %d manifests in the store, want %d", id, kinds[id], len(pubs[id]), manifests, wantPubs)
		}
		for _, p := range pubs[id] {
			if rec := recs[id]; len(p.problems) > 0 || rec != nil && p.manifest.ApprovalID != rec.ApprovalID {
				fig.BadPublications++
				t.Errorf("task %s: publication %s: %v", id, p.dir, p.problems)
			}
		}
	}
	for id := range pubs {
		if _, ok := kinds[id]; !ok {
			t.Errorf("a publication of unknown task %s", id)
		}
	}

	// No approval lost: every run that parked or was promoted has its
	// approval, decided and published; there is no other.
	all, err := st.List(ctx, approve.StateAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	byTask := map[string][]*approve.Approval{}
	for _, a := range all {
		byTask[a.TaskID] = append(byTask[a.TaskID], a)
	}
	for _, id := range ids {
		if want[kinds[id]] != record.StatePromoted {
			if len(byTask[id]) > 0 {
				t.Errorf("task %s (%s) has approvals", id, kinds[id])
			}
			continue
		}
		if len(byTask[id]) != 1 {
			fig.ApprovalsLost++
			t.Errorf("task %s (%s): %d approvals, want 1", id, kinds[id], len(byTask[id]))
			continue
		}
		a, err := st.Get(ctx, byTask[id][0].ID)
		if err != nil || a.State != approve.StateAccepted || a.PromotedAt.IsZero() {
			fig.ApprovalsLost++
			t.Errorf("task %s (%s): approval %+v, %v: want accepted and promoted", id, kinds[id], a, err)
		}
	}

	// How the runs went: attempts, re-runs, recovery after each kill.
	entries := f.journal.snapshot()
	ends := map[string][]time.Time{}
	for _, e := range entries {
		if e.msg == "task end" {
			ends[e.taskID] = append(ends[e.taskID], e.at)
		}
	}
	for _, id := range ids {
		if len(ends[id]) > 1 {
			fig.ReRunAfterEnd++
		}
	}
	var recovers []float64
	for _, k := range kills {
		fig.KilledInFlight += len(k.inFlight)
		for _, id := range k.inFlight {
			var got time.Time
			for _, at := range ends[id] {
				if at.After(k.at) {
					got = at
					break
				}
			}
			if got.IsZero() {
				fig.Unrecovered++
				t.Errorf("task %s, in flight on worker %d when it was killed, never ended after", id, k.worker)
				continue
			}
			recovers = append(recovers, got.Sub(k.at).Seconds())
		}
	}
	if len(recovers) > 0 {
		sort.Float64s(recovers)
		fig.RecoverMaxS, fig.RecoverP50S = recovers[len(recovers)-1], recovers[len(recovers)/2]
	}

	left := f.leftovers()
	fig.Leftovers = len(left)
	if len(left) > 0 {
		t.Errorf("left behind after the workers stopped:\n%s", strings.Join(left, "\n"))
	}

	b, _ := json.MarshalIndent(fig, "", "  ")
	t.Logf("chaos figures:\n%s", b)
	t.Logf("tasks %d (%v), kills %d, worker restarts %d, Redis restarts %d (down %.1f s), wall %.1f s, "+
		"time to recover max %.1f s (p50 %.1f s, %d tasks in flight at the kills), lost %d, duplicates %d, approvals lost %d, leftovers %d",
		cfg.Tasks, fig.Kinds, fig.Kills, fig.WorkerRestarts, fig.RedisRestarts, fig.RedisDownMS/1000, fig.WallS,
		fig.RecoverMaxS, fig.RecoverP50S, fig.KilledInFlight, fig.Lost, fig.DuplicateManifests, fig.ApprovalsLost, fig.Leftovers)
	if p := os.Getenv("AIRLOCK_CHAOS_REPORT"); p != "" {
		if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
			t.Errorf("$AIRLOCK_CHAOS_REPORT: %v", err)
		}
	}
}
