//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// Issue 31's quotas per principal and fair share, each round-4 attack
// replayed against the real worker, api and mcp binaries on a key prefix
// of the test's own: the figures are logged (t.Logf) for the closing
// note, and asserted.

// quotaToken is the bearer token of name in these tests.
func quotaToken(name string) string { return "quota-" + name + "-token-e2e-0123456789" }

// quotaTokens writes a token file: each name with the scopes
// runs:write,runs:read and its quotaToken.
func quotaTokens(t *testing.T, names ...string) string {
	t.Helper()
	var lines []string
	for _, n := range names {
		lines = append(lines, n+" runs:write,runs:read "+httpapi.HashToken(quotaToken(n)))
	}
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// quotaSetup gives a test a worker whose -policy is pol, on its own queue
// and key prefix (every key under it deleted at the end), with the
// bundle's client on that prefix.
func quotaSetup(t *testing.T, pol string, flags ...string) (*bundle, string) {
	t.Helper()
	needRoot(t)
	b := newBundle(t)
	prefix, _ := approvetest.Prefix(t)
	b.client = airlock.NewClient(redistest.Client(t), airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	t.Cleanup(func() { b.client.Close() })
	b.worker = b.startWorker(append([]string{"-prefix", prefix, "-policy", writePolicy(t, pol)}, flags...)...)
	return b, prefix
}

// pct is the q-quantile of ds (nearest rank): pct(ds, 0.99) of 100
// samples is the 99th smallest.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// fdCount is what a process's descriptors are: in all, TCP connections
// from its clients (to its listening port) and to Redis.
type fdCount struct{ all, clients, redis int }

func (c fdCount) String() string {
	return fmt.Sprintf("%d (%d client connections, %d to Redis)", c.all, c.clients, c.redis)
}

// fdsOf counts process pid's descriptors: its TCP sockets by their ports
// (/proc/PID/net/tcp{,6}), listen its listening port, redisPort Redis's.
func fdsOf(t *testing.T, pid, listen, redisPort int) fdCount {
	t.Helper()
	type ends struct{ local, remote int }
	socks := map[string]ends{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 {
				continue
			}
			port := func(addr string) int {
				_, hex, _ := strings.Cut(addr, ":")
				n, _ := strconv.ParseInt(hex, 16, 32)
				return int(n)
			}
			socks["socket:["+fs[9]+"]"] = ends{port(fs[1]), port(fs[2])}
		}
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := fdCount{all: len(ents)}
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join(dir, e.Name()))
		switch s, ok := socks[l]; {
		case !ok:
		case s.local == listen && s.remote != 0:
			c.clients++
		case s.remote == redisPort:
			c.redis++
		}
	}
	return c
}

// taskKeys counts the asynq task hashes of queue (asynq:{q}:t:*).
func taskKeys(t *testing.T, rdb redis.UniversalClient, queue string) int {
	t.Helper()
	n := 0
	iter := rdb.Scan(context.Background(), 0, "asynq:{"+queue+"}:t:*", 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// quotaProblem decodes a 429 quota answer, and checks it is one: the
// problem type, Retry-After in (0, maxAfter] seconds, the quota and its
// limit. It returns the Retry-After.
func quotaProblem(t *testing.T, what string, status int, h http.Header, body []byte, quota string, limit int64, maxAfter int) int {
	t.Helper()
	var p httpapi.Problem
	after, aerr := strconv.Atoi(h.Get("Retry-After"))
	if status != http.StatusTooManyRequests || json.Unmarshal(body, &p) != nil || p.Type != httpapi.ProblemQuota ||
		p.Quota != quota || p.Limit != limit || aerr != nil || after < 1 || after > maxAfter || !strings.Contains(p.Detail, "quota "+quota) {
		t.Errorf("%s: %d Retry-After %q %s\nwant 429 %s, quota %s, limit %d, Retry-After 1-%d",
			what, status, h.Get("Retry-After"), body, httpapi.ProblemQuota, quota, limit, maxAfter)
	}
	return after
}

// TestQuotaPendingBytes replays round 4's "one tenant fills the approval
// queue for everyone": -max-pending-bytes was one pool, and token agent's
// parked runs held 67,108,853 of its 67,108,864 bytes, so that every park
// of token agent2 failed pending_limit. Now agent's quota max_pending_bytes
// (1MiB) fills first: agent's next park fails pending_limit, its error
// naming the quota, while agent2 still parks under the same global bound
// (4MiB); a decision on one of agent's gives it room again.
func TestQuotaPendingBytes(t *testing.T) {
	t.Parallel()
	const quota, global, artifact = 1 << 20, 4 << 20, 300_000
	b, prefix := quotaSetup(t, `{"default": "promote", "quotas": {"agent": {"max_pending_bytes": "1MiB"}}}`,
		"-max-pending-bytes", "4MiB", "-max-artifact-bytes", "2MiB", "-max-staged-bytes", "2MiB")
	api := newAPIClient(t, startAPI(t, b, "-prefix", prefix, "-tokens", quotaTokens(t, "agent", "agent2")))
	store := approve.NewStore(redistest.Client(t), approve.Options{Prefix: prefix})
	ctx := context.Background()
	spec := fmt.Sprintf(`{"version": 1, "queue": %q, "approval": "always",
		"steps": [{"run": ["sh", "-c", "head -c %d /dev/zero | tr '\\0' x > out/big.txt"]}],
		"output": {"artifacts": ["out/big.txt"]}}`, b.queue, artifact)
	park := func(who string) record.Run {
		t.Helper()
		var en httpapi.Enqueued
		api.json("POST", "/v1/runs", quotaToken(who), spec, 201, &en)
		var rec record.Run
		api.json("GET", "/v1/runs/"+en.TaskID+"?wait=2m&queue="+b.queue, quotaToken(who), nil, 200, &rec)
		return rec
	}
	held := func(who string) int64 {
		t.Helper()
		n, err := store.PrincipalPendingBytes(ctx, who)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// agent parks until its quota is full, then twice more.
	var agentParked []string
	var refused []record.Run
	for i := 0; len(refused) < 2 && i < 10; i++ {
		rec := park("agent")
		switch {
		case rec.State == record.StateParked && rec.ApprovalID != "":
			agentParked = append(agentParked, rec.ApprovalID)
		case rec.State == record.StateFailed && rec.Verdict == record.VerdictPendingLimit:
			refused = append(refused, rec)
		default:
			t.Fatalf("agent's park %d: want parked or failed pending_limit:\n%s", i, mustJSON(t, rec))
		}
	}
	agentHeld := held("agent")
	total, err := store.PendingBytes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent (max_pending_bytes 1MiB = %d, global -max-pending-bytes %d): %d parks of %d bytes held, %d bytes held; then %d parks refused; fleet total %d bytes",
		quota, global, len(agentParked), artifact, agentHeld, len(refused), total)
	if want := quota / artifact; len(agentParked) != want || len(refused) != 2 {
		t.Errorf("agent parked %d runs of %d bytes under its 1MiB quota, then %d refused: want %d parked, then refused", len(agentParked), artifact, len(refused), want)
	}
	if agentHeld < int64(len(agentParked))*artifact || agentHeld > quota {
		t.Errorf("agent holds %d bytes: want at least its %d parks' artifacts, at most its quota %d", agentHeld, len(agentParked), quota)
	}
	for _, rec := range refused {
		if !strings.HasPrefix(rec.Error, "quota max_pending_bytes") || rec.ApprovalID != "" || !strings.Contains(rec.Error, `"agent"`) {
			t.Errorf("agent's park past its quota: want failed pending_limit, error starting \"quota max_pending_bytes\" naming agent, no approval:\n%s", mustJSON(t, rec))
		}
	}
	if len(refused) > 0 {
		t.Logf("agent's refused park: %s", refused[0].Error)
	}

	// agent2 still parks: the same number of runs, under the same global bound.
	for i := range len(agentParked) {
		if rec := park("agent2"); rec.State != record.StateParked || rec.ApprovalID == "" {
			t.Fatalf("HOLE: agent2's park %d after agent filled its quota: want parked:\n%s", i, mustJSON(t, rec))
		}
	}
	total, _ = store.PendingBytes(ctx)
	t.Logf("agent2 then parked %d runs: it holds %d bytes, agent %d, the fleet %d of its %d", len(agentParked), held("agent2"), held("agent"), total, global)

	// A decision on one of agent's makes room for agent again.
	if code, out, errOut := b.runBin(bin.approve, "", "-prefix", prefix, "reject", agentParked[0], "-by", "alice", "-comment", "too big"); code != 0 {
		t.Fatalf("reject: exit %d %s%s", code, out, errOut)
	}
	if rec := park("agent"); rec.State != record.StateParked {
		t.Errorf("agent's park after a rejection made room: want parked:\n%s", mustJSON(t, rec))
	}
	t.Logf("after one rejection agent parks again: it holds %d bytes", held("agent"))
}

// TestQuotaAdmission refuses at admission, through every front end, what
// a principal's quota does not allow (before: no quota existed): through
// the API, max_queued and runs_per_minute answer POST /v1/runs 429 with
// Retry-After and the quota's name and limit, max_sessions answers POST
// /v1/sessions; the enqueue CLI exits 2 naming the quota; the MCP server
// (-principal agent) answers run_action with a tool error naming it.
// Another principal is not refused meanwhile, and a refused run leaves no
// task in Redis (its Idempotency-Key enqueues afresh later).
func TestQuotaAdmission(t *testing.T) {
	t.Parallel()
	b, prefix := quotaSetup(t, `{"default": "promote", "quotas": {
		"agent": {"max_queued": 2, "max_active": 1},
		"burst": {"runs_per_minute": 5},
		"opener": {"max_sessions": 1}}}`, "-concurrency", "3")
	api := newAPIClient(t, startAPI(t, b, "-prefix", prefix, "-tokens", quotaTokens(t, "agent", "burst", "opener", "other")))
	rdb := redistest.Client(t)
	runSpec := func(cmd string) string {
		return fmt.Sprintf(`{"version": 1, "queue": %q, "timeout": "2m", "steps": [{"run": ["sh", "-c", %q]}]}`, b.queue, cmd)
	}
	post := func(who, spec string, key string) (int, http.Header, []byte, httpapi.Enqueued) {
		t.Helper()
		var hdr map[string]string
		if key != "" {
			hdr = map[string]string{"Idempotency-Key": key}
		}
		status, h, body := api.do("POST", "/v1/runs", quotaToken(who), spec, hdr)
		var en httpapi.Enqueued
		_ = json.Unmarshal(body, &en)
		return status, h, body, en
	}
	runState := func(who, id string) record.State {
		t.Helper()
		var rec record.Run
		api.json("GET", "/v1/runs/"+id+"?queue="+b.queue, quotaToken(who), nil, 200, &rec)
		return rec.State
	}

	// max_queued 2 (with max_active 1): one run of agent's runs, two wait,
	// the next is refused.
	status, _, body, first := post("agent", runSpec("sleep 60"), "")
	if status != 201 {
		t.Fatalf("agent's first run: %d %s", status, body)
	}
	if !eventually(30*time.Second, func() bool { return runState("agent", first.TaskID) == "active" }) {
		t.Fatalf("agent's first run is not running: %s", runState("agent", first.TaskID))
	}
	var queued []string
	for i := range 2 {
		status, _, body, en := post("agent", runSpec("true"), "")
		if status != 201 {
			t.Fatalf("agent's queued run %d: %d %s", i, status, body)
		}
		queued = append(queued, en.TaskID)
	}
	keysBefore := taskKeys(t, rdb, b.queue)
	key := "quota-refused-" + b.queue
	status, h, body, _ := post("agent", runSpec("true"), key)
	after := quotaProblem(t, "agent's third queued run (POST /v1/runs)", status, h, body, "max_queued", 2, 60)
	t.Logf("max_queued 2: agent's third queued run: %d Retry-After %d: %s", status, after, body)
	refusedID := airlock.IdempotentTaskIDFor(b.queue, "agent", key)
	if n, err := rdb.Exists(context.Background(), "asynq:{"+b.queue+"}:t:"+refusedID).Result(); err != nil || n != 0 {
		t.Errorf("HOLE: the refused run's task %s is in Redis (%d, %v)", refusedID, n, err)
	}
	code, stdout, stderr := b.enqueueCLI(runSpec("true"), "-prefix", prefix, "-principal", "agent", "-queue", b.queue, "-")
	t.Logf("enqueue -principal agent: exit %d, stderr %s", code, strings.TrimSpace(stderr))
	if code != 2 || !strings.Contains(stderr, "quota max_queued") || !strings.Contains(stderr, `"agent"`) || stdout != "" {
		t.Errorf("enqueue -principal agent past max_queued: exit %d, stdout %q, stderr %q; want exit 2 naming quota max_queued", code, stdout, stderr)
	}
	cs := mcpStdio(t, b, "-prefix", prefix, "-principal", "agent")
	e := call(t, cs, "run_action", `{"command": "true"}`, true).err(t)
	t.Logf("mcp -principal agent run_action: tool error %q", e.Error)
	if !strings.Contains(e.Error, "quota max_queued") {
		t.Errorf("mcp run_action past agent's max_queued: %q, want a tool error naming quota max_queued", e.Error)
	}
	if n := taskKeys(t, rdb, b.queue); n != keysBefore {
		t.Errorf("HOLE: refused runs left tasks in Redis: %d task keys, %d before the refusals", n, keysBefore)
	}

	// Another principal is not refused, and its runs run beside agent's.
	var others []string
	for i := range 3 {
		status, _, body, en := post("other", runSpec("true"), "")
		if status != 201 {
			t.Errorf("HOLE: other's run %d while agent is refused: %d %s", i, status, body)
			continue
		}
		others = append(others, en.TaskID)
	}
	for _, id := range others {
		var rec record.Run
		api.json("GET", "/v1/runs/"+id+"?wait=1m&queue="+b.queue, quotaToken("other"), nil, 200, &rec)
		if rec.State != record.StateCompleted {
			t.Errorf("other's run: want completed:\n%s", mustJSON(t, rec))
		}
	}
	t.Logf("other (no quota): %d runs admitted and completed while agent was refused", len(others))

	// runs_per_minute 5: the sixth run within the minute is refused.
	var burst []string
	for i := range 5 {
		status, _, body, en := post("burst", runSpec("true"), "")
		if status != 201 {
			t.Fatalf("burst's run %d of 5: %d %s", i, status, body)
		}
		burst = append(burst, en.TaskID)
	}
	keysBefore = taskKeys(t, rdb, b.queue)
	status, h, body, _ = post("burst", runSpec("true"), "")
	after = quotaProblem(t, "burst's sixth run in a minute", status, h, body, "runs_per_minute", 5, 120)
	t.Logf("runs_per_minute 5: burst's sixth run: %d Retry-After %d: %s", status, after, body)
	code, _, stderr = b.enqueueCLI(runSpec("true"), "-prefix", prefix, "-principal", "burst", "-queue", b.queue, "-")
	if code != 2 || !strings.Contains(stderr, "quota runs_per_minute") {
		t.Errorf("enqueue -principal burst past runs_per_minute: exit %d, stderr %q; want exit 2 naming quota runs_per_minute", code, stderr)
	}
	if n := taskKeys(t, rdb, b.queue); n != keysBefore {
		t.Errorf("HOLE: refused runs left tasks in Redis: %d task keys, %d before", n, keysBefore)
	}

	// max_sessions 1: a second open session is refused; once the first
	// is closed, one opens again.
	open := func() (int, http.Header, []byte, httpapi.SessionOpened) {
		t.Helper()
		status, h, body := api.do("POST", "/v1/sessions", quotaToken("opener"),
			map[string]any{"version": 1, "queue": b.queue, "timeout": "2m", "session": map[string]any{"idle_timeout": "60s"}}, nil)
		var o httpapi.SessionOpened
		_ = json.Unmarshal(body, &o)
		return status, h, body, o
	}
	status, _, body, s1 := open()
	if status != 201 {
		t.Fatalf("opener's first session: %d %s", status, body)
	}
	keysBefore = taskKeys(t, rdb, b.queue)
	status, h, body, _ = open()
	after = quotaProblem(t, "opener's second session (POST /v1/sessions)", status, h, body, "max_sessions", 1, 60)
	t.Logf("max_sessions 1: opener's second session: %d Retry-After %d: %s", status, after, body)
	if n := taskKeys(t, rdb, b.queue); n != keysBefore {
		t.Errorf("HOLE: the refused open left a task in Redis: %d task keys, %d before", n, keysBefore)
	}
	api.json("POST", "/v1/sessions/"+s1.SessionID+"/close", quotaToken("opener"), nil, 200, nil)
	var s2 httpapi.SessionOpened
	if !eventually(15*time.Second, func() bool { status, _, body, s2 = open(); return status == 201 }) {
		t.Errorf("opener's session after closing the first: %d %s, want 201", status, body)
	} else {
		api.json("POST", "/v1/sessions/"+s2.SessionID+"/close", quotaToken("opener"), nil, 200, nil)
	}

	// agent's first run canceled: its queued runs run (max_active 1, in
	// order), and its refused key enqueues afresh.
	api.json("DELETE", "/v1/runs/"+first.TaskID+"?queue="+b.queue, quotaToken("agent"), nil, 200, nil)
	for _, id := range queued {
		var rec record.Run
		api.json("GET", "/v1/runs/"+id+"?wait=1m&queue="+b.queue, quotaToken("agent"), nil, 200, &rec)
		if rec.State != record.StateCompleted {
			t.Errorf("agent's queued run once its first ended: want completed:\n%s", mustJSON(t, rec))
		}
	}
	status, _, body, en := post("agent", runSpec("true"), key)
	if status != 201 || en.Duplicate || en.TaskID != refusedID {
		t.Errorf("the refused Idempotency-Key once agent had room: %d %s; want 201, task %s, not a duplicate", status, body, refusedID)
	}
	for _, id := range burst {
		var rec record.Run
		api.json("GET", "/v1/runs/"+id+"?wait=1m&queue="+b.queue, quotaToken("burst"), nil, 200, &rec)
	}
}
