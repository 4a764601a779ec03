//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/frontend/httpapi"
	refusedrec "github.com/airlock-run/airlock/internal/redis/refused"
	"github.com/airlock-run/airlock/record"
)

// TestRefusedOpensLeaveNothing (issue 31, part 4): a session open refused
// for -max-sessions leaves its record and nothing of its spec. On a
// redis-server of the test's own, a worker with -max-sessions 1 holds one
// session; 200 opens of 0.9 MB each through the real api binary are
// answered 429 with Retry-After at once; Redis grows by under 200 KiB in
// all (its used_memory, and its keys' MEMORY USAGE); asynq keeps none of
// their tasks; and each refused run still reads as failed, verdict
// session_limit, with its reason (Client.Status, Client.Wait, GET
// /v1/runs/{id}, Client.Result, Client.Cancel). Before: 184 MB (asynq
// archived each task with its spec, for 90 days).
func TestRefusedOpensLeaveNothing(t *testing.T) {
	needRoot(t)
	own := startOwnRedis(t, false)
	b := newBundle(t)
	b.url = own.url(0)
	opt, err := redis.ParseURL(b.url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Retention: time.Hour})
	b.worker = b.startWorker("-concurrency", "2", "-max-sessions", "1")
	api := newAPIClient(t, startAPI(t, b))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var held struct {
		SessionID string `json:"session_id"`
	}
	api.json("POST", "/v1/sessions", apiAgent, fmt.Sprintf(`{"version":1,"queue":%q,"timeout":"4m","session":{"idle_timeout":"4m"}}`, b.queue), 201, &held)
	t.Cleanup(func() { api.do("DELETE", "/v1/sessions/"+held.SessionID, apiAgent, nil, nil) })

	const opens, size = 200, 900_000
	big := []byte(fmt.Sprintf(`{"version":1,"queue":%q,"timeout":"30s","session":{},"files":{"in/big":%q}}`, b.queue, strings.Repeat("x", size)))
	// attack sends n opens, 4 at a time; each must be refused at once.
	attack := func(n int) time.Duration {
		t0 := time.Now()
		jobs := make(chan struct{})
		var wg sync.WaitGroup
		var once sync.Once
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Timeout: time.Minute}
				for range jobs {
					st, ra, typ := openRaw(ctx, t, c, api.base, big)
					if n, err := strconv.Atoi(ra); st != 429 || err != nil || n <= 0 || typ != httpapi.ProblemNoRoom {
						once.Do(func() { t.Errorf("an open past -max-sessions: %d, Retry-After %q, type %q", st, ra, typ) })
					}
				}
			}()
		}
		for range n {
			jobs <- struct{}{}
		}
		close(jobs)
		wg.Wait()
		return time.Since(t0)
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	// tasks is how many tasks asynq holds of the queue (archived the
	// archived ones); the held session's task alone once the refused
	// ones are gone.
	tasks := func() (n, archived int) {
		qi, err := insp.GetQueueInfo(b.queue)
		if err != nil {
			return -1, -1
		}
		return qi.Pending + qi.Active + qi.Scheduled + qi.Retry + qi.Archived + qi.Completed + qi.Aggregating, qi.Archived
	}
	// settle waits until the worker logged n refusals and asynq is done
	// with their tasks, then for asynq's next heartbeat (every 5 s), which
	// rewrites the list of tasks in progress, payloads and all.
	settle := func(n int) {
		t.Helper()
		if !eventually(time.Minute, func() bool { return len(refusedIDs(b)) == n }) {
			t.Fatalf("the worker logged %d refusals, want %d", len(refusedIDs(b)), n)
		}
		eventually(10*time.Second, func() bool { n, _ := tasks(); return n == 1 })
		time.Sleep(6 * time.Second)
	}
	// What Redis allocates once (scripts, buffers for the first large
	// arguments, dictionaries that grow) comes before the measure: 150
	// refused opens (with 50, about 45 KiB more comes during the measure,
	// and does not grow with the opens: with 600, 20 KiB).
	const warm = 150
	attack(warm)
	settle(warm)
	usedBefore, keysBefore := redisMemory(ctx, t, rdb)

	took := attack(opens)
	if t.Failed() {
		t.FailNow()
	}
	settle(warm + opens)
	n, archived := tasks()
	t.Logf("asynq holds %d tasks of the queue (%d archived) after %d refusals: the held session's", n, archived, warm+opens)
	if n != 1 || archived != 0 {
		t.Errorf("HOLE: asynq holds %d tasks of the queue, %d archived, want only the held session's", n, archived)
	}
	const bound = 200 << 10
	var usedAfter, keysAfter int64
	eventually(15*time.Second, func() bool {
		usedAfter, keysAfter = redisMemory(ctx, t, rdb)
		return usedAfter-usedBefore < bound && keysAfter-keysBefore < bound
	})
	t.Logf("%d refused opens of %d bytes in %s: Redis used_memory %d → %d (%+d bytes, %d per open); its keys %d → %d (%+d bytes, %d per open)",
		opens, size, took.Round(time.Millisecond), usedBefore, usedAfter, usedAfter-usedBefore, (usedAfter-usedBefore)/opens,
		keysBefore, keysAfter, keysAfter-keysBefore, (keysAfter-keysBefore)/opens)
	if usedAfter-usedBefore >= bound || keysAfter-keysBefore >= bound {
		logKeyGroups(ctx, t, rdb)
		t.Errorf("HOLE: %d refused opens grew Redis by %d bytes (its keys by %d), want under %d", opens, usedAfter-usedBefore, keysAfter-keysBefore, bound)
	}

	// Each refused run still says why, wherever it is read, and asynq
	// keeps nothing of its spec.
	kept := 0
	for i, id := range refusedIDs(b) {
		if ti, err := insp.GetTaskInfo(b.queue, id); err == nil && kept < 3 {
			kept++
			t.Errorf("HOLE: refused task %s is %s in asynq, with its payload of %d bytes", id, ti.State, len(ti.Payload))
		}
		if i%50 != 0 {
			continue
		}
		want := func(what string, rec *record.Run, err error) {
			t.Helper()
			if err != nil || rec.State != record.StateFailed || rec.Verdict != record.VerdictSessionLimit ||
				!strings.Contains(rec.Error, "-max-sessions 1") || rec.TaskID != id || rec.Queue != b.queue ||
				rec.Principal != "agent" || rec.Session == nil || rec.Session.Ended != "session_limit" {
				t.Errorf("%s of refused task %s: %+v, %v", what, id, rec, err)
			}
		}
		rec, err := b.client.Status(ctx, b.queue, id)
		want("Client.Status", rec, err)
		rec, err = b.client.Wait(ctx, b.queue, id)
		want("Client.Wait", rec, err)
		var got record.Run
		api.json("GET", "/v1/runs/"+id, apiAgent, nil, 200, &got)
		want("GET /v1/runs/{id}", &got, nil)
		if _, err := b.client.Result(ctx, id); !errors.Is(err, airlock.ErrNotPromoted) || !strings.Contains(err.Error(), "-max-sessions 1") {
			t.Errorf("Client.Result of refused task %s: %v, want ErrNotPromoted with its reason", id, err)
		}
		if _, err := b.client.Cancel(ctx, b.queue, id); !errors.Is(err, airlock.ErrFinal) {
			t.Errorf("Client.Cancel of refused task %s: %v, want ErrFinal", id, err)
		}
		if n, _ := rdb.HStrLen(ctx, refusedrec.Key("", b.queue), id).Result(); n == 0 || n > 400 {
			t.Errorf("the stored record of refused task %s: %d bytes, want a small one", id, n)
		} else if i == 0 {
			t.Logf("the stored record of a refused open: %d bytes", n)
		}
	}
}

// openRaw sends POST /v1/sessions with body as the agent, and returns the
// answer's status, Retry-After and problem type.
func openRaw(ctx context.Context, t *testing.T, c *http.Client, base string, body []byte) (int, string, string) {
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/sessions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiAgent)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		t.Error(err)
		return 0, "", ""
	}
	defer res.Body.Close()
	var p struct {
		Type string `json:"type"`
	}
	_ = json.NewDecoder(res.Body).Decode(&p)
	return res.StatusCode, res.Header.Get("Retry-After"), p.Type
}

// refusedIDs are the task ids of the session opens b's worker refused for
// its -max-sessions, as its log says.
func refusedIDs(b *bundle) []string {
	var ids []string
	for _, l := range strings.Split(b.worker.logs.String(), "\n") {
		var e struct {
			Message string `json:"message"`
			TaskID  string `json:"task_id"`
			Verdict string `json:"verdict"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && e.Message == "task end" && e.Verdict == string(record.VerdictSessionLimit) {
			ids = append(ids, e.TaskID)
		}
	}
	return ids
}

// redisMemory returns what a Redis of a test's own holds: its used_memory
// (INFO memory), and the sum of its keys' MEMORY USAGE.
func redisMemory(ctx context.Context, t *testing.T, rdb *redis.Client) (used, keys int64) {
	t.Helper()
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		n, err := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		if err == nil {
			keys += n
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return used, keys
}

// logKeyGroups logs the keys of a Redis of a test's own by shape (ids
// replaced by *): how many, and their MEMORY USAGE.
func logKeyGroups(ctx context.Context, t *testing.T, rdb *redis.Client) {
	t.Helper()
	id := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{16,}`)
	type group struct{ n, bytes int64 }
	groups := map[string]*group{}
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := id.ReplaceAllString(iter.Val(), "*")
		if groups[k] == nil {
			groups[k] = &group{}
		}
		n, _ := rdb.MemoryUsage(ctx, iter.Val(), 0).Result()
		groups[k].n++
		groups[k].bytes += n
	}
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		t.Logf("keys %s: %d, %d bytes", k, groups[k].n, groups[k].bytes)
	}
}
