//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// TestMetrics scrapes a real worker (-metrics-addr) serving two queues
// with one slot: before any task every counter is exposed at 0 on both
// queues; a run on the first queue with a download from a local HTTP
// server and inline files counts the download's bytes as
// airlock_input_bytes_total and the files' as airlock_files_bytes_total,
// under its queue; while a run holds the slot, tasks enqueued into the
// second queue show as pending in airlock_queue_tasks, the running one as
// active; and promtool finds every scrape clean.
func TestMetrics(t *testing.T) {
	t.Parallel()
	needRoot(t)
	download := bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(download) }))
	t.Cleanup(srv.Close)
	httpPort := freeTCPPort(t)
	b := newBundle(t)
	q1, q2 := b.queue, redistest.Queue(t)
	b.worker = b.startWorker("-queues", q1+"=1,"+q2+"=1", "-concurrency", "1", "-fetch-allow", "127.0.0.1",
		"-store", t.TempDir(), "-metrics-addr", fmt.Sprintf("127.0.0.1:%d", httpPort))
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	scrape := func() string {
		t.Helper()
		code, body, err := httpGet(base + "/metrics")
		if err != nil || code != 200 {
			t.Fatalf("/metrics: %d %v", code, err)
		}
		return body
	}

	body := scrape()
	for _, q := range []string{q1, q2} {
		for _, s := range []string{
			`airlock_tasks_finished_total{queue="` + q + `",state="completed",verdict="ok"}`,
			`airlock_tasks_finished_total{queue="` + q + `",state="failed",verdict="fetch"}`,
			`airlock_tasks_finished_total{queue="` + q + `",state="canceled",verdict="canceled"}`,
			`airlock_input_bytes_total{queue="` + q + `"}`, `airlock_files_bytes_total{queue="` + q + `"}`,
			`airlock_task_duration_seconds_count{queue="` + q + `"}`,
			`airlock_queue_tasks{queue="` + q + `",state="pending"}`, `airlock_queue_tasks{queue="` + q + `",state="active"}`,
		} {
			if v, ok := sample(body, s); !ok || v != 0 {
				t.Errorf("before any task: %s = %v (exposed: %v), want 0", s, v, ok)
			}
		}
	}
	if v, ok := sample(body, `airlock_promotions_total{result="refused"}`); !ok || v != 0 {
		t.Errorf("before any task: promotions refused = %v (exposed: %v), want 0", v, ok)
	}
	promtoolCheck(t, "before any task", body)

	files := map[string]string{"a.txt": "hello\n", "dir/b.txt": strings.Repeat("x", 1000)}
	rec := b.run(fmt.Sprintf(`{"version": 1, "files": %s,
		"inputs": [{"url": %q, "path": "in/data.bin"}],
		"steps": [{"run": ["sh", "-c", "wc -c < in/data.bin; cat a.txt dir/b.txt > /dev/null"]}]}`, mustJSON(t, files), srv.URL+"/data.bin"))
	if rec.State != record.StateCompleted || len(rec.Inputs) != 1 || rec.Inputs[0].Bytes != int64(len(download)) {
		t.Fatalf("want completed with one 64 KiB input:\n%s", mustJSON(t, rec))
	}
	filesBytes := len(files["a.txt"]) + len(files["dir/b.txt"])
	body = scrape()
	for s, want := range map[string]float64{
		`airlock_input_bytes_total{queue="` + q1 + `"}`:                                   float64(len(download)),
		`airlock_files_bytes_total{queue="` + q1 + `"}`:                                   float64(filesBytes),
		`airlock_tasks_finished_total{queue="` + q1 + `",state="completed",verdict="ok"}`: 1,
		`airlock_task_duration_seconds_count{queue="` + q1 + `"}`:                         1,
		`airlock_step_duration_seconds_count{queue="` + q1 + `"}`:                         1,
		`airlock_input_bytes_total{queue="` + q2 + `"}`:                                   0,
		`airlock_tasks_finished_total{queue="` + q2 + `",state="completed",verdict="ok"}`: 0,
	} {
		if v, ok := sample(body, s); !ok || v != want {
			t.Errorf("after the run: %s = %v (exposed: %v), want %v", s, v, ok, want)
		}
	}

	// The slot busy on q1, two tasks wait in q2.
	ctx := context.Background()
	marker := "30." + numMarker()
	busy, err := b.client.Enqueue(ctx, b.spec(napSpec(marker)))
	if err != nil {
		t.Fatal(err)
	}
	started(t, marker)
	for range 2 {
		s := b.spec(`{"version": 1, "steps": [{"run": ["true"]}]}`)
		s.Queue = q2
		if _, err := b.client.Enqueue(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	body = scrape()
	for s, want := range map[string]float64{
		`airlock_queue_tasks{queue="` + q1 + `",state="active"}`:    1,
		`airlock_queue_tasks{queue="` + q1 + `",state="pending"}`:   0,
		`airlock_queue_tasks{queue="` + q2 + `",state="pending"}`:   2,
		`airlock_queue_tasks{queue="` + q2 + `",state="active"}`:    0,
		`airlock_queue_tasks{queue="` + q2 + `",state="scheduled"}`: 0,
		`airlock_queue_tasks{queue="` + q2 + `",state="retry"}`:     0,
		`airlock_slots_busy`:                      1,
		`airlock_redis_errors_total{op="queues"}`: 0,
	} {
		if v, ok := sample(body, s); !ok || v != want {
			t.Errorf("slot busy, two waiting: %s = %v (exposed: %v), want %v", s, v, ok, want)
		}
	}
	promtoolCheck(t, "slot busy", body)

	if rec, err := b.client.Cancel(ctx, q1, busy.TaskID); err != nil || rec.State != record.StateCanceled {
		t.Fatalf("cancel: %v %+v", err, rec)
	}
	var last string
	if !eventually(30*time.Second, func() bool {
		body = scrape()
		v, _ := sample(body, `airlock_tasks_finished_total{queue="`+q2+`",state="completed",verdict="ok"}`)
		p, _ := sample(body, `airlock_queue_tasks{queue="`+q2+`",state="pending"}`)
		last = fmt.Sprintf("q2 completed %v, pending %v", v, p)
		return v == 2 && p == 0
	}) {
		t.Fatalf("the two q2 tasks did not run once the slot was free: %s", last)
	}
	if v, ok := sample(body, `airlock_tasks_finished_total{queue="`+q1+`",state="canceled",verdict="canceled"}`); !ok || v != 1 {
		t.Errorf("canceled on q1 = %v (exposed: %v), want 1", v, ok)
	}
	promtoolCheck(t, "at the end", body)
}

// sample returns the value of the sample series (name{labels} as the
// text format writes it, labels sorted) in a scrape.
func sample(body, series string) (float64, bool) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	return v, err == nil
}

// promtoolCheck runs `promtool check metrics` (Prometheus' linter) on a
// scrape: it must find nothing. Without promtool the check is skipped,
// unless AIRLOCK_REQUIRE_PROMTOOL=1 (CI installs it).
func promtoolCheck(t *testing.T, when, body string) {
	t.Helper()
	t.Run("promtool "+when, func(t *testing.T) {
		path, err := exec.LookPath("promtool")
		if err != nil {
			if os.Getenv("AIRLOCK_REQUIRE_PROMTOOL") == "1" {
				t.Fatal("AIRLOCK_REQUIRE_PROMTOOL=1 and no promtool on PATH (Debian: apt-get install prometheus)")
			}
			t.Skip("no promtool on PATH (Debian: apt-get install prometheus; AIRLOCK_REQUIRE_PROMTOOL=1 makes this a failure)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, path, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	})
}
