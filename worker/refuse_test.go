//go:build linux

package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/refused"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/promote"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestRefusedRunsLeaveTheirRecordOnly: a task the worker refuses without
// running it (a payload that is no spec, a secret the policy does not
// grant: what a raw enqueuer can send) is deleted from asynq, payload and
// all, as soon as its handler returns; its record, small, stays where
// Status, Wait, Result, Cancel and Locate read it, saying why.
func TestRefusedRunsLeaveTheirRecordOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a real worker; not with -short")
	}
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	prefix := q + ":"
	t.Cleanup(func() { _ = redistest.DeleteMatching(context.Background(), rdb, prefix+"*") })
	root, err := os.MkdirTemp("", "airlock-refuse-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	w, err := New(Config{
		Redis: rdb, Prefix: prefix, Queues: map[string]int{q: 1}, Concurrency: 1,
		Isolation: BestEffort, Cgroup: "off", WorkspaceRoot: filepath.Join(root, "ws"),
		UIDLockDir: filepath.Join(root, "uids"), UIDFirst: 380110, UIDCount: 10,
		Sink: &promote.FS{Dir: filepath.Join(root, "store")}, SweepInterval: time.Hour,
		ShutdownTimeout: 200 * time.Millisecond, Grace: 100 * time.Millisecond,
		Logger: zerolog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "worker started"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("worker not started:\n%s", logs.String())
		}
	}
	ac := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix})
	pad := strings.Repeat("p", 200<<10) // what asynq would have kept
	for _, tt := range []struct {
		name, payload, why string
	}{
		{"no spec", `{"version": 1, "steps": [{"run": ["true"]}], "padding": "` + pad + `"}`, "spec rejected: "},
		{"a secret not granted", `{"version": 1, "secrets": ["TOKEN"], "steps": [{"run": ["true"]}], "files": {"pad": "` + pad + `"}}`, "secret refused: "},
	} {
		info, err := ac.Enqueue(asynq.NewTask(tasks.TypeRun, []byte(tt.payload)), asynq.Queue(q), asynq.Retention(time.Hour), asynq.MaxRetry(3))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := c.Wait(ctx, q, info.ID)
		if err != nil || rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.HasPrefix(rec.Error, tt.why) || rec.Attempt != 1 {
			t.Fatalf("%s: Wait: %+v, %v", tt.name, rec, err)
		}
		// asynq deletes the task once the handler returned.
		var gone bool
		for deadline := time.Now().Add(5 * time.Second); !gone && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			_, err := insp.GetTaskInfo(q, info.ID)
			gone = errors.Is(err, asynq.ErrTaskNotFound)
		}
		if !gone {
			ti, _ := insp.GetTaskInfo(q, info.ID)
			t.Fatalf("%s: asynq keeps the refused task: %+v", tt.name, ti)
		}
		stored, ok, err := refused.Get(ctx, rdb, prefix, q, info.ID)
		if err != nil || !ok || stored.Error != rec.Error {
			t.Errorf("%s: the refusal's record: %+v, %v, %v", tt.name, stored, ok, err)
		}
		if n := rdb.HStrLen(ctx, refused.Key(prefix, q), info.ID).Val(); n > 512 {
			t.Errorf("%s: the refusal's record is %d bytes", tt.name, n)
		}
		for what, read := range map[string]func() (*record.Run, error){
			"Status": func() (*record.Run, error) { return c.Status(ctx, q, info.ID) },
			"Wait":   func() (*record.Run, error) { return c.Wait(ctx, q, info.ID) },
			"Cancel": func() (*record.Run, error) { return c.Cancel(ctx, q, info.ID) },
		} {
			got, err := read()
			if what == "Cancel" && errors.Is(err, airlock.ErrFinal) {
				err = nil
			}
			if err != nil || got.TaskID != info.ID || got.Queue != q || got.State != record.StateFailed || got.Error != rec.Error || got.Steps == nil {
				t.Errorf("%s: %s of the refused task: %+v, %v", tt.name, what, got, err)
			}
		}
		if where, err := c.Locate(ctx, info.ID); err != nil || where != q {
			t.Errorf("%s: Locate: %q, %v", tt.name, where, err)
		}
		if _, err := c.Result(ctx, info.ID); !errors.Is(err, airlock.ErrNotPromoted) || !strings.Contains(err.Error(), tt.why) {
			t.Errorf("%s: Result: %v, want ErrNotPromoted with the reason", tt.name, err)
		}
	}
	if _, err := c.Status(ctx, q, "no-such-task"); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("Status of a task never enqueued: %v, want ErrNotFound", err)
	}
}

// TestRefusedErrIsFinal: asynq deletes the task of a refused run
// (RevokeTask, which its processor looks for before SkipRetry), and
// whoever reads the handler's error sees a run that will not run again.
func TestRefusedErrIsFinal(t *testing.T) {
	err := refusedErr(&record.Run{Verdict: record.VerdictSessionLimit, Error: "full"})
	if !errors.Is(err, asynq.RevokeTask) || !errors.Is(err, asynq.SkipRetry) {
		t.Errorf("%v: want it to match asynq.RevokeTask and asynq.SkipRetry", err)
	}
}
