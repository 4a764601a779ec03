package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock"
	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/actions"
	csvreport "github.com/airlock-run/airlock/examples/csv-report"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

const validSpec = `{"version": 1, "steps": [{"run": ["true"]}]}`

// result is what a run of the command gave.
type result struct {
	Code           int
	Stdout, Stderr string
}

// enqueueCmd runs the command against the test Redis with args then the
// spec's path: the spec is written to a file when path is "", or given on
// stdin when path is "-".
func enqueueCmd(t *testing.T, spec, path string, args ...string) result {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "spec.json")
		if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args = append(append([]string{"-redis", redistest.URL(t)}, args...), path)
	return runArgs(t, spec, args...)
}

func runArgs(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func TestRejected(t *testing.T) {
	t.Parallel()
	big := func(n int) string {
		return `{"version": 1, "files": {"big": "` + strings.Repeat("x", n) + `"}, "steps": [{"run": ["true"]}]}`
	}
	for _, tc := range []struct {
		name, spec string
		stderr     string // the whole of stderr, or its start when it ends in "..."
	}{
		{
			"unknown field", `{"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}`,
			"enqueue: spec rejected: steps[0].tiemout: unknown field (known fields: name, run, stdin, timeout, env, cwd)\n",
		},
		{
			"wrong type", `{"version": 1, "steps": [{"run": "true"}]}`,
			"enqueue: spec rejected: steps[0].run: want a JSON array\n",
		},
		{
			"dotdot path", `{"version": 1, "files": {"../x": "y"}, "steps": [{"run": ["true"]}]}`,
			`enqueue: spec rejected: files["../x"]: "../x" leaves the workspace (remove the .. component)` + "\n",
		},
		{
			"above the published maximum", `{"version": 1, "steps": [{"run": ["true"]}], "limits": {"processes": 100}}`,
			"enqueue: spec rejected: limits.processes: 100 is above the worker's maximum 10 (a spec may lower a limit, never raise it past the operator's maximum)\n",
		},
		{
			"network not allowed", `{"version": 1, "network": true, "steps": [{"run": ["true"]}]}`,
			"enqueue: spec rejected: network: the worker's operator does not allow network for steps...",
		},
		{
			"oversized payload", big(tasks.DefaultMaxPayload),
			"enqueue: spec rejected: spec: payload is ...",
		},
		{
			"oversized file", big(tasks.DefaultMaxPayload + readSlack),
			fmt.Sprintf("enqueue: spec rejected: spec: more than %d bytes of JSON, so its payload would be above the cap of %d bytes (inline files and stdin are for small inputs)\n",
				tasks.DefaultMaxPayload+readSlack, tasks.DefaultMaxPayload),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := redistest.Queue(t)
			p := limits.DefaultPolicy()
			p.Default.Processes, p.Max.Processes = 10, 10
			if err := queuepolicy.Publish(context.Background(), redistest.Client(t), "", []string{q}, p); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"", "-"} {
				got := enqueueCmd(t, tc.spec, path, "-queue", q)
				want := result{Code: 2, Stderr: tc.stderr}
				if prefix, ok := strings.CutSuffix(tc.stderr, "..."); ok && strings.HasPrefix(got.Stderr, prefix) && strings.Count(got.Stderr, "\n") == 1 {
					want.Stderr = got.Stderr
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("spec from %q: (-want +got):\n%s", path, diff)
				}
			}
		})
	}
}

func TestEnqueue(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", "-"} {
		q := redistest.Queue(t)
		got := enqueueCmd(t, validSpec, path, "-queue", q, "-retention", "1h")
		id := strings.TrimSuffix(got.Stdout, "\n")
		// No worker serves q: said on stderr, the exit status unchanged.
		warning := fmt.Sprintf("enqueue: warning: no worker serves queue %q (none announced itself in the last 30s): task %s waits until one starts (worker -queues %s)\n", q, id, q)
		if got.Code != 0 || got.Stderr != warning || id == "" || strings.Contains(id, "\n") {
			t.Fatalf("spec from %q: got %+v, want exit 0, one line, the task id, and the warning", path, got)
		}
		info, err := asynq.NewInspectorFromRedisClient(redistest.Client(t)).GetTaskInfo(q, id)
		if err != nil {
			t.Fatalf("the printed task id is not in queue %s: %v", q, err)
		}
		if info.State != asynq.TaskStatePending || info.Retention != time.Hour || info.Type != tasks.TypeRun {
			t.Errorf("task %+v: want pending, retention 1h (-retention), type %s", info, tasks.TypeRun)
		}
	}
}

// TestQueueFlag checks that -queue overrides the spec's queue, and that the
// spec's queue is used without it.
func TestQueueFlag(t *testing.T) {
	t.Parallel()
	inSpec, inFlag := redistest.Queue(t), redistest.Queue(t)
	spec := `{"version": 1, "queue": "` + inSpec + `", "steps": [{"run": ["true"]}]}`
	insp := asynq.NewInspectorFromRedisClient(redistest.Client(t))
	for _, tc := range []struct {
		args  []string
		queue string
	}{{nil, inSpec}, {[]string{"-queue", inFlag}, inFlag}} {
		got := enqueueCmd(t, spec, "", tc.args...)
		if got.Code != 0 {
			t.Fatalf("args %q: %+v", tc.args, got)
		}
		if _, err := insp.GetTaskInfo(tc.queue, strings.TrimSpace(got.Stdout)); err != nil {
			t.Errorf("args %q: task not in queue %s: %v", tc.args, tc.queue, err)
		}
	}
}

func TestDuplicate(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	spec := `{"version": 1, "idempotency_key": "order-7", "steps": [{"run": ["true"]}]}`
	announce(t, q)
	first := enqueueCmd(t, spec, "", "-queue", q)
	again := enqueueCmd(t, spec, "", "-queue", q)
	if first.Code != 0 || first.Stderr != "" {
		t.Fatalf("first: %+v", first)
	}
	if again.Code != 0 || again.Stdout != first.Stdout || !strings.HasPrefix(again.Stderr, `enqueue: duplicate: idempotency_key "order-7" matches task `+strings.TrimSpace(first.Stdout)) {
		t.Errorf("again: %+v; want exit 0, the first task id %q and a duplicate note", again, first.Stdout)
	}
}

// fakeWorker serves q, storing a record of state and verdict and returning
// ret.
func fakeWorker(t *testing.T, q string, state record.State, verdict record.Verdict, ret error) {
	announce(t, q)
	redistest.Serve(t, q, func(ctx context.Context, task *asynq.Task) error {
		var s tasks.Spec
		if err := json.Unmarshal(task.Payload(), &s); err != nil {
			return err
		}
		b, err := json.Marshal(record.Run{TaskID: task.ResultWriter().TaskID(), RunID: s.RunID, Queue: s.Queue,
			State: state, Verdict: verdict, Attempt: 1, Steps: []record.Step{{Name: "step-1", Verdict: verdict}}})
		if err != nil {
			return err
		}
		if _, err := task.ResultWriter().Write(b); err != nil {
			return err
		}
		return ret
	})
}

func TestWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		state   record.State
		verdict record.Verdict
		ret     error
		list    func(*asynq.Inspector, string) ([]*asynq.TaskInfo, error)
	}{
		{"completed", record.StateCompleted, record.VerdictOK, nil,
			func(i *asynq.Inspector, q string) ([]*asynq.TaskInfo, error) { return i.ListCompletedTasks(q) }},
		{"failed", record.StateFailed, record.VerdictExit, fmt.Errorf("step-1 exited 1: %w", asynq.SkipRetry),
			func(i *asynq.Inspector, q string) ([]*asynq.TaskInfo, error) { return i.ListArchivedTasks(q) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := redistest.Queue(t)
			fakeWorker(t, q, tc.state, tc.verdict, tc.ret)
			got := enqueueCmd(t, validSpec, "", "-queue", q, "-wait", "-wait-timeout", "20s")
			if got.Code != 0 || got.Stderr != "" {
				t.Fatalf("got %+v, want exit 0 whatever the verdict", got)
			}
			dec := json.NewDecoder(strings.NewReader(got.Stdout))
			dec.DisallowUnknownFields()
			var rec record.Run
			if err := dec.Decode(&rec); err != nil {
				t.Fatalf("stdout %q is not a run record: %v", got.Stdout, err)
			}
			if _, err := dec.Token(); !errors.Is(err, io.EOF) || strings.Count(got.Stdout, "\n") != 1 {
				t.Errorf("stdout %q: want exactly one JSON object on one line", got.Stdout)
			}
			tasksInQueue, err := tc.list(asynq.NewInspectorFromRedisClient(redistest.Client(t)), q)
			if err != nil || len(tasksInQueue) != 1 {
				t.Fatalf("tasks %v, %v; want the one task", tasksInQueue, err)
			}
			want := record.Run{TaskID: tasksInQueue[0].ID, RunID: rec.RunID, Queue: q, State: tc.state, Verdict: tc.verdict,
				Attempt: 1, Steps: []record.Step{{Name: "step-1", Verdict: tc.verdict}}}
			if diff := cmp.Diff(want, rec); diff != "" || rec.RunID == "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			// -wait-id reads the same record back for the task's id.
			again := runArgs(t, "", "-redis", redistest.URL(t), "-queue", q, "-wait-id", rec.TaskID, "-wait-timeout", "20s")
			var rec2 record.Run
			if err := json.Unmarshal([]byte(again.Stdout), &rec2); err != nil || again.Code != 0 || rec2.TaskID != rec.TaskID {
				t.Errorf("-wait-id %s: got %+v", rec.TaskID, again)
			}
		})
	}
}

func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	got := enqueueCmd(t, validSpec, "", "-queue", q, "-wait", "-wait-timeout", "50ms") // no worker
	if got.Code != 1 || got.Stdout != "" || !strings.Contains(got.Stderr, "not done within -wait-timeout 50ms: ") ||
		!strings.Contains(got.Stderr, "still pending") {
		t.Errorf("got %+v, want exit 1 naming -wait-timeout and the pending state", got)
	}
}

func TestRedisErrors(t *testing.T) {
	t.Parallel()
	spec := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(spec, []byte(validSpec), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, stderr string
	}{
		// A connection error names the URL and where it came from.
		{"redis://127.0.0.1:1", "enqueue: Redis redis://127.0.0.1:1 (from -redis): airlock: "},
		{"127.0.0.1:1", "enqueue: Redis redis://127.0.0.1:1/0 (from -redis): airlock: "}, // HOST:PORT: redis://HOST:PORT/0
		{"http://127.0.0.1:6379", "enqueue: -redis: "},
		{"localhost", `enqueue: -redis: "localhost" has no scheme: write redis://localhost (HOST:PORT alone is read as redis://HOST:PORT/0)`},
	} {
		got := runArgs(t, "", "-redis", tc.url, spec)
		if got.Code != 1 || got.Stdout != "" || !strings.HasPrefix(got.Stderr, tc.stderr) || (strings.Contains(tc.url, ":1") && !strings.Contains(got.Stderr, "connection refused")) {
			t.Errorf("-redis %s: got %+v, want exit 1 and %q", tc.url, got, tc.stderr)
		}
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, 2, "", "enqueue: want one argument, the spec file or - for stdin (see -h)\n"},
		{[]string{"a.json", "b.json"}, 2, "", "enqueue: want one argument, the spec file or - for stdin (see -h)\n"},
		{[]string{"-wait-timeout", "0", "-"}, 2, "", "enqueue: -wait-timeout: must be positive\n"},
		{[]string{"-wait-id", "t1", "spec.json"}, 2, "", "enqueue: -wait-id takes no spec (see -h)\n"},
		{[]string{"/nonexistent/spec.json"}, 1, "", "enqueue: open /nonexistent/spec.json: no such file or directory\n"},
		// An unknown flag is said once, with no usage dump.
		{[]string{"-bogus", "-"}, 2, "", "enqueue: flag provided but not defined: -bogus (see enqueue -h)\n"},
		// -h prints the usage on stdout and exits 0.
		{[]string{"-h"}, 0, "usage: enqueue [flags] SPEC.json|-", ""},
		// -version prints the one version string.
		{[]string{"-version"}, 0, airlock.Version + "\n", ""},
		{[]string{"-store", "/s", "-"}, 2, "", "enqueue: -store: only with -result (see -h)\n"},
		// -json errors are JSON on stdout.
		{[]string{"-json", "-wait-timeout", "0", "-"}, 2, `{"error":"-wait-timeout: must be positive","code":2}` + "\n", ""},
	} {
		got := runArgs(t, "", tc.args...)
		if got.Code != tc.code || !strings.Contains(got.Stdout, tc.stdout) || (tc.stderr == "" && got.Stderr != "") || !strings.Contains(got.Stderr, tc.stderr) {
			t.Errorf("args %q: got %+v, want exit %d, stdout with %q and stderr %q", tc.args, got, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestJSONRejected: a rejected spec under -json is an error object naming
// the field.
func TestJSONRejected(t *testing.T) {
	t.Parallel()
	got := runArgs(t, `{"version": 1, "steps": [{"run": ["true"], "tiemout": "1s"}]}`, "-json", "-queue", redistest.Queue(t), "-")
	var e struct {
		Error, Field string
		Code         int
	}
	if err := json.Unmarshal([]byte(got.Stdout), &e); err != nil || got.Code != 2 || e.Field != "steps[0].tiemout" || e.Code != 2 || got.Stderr != "" {
		t.Errorf("got %+v (%+v, %v), want exit 2 and a JSON error naming steps[0].tiemout", got, e, err)
	}
}

// TestActionRejected: a call the published catalog refuses is an error
// listing every violation of its params (a missing one first), or naming
// the action, with a hint that names what enqueue's user can do.
func TestActionRejected(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	def, err := csvreport.Action("http://127.0.0.1:1", limits.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if err := queuepolicy.PublishActions(context.Background(), redistest.Client(t), "", []string{q}, []actions.Info{def.Info}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		stdout string
		stderr string
	}{
		{[]string{"-action", "csv-report", "-params", `{"date": "2026-12-05"}`}, "",
			"enqueue: spec rejected: params: day is required; params: additional property date is not allowed " +
				"(enqueue -list-actions [-queue Q] shows each action's params schema)\n"},
		{[]string{"-action", "csv-report", "-params", `{"day": "yesterday"}`}, "",
			"enqueue: spec rejected: params.day: does not match pattern '^[0-9]{4}-[0-9]{2}-[0-9]{2}$' " +
				"(enqueue -list-actions [-queue Q] shows each action's params schema)\n"},
		{[]string{"-action", "nope"}, "",
			`enqueue: spec rejected: action: "nope" is not in the catalog the workers of queue "` + q + `" published (they have: csv-report) ` +
				"(an action is defined by the operator (worker -actions); enqueue -list-actions [-queue Q] lists them)\n"},
		{[]string{"-json", "-action", "csv-report", "-params", `{"date": "2026-12-05"}`},
			`{"error":"spec rejected: params: day is required; params: additional property date is not allowed ` +
				`(enqueue -list-actions [-queue Q] shows each action's params schema)","field":"params","code":2}` + "\n", ""},
	} {
		got := runArgs(t, "", append([]string{"-redis", redistest.URL(t), "-queue", q}, tc.args...)...)
		if diff := cmp.Diff(result{Code: 2, Stdout: tc.stdout, Stderr: tc.stderr}, got); diff != "" {
			t.Errorf("enqueue %q (-want +got):\n%s", tc.args, diff)
		}
	}
}

// TestRedisURLFromEnv checks that $REDIS_URL is the default of -redis.
func TestRedisURLFromEnv(t *testing.T) {
	q := redistest.Queue(t)
	t.Setenv("REDIS_URL", redistest.URL(t))
	got := runArgs(t, validSpec, "-queue", q, "-")
	if got.Code != 0 {
		t.Errorf("got %+v, want the task enqueued in the Redis of $REDIS_URL", got)
	}
}

// announce says that a worker serves q, as a worker does while it runs.
func announce(t *testing.T, q string) {
	t.Helper()
	a := queuepolicy.Announcement{Worker: "test/1", Store: t.TempDir()}
	if err := queuepolicy.Announce(context.Background(), redistest.Client(t), "", []string{q}, a, time.Now()); err != nil {
		t.Fatal(err)
	}
}
