package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

func get(t *testing.T, h http.Handler, method, path string) (int, http.Header, string) {
	t.Helper()
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(method, path, nil))
	return rr.Code, rr.Header(), rr.Body.String()
}

func TestHandler(t *testing.T) {
	m := New("1.2.3-test", "default")
	var readyErr error
	h := Handler(m, func(ctx context.Context) error { return readyErr })

	if code, hd, body := get(t, h, "GET", "/healthz"); code != 200 || body != "ok\n" || hd.Get("Cache-Control") != "no-store" {
		t.Errorf("healthz: %d %q %v", code, body, hd)
	}
	if code, _, body := get(t, h, "GET", "/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("readyz when ready: %d %q", code, body)
	}
	readyErr = errors.New("redis: dial tcp 127.0.0.1:6379: connect: connection refused")
	code, _, body := get(t, h, "GET", "/readyz")
	if code != 503 || body != "not ready: redis: dial tcp 127.0.0.1:6379: connect: connection refused\n" {
		t.Errorf("readyz when not ready: %d %q", code, body)
	}
	if n := testutil.ToFloat64(m.readyFail); n != 1 {
		t.Errorf("%s = %v, want 1", NameReadyzFailure, n)
	}
	if code, _, _ := get(t, h, "HEAD", "/healthz"); code != 200 {
		t.Errorf("HEAD /healthz: %d", code)
	}
	if code, _, _ := get(t, h, "POST", "/readyz"); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /readyz: %d, want 405", code)
	}
	if code, _, _ := get(t, h, "GET", "/debug/pprof/"); code != 404 {
		t.Errorf("GET /debug/pprof/: %d, want 404", code)
	}

	code, hd, body := get(t, h, "GET", "/metrics")
	if code != 200 || !strings.HasPrefix(hd.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("metrics: %d %v", code, hd)
	}
	for _, want := range []string{
		`airlock_build_info{go_version="go`, `version="1.2.3-test"} 1`,
		"# TYPE " + NameTaskDuration + " histogram", "# TYPE " + NameStepDuration + " histogram",
		NameInputBytes + `{queue="default"} 0`, NameFilesBytes + `{queue="default"} 0`,
		NameEgressBytes + `{direction="up",queue="default"} 0`, NamePromotions + `{result="published"} 0`,
		NameSlots + " 0", NameSlotsBusy + " 0", NameRedisRetries + " 0", NameReadyzFailure + " 1",
		"go_goroutines ", "process_start_time_seconds ", "promhttp_metric_handler_requests_total",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func exitCode(n int) *int { return &n }

func sampleRecord() *record.Run {
	return &record.Run{
		Queue: "a", State: record.StateFailed, Verdict: record.VerdictExit, DurationMS: 1500,
		Workspace: record.Workspace{InputBytes: 1000},
		Inputs:    []record.Input{{Path: "in/x", Bytes: 300}, {Path: "in/y", Bytes: 20, Error: "more than max_bytes 20"}},
		Steps: []record.Step{
			{Name: "a", Verdict: record.VerdictOK, ExitCode: exitCode(0), DurationMS: 2},
			{Name: "b", Verdict: record.VerdictExit, ExitCode: exitCode(1), DurationMS: 700},
		},
		Egress: []record.Egress{{Host: "x", Port: 443, Allowed: true, BytesUp: 10, BytesDown: 300}, {Host: "y", Port: 443, BytesUp: 5}},
	}
}

func TestRunEnded(t *testing.T) {
	m := New("v", "a", "b")
	m.SetSlots(func() (int, int) { return 1, 4 })
	rec := sampleRecord()
	m.RunEnded(rec)
	m.RunEnded(rec)
	m.RunEnded(&record.Run{Queue: "b", State: record.StatePromoted, Verdict: record.VerdictOK, DurationMS: 10})
	m.Promotion(Published)
	m.Promotion(Already)
	m.Promotion(Failed)
	m.RedisError(OpEvents)
	m.StartRetry()

	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"a failed/exit", testutil.ToFloat64(m.tasks.WithLabelValues("a", "failed", "exit")), 2},
		{"b failed/exit", testutil.ToFloat64(m.tasks.WithLabelValues("b", "failed", "exit")), 0},
		{"b promoted/ok", testutil.ToFloat64(m.tasks.WithLabelValues("b", "promoted", "ok")), 1},
		{"a input bytes (downloads)", testutil.ToFloat64(m.inputBytes.WithLabelValues("a")), 640},
		{"a files bytes", testutil.ToFloat64(m.filesBytes.WithLabelValues("a")), 2000},
		{"b input bytes", testutil.ToFloat64(m.inputBytes.WithLabelValues("b")), 0},
		{"a egress up", testutil.ToFloat64(m.egress.WithLabelValues("a", "up")), 30},
		{"a egress down", testutil.ToFloat64(m.egress.WithLabelValues("a", "down")), 600},
		{"published (one inline, one task)", testutil.ToFloat64(m.promotions.WithLabelValues(Published)), 2},
		{"already", testutil.ToFloat64(m.promotions.WithLabelValues(Already)), 1},
		{"failed", testutil.ToFloat64(m.promotions.WithLabelValues(Failed)), 1},
		{"redis events", testutil.ToFloat64(m.redisErrs.WithLabelValues(OpEvents)), 1},
		{"start retries", testutil.ToFloat64(m.startRetry), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.taskDur); n != 2 {
		t.Errorf("task duration: %d series, want one per queue", n)
	}
	body := scrape(t, m)
	for _, want := range []string{
		NameTaskDuration + `_count{queue="a"} 2`, NameTaskDuration + `_bucket{queue="a",le="2.5"} 2`,
		NameTaskDuration + `_bucket{queue="a",le="1"} 0`, NameTaskDuration + `_bucket{queue="b",le="0.01"} 1`,
		NameStepDuration + `_count{queue="a"} 4`, NameStepDuration + `_bucket{queue="a",le="0.0025"} 2`,
		NameStepDuration + `_count{queue="b"} 0`,
		NameSlots + " 4", NameSlotsBusy + " 1",
		NameTasks + `{queue="a",state="failed",verdict="exit"} 2`,
		NameInputBytes + `{queue="a"} 640`, NameFilesBytes + `{queue="a"} 2000`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	_, _, body := get(t, Handler(m, func(context.Context) error { return nil }), "GET", "/metrics")
	return body
}

// RunEnded is on every task's path: once its (state, verdict) pair has
// been seen, it allocates nothing.
func TestRunEndedAllocs(t *testing.T) {
	m := New("v", "a")
	rec := sampleRecord()
	m.RunEnded(rec)
	if n := testing.AllocsPerRun(100, func() { m.RunEnded(rec) }); n != 0 {
		t.Errorf("RunEnded allocates %v times per call", n)
	}
}

func TestRunEndedConcurrent(t *testing.T) {
	m := New("v", "q")
	done := make(chan struct{})
	for i := 0; i < 8; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := 0; j < 200; j++ {
				m.RunEnded(&record.Run{Queue: "q", State: record.StateCompleted, Verdict: record.VerdictOK})
			}
		}()
	}
	for i := 0; i < 8; i++ {
		<-done
	}
	if n := testutil.ToFloat64(m.tasks.WithLabelValues("q", "completed", "ok")); n != 1600 {
		t.Errorf("completed/ok = %v, want 1600", n)
	}
}

func TestListenShutdown(t *testing.T) {
	m := New("v")
	block := make(chan struct{})
	srv, err := Listen("127.0.0.1:0", Handler(m, func(ctx context.Context) error {
		<-block // a slow readiness check in progress when shutdown starts
		return nil
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + srv.Addr()
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, b)
	}

	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	time.Sleep(50 * time.Millisecond) // the request is in the handler
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(5 * time.Second) }()
	time.Sleep(50 * time.Millisecond)
	close(block)
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if code := <-got; code != 200 {
		t.Errorf("the request in progress at shutdown: %d, want 200 (graceful)", code)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after Shutdown")
	}
	http.DefaultClient.CloseIdleConnections()

	// A taken address is an error at once.
	ln, err := Listen("127.0.0.1:0", Handler(m, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Shutdown(time.Second)
	if _, err := Listen(ln.Addr(), Handler(m, nil), nil); err == nil {
		t.Error("Listen on a taken address: no error")
	}
}
