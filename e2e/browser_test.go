//go:build linux

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	browserexport "github.com/airlock-run/airlock/examples/browser-export"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// browserSetup starts the partner's back-office on 127.0.0.1 and a worker
// that lets networked runs reach it, with playwright-core bound into the
// view as README installs it. It skips without Debian's chromium or
// playwright-core under /opt/airlock-browser, unless
// AIRLOCK_REQUIRE_BROWSER=1 (CI installs both). A policy, when given, is
// the worker's, {{queue}} standing for the test's queue.
func browserSetup(t *testing.T, pol string, flags ...string) (*bundle, *approve.Store, string) {
	t.Helper()
	needRoot(t)
	var missing []string
	if _, err := exec.LookPath("chromium"); err != nil {
		missing = append(missing, "chromium (apt-get install chromium)")
	}
	if _, err := os.Stat(filepath.Join(browserexport.PlaywrightDir, "node_modules/playwright-core")); err != nil {
		missing = append(missing, "playwright-core (npm install --prefix "+browserexport.PlaywrightDir+" playwright-core)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing = append(missing, "node")
	}
	if len(missing) > 0 {
		if os.Getenv("AIRLOCK_REQUIRE_BROWSER") == "1" {
			t.Fatalf("missing %s, and AIRLOCK_REQUIRE_BROWSER=1", strings.Join(missing, ", "))
		}
		t.Skipf("missing %s", strings.Join(missing, ", "))
	}
	srv := httptest.NewServer(&browserexport.Partner{User: browserexport.DemoUser, Password: browserexport.DemoPassword, Rows: 500})
	t.Cleanup(srv.Close)
	prefix := "brw" + numMarker() + ":"
	b := newBundle(t)
	if pol != "" {
		flags = append(flags, "-policy", writePolicy(t, strings.ReplaceAll(pol, "{{queue}}", b.queue)))
	}
	b.worker = b.startWorker(append([]string{"-prefix", prefix, "-allow-network", "-egress-allow", "127.0.0.1",
		"-ro-bind", browserexport.PlaywrightDir}, flags...)...)
	rdb := redistest.Client(t)
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	t.Cleanup(func() { b.client.Close() })
	return b, approve.NewStore(rdb, approve.Options{Prefix: prefix}), srv.URL
}

// checkPartnerEgress checks a browser run's egress: the partner reached
// with bytes down, nothing else reached, and the page's tracker refused.
func checkPartnerEgress(t *testing.T, rec *record.Run, partner string) {
	t.Helper()
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(partner, "http://"))
	var down int64
	tracker := false
	for _, e := range rec.Egress {
		switch {
		case e.Allowed && (e.Host != host || strconv.Itoa(e.Port) != port):
			t.Errorf("the browser reached %s:%d, not the partner", e.Host, e.Port)
		case e.Allowed:
			down += e.BytesDown
		case e.Host == "analytics.partner.invalid":
			tracker = e.BytesDown == 0 && strings.Contains(e.Reason, "refused")
		}
	}
	if down < 30_000 {
		t.Errorf("bytes down from the partner: %d, want the pages and the export's rows", down)
	}
	if !tracker {
		t.Errorf("the page's call to an address not allowed is not listed as refused:\n%s", mustJSON(t, rec.Egress))
	}
}

// The seed's example end to end: Chromium, driven by Playwright in a step
// through the egress proxy, logs in to the partner's back-office and clicks
// the export its JavaScript builds; the csv-report clean makes the result,
// which is validated and parked with the cleaned CSV, whose digest is the
// staged bytes'.
func TestBrowserExport(t *testing.T) {
	b, store, partner := browserSetup(t, "")
	rec := b.run(string(browserexport.Spec(partner, browserexport.DemoLogin)))
	if rec.State != record.StateParked || len(rec.Steps) != 2 {
		t.Fatalf("want parked after browse and clean:\n%s", mustJSON(t, rec))
	}
	browse := stepOf(t, rec, 0)
	if !strings.Contains(browse.Stdout, "saved export-2026-12-05.csv as in/export.csv") || browse.Stderr != "" {
		t.Errorf("browse: stdout %q, stderr %q (a quiet start: no D-Bus error lines)", browse.Stdout, browse.Stderr)
	}
	ap, err := store.Get(context.Background(), rec.ApprovalID)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Rows int `json:"rows"`
	}
	if err := json.Unmarshal(ap.Result, &res); err != nil || res.Rows != 500 {
		t.Errorf("result %s: want 500 rows", ap.Result)
	}
	checkPartnerEgress(t, rec, partner)
	if len(rec.Artifacts) != 1 || rec.Artifacts[0].Name != "out/clean.csv" {
		t.Fatalf("artifacts: %+v", rec.Artifacts)
	}
	data, err := store.Data(context.Background(), rec.ApprovalID, "out/clean.csv")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != rec.Artifacts[0].SHA256 || !strings.HasPrefix(string(data), "order_id,customer,amount,status\n") {
		t.Errorf("staged clean.csv (sha256 %x, begins %.40q) is not the record's artifact %+v", sum, data, rec.Artifacts[0])
	}
	t.Logf("browse: %.0f ms, memory peak %d MB; egress: %d entries", browse.DurationMS, browse.MemoryPeakBytes>>20, len(rec.Egress))
}

// The same flow as a session: open, look at the page's text, export,
// clean, close; the browser is started again by each call and nothing it
// started outlives its step.
func TestBrowserSession(t *testing.T) {
	b, _, partner := browserSetup(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(string(browserexport.SessionSpec(browserexport.DemoLogin))))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	var outs []string
	for i, raw := range browserexport.SessionSteps(partner, browserexport.DemoLogin) {
		var st tasks.Step
		if err := tasks.DecodeStep(raw, &st); err != nil {
			t.Fatal(err)
		}
		got, err := s.Run(ctx, st)
		if err != nil || got.Verdict != record.VerdictOK {
			t.Fatalf("call %d (%s): %v\n%s", i, st.Name, err, mustJSON(t, got))
		}
		outs = append(outs, got.Stdout)
	}
	if !strings.Contains(outs[0], "500 orders, columns: order_id, _sync_ts") || !strings.Contains(outs[0], "Analytics: blocked") {
		t.Errorf("the page's text, as the agent looks at it: %q", outs[0])
	}
	if !strings.Contains(outs[2], "cleaned 501 lines") {
		t.Errorf("clean: %q", outs[2])
	}
	rec, err := s.Close(ctx)
	if err != nil || rec.State != record.StateParked || len(rec.Steps) != 3 {
		t.Fatalf("close: %v\n%s", err, mustJSON(t, rec))
	}
	checkPartnerEgress(t, rec, partner)
}

// A browser under processes: 16 runs out of threads at once: the record
// says limits_hit ["processes"] within seconds, not at the deadline.
func TestBrowserProcessesHit(t *testing.T) {
	b, _, partner := browserSetup(t, "")
	var m map[string]any
	_ = json.Unmarshal(browserexport.Spec(partner, browserexport.DemoLogin), &m)
	m["limits"] = map[string]any{"profile": "browser", "processes": 16}
	m["timeout"] = "60s"
	js, _ := json.Marshal(m)
	start := time.Now()
	rec := b.run(string(js))
	took := time.Since(start)
	browse := stepOf(t, rec, 0)
	if !slices.Equal(browse.LimitsHit, []string{record.LimitProcesses}) || browse.PidsRefused == 0 {
		t.Fatalf("a browser under processes=16: limits_hit %v, pids_refused %d:\n%s", browse.LimitsHit, browse.PidsRefused, mustJSON(t, rec))
	}
	if took > 20*time.Second || browse.Verdict == record.VerdictTimeout {
		t.Errorf("ended after %s with verdict %s: want quickly, not at the 60s deadline", took, browse.Verdict)
	}
	t.Logf("processes=16: ended in %s, %d forks refused", took.Round(time.Millisecond), browse.PidsRefused)
}

// Two browsers in two slots at once: both exports parked, their browse
// steps overlapping in time.
func TestBrowserTwoSlots(t *testing.T) {
	b, _, partner := browserSetup(t, "", "-concurrency", "2")
	js := string(browserexport.Spec(partner, browserexport.DemoLogin))
	recs := make([]*record.Run, 2)
	var wg sync.WaitGroup
	for i := range recs {
		wg.Add(1)
		go func() { defer wg.Done(); recs[i] = b.run(js) }()
	}
	wg.Wait()
	for i, rec := range recs {
		if rec.State != record.StateParked {
			t.Fatalf("run %d: want parked:\n%s", i, mustJSON(t, rec))
		}
	}
	if !recs[0].StartedAt.Before(recs[1].FinishedAt) || !recs[1].StartedAt.Before(recs[0].FinishedAt) {
		t.Errorf("the two runs did not overlap: %s–%s and %s–%s", recs[0].StartedAt, recs[0].FinishedAt, recs[1].StartedAt, recs[1].FinishedAt)
	}
}

// A browser adds no reach: in the view a browser step gets, there is no
// D-Bus, no /sys, no host socket a page could be pointed at, and the
// chromium wrapper's settings are the view's own.
func TestBrowserNoNewReach(t *testing.T) {
	b, _, _ := browserSetup(t, "")
	rec := b.run(`{"version":1,"network":true,"limits":{"profile":"browser"},"steps":[
		{"name":"view","run":["sh","-c","ls / | tr '\\n' ' '; echo; test -e /run && echo has-run; test -e /sys && echo has-sys; test -e /var/run/dbus && echo has-dbus; env | grep -c DBUS_; grep -c '^export CHROMIUM_FLAGS=.*--no-sandbox' /etc/chromium.d/zz-airlock"]},
		{"name":"page","run":["sh","-c","for d in /etc/ /run/postgresql/; do chromium --headless --dump-dom file://$d | grep -o 'chromium\\.d\\|PGSQL[.0-9]*' | sort -u; done"]}]}`)
	view, page := stepOf(t, rec, 0), stepOf(t, rec, 1)
	lines := strings.Split(view.Stdout, "\n")
	if len(lines) < 3 || strings.Contains(view.Stdout, "has-") || strings.TrimSpace(lines[1]) != "0" || strings.TrimSpace(lines[2]) != "1" {
		t.Errorf("the browser's view: %q", view.Stdout)
	}
	if root := strings.Fields(lines[0]); !slices.Equal(root, []string{"bin", "dev", "etc", "lib", "lib64", "opt", "proc", "sbin", "tmp", "usr", "workspace"}) {
		t.Errorf("the view's root: %v", root)
	}
	if page.Stdout != "chromium.d\n" { // the listing of /etc renders; /run is not there
		t.Errorf("a page pointed at the host's PostgreSQL socket directory:\n%s", mustJSON(t, page))
	}
}

// The login with a granted secret: the password is not in the spec, the
// worker reads it from its secrets directory into the browse step's
// environment (granted env: true), the run is parked, and the record
// keeps no trace of the value.
func TestBrowserSecretLogin(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "PARTNER_PASSWORD"), []byte(browserexport.DemoPassword), 0o600); err != nil {
		t.Fatal(err)
	}
	b, _, partner := browserSetup(t, `{"secrets": {"PARTNER_PASSWORD": {"queues": ["{{queue}}"], "env": true}}}`, "-secrets-dir", dir)
	js := browserexport.Spec(partner, browserexport.Login{User: browserexport.DemoUser, Secret: "PARTNER_PASSWORD"})
	if strings.Contains(string(js), browserexport.DemoPassword) {
		t.Fatal("the password travels in the spec")
	}
	rec := b.run(string(js))
	if rec.State != record.StateParked || len(rec.Steps) != 2 || stepOf(t, rec, 1).Verdict != record.VerdictOK {
		t.Fatalf("want parked after browse and clean:\n%s", mustJSON(t, rec))
	}
	if strings.Contains(mustJSON(t, rec), browserexport.DemoPassword) {
		t.Error("the record holds the secret's value")
	}
}
