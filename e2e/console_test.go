//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	browserexport "github.com/airlock-run/airlock/examples/browser-export"
	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// The console's extra tokens (startAPI's file has neither).
const (
	consoleCarol  = "carol-token-e2e-0123456789"  // approvals:read,approvals:write
	consoleReader = "reader-token-e2e-0123456789" // approvals:read
)

// consoleScript is the browser side of TestConsole, run with node.
const consoleScript = "testdata/console/console.mjs"

// consoleBulk is how many approvals TestConsole parks to time the inbox.
const consoleBulk = 10_000

// consoleShotsEnv names a directory where TestConsole writes the
// console's screenshots (console-inbox.png, console-approval.png,
// console-artifacts.png, console-diff.png):
// AIRLOCK_CONSOLE_SHOTS=$PWD/docs/img go test ./e2e -run TestConsole
// refreshes the documentation's.
const consoleShotsEnv = "AIRLOCK_CONSOLE_SHOTS"

// TestConsole drives the approval console (the api's /ui/) in Chromium
// through playwright-core (testdata/console/console.mjs) against the real
// api and worker: an approver signs in with her token; a csv-report run
// parks and shows in her open inbox without a reload; its page shows the
// cleaned CSV as a table, the change since the run she accepted before
// (refund_rate 0.09 → 0.0917), the value the policy's rule looked at
// marked and named, the steps and the secret's name; axe-core finds no
// serious or critical violation on either page; the page fits a phone's
// width and the keyboard reaches Accept. She accepts; a second approver
// whose page still shows the form is told who decided; a read-only token
// sees no decision form and its forged POST is refused, as is one without
// the CSRF token. A hostile run's result and artifacts (script, event
// handlers, javascript: URLs, HTML, SVG, a CSV formula) show as text:
// no dialog, no script, no request off the console's origin, downloads
// stay downloads. The approve CLI's history names who accepted in the
// browser, and the run is promoted. Then, with 10,000 approvals pending,
// the inbox shows its first row within a second, 50 rows a page, and its
// next page.
//
// It skips without chromium, node, playwright-core or axe-core
// (/opt/airlock-browser), unless AIRLOCK_REQUIRE_BROWSER=1.
func TestConsole(t *testing.T) {
	// Not parallel: the first page's time is measured.
	needRoot(t)
	nodePath, axePath := consoleTools(t)
	ctx := context.Background()

	// The worker's and the api's keys under a prefix of their own: 10,000
	// pending approvals must not show in other tests' lists. Deleted last.
	prefix := "con" + numMarker() + ":"
	rdb := redistest.Client(t)
	t.Cleanup(func() {
		if err := redistest.DeleteMatching(context.Background(), rdb, prefix+"*"); err != nil {
			t.Errorf("deleting %s*: %v", prefix, err)
		}
	})

	// The partner's export: its row count changes between runs.
	var rows atomic.Int64
	rows.Store(500)
	partnerToken := csvreport.NewToken()
	partner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(&csvreport.Partner{Token: partnerToken, Rows: int(rows.Load())}).ServeHTTP(w, r)
	}))
	t.Cleanup(partner.Close)
	actionsDir := csvReportCatalog(t, partner.URL)
	// Every csv-report run is parked by a rule on its result (the page
	// marks the value it looked at); anything else by the default.
	pol := writePolicy(t, `{"default": "park",
		"rules": [{"name": "refund-rate-watch", "when": {"action": ["csv-report"], "result": {"pointer": "/refund_rate", "op": ">=", "value": 0.05}}, "then": "park"}],
		"secrets": {"PARTNER_TOKEN": {"actions": ["csv-report"], "hosts": ["127.0.0.1"]}}}`)
	store := t.TempDir()
	b := newBundle(t)
	b.worker = b.startWorker("-prefix", prefix, "-actions", actionsDir, "-policy", pol, "-store", store,
		"-fetch-allow", "127.0.0.1", "-secrets-dir", secretsDir(t, "PARTNER_TOKEN", partnerToken))
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	t.Cleanup(func() { b.client.Close() })
	approvals := approve.NewStore(rdb, approve.Options{Prefix: prefix})

	// The api with a token file of its own: a -tokens after startAPI's
	// wins (the flag package keeps the last value).
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(strings.Join([]string{
		"agent runs:write,runs:read " + httpapi.HashToken(apiAgent),
		"alice approvals:read,approvals:write " + httpapi.HashToken(apiApprover),
		"carol approvals:read,approvals:write " + httpapi.HashToken(consoleCarol),
		"reader approvals:read " + httpapi.HashToken(consoleReader),
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := startAPI(t, b, "-tokens", tokens, "-prefix", prefix, "-store", store)
	api := newAPIClient(t, base)

	// Run 1, 500 rows (refund rate 0.0900): parked, accepted through the
	// API by alice, promoted. Run 2's page compares with it.
	var en httpapi.Enqueued
	api.json("POST", "/v1/actions/csv-report/runs", apiAgent, fmt.Sprintf(`{"params": {"day": "2026-12-04"}, "queue": %q}`, b.queue), 201, &en)
	var st struct {
		State      string `json:"state"`
		ApprovalID string `json:"approval_id"`
	}
	api.json("GET", "/v1/runs/"+en.TaskID+"?wait=60s&queue="+b.queue, apiAgent, nil, 200, &st)
	if st.State != "parked" || st.ApprovalID == "" {
		t.Fatalf("run 1: %+v, want parked\nworker logs:\n%s", st, b.worker.logs.String())
	}
	api.json("POST", "/v1/approvals/"+st.ApprovalID+"/accept", apiApprover, map[string]string{"comment": "first export"}, 200, nil)
	if rec := b.waitFinal(en.TaskID); rec.State != record.StatePromoted {
		t.Fatalf("run 1 after accept:\n%s", mustJSON(t, rec))
	}

	// The browser's part: run 2 (120 rows: refund rate 0.0917) is
	// enqueued by the script with alice's inbox open.
	rows.Store(120)
	env := []string{
		"AIRLOCK_API_URL=" + base, "AIRLOCK_QUEUE=" + b.queue,
		"AGENT_TOKEN=" + apiAgent, "ALICE_TOKEN=" + apiApprover, "CAROL_TOKEN=" + consoleCarol, "READER_TOKEN=" + consoleReader,
		"AXE_PATH=" + axePath, "PLAYWRIGHT_DIR=" + browserexport.PlaywrightDir,
		"DEBUG_DIR=" + t.TempDir(),
	}
	if dir := os.Getenv(consoleShotsEnv); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			t.Fatal(err)
		}
		env = append(env, consoleShotsEnv+"="+abs)
	}
	type ids struct {
		TaskID     string `json:"task_id"`
		ApprovalID string `json:"approval_id"`
	}
	var main struct {
		Run2    ids `json:"run2"`
		Hostile ids `json:"hostile"`
	}
	start := time.Now()
	runConsoleScript(t, b, nodePath, "main", env, &main)
	t.Logf("main phase: %s", time.Since(start).Round(time.Millisecond))
	if main.Run2.ApprovalID == "" || main.Hostile.ApprovalID == "" {
		t.Fatalf("the script named no approvals: %+v", main)
	}

	// What the browser did, seen from the CLI and the run.
	code, out, stderr := b.approveCLI("-prefix", prefix, "history", main.Run2.ApprovalID)
	if code != 0 || !strings.Contains(out, "accepted") || !strings.Contains(out, "alice") || !strings.Contains(out, "numbers checked") {
		t.Errorf("approve history %s: exit %d, want accepted by alice with her comment:\n%s%s", main.Run2.ApprovalID, code, out, stderr)
	}
	if strings.Contains(out, "carol") {
		t.Errorf("approve history %s names carol, whose reject came second:\n%s", main.Run2.ApprovalID, out)
	}
	if rec := b.waitFinal(main.Run2.TaskID); rec.State != record.StatePromoted || rec.DecidedBy != "alice" {
		t.Errorf("run 2 after the browser's accept:\n%s", mustJSON(t, rec))
	}
	if a, err := approvals.Get(ctx, main.Hostile.ApprovalID); err != nil || a.State != approve.StatePending {
		t.Errorf("the hostile run's approval after the forged POSTs: %v, %v; want still pending", a, err)
	}

	// 10,000 approvals pending: the inbox's first page.
	start = time.Now()
	parkBulk(t, approvals.Quiet(), b.queue, consoleBulk)
	t.Logf("parked %d approvals in %s", consoleBulk, time.Since(start).Round(time.Millisecond))
	var bulk struct {
		FirstRowMS []float64 `json:"first_row_ms"`
		Rows       int       `json:"rows"`
		NextRows   int       `json:"next_rows"`
		Pending    string    `json:"pending"`
	}
	runConsoleScript(t, b, nodePath, "bulk", env, &bulk)
	t.Logf("first inbox row visible after %v ms (3 loads) with %d pending", bulk.FirstRowMS, consoleBulk+1)
	if len(bulk.FirstRowMS) == 0 || median(bulk.FirstRowMS) >= 1000 {
		t.Errorf("first inbox row visible after %v ms: want under 1000 ms (median)", bulk.FirstRowMS)
	}
	if bulk.Rows != 50 || bulk.NextRows != 50 {
		t.Errorf("inbox pages: %d then %d rows, want 50 and 50", bulk.Rows, bulk.NextRows)
	}
	if want := "10,001 pending"; bulk.Pending != want {
		t.Errorf("inbox count %q, want %q", bulk.Pending, want)
	}
}

// consoleTools returns node's path and axe-core's script, skipping the
// test (failing it with AIRLOCK_REQUIRE_BROWSER=1) when chromium, node,
// playwright-core or axe-core is missing.
func consoleTools(t *testing.T) (node, axe string) {
	t.Helper()
	var missing []string
	if _, err := exec.LookPath("chromium"); err != nil {
		missing = append(missing, "chromium (apt-get install chromium)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	if _, err := os.Stat(filepath.Join(browserexport.PlaywrightDir, "node_modules/playwright-core")); err != nil {
		missing = append(missing, "playwright-core (npm install --prefix "+browserexport.PlaywrightDir+" playwright-core)")
	}
	axe = filepath.Join(browserexport.PlaywrightDir, "node_modules/axe-core/axe.min.js")
	if _, err := os.Stat(axe); err != nil {
		missing = append(missing, "axe-core (npm install --prefix "+browserexport.PlaywrightDir+" axe-core)")
	}
	if len(missing) > 0 {
		if os.Getenv("AIRLOCK_REQUIRE_BROWSER") == "1" {
			t.Fatalf("missing %s, and AIRLOCK_REQUIRE_BROWSER=1", strings.Join(missing, ", "))
		}
		t.Skipf("missing %s", strings.Join(missing, ", "))
	}
	return node, axe
}

// runConsoleScript runs the console script's phase and decodes its last
// stdout line (its findings) into v; the script's failure, or findings
// without "ok": true, fail the test with its output.
func runConsoleScript(t *testing.T, b *bundle, node, phase string, env []string, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, consoleScript)
	cmd.Env = append(append(os.Environ(), env...), "PHASE="+phase)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	var res struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err != nil || json.Unmarshal([]byte(last), &res) != nil || !res.OK {
		t.Fatalf("console script, phase %s: %v: %s\nstdout:\n%s\nstderr:\n%s\nworker logs:\n%s",
			phase, err, res.Error, stdout.String(), stderr.String(), b.worker.logs.String())
	}
	if err := json.Unmarshal([]byte(last), v); err != nil {
		t.Fatalf("console script, phase %s: %v: %s", phase, err, last)
	}
	t.Logf("console script, phase %s: %s", phase, last)
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Logf("console script, phase %s, stderr:\n%s", phase, s)
	}
}

// parkBulk parks n pending approvals of csv-report on queue from many
// goroutines, as many workers would.
func parkBulk(t *testing.T, s *approve.Store, queue string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const workers = 32
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				id := fmt.Sprintf("bulk%05d", i)
				result := fmt.Appendf(nil, `{"rows": %d, "paid_revenue": %d.5, "refund_rate": 0.09}`, 100+i%400, 1000+i)
				a := &approve.Approval{
					ID: "ap-" + id, TaskID: id, RunID: id, State: approve.StatePending,
					Reasons: []string{"rule refund-rate-watch: /refund_rate is 0.09 >= 0.05"},
					Result:  result,
					Run:     approve.RunSummary{Queue: queue, Principal: "agent", Action: csvreport.Name, Attempt: 1, Worker: "bulk"},
				}
				if _, _, err := s.Park(ctx, a, nil); err != nil {
					errs <- fmt.Errorf("park %s: %w", a.ID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// median is the middle value of xs (the lower of the two middle ones).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	return s[(len(s)-1)/2]
}
