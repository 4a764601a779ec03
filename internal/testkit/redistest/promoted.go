package redistest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// PromotedResult is the result ServePromoted publishes for every run.
const PromotedResult = `{"rows": 3}`

// ServePromoted serves queue (Serve) as a worker whose policy promotes
// every run into the filesystem store dir would: each task's manifest and
// result (PromotedResult) are written to dir/<run_id>/<task_id>/, and its
// record says promoted, published to publishedTo of that directory
// (nil: the directory itself), as a worker that sees its store elsewhere,
// or relative, would say.
func ServePromoted(t testing.TB, queue, dir string, publishedTo func(where, runID, taskID string) string) {
	t.Helper()
	Serve(t, queue, func(ctx context.Context, task *asynq.Task) error {
		var s struct {
			RunID     string `json:"run_id"`
			Queue     string `json:"queue"`
			Principal string `json:"principal"`
		}
		if err := json.Unmarshal(task.Payload(), &s); err != nil {
			return err
		}
		id := task.ResultWriter().TaskID()
		where := filepath.Join(dir, s.RunID, id)
		if err := os.MkdirAll(where, 0o700); err != nil {
			return err
		}
		m, err := json.Marshal(map[string]any{"run_id": s.RunID, "task_id": id, "result": map[string]any{"name": "result.json"}})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(where, "result.json"), []byte(PromotedResult), 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(where, "manifest.json"), m, 0o600); err != nil {
			return err
		}
		if publishedTo != nil {
			where = publishedTo(where, s.RunID, id)
		}
		b, err := json.Marshal(record.Run{TaskID: id, RunID: s.RunID, Queue: s.Queue, Principal: s.Principal, State: record.StatePromoted,
			Verdict: record.VerdictOK, Attempt: 1, Steps: []record.Step{}, PublishedTo: where})
		if err != nil {
			return err
		}
		_, err = task.ResultWriter().Write(b)
		return err
	})
}

// PromotedElsewhere serves queue as ServePromoted does, with records that
// say the output is in /nonexistent/store (where a worker on another
// machine sees its store, which this process does not), enqueues one run
// r1 of principal (whose front end may read it), waits for it and returns
// its task id: its output is in dir.
func PromotedElsewhere(t testing.TB, queue, dir, principal string) string {
	t.Helper()
	ServePromoted(t, queue, dir, func(_, runID, taskID string) string {
		return filepath.Join("/nonexistent/store", runID, taskID)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := airlock.NewClient(Client(t), airlock.ClientOptions{})
	e, err := c.Enqueue(ctx, &tasks.Spec{Version: tasks.Version, Queue: queue, RunID: "r1", Principal: principal, Steps: []tasks.Step{{Run: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, queue, e.TaskID); err != nil {
		t.Fatal(err)
	}
	return e.TaskID
}
