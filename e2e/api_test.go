//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
)

// The API's binary, built on first use (or copied from $AIRLOCK_E2E_BIN).
var apiBin struct {
	once sync.Once
	path string
	err  error
}

func buildAPI(t *testing.T) string {
	t.Helper()
	apiBin.once.Do(func() {
		apiBin.path = filepath.Join(bin.dir, "api")
		cmd := exec.Command("go", "build", "-o", apiBin.path, "../cmd/api")
		if prebuilt := os.Getenv("AIRLOCK_E2E_BIN"); prebuilt != "" {
			cmd = exec.Command("cp", filepath.Join(prebuilt, "api"), apiBin.path)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			apiBin.err = fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
		}
	})
	if apiBin.err != nil {
		t.Fatal(apiBin.err)
	}
	return apiBin.path
}

// The tokens of the API server of these tests.
const (
	apiAgent    = "agent-token-e2e-0123456789"    // runs:write,runs:read
	apiEnqueuer = "enqueuer-token-e2e-0123456789" // runs:write
	apiApprover = "approver-token-e2e-0123456789" // approvals:read,approvals:write
	apiSecond   = "second-token-e2e-0123456789"   // approvals:write
)

// startAPI runs the api binary against the bundle's Redis on a free port,
// and returns its URL; it is stopped with SIGTERM when t ends, and must
// exit 0.
func startAPI(t *testing.T, b *bundle, extra ...string) string {
	t.Helper()
	u, _ := startAPIProc(t, b, extra...)
	return u
}

// startAPIProc is startAPI, and also returns the api's process (to read
// its /proc).
func startAPIProc(t *testing.T, b *bundle, extra ...string) (string, *os.Process) {
	t.Helper()
	path := buildAPI(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	content := strings.Join([]string{
		"agent runs:write,runs:read " + httpapi.HashToken(apiAgent),
		"enqueuer runs:write " + apiEnqueuer,
		"alice approvals:read,approvals:write " + httpapi.HashToken(apiApprover),
		"bob approvals:write " + apiSecond,
	}, "\n")
	if err := os.WriteFile(tokens, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, append([]string{"-addr", "127.0.0.1:0", "-redis", b.url, "-tokens", tokens}, extra...)...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("api exited with %v after SIGTERM:\n%s", err, logs.String())
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("api still running 15s after SIGTERM:\n%s", logs.String())
		}
		if t.Failed() {
			t.Logf("api logs:\n%s", logs.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var l struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Message == "api started" {
				return l.URL, cmd.Process
			}
		}
		select {
		case err := <-done:
			t.Fatalf("api exited at start (%v):\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("api not started after 20s:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// apiClient calls the API, validating every request and response against
// openapi.json.
type apiClient struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newAPIClient(t *testing.T, base string) *apiClient {
	return &apiClient{t: t, base: base, c: &http.Client{Transport: httpapitest.Transport(t, nil), Timeout: 3 * time.Minute}}
}

func (a *apiClient) do(method, path, token string, body any, header map[string]string) (int, http.Header, []byte) {
	a.t.Helper()
	return a.send(method, path, token, body, header, false)
}

// send is do; invalid marks a request that breaks the document on purpose
// (its answer is still validated).
func (a *apiClient) send(method, path, token string, body any, header map[string]string, invalid bool) (int, http.Header, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			j, _ := json.Marshal(body)
			rd = bytes.NewReader(j)
		}
	}
	req, err := http.NewRequest(method, a.base+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if invalid {
		req = httpapitest.Invalid(req)
	}
	res, err := a.c.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return res.StatusCode, res.Header, b
}

func (a *apiClient) json(method, path, token string, body any, wantStatus int, v any) http.Header {
	a.t.Helper()
	status, h, b := a.do(method, path, token, body, nil)
	if status != wantStatus {
		a.t.Fatalf("%s %s: %d, want %d: %s", method, path, status, wantStatus, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return h
}

// TestAPIRunApproveResult runs a spec through the real api and worker
// binaries: 201 then 200 for the same Idempotency-Key, a long poll until
// parked, the result 409 while parked, an enqueuer that cannot accept, an
// approver who does, a second one who is told who did, the event stream
// in order, the long poll until promoted and the result.
func TestAPIRunApproveResult(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, "-store", store)
	api := newAPIClient(t, startAPI(t, b))
	spec := fmt.Sprintf(`{"version": 1, "queue": %q,
		"files": {"report.sh": "printf 'region,amount\\neu,10\\n' > out/report.csv; echo '{\"total\": 10}' > out/result.json"},
		"steps": [{"run": ["sh", "report.sh"]}],
		"output": {"result": "out/result.json", "schema": {"type": "object", "required": ["total"]}, "artifacts": ["out/*.csv"]}}`, b.queue)
	key := map[string]string{"Idempotency-Key": "e2e-" + b.queue}
	status, hdr, body := api.do("POST", "/v1/runs", apiAgent, spec, key)
	var en httpapi.Enqueued
	if status != 201 || json.Unmarshal(body, &en) != nil || en.TaskID == "" {
		t.Fatalf("POST /v1/runs: %d %s", status, body)
	}
	if hdr.Get("Location") != "/v1/runs/"+en.TaskID+"?queue="+b.queue {
		t.Errorf("Location %q", hdr.Get("Location"))
	}
	status, _, body = api.do("POST", "/v1/runs", apiAgent, spec, key)
	var dup httpapi.Enqueued
	if status != 200 || json.Unmarshal(body, &dup) != nil || !dup.Duplicate || dup.TaskID != en.TaskID {
		t.Errorf("same Idempotency-Key: %d %s", status, body)
	}
	status, _, body = api.send("POST", "/v1/runs", apiAgent, `{"version": 1, "steps": [{"run": ["true"], "cwd": "/"}]}`, nil, true)
	var p httpapi.Problem
	if status != 400 || json.Unmarshal(body, &p) != nil || p.Field != "steps[0].cwd" || !strings.HasPrefix(p.Detail, "spec rejected: steps[0].cwd: \"/\" is absolute") {
		t.Errorf("bad spec: %d %s", status, body)
	}

	// Follow the run's events from now on.
	type sse struct{ name, data string }
	events := make(chan sse, 32)
	go func() {
		defer close(events)
		req, _ := http.NewRequest("GET", api.base+"/v1/runs/"+en.TaskID+"/events?queue="+b.queue, nil)
		req.Header.Set("Authorization", "Bearer "+apiAgent)
		res, err := api.c.Do(req)
		if err != nil {
			t.Errorf("events: %v", err)
			return
		}
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev sse
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "" && ev.name != "":
				events <- ev
				ev = sse{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()

	var rec struct {
		State, Verdict, ApprovalID, DecidedBy string
	}
	recOf := func(b []byte) {
		var r struct {
			State      string `json:"state"`
			Verdict    string `json:"verdict"`
			ApprovalID string `json:"approval_id"`
			DecidedBy  string `json:"decided_by"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		rec.State, rec.Verdict, rec.ApprovalID, rec.DecidedBy = r.State, r.Verdict, r.ApprovalID, r.DecidedBy
	}
	_, _, body = api.do("GET", "/v1/runs/"+en.TaskID+"?wait=2m&until=done", apiAgent, nil, nil)
	recOf(body)
	if rec.State != "parked" || rec.ApprovalID == "" {
		t.Fatalf("until=done: %s\nworker logs:\n%s", body, b.worker.logs.String())
	}
	status, _, body = api.do("GET", "/v1/runs/"+en.TaskID+"/result", apiAgent, nil, nil)
	if status != 409 || json.Unmarshal(body, &p) != nil || p.State != "parked" || p.Type != httpapi.ProblemNotPromoted {
		t.Errorf("result while parked: %d %s", status, body)
	}
	accept := "/v1/approvals/" + rec.ApprovalID + "/accept"
	if status, _, body = api.do("POST", accept, apiEnqueuer, map[string]string{}, nil); status != 403 {
		t.Errorf("an enqueuer's accept: %d %s, want 403", status, body)
	}
	var show struct {
		State  string         `json:"state"`
		Result map[string]int `json:"result"`
	}
	api.json("GET", "/v1/approvals/"+rec.ApprovalID, apiApprover, nil, 200, &show)
	if show.State != "pending" || show.Result["total"] != 10 {
		t.Errorf("approval: %+v", show)
	}
	api.json("POST", accept, apiApprover, map[string]string{"comment": "checked"}, 200, nil)
	status, _, body = api.do("POST", accept, apiSecond, map[string]string{}, nil)
	if status != 409 || json.Unmarshal(body, &p) != nil || p.DecidedBy != "alice" || p.State != "accepted" {
		t.Errorf("second accept: %d %s, want 409 decided by alice", status, body)
	}
	_, _, body = api.do("GET", "/v1/runs/"+en.TaskID+"?wait=2m&until=final&queue="+b.queue, apiAgent, nil, nil)
	recOf(body)
	if rec.State != "promoted" || rec.DecidedBy != "alice" {
		t.Fatalf("until=final: %s\nworker logs:\n%s", body, b.worker.logs.String())
	}
	var pub struct {
		Where    string         `json:"where"`
		Result   map[string]int `json:"result"`
		Manifest struct {
			AcceptedBy string `json:"accepted_by"`
			Artifacts  []struct {
				Name string `json:"name"`
			} `json:"artifacts"`
		} `json:"manifest"`
	}
	api.json("GET", "/v1/runs/"+en.TaskID+"/result", apiAgent, nil, 200, &pub)
	if pub.Result["total"] != 10 || pub.Manifest.AcceptedBy != "alice" || len(pub.Manifest.Artifacts) != 1 ||
		pub.Manifest.Artifacts[0].Name != "out/report.csv" || !strings.HasPrefix(pub.Where, store) {
		t.Errorf("result: %+v", pub)
	}
	csv, err := os.ReadFile(filepath.Join(pub.Where, "out/report.csv"))
	if err != nil || string(csv) != "region,amount\neu,10\n" {
		t.Errorf("published artifact: %q, %v", csv, err)
	}

	var states []string
	var end httpapi.StreamEnd
	timeout := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-events:
			if !ok {
				done = true
				break
			}
			var x struct {
				State string `json:"state"`
			}
			_ = json.Unmarshal([]byte(ev.data), &x)
			if ev.name == "end" {
				_ = json.Unmarshal([]byte(ev.data), &end)
			} else {
				states = append(states, x.State)
			}
		case <-timeout:
			t.Fatalf("the event stream did not end; states so far %v", states)
		}
	}
	if got := strings.Join(states, ","); !strings.HasSuffix(got, "parked,accepted,promoted") || end.Reason != "final" {
		t.Errorf("events: %s then end %+v; want ...,parked,accepted,promoted then final", got, end)
	}
}

// TestAPIClientsCSVReport runs the Python and TypeScript clients
// (examples/python, examples/typescript) against the real api and worker:
// each enqueues the csv-report demo, waits, accepts as an approver and
// prints the published result. Their requests go through a proxy that
// validates them and the answers against openapi.json.
func TestAPIClientsCSVReport(t *testing.T) {
	t.Parallel()
	partnerToken := csvreport.NewToken()
	partner := httptest.NewServer(&csvreport.Partner{Token: partnerToken, Rows: 500})
	t.Cleanup(partner.Close)
	// The clients run the csv-report action by name: the worker's catalog
	// holds it, pointed at this partner; its policy parks (the clients
	// accept as approvers) and grants the token to the action alone.
	actionsDir := csvReportCatalog(t, partner.URL)
	b := setupWithPolicy(t, `{"secrets": {"PARTNER_TOKEN": {"actions": ["csv-report"], "hosts": ["127.0.0.1"]}}}`, "-actions", actionsDir,
		"-store", t.TempDir(), "-fetch-allow", "127.0.0.1", "-secrets-dir", secretsDir(t, "PARTNER_TOKEN", partnerToken))
	apiURL, err := url.Parse(startAPI(t, b))
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(httpapitest.Proxy(t, apiURL))
	t.Cleanup(proxy.Close)
	for _, c := range []struct{ name, prog, script string }{
		{"python", "python3", "../examples/python/csv_report.py"},
		{"typescript", "node", "../examples/typescript/csv_report.mjs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr := runExample(t, b, c.prog, c.script,
				"AIRLOCK_API_URL="+proxy.URL, "AIRLOCK_TOKEN="+apiAgent, "AIRLOCK_APPROVER_TOKEN="+apiApprover,
				"PARTNER_URL="+partner.URL, "AIRLOCK_QUEUE="+b.queue, "AIRLOCK_TIMEOUT=150")
			var out struct {
				TaskID string `json:"task_id"`
				State  string `json:"state"`
				Result struct {
					Rows        int     `json:"rows"`
					PaidRevenue float64 `json:"paid_revenue"`
					RefundRate  float64 `json:"refund_rate"`
				} `json:"result"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
				t.Fatalf("stdout is not the result: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
			}
			if out.State != "promoted" || out.TaskID == "" || out.Result.Rows != 500 || out.Result.PaidRevenue <= 0 ||
				out.Result.RefundRate <= 0 || out.Result.RefundRate >= 1 {
				t.Errorf("result: %s", stdout.String())
			}
			if !strings.Contains(stderr.String(), "accepted ap-") {
				t.Errorf("the client did not accept as the approver: %s", stderr.String())
			}
			t.Logf("%s: %s", c.name, strings.TrimSpace(stdout.String()))
		})
	}
}

// runExample runs an example client (prog script) with env added to the
// test's, and returns its stdout and stderr; it fails the test on a
// non-zero exit, and skips it when prog is not on PATH (a failure with
// AIRLOCK_REQUIRE_CLIENTS=1, as CI sets).
func runExample(t *testing.T, b *bundle, prog, script string, env ...string) (stdout, stderr *bytes.Buffer) {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		if os.Getenv("AIRLOCK_REQUIRE_CLIENTS") == "1" {
			t.Fatalf("%s is not on PATH, and AIRLOCK_REQUIRE_CLIENTS=1", prog)
		}
		t.Skipf("%s is not on PATH (AIRLOCK_REQUIRE_CLIENTS=1 makes this a failure)", prog)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	abs, _ := filepath.Abs(script)
	cmd := exec.CommandContext(ctx, path, abs)
	cmd.Env = append(append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1"), env...)
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout: %s\nstderr: %s\nworker logs:\n%s", prog, script, err, stdout.String(), stderr.String(), b.worker.logs.String())
	}
	return stdout, stderr
}

// csvReportCatalog returns a worker's -actions directory that holds the
// csv-report action, fetching its export from partner.
func csvReportCatalog(t *testing.T, partner string) string {
	t.Helper()
	def, err := csvreport.Definition(partner)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, csvreport.Name+".yaml"), def, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
