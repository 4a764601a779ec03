package airlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/queuepolicy"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

func TestRedisSource(t *testing.T) { t.Logf("Redis from %s", redistest.Source(t)) }

func newClient(t *testing.T, opts airlock.ClientOptions) *airlock.Client {
	t.Helper()
	c := airlock.NewClient(redistest.Client(t), opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func inspector(t *testing.T) *asynq.Inspector {
	t.Helper()
	return asynq.NewInspectorFromRedisClient(redistest.Client(t))
}

// newSpec is a valid spec of one step in queue.
func newSpec(queue string) *tasks.Spec {
	return &tasks.Spec{Version: tasks.Version, Queue: queue, Steps: []tasks.Step{{Run: []string{"true"}}}}
}

// tightPolicy is the default policy with a 64MiB memory maximum and a 10s
// timeout maximum.
func tightPolicy() limits.Policy {
	p := limits.DefaultPolicy()
	p.Default.Memory, p.Max.Memory = 32<<20, 64<<20
	p.DefaultTimeout, p.MaxTimeout = limits.Duration(5*time.Second), limits.Duration(10*time.Second)
	return p
}

func TestEnqueueRejects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		edit  func(*tasks.Spec)
		field string
	}{
		{"path leaves the workspace", func(s *tasks.Spec) { s.Files = map[string]tasks.File{"../x": "x"} }, `files["../x"]`},
		{"absolute output path", func(s *tasks.Spec) { s.Output = &tasks.Output{Result: "/etc/passwd"} }, "output.result"},
		{"memory above the published maximum", func(s *tasks.Spec) { s.Limits.Memory = 128 << 20 }, "limits.memory"},
		{"timeout above the published maximum", func(s *tasks.Spec) { s.Timeout = limits.Duration(time.Minute) }, "timeout"},
		{"network not allowed", func(s *tasks.Spec) { s.Network = true }, "network"},
		{"payload above MaxPayload", func(s *tasks.Spec) {
			s.Files = map[string]tasks.File{"big.txt": tasks.File(strings.Repeat("x", tasks.DefaultMaxPayload))}
		}, "spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := redistest.Queue(t)
			rdb := redistest.Client(t)
			if err := queuepolicy.Publish(context.Background(), rdb, "", []string{q}, tightPolicy()); err != nil {
				t.Fatal(err)
			}
			c := airlock.NewClient(rdb, airlock.ClientOptions{})
			s := newSpec(q)
			tc.edit(s)
			_, err := c.Enqueue(context.Background(), s)
			fe, ok := err.(*tasks.FieldError)
			if !ok {
				t.Fatalf("Enqueue: err = %v (%T), want a *tasks.FieldError as is", err, err)
			}
			if diff := cmp.Diff(tc.field, fe.Field); diff != "" {
				t.Errorf("FieldError.Field (-want +got):\n%s", diff)
			}
			if fe.Msg == "" || !tasks.IsInvalid(err) {
				t.Errorf("FieldError %+v: want a message and tasks.IsInvalid", fe)
			}
			queues, err := inspector(t).Queues()
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(queues, q) {
				t.Errorf("queue %s exists after a rejected spec, want nothing enqueued", q)
			}
		})
	}
}

// TestEnqueueDefaultPolicy checks that, with no published policy, a spec is
// checked against limits.DefaultPolicy: the memory tightPolicy rejects
// passes, a memory above the default maximum does not.
func TestEnqueueDefaultPolicy(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	s := newSpec(q)
	s.Limits.Memory = 128 << 20
	if _, err := c.Enqueue(context.Background(), s); err != nil {
		t.Fatalf("Enqueue of 128MiB with no published policy: %v", err)
	}
	s = newSpec(q)
	s.Limits.Memory = limits.DefaultPolicy().Max.Memory + 1
	_, err := c.Enqueue(context.Background(), s)
	var fe *tasks.FieldError
	if !errors.As(err, &fe) || fe.Field != "limits.memory" {
		t.Errorf("Enqueue above the default maximum: err = %v, want a FieldError on limits.memory", err)
	}
}

// TestEnqueueBadPublishedPolicy checks that a key holding no policy is an
// error naming it, not a spec rejection.
func TestEnqueueBadPublishedPolicy(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	rdb := redistest.Client(t)
	if err := rdb.Set(context.Background(), queuepolicy.Key("", q), "{", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := airlock.NewClient(rdb, airlock.ClientOptions{}).Enqueue(context.Background(), newSpec(q))
	if err == nil || tasks.IsInvalid(err) || !strings.Contains(err.Error(), queuepolicy.Key("", q)) {
		t.Errorf("Enqueue with a bad published policy: err = %v, want an error naming %s", err, queuepolicy.Key("", q))
	}
}

func TestEnqueueIdempotent(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	ctx := context.Background()
	enqueue := func(key string) airlock.Enqueued {
		t.Helper()
		s := newSpec(q)
		s.IdempotencyKey = key
		enq, err := c.Enqueue(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		return enq
	}

	first := enqueue("order-1")
	want := airlock.Enqueued{TaskID: airlock.IdempotentTaskID(q, "order-1"), Queue: q, RunID: first.RunID, NoWorker: true}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("first Enqueue (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(first.TaskID, "ik-") || len(first.TaskID) != 43 || first.RunID == "" {
		t.Errorf("first Enqueue = %+v, want task id ik- and 40 hex digits, and a run id", first)
	}
	want.Duplicate = true
	if diff := cmp.Diff(want, enqueue("order-1")); diff != "" {
		t.Errorf("second Enqueue, same key (-want +got):\n%s", diff)
	}
	other := enqueue("order-2")
	if other.Duplicate || other.TaskID == first.TaskID {
		t.Errorf("Enqueue with another key = %+v, want a new task", other)
	}
	if id := airlock.IdempotentTaskID("other-queue", "order-1"); id == first.TaskID {
		t.Errorf("IdempotentTaskID does not depend on the queue")
	}

	pending, err := inspector(t).ListPendingTasks(q)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range pending {
		ids = append(ids, p.ID)
	}
	if diff := cmp.Diff([]string{first.TaskID, other.TaskID}, ids); diff != "" {
		t.Errorf("pending tasks (-want +got):\n%s", diff)
	}
}

func TestEnqueueTaskOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		grace   time.Duration
		want    time.Duration
	}{
		{"fraction rounded up", 1500 * time.Millisecond, 0, 32 * time.Second}, // default grace 30s
		{"whole seconds kept", 3 * time.Second, 2 * time.Second, 5 * time.Second},
		{"no grace", 2100 * time.Millisecond, -1, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := redistest.Queue(t)
			c := newClient(t, airlock.ClientOptions{Grace: tc.grace, Retention: time.Hour})
			s := newSpec(q)
			s.Timeout = limits.Duration(tc.timeout)
			retry := 1
			s.MaxRetry = &retry
			enq, err := c.Enqueue(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			info, err := inspector(t).GetTaskInfo(q, enq.TaskID)
			if err != nil {
				t.Fatal(err)
			}
			grace := max(tc.grace, 0)
			if tc.grace == 0 {
				grace = airlock.DefaultGrace
			}
			if info.Timeout < tc.timeout+grace {
				t.Errorf("TaskInfo.Timeout = %v, below the spec's timeout %v + grace %v", info.Timeout, tc.timeout, grace)
			}
			var payload tasks.Spec
			if err := json.Unmarshal(info.Payload, &payload); err != nil {
				t.Fatal(err)
			}
			type opts struct {
				Type, Queue, RunID string
				Timeout, Retention time.Duration
				MaxRetry           int
			}
			want := opts{tasks.TypeRun, q, enq.RunID, tc.want, time.Hour, 1}
			got := opts{info.Type, info.Queue, payload.RunID, info.Timeout, info.Retention, info.MaxRetry}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("task (-want +got):\n%s", diff)
			}
		})
	}
}

// handler is a fake worker: it stores a record with state and verdict
// (none when state is "") and returns ret.
func handler(state record.State, verdict record.Verdict, ret error) asynq.HandlerFunc {
	return func(ctx context.Context, task *asynq.Task) error {
		if state != "" {
			n, _ := asynq.GetRetryCount(ctx)
			b, err := json.Marshal(fakeRecord(task, state, verdict, n+1))
			if err != nil {
				return err
			}
			if _, err := task.ResultWriter().Write(b); err != nil {
				return err
			}
		}
		return ret
	}
}

func fakeRecord(task *asynq.Task, state record.State, verdict record.Verdict, attempt int) record.Run {
	var s tasks.Spec
	_ = json.Unmarshal(task.Payload(), &s)
	return record.Run{
		TaskID: task.ResultWriter().TaskID(), RunID: s.RunID, Queue: s.Queue,
		State: state, Verdict: verdict, Attempt: attempt, MaxRetry: *s.MaxRetry, Worker: "fake",
	}
}

// enqueueAndWait enqueues a spec in q, served by h, and waits for it.
func enqueueAndWait(t *testing.T, h asynq.HandlerFunc) (airlock.Enqueued, *record.Run) {
	t.Helper()
	q := redistest.Queue(t)
	redistest.Serve(t, q, h)
	c := newClient(t, airlock.ClientOptions{})
	enq, err := c.Enqueue(context.Background(), newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := c.Wait(ctx, enq.Queue, enq.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	return enq, run
}

func TestWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    asynq.HandlerFunc
		want func(airlock.Enqueued) record.Run
	}{
		{
			name: "completed",
			h:    handler(record.StateCompleted, record.VerdictOK, nil),
			want: func(e airlock.Enqueued) record.Run {
				return record.Run{TaskID: e.TaskID, RunID: e.RunID, Queue: e.Queue, State: "completed", Verdict: "ok", Attempt: 1, MaxRetry: 3, Worker: "fake"}
			},
		},
		{
			name: "archived with a record",
			h:    handler(record.StateFailed, record.VerdictExit, fmt.Errorf("step exited 1: %w", asynq.SkipRetry)),
			want: func(e airlock.Enqueued) record.Run {
				return record.Run{TaskID: e.TaskID, RunID: e.RunID, Queue: e.Queue, State: "failed", Verdict: "exit", Attempt: 1, MaxRetry: 3, Worker: "fake"}
			},
		},
		{
			name: "archived without a record",
			h:    handler("", "", fmt.Errorf("worker broke: %w", asynq.SkipRetry)),
			want: func(e airlock.Enqueued) record.Run {
				return record.Run{TaskID: e.TaskID, RunID: e.RunID, Queue: e.Queue, State: "failed", Verdict: "error",
					Error: "worker broke: skip retry for the task", Attempt: 1, MaxRetry: 3}
			},
		},
		{
			name: "completed after a retry",
			h: func(ctx context.Context, task *asynq.Task) error {
				if n, _ := asynq.GetRetryCount(ctx); n == 0 {
					return errors.New("redis hiccup")
				}
				return handler(record.StateCompleted, record.VerdictOK, nil)(ctx, task)
			},
			want: func(e airlock.Enqueued) record.Run {
				return record.Run{TaskID: e.TaskID, RunID: e.RunID, Queue: e.Queue, State: "completed", Verdict: "ok", Attempt: 2, MaxRetry: 3, Worker: "fake"}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			enq, got := enqueueAndWait(t, tc.h)
			if diff := cmp.Diff(tc.want(enq), *got); diff != "" {
				t.Errorf("Wait (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWaitDuplicateOfCompleted checks that a key matches a task that is
// completed and retained, and that Wait then gives its record at once.
func TestWaitDuplicateOfCompleted(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	redistest.Serve(t, q, handler(record.StateCompleted, record.VerdictOK, nil))
	c := newClient(t, airlock.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := newSpec(q)
	s.IdempotencyKey = "k"
	first, err := c.Enqueue(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, q, first.TaskID); err != nil {
		t.Fatal(err)
	}
	s = newSpec(q)
	s.IdempotencyKey = "k"
	again, err := c.Enqueue(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Duplicate || again.TaskID != first.TaskID || again.RunID != first.RunID {
		t.Errorf("Enqueue after completion = %+v, want a duplicate of %+v", again, first)
	}
	run, err := c.Wait(ctx, q, again.TaskID)
	if err != nil || run.RunID != first.RunID {
		t.Errorf("Wait on the duplicate = %+v, %v; want the first run's record", run, err)
	}
}

func TestWaitNotFound(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	_, err := c.Wait(ctx, q, "no-such-task") // the queue does not exist yet
	if !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("Wait in an unknown queue: err = %v, want ErrNotFound", err)
	}
	if _, err := c.Enqueue(ctx, newSpec(q)); err != nil {
		t.Fatal(err)
	}
	_, err = c.Wait(ctx, q, "no-such-task")
	var nf *airlock.NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, airlock.ErrNotFound) || !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("Wait on an unknown id: err = %v, want a *NotFoundError matching ErrNotFound and asynq.ErrTaskNotFound", err)
	}
	if diff := cmp.Diff(airlock.NotFoundError{Queue: q, TaskID: "no-such-task"}, *nf, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())); diff != "" {
		t.Errorf("NotFoundError (-want +got):\n%s", diff)
	}
}

func TestWaitContext(t *testing.T) {
	t.Parallel()
	q := redistest.Queue(t)
	c := newClient(t, airlock.ClientOptions{})
	enq, err := c.Enqueue(context.Background(), newSpec(q))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.Wait(ctx, q, enq.TaskID) // no worker
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pending") {
		t.Errorf("Wait with no worker: err = %v, want DeadlineExceeded naming the pending state", err)
	}
}

func TestDial(t *testing.T) {
	t.Parallel()
	if _, err := airlock.Dial("http://x", airlock.ClientOptions{}); err == nil {
		t.Error("Dial of an http URL: no error")
	}
	q := redistest.Queue(t)
	c, err := airlock.Dial(redistest.URL(t), airlock.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(context.Background(), newSpec(q)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(context.Background(), newSpec(q)); err == nil {
		t.Error("Enqueue after Close: no error, want the connection closed")
	}
}

func TestNewClientCloseKeepsConnection(t *testing.T) {
	t.Parallel()
	rdb := redistest.Client(t)
	if err := airlock.NewClient(rdb, airlock.ClientOptions{}).Close(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Errorf("Ping after Client.Close: %v, want the caller's connection open", err)
	}
}
