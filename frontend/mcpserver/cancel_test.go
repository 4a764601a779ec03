package mcpserver

import (
	"context"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve/approvetest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// TestCancelRun checks cancel_run against a real client and Redis: the
// agent's own pending run is canceled (and again: the same record); a run
// of another principal, or of none, is not found and left as it was; an
// unknown task and a finished run are errors; a queue the server does not
// serve is refused naming queue.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	prefix, q := approvetest.Prefix(t)
	rdb := redistest.Client(t)
	c := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Principal: "agent@corp"})
	cs := connect(t, c, Options{Queues: []string{q}, Principal: "agent@corp"}, nil)
	ctx := context.Background()

	res, out := callTool(t, cs, ToolRunAction, `{"command": "sleep 1"}`)
	if res.IsError {
		t.Fatalf("run_action: %v", out)
	}
	id := out["task_id"].(string)
	res, out = callTool(t, cs, ToolCancelRun, `{"task_id": "`+id+`"}`)
	rec, _ := out["record"].(map[string]any)
	if res.IsError || rec["state"] != "canceled" || rec["error"] != "canceled by agent@corp before it started" || rec["attempt"] != 1.0 ||
		!strings.HasPrefix(out["note"].(string), "canceled: ") {
		t.Fatalf("cancel_run of the agent's pending run: %v", out)
	}
	if res, again := callTool(t, cs, ToolCancelRun, `{"task_id": "`+id+`", "queue": "`+q+`"}`); res.IsError || again["record"].(map[string]any)["error"] != rec["error"] {
		t.Errorf("cancel_run again: %v", again)
	}

	// Another principal's run, and a run that names none.
	other := airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Principal: "someone-else"})
	theirs, err := other.Enqueue(ctx, &tasks.Spec{Version: tasks.Version, Queue: q, Steps: []tasks.Step{{Run: []string{"true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := asynq.NewClientFromRedisClient(rdb).Enqueue(asynq.NewTask(tasks.TypeRun, []byte(`{"version": 1, "steps": [{"run": ["true"]}]}`)), asynq.Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{theirs.TaskID, raw.ID} {
		// Unknown here: the words of a task that does not exist.
		res, out := callTool(t, cs, ToolCancelRun, `{"task_id": "`+id+`"}`)
		want := `task "` + id + `" not found in queue "` + q + `" (check the queue and id; a finished task is kept only for the retention period)`
		if !res.IsError || out["error"] != want {
			t.Errorf("cancel_run of %s: %v, want the error %q", id, out, want)
		}
		if now, err := c.Status(ctx, q, id); err != nil || now.State != airlock.StatePending {
			t.Errorf("%s after a refused cancel_run: %+v, %v; want pending", id, now, err)
		}
	}

	res, out = callTool(t, cs, ToolCancelRun, `{"task_id": "no-such-task"}`)
	if !res.IsError || !strings.Contains(out["error"].(string), "not found") {
		t.Errorf("cancel_run of an unknown task: %v", out)
	}
	res, out = callTool(t, cs, ToolCancelRun, `{"task_id": "`+id+`", "queue": "elsewhere"}`)
	if !res.IsError || out["field"] != "queue" {
		t.Errorf("cancel_run in a queue not served: %v", out)
	}

	// A finished run of the agent's: an error with its state.
	redistest.Serve(t, q, func(ctx context.Context, task *asynq.Task) error {
		_, err := task.ResultWriter().Write([]byte(`{"task_id": "` + task.ResultWriter().TaskID() + `", "principal": "agent@corp", "state": "completed", "verdict": "ok", "attempt": 1}`))
		return err
	})
	res, out = callTool(t, cs, ToolRunAction, `{"command": "true", "wait": true, "wait_timeout": "20s"}`)
	if res.IsError || out["record"].(map[string]any)["state"] != "completed" {
		t.Fatalf("run_action with a worker: %v", out)
	}
	done := out["task_id"].(string)
	res, out = callTool(t, cs, ToolCancelRun, `{"task_id": "`+done+`"}`)
	if !res.IsError || out["state"] != string(record.StateCompleted) || !strings.Contains(out["error"].(string), "is already completed: nothing to cancel") {
		t.Errorf("cancel_run of a completed run: %v", out)
	}
}
