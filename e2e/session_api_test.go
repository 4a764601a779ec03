//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
	"github.com/airlock-run/airlock/record"
)

// A session through the real api binaries: opened through one server and
// continued through another (the API keeps no session state), a file
// written in one call read by the next step, each step an event on the
// run's SSE route, another token's calls refused, the close parking the
// output with every step; then -max-sessions answered 429, and a worker
// SIGKILLed mid-session ending its session failed, never replayed.
func TestAPISessionAcrossServers(t *testing.T) {
	b := setup(t, "-concurrency", "2", "-max-sessions", "1")
	one := newAPIClient(t, startAPI(t, b))
	two := newAPIClient(t, startAPI(t, b))
	var opened struct {
		SessionID string `json:"session_id"`
		Queue     string `json:"queue"`
		State     string `json:"state"`
	}
	one.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "60s",
		"session": map[string]any{"idle_timeout": "30s"}, "output": map[string]any{"result": "out/r.json"}}, 201, &opened)
	sid := url.PathEscape(opened.SessionID)
	if opened.State != "open" || opened.Queue != b.queue {
		t.Fatalf("opened: %+v", opened)
	}
	// A second session finds no room on this worker: 429 with Retry-After.
	status, h, body := two.do("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "session": map[string]any{}}, nil)
	if status != http.StatusTooManyRequests || h.Get("Retry-After") == "" || !strings.Contains(string(body), "no-room") {
		t.Fatalf("a second session: %d %v %s", status, h, body)
	}
	// Through the other server: write, then a step reads it.
	put, err := http.NewRequest("PUT", two.base+"/v1/sessions/"+sid+"/files/"+url.PathEscape("in/n.txt"), strings.NewReader("41"))
	if err != nil {
		t.Fatal(err)
	}
	put.Header.Set("Authorization", "Bearer "+apiAgent)
	put.Header.Set("Content-Type", "application/octet-stream")
	if res, err := two.c.Do(put); err != nil || res.StatusCode != 200 {
		t.Fatalf("PUT file: %v %v", res, err)
	}
	// The run's SSE route, followed while the step runs.
	events := sseFor(t, two.base+"/v1/runs/"+sid+"/events?queue="+b.queue, apiAgent, 3*time.Second)
	var st record.Step
	two.json("POST", "/v1/sessions/"+sid+"/steps", apiAgent, map[string]any{"name": "add",
		"run": []string{"sh", "-c", `echo "{\"n\": $(( $(cat in/n.txt) + 1 ))}" > out/r.json; cat out/r.json`}}, 200, &st)
	if st.Verdict != record.VerdictOK || strings.TrimSpace(st.Stdout) != `{"n": 42}` {
		t.Fatalf("step: %+v", st)
	}
	if ev := <-events; !strings.Contains(ev, `"step":"add"`) || !strings.Contains(ev, `"state":"active"`) {
		t.Errorf("the step's event: %s", ev)
	}
	status, _, got := one.do("GET", "/v1/sessions/"+sid+"/files/"+url.PathEscape("out/r.json"), apiAgent, nil, nil)
	if status != 200 || strings.TrimSpace(string(got)) != `{"n": 42}` {
		t.Fatalf("GET file: %d %q", status, got)
	}
	// Another token (with runs:write) does not see the session.
	if status, _, body := one.do("POST", "/v1/sessions/"+sid+"/steps", apiEnqueuer, map[string]any{"run": []string{"true"}}, nil); status != 404 {
		t.Errorf("another token's step: %d %s", status, body)
	}
	// Bad input names the field.
	if status, _, body := two.send("POST", "/v1/sessions/"+sid+"/steps", apiAgent, map[string]any{"run": []string{}}, nil, true); status != 400 || !strings.Contains(string(body), `"field":"step.run"`) {
		t.Errorf("empty run: %d %s", status, body)
	}
	var rec record.Run
	one.json("POST", "/v1/sessions/"+sid+"/close", apiAgent, nil, 200, &rec)
	if rec.State != record.StateParked || len(rec.Steps) != 1 || rec.Session == nil || rec.Session.Ended != "close" || rec.Decision == nil || rec.Decision.Rule != "no-policy" {
		t.Fatalf("closed: %s", mustJSON(t, rec))
	}
	if status, _, body := two.do("POST", "/v1/sessions/"+sid+"/steps", apiAgent, map[string]any{"run": []string{"true"}}, nil); status != 410 || !strings.Contains(string(body), `"end":"parked"`) {
		t.Errorf("a step after the close: %d %s", status, body)
	}

	// A worker killed between two calls: the next call waits for the
	// session to resume on the next worker, from its last answered call;
	// its steps never run again.
	var second struct {
		SessionID string `json:"session_id"`
	}
	one.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "90s", "session": map[string]any{}}, 201, &second)
	sid2 := url.PathEscape(second.SessionID)
	two.json("POST", "/v1/sessions/"+sid2+"/steps", apiAgent, map[string]any{"run": []string{"sh", "-c", "echo once >> ran.txt"}}, 200, &st)
	_ = b.worker.cmd.Process.Signal(syscall.SIGKILL)
	<-b.worker.done
	b.worker = b.startWorker("-concurrency", "2", "-max-sessions", "1")
	start := time.Now()
	two.json("POST", "/v1/sessions/"+sid2+"/steps", apiAgent, map[string]any{"run": []string{"cat", "ran.txt"}}, 200, &st)
	if st.Stdout != "once\n" {
		t.Fatalf("a step after the worker died: %+v", st)
	}
	t.Logf("the dead worker's session resumed on the next worker in %s", time.Since(start))
	if status, _, body := one.do("DELETE", "/v1/sessions/"+sid2, apiAgent, nil, nil); status != 200 {
		t.Errorf("delete: %d %s", status, body)
	}
}

// TestAPIClientsSession runs the Python and TypeScript session examples
// against the real api and worker: each opens a session on the partner's
// export, looks, writes, cleans, reads, closes, accepts as the approver
// and prints the published result. Their requests go through a proxy that
// validates them and the answers against openapi.json.
func TestAPIClientsSession(t *testing.T) {
	partnerToken := csvreport.NewToken()
	partner := httptest.NewServer(&csvreport.Partner{Token: partnerToken, Rows: 300})
	t.Cleanup(partner.Close)
	b := setupWithPolicy(t, `{"secrets": {"PARTNER_TOKEN": {"queues": ["{{queue}}"], "hosts": ["127.0.0.1"]}}}`,
		"-store", t.TempDir(), "-fetch-allow", "127.0.0.1", "-secrets-dir", secretsDir(t, "PARTNER_TOKEN", partnerToken))
	apiURL, err := url.Parse(startAPI(t, b))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(httpapitest.Proxy(t, apiURL))
	t.Cleanup(proxy.Close)
	for _, c := range []struct{ name, prog, script string }{
		{"python", "python3", "../examples/python/session_report.py"},
		{"typescript", "node", "../examples/typescript/session_report.mjs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr := runExample(t, b, c.prog, c.script,
				"AIRLOCK_API_URL="+proxy.URL, "AIRLOCK_TOKEN="+apiAgent, "AIRLOCK_APPROVER_TOKEN="+apiApprover,
				"PARTNER_URL="+partner.URL, "AIRLOCK_QUEUE="+b.queue, "AIRLOCK_TIMEOUT=150")
			var out struct {
				SessionID string   `json:"session_id"`
				State     string   `json:"state"`
				Steps     []string `json:"steps"`
				Result    struct {
					Rows        int     `json:"rows"`
					PaidRevenue float64 `json:"paid_revenue"`
				} `json:"result"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("stdout is not the result: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			if out.State != "promoted" || strings.Join(out.Steps, ",") != "look,clean" || out.Result.Rows != 300 || out.Result.PaidRevenue <= 0 {
				t.Errorf("result: %s\nstderr: %s", stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), "dropping") || !strings.Contains(stderr.String(), "accepted ap-") {
				t.Errorf("the client did not look, or did not accept: %s", stderr.String())
			}
			t.Logf("%s: %s", c.name, strings.TrimSpace(stdout.String()))
		})
	}
}

// sseFor reads an SSE route for d, from now, and sends what it got.
func sseFor(t *testing.T, u, token string, d time.Duration) <-chan string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req) // answers once the stream is open
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		defer cancel()
		defer res.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(res.Body) // ends with ctx
		out <- buf.String()
	}()
	return out
}
