package metrics

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// Prometheus' linter (promtool check metrics) finds nothing in a scrape
// with every kind of series set: it skips without promtool, unless
// AIRLOCK_REQUIRE_PROMTOOL=1 (CI installs it). e2e TestMetrics runs it on
// a real worker's scrapes.
func TestPromtool(t *testing.T) {
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("AIRLOCK_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("AIRLOCK_REQUIRE_PROMTOOL=1 and no promtool on PATH (Debian: apt-get install prometheus)")
		}
		t.Skip("no promtool on PATH (Debian: apt-get install prometheus; AIRLOCK_REQUIRE_PROMTOOL=1 makes this a failure)")
	}
	q := redistest.Queue(t)
	m := New("1.0.0", q, "batch")
	m.SetSlots(func() (int, int) { return 1, 2 })
	m.SetPending(func() (int64, error) { return 3, nil })
	m.SetPendingBytes(func() (int64, error) { return 4096, nil })
	m.SetHelperRestarts(func() int64 { return 1 })
	rdb := redistest.Client(t)
	rdb.RPush(context.Background(), asynqkey.Pending(q), "a", "b")
	m.SetRedis(rdb)
	rec := sampleRecord()
	rec.Queue = "batch"
	m.RunEnded(rec)
	m.RunEnded(&record.Run{Queue: "elsewhere", State: record.StatePromoted, Verdict: record.VerdictOK})
	m.Promotion(Refused)
	m.RedisError(OpPing)
	body := scrape(t, m)
	if !strings.Contains(body, NameQueueTasks+`{queue="`+q+`",state="pending"} 2`) {
		t.Fatalf("the scrape lacks the depth:\n%s", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
