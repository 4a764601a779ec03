//go:build linux

package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestHandedBackWakesIdleWorkers: a task handed back by a stopping worker
// starts on an idle worker of its queue at once, not at that worker's
// next idle poll (10 s here).
func TestHandedBackWakesIdleWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two real workers; not with -short")
	}
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	start := func(name string, uidFirst int) (stop func(), logs *syncBuffer) {
		root, err := os.MkdirTemp("", "airlock-handback-test-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(root) })
		if err := os.Chmod(root, 0o711); err != nil {
			t.Fatal(err)
		}
		logs = &syncBuffer{}
		w, err := New(Config{
			Redis: rdb, Prefix: q + ":", Queues: map[string]int{q: 1}, Concurrency: 1,
			Isolation: BestEffort, Cgroup: "off", WorkspaceRoot: filepath.Join(root, "ws"),
			UIDLockDir: filepath.Join(root, "uids"), UIDFirst: uidFirst, UIDCount: 10,
			Sink: &promote.FS{Dir: filepath.Join(root, "store")}, SweepInterval: time.Hour,
			IdleWait: 10 * time.Second, ShutdownTimeout: 200 * time.Millisecond, Grace: 100 * time.Millisecond,
			Logger: zerolog.New(logs).With().Str("worker", name).Logger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		var once bool
		stop = func() {
			if once {
				return
			}
			once = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("worker %s: %v", name, err)
			}
		}
		t.Cleanup(stop)
		return stop, logs
	}
	stopA, logsA := start("a", 380010)
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: q + ":"})
	spec, err := tasks.Decode([]byte(`{"version": 1, "queue": "` + q + `", "steps": [{"run": ["sleep", "2"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Enqueue(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	started := func(logs *syncBuffer) bool {
		for _, l := range taskLines(t, logs, e.TaskID) {
			if l["message"] == "task start" {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); !started(logsA); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("worker a did not start the task")
		}
	}
	// B starts now, with nothing to do: its polls go idle, for 10 s each.
	_, logsB := start("b", 380020)
	time.Sleep(500 * time.Millisecond)
	stopped := time.Now()
	stopA()
	for deadline := time.Now().Add(8 * time.Second); !started(logsB); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			info, _ := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(q, e.TaskID)
			t.Fatalf("worker b did not start the handed-back task within 8 s of a's stop (its idle poll waits 10 s); task %+v\na's log:\n%s\nb's log:\n%s", info, logsA.String(), logsB.String())
		}
	}
	t.Logf("handed back, started by b %s after a's stop began", time.Since(stopped).Round(time.Millisecond))
	if !strings.Contains(logsA.String(), "handing it back") {
		t.Errorf("a did not hand the task back:\n%s", logsA.String())
	}
	rec, err := c.Wait(context.Background(), q, e.TaskID)
	if err != nil || rec.State != record.StateCompleted {
		t.Errorf("handed-back task: %+v, %v", rec, err)
	}
}
