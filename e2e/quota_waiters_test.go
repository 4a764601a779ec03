//go:build linux

package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/record"
)

// waitAnswer is what a long poll was answered, and how long it took.
type waitAnswer struct {
	status     int
	retryAfter string
	problem    httpapi.Problem
	took       time.Duration
	err        error
}

// longPolls sends n GET path (a long poll) by token at once, on ctx; each
// answer arrives on the channel as it comes (a held one once ctx ends).
func longPolls(ctx context.Context, c *http.Client, url, token string, n int) <-chan waitAnswer {
	out := make(chan waitAnswer, n)
	for range n {
		go func() {
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			res, err := c.Do(req)
			if err != nil {
				out <- waitAnswer{err: err, took: time.Since(start)}
				return
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			a := waitAnswer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), took: time.Since(start), err: err}
			_ = json.Unmarshal(body, &a.problem)
			out <- a
		}()
	}
	return out
}

// answered collects from ch until want answers came, then for settle
// more (any later answer counts too); it fails the test when want did not
// come within d.
func answered(t *testing.T, ch <-chan waitAnswer, want int, d, settle time.Duration) []waitAnswer {
	t.Helper()
	var got []waitAnswer
	deadline := time.After(d)
	for len(got) < want {
		select {
		case a := <-ch:
			got = append(got, a)
		case <-deadline:
			t.Fatalf("%d answers within %s, want %d", len(got), d, want)
		}
	}
	quiet := time.After(settle)
	for {
		select {
		case a := <-ch:
			got = append(got, a)
		case <-quiet:
			return got
		}
	}
}

// TestQuotaWaiters replays round 4's "one tenant's long polls starve
// everyone's reads": 300 GET /v1/runs/{id}?wait=40s by one token took
// every other GET from 0.008 s to 14-18 s for the 40 s (API descriptors
// 40 → 340, no error to anyone). Now token agent's quota max_waiters 20
// holds 20 of its 300 long polls on a parked run (wait=40s&until=final:
// they really wait), the other 280 are answered 429 quota max_waiters with
// Retry-After at once, and another token's plain GETs stay under 100 ms
// p99. A token without a quota meets its share of the server's ceiling
// (a quarter of -max-waiters, default 256): 503 overloaded past it, and still the others' GETs are
// served. Both floods end the moment their clients go away.
func TestQuotaWaiters(t *testing.T) {
	// Not parallel: the latencies it measures are the API's, not the
	// other tests' load.
	const quota, flood, ceiling = 20, 300, httpapi.DefaultMaxWaiters
	b, prefix := quotaSetup(t, `{"default": "promote", "quotas": {"agent": {"max_waiters": 20}}}`)
	base, proc := startAPIProc(t, b, "-prefix", prefix, "-tokens", quotaTokens(t, "agent", "agent2", "reader"))
	api := newAPIClient(t, base)
	apiURL, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	redisURL, err := neturl.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	apiPort, _ := strconv.Atoi(apiURL.Port())
	redisPort, _ := strconv.Atoi(cmp.Or(redisURL.Port(), "6379"))
	fds := func() fdCount { return fdsOf(t, proc.Pid, apiPort, redisPort) }

	parked := func(who string) string {
		t.Helper()
		var en httpapi.Enqueued
		api.json("POST", "/v1/runs", quotaToken(who), fmt.Sprintf(`{"version": 1, "queue": %q, "approval": "always",
			"steps": [{"run": ["sh", "-c", "echo '{}' > out/r.json"]}], "output": {"result": "out/r.json"}}`, b.queue), 201, &en)
		var rec record.Run
		api.json("GET", "/v1/runs/"+en.TaskID+"?wait=2m&queue="+b.queue, quotaToken(who), nil, 200, &rec)
		if rec.State != record.StateParked {
			t.Fatalf("%s's run: want parked:\n%s", who, mustJSON(t, rec))
		}
		return en.TaskID
	}
	agentRun, agent2Run, readerRun := parked("agent"), parked("agent2"), parked("reader")

	// The floods' connections close once answered: what the API holds is
	// what it keeps open, not a client's idle keep-alives.
	floods := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	reader := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	t.Cleanup(reader.CloseIdleConnections)
	readerGETs := func(n int) []time.Duration {
		t.Helper()
		var ds []time.Duration
		for range n {
			req, _ := http.NewRequest("GET", base+"/v1/runs/"+readerRun+"?queue="+b.queue, nil)
			req.Header.Set("Authorization", "Bearer "+quotaToken("reader"))
			start := time.Now()
			res, err := reader.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			ds = append(ds, time.Since(start))
			if res.StatusCode != 200 {
				t.Fatalf("reader's GET: %d", res.StatusCode)
			}
		}
		return ds
	}
	pollURL := func(id string) string { return base + "/v1/runs/" + id + "?wait=40s&until=final&queue=" + b.queue }

	fdBefore := fds()
	quiet := readerGETs(100)
	t.Logf("before: API descriptors %s; reader's 100 plain GETs p50 %s p99 %s", fdBefore, pct(quiet, 0.5), pct(quiet, 0.99))

	// 300 long polls by agent: 20 held, 280 refused at once.
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	started := time.Now()
	ch1 := longPolls(ctx1, floods, pollURL(agentRun), quotaToken("agent"), flood)
	got := answered(t, ch1, flood-quota, 30*time.Second, 2*time.Second)
	var late []time.Duration
	refused := 0
	for _, a := range got {
		switch {
		case a.err != nil:
			t.Errorf("a long poll: %v", a.err)
		case a.status == http.StatusTooManyRequests && a.problem.Type == httpapi.ProblemQuota && a.problem.Quota == "max_waiters" &&
			a.problem.Limit == quota && a.retryAfter == "1":
			refused++
			late = append(late, a.took)
		default:
			t.Errorf("a long poll past agent's max_waiters: %d Retry-After %q %+v; want 429 quota max_waiters, limit %d, Retry-After 1", a.status, a.retryAfter, a.problem, quota)
		}
	}
	held := flood - len(got)
	fdAgent := fds()
	during := readerGETs(100)
	t.Logf("agent's %d long polls (max_waiters %d): %d held, %d refused 429 quota max_waiters (answered in p50 %s, max %s; all answers within %s)",
		flood, quota, held, refused, pct(late, 0.5).Round(time.Millisecond), pct(late, 1).Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
	t.Logf("during: API descriptors %s; reader's 100 plain GETs p50 %s p99 %s (round 4: 0.008 s → 14-18 s, descriptors 40 → 340)",
		fdAgent, pct(during, 0.5), pct(during, 0.99))
	if held != quota || refused != flood-quota {
		t.Errorf("HOLE: agent's %d long polls: %d held, %d refused; want %d held, the rest refused", flood, held, refused, quota)
	}
	// Beside the held ones: the reader's connection and api's (keep-alive).
	if fdAgent.clients < held || fdAgent.clients > held+2 {
		t.Errorf("the API holds %d client connections while agent holds %d long polls (and the reader and api clients one each)", fdAgent.clients, held)
	}
	if p := pct(late, 1); p > 5*time.Second {
		t.Errorf("the refusals came after up to %s: want at once (not after the 40 s wait)", p)
	}
	if p := pct(during, 0.99); p >= 100*time.Millisecond {
		t.Errorf("HOLE: the reader's plain GETs took p99 %s while agent held its long polls, want under 100ms", p)
	}
	// Its event stream is a waiter too.
	status, h, body := api.do("GET", "/v1/runs/"+agentRun+"/events?queue="+b.queue, quotaToken("agent"), nil, nil)
	quotaProblem(t, "agent's event stream beside its 20 long polls", status, h, body, "max_waiters", quota, 1)
	t.Logf("agent's event stream beside them: %d %s", status, body)

	// A token without a quota meets its share of the server's ceiling (a
	// quarter of -max-waiters): 503 past it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	share := (ceiling + 3) / 4
	over := share + 24
	ch2 := longPolls(ctx2, floods, pollURL(agent2Run), quotaToken("agent2"), over)
	got2 := answered(t, ch2, over-share, 30*time.Second, 2*time.Second)
	overloaded := 0
	for _, a := range got2 {
		if a.err == nil && a.status == http.StatusServiceUnavailable && a.problem.Type == httpapi.ProblemOverloaded &&
			a.retryAfter == "1" && strings.Contains(a.problem.Detail, "-max-waiters") {
			overloaded++
			continue
		}
		t.Errorf("a long poll past the server's -max-waiters: %d %v Retry-After %q %+v; want 503 overloaded naming -max-waiters, Retry-After 1",
			a.status, a.err, a.retryAfter, a.problem)
	}
	held2 := over - len(got2)
	fdCeiling := fds()
	full := readerGETs(100)
	t.Logf("agent2 (no quota) %d long polls beside agent's %d: %d held, %d refused 503 overloaded (its share %d of -max-waiters %d); API descriptors %s; reader's 100 plain GETs p50 %s p99 %s",
		over, held, held2, overloaded, share, ceiling, fdCeiling, pct(full, 0.5), pct(full, 0.99))
	if held2 != share || overloaded != over-share {
		t.Errorf("agent2's %d long polls: %d held, %d refused 503; want %d held (a quarter of the server's %d), the rest refused", over, held2, overloaded, share, ceiling)
	}
	if p := pct(full, 0.99); p >= 100*time.Millisecond {
		t.Errorf("the reader's plain GETs took p99 %s while the server held its -max-waiters %d, want under 100ms", p, ceiling)
	}

	// The clients go away: their waiters are given back at once.
	cancel1()
	cancel2()
	for range held + held2 {
		select {
		case a := <-ch1:
			if a.err == nil {
				t.Errorf("a held long poll was answered %d before its client went away: %+v", a.status, a.problem)
			}
		case a := <-ch2:
			if a.err == nil {
				t.Errorf("a held long poll was answered %d before its client went away: %+v", a.status, a.problem)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("held long polls did not end with their clients")
		}
	}
	if !eventually(10*time.Second, func() bool {
		status, _, _ = api.do("GET", "/v1/runs/"+agentRun+"?wait=100ms&until=final&queue="+b.queue, quotaToken("agent"), nil, nil)
		return status == http.StatusOK
	}) {
		t.Errorf("agent's long poll after its clients went away: %d, want 200 (its waiters given back)", status)
	}
	var fdAfter fdCount
	eventually(5*time.Second, func() bool { fdAfter = fds(); return fdAfter.clients <= 2 })
	t.Logf("after the clients went away: API descriptors %s", fdAfter)
}
