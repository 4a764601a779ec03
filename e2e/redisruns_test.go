//go:build linux

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// Commands one run costs Redis end to end through the Go client on one
// queue (Enqueue, the worker's run, Wait), as Redis executes them (a
// script's own commands counted, asynq's included) and as clients send
// them (a script is one). A change that adds a round trip to the
// per-run path fails here; lower the bounds when a change removes some.
// Bare asynq executes 20 for a task with its result kept (enqueue 4,
// dequeue 7, the result 1, the completion 8): see BENCHMARKS.md.
var perRunBounds = map[string]struct{ executed, sent float64 }{
	"trivial":      {41, 13},
	"promoted":     {66, 23},
	"API trivial":  {43, 15},
	"API promoted": {68, 25},
}

// TestRedisCommandsPerRun counts, on a redis-server of its own that only
// this test uses, the commands of one trivial run (`true`, no output) and
// of one promoted run (a JSON result, the policy's default: promote),
// through the Go client and through the api binary (POST /v1/runs, then
// GET /v1/runs/{task_id}?wait=30s as docs/http-api.md shows), each the
// mean of 10 runs one after the other on one worker of two slots after a
// first run of its kind (which loads the scripts), the least of three such
// batches; the worker's idle commands over the same time (its rate
// measured before) are taken out. It fails above perRunBounds.
func TestRedisCommandsPerRun(t *testing.T) {
	t.Parallel()
	needRoot(t)
	rs := startOwnRedis(t, false)
	const queue, prefix, n = "perrun", "perrun:", 10
	f := newFleet(t, fleetConfig{
		url: rs.url(0), queue: queue, prefix: prefix, store: t.TempDir(),
		policy: writePolicy(t, `{"default": "promote"}`), workers: 1, concurrency: 2, uidBase: 352000, clientNames: true,
	})
	mon := startCmdCounter(t, rs.port)
	f.startAll(30 * time.Second)
	_, c := fleetClient(t, rs.url(0), prefix)
	ctx := waitCtx(t, 3*time.Minute)
	specs := map[string]string{
		"trivial":  `{"version": 1, "steps": [{"name": "t", "run": ["true"]}]}`,
		"promoted": `{"version": 1, "steps": [{"name": "t", "run": ["sh", "-c", "printf '{\"total\": 3}' > out/result.json"]}], "output": {"result": "out/result.json", "schema": {"type": "object"}}}`,
	}
	want := map[string]record.State{"trivial": record.StateCompleted, "promoted": record.StatePromoted}
	api := startAPI(t, &bundle{t: t, url: rs.url(0) + "?client_name=fleet-client", queue: queue}, "-prefix", prefix)
	run := func(kind string) {
		t.Helper()
		if k, ok := strings.CutPrefix(kind, "API "); ok {
			runAPI(t, api, queue, specs[k], want[k])
			return
		}
		s, err := decodeSpec(specs[kind], queue)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Enqueue(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := c.Wait(ctx, queue, e.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != want[kind] {
			t.Fatalf("%s run: state %s (%s), want %s", kind, rec.State, rec.Error, want[kind])
		}
	}
	for _, kind := range []string{"trivial", "promoted", "API trivial", "API promoted"} {
		run(kind) // loads the scripts, adds the queue
		time.Sleep(time.Second)
		i0, at := mon.snapshot(), time.Now()
		time.Sleep(2 * time.Second)
		idle := float64(mon.snapshot().sub(i0).total("workers")+mon.snapshot().sub(i0).total("lua")) / time.Since(at).Seconds()
		// Three batches: periodic work (asynq's heartbeat, the sweeps)
		// only adds, so the batch with least is the runs' own.
		var perExec, perSent float64
		var d cmdSnapshot
		var secs float64
		for batch := range 3 {
			s0, start := mon.snapshot(), time.Now()
			for range n {
				run(kind)
			}
			time.Sleep(300 * time.Millisecond) // asynq marks the last task done after Wait returns
			bd := mon.snapshot().sub(s0)
			bsecs := time.Since(start).Seconds()
			sent := float64(bd.total("workers")+bd.total("client")) - idle*bsecs
			executed := sent + float64(bd.total("lua"))
			if batch == 0 || executed/n < perExec {
				perSent, perExec, d, secs = sent/n, executed/n, bd, bsecs
			}
		}
		b := perRunBounds[kind]
		t.Logf("%s run: %.1f commands executed (%.1f sent) per run; idle %.1f/s taken out over %.1fs; client: %s; workers: %s; in scripts: %s",
			kind, perExec, perSent, idle, secs, d.top("client", n, 12), d.top("workers", n, 12), d.top("lua", n, 20))
		if perExec > b.executed || perSent > b.sent {
			t.Errorf("%s run: %.1f commands executed, %.1f sent per run; bounds %v and %v: a change added round trips (see the breakdown above)",
				kind, perExec, perSent, b.executed, b.sent)
		}
	}
	f.stopAll(20 * time.Second)
}

// runAPI enqueues spec in queue through the API at base, as the agent
// token, and waits for its record as docs/http-api.md shows (GET
// /v1/runs/{task_id}?wait=30s): its state must be want.
func runAPI(t *testing.T, base, queue, spec string, want record.State) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(spec), &m); err != nil {
		t.Fatal(err)
	}
	m["queue"] = queue
	body, _ := json.Marshal(m)
	call := func(method, url string, body []byte, wantCode int, v any) {
		t.Helper()
		req, _ := http.NewRequest(method, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiAgent)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != wantCode {
			t.Fatalf("%s %s: %d %s", method, url, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatal(err)
		}
	}
	var e struct {
		TaskID string `json:"task_id"`
	}
	call("POST", base+"/v1/runs", body, http.StatusCreated, &e)
	var rec record.Run
	call("GET", base+"/v1/runs/"+e.TaskID+"?wait=30s", nil, http.StatusOK, &rec)
	if rec.State != want {
		t.Fatalf("API run: state %s (%s), want %s", rec.State, rec.Error, want)
	}
}
