package cancelrun_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/redis/cancelrun"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/tasks"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// TestMark checks a mark's key, its round trip (an unnamed canceler too),
// its absence, and that a reader gets at most MaxBy bytes of a name,
// whoever wrote the key.
func TestMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	prefix := "test:" + q + ":"
	t.Cleanup(func() { _ = redistest.DeleteMatching(context.Background(), rdb, prefix+"*") })
	if k := cancelrun.Key("", "default", "t1"); k != "airlock:cancel:default:t1" {
		t.Errorf("Key with the default prefix: %s", k)
	}
	if _, ok, err := cancelrun.Get(ctx, rdb, prefix, q, "t1"); ok || err != nil {
		t.Fatalf("Get of no mark: %v %v", ok, err)
	}
	for id, by := range map[string]string{"t1": "agent@corp", "t2": ""} {
		if err := cancelrun.Set(ctx, rdb, prefix, q, id, by, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := cancelrun.Get(ctx, rdb, prefix, q, id); !ok || err != nil || got != by {
			t.Errorf("Get(%s) = %q %v %v, want %q", id, got, ok, err, by)
		}
	}
	if ttl := rdb.TTL(ctx, cancelrun.Key(prefix, q, "t1")).Val(); ttl <= 0 || ttl > time.Minute {
		t.Errorf("TTL %s", ttl)
	}
	long := strings.Repeat("é", cancelrun.MaxBy) // 2 bytes a rune
	if err := cancelrun.Set(ctx, rdb, prefix, q, "t3", long, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := cancelrun.Get(ctx, rdb, prefix, q, "t3"); len(got) > cancelrun.MaxBy || !utf8.ValidString(got) || !strings.HasPrefix(long, got) {
		t.Errorf("a long name came back as %d bytes (valid UTF-8: %v)", len(got), utf8.ValidString(got))
	}
	// A key someone else wrote, far larger: the read is bounded all the same.
	rdb.Set(ctx, cancelrun.Key(prefix, q, "t4"), "by="+strings.Repeat("x", 1<<20), time.Minute)
	if got, ok, _ := cancelrun.Get(ctx, rdb, prefix, q, "t4"); !ok || len(got) != cancelrun.MaxBy {
		t.Errorf("a 1 MiB mark read as %d bytes", len(got))
	}
	if m := cancelrun.Message("", "before it started"); m != "canceled before it started" {
		t.Errorf("Message: %q", m)
	}
}

// TestStoreIfWaiting checks that a waiting task's result is set and kept
// through its archiving, as asynq's Inspector reads it, and that a task
// in another state, or none, is left alone.
func TestStoreIfWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	ac := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	info, err := ac.Enqueue(asynq.NewTask(tasks.TypeRun, []byte(`{}`)), asynq.Queue(q))
	if err != nil {
		t.Fatal(err)
	}
	state, err := cancelrun.StoreIfWaiting(ctx, rdb, q, info.ID, []byte(`{"state":"canceled"}`))
	if err != nil || state != "pending" || !cancelrun.Waiting(state) {
		t.Fatalf("StoreIfWaiting of a pending task: %q, %v", state, err)
	}
	if err := insp.ArchiveTask(q, info.ID); err != nil {
		t.Fatal(err)
	}
	got, err := insp.GetTaskInfo(q, info.ID)
	if err != nil || got.State != asynq.TaskStateArchived || string(got.Result) != `{"state":"canceled"}` {
		t.Fatalf("archived task: %+v, %v", got, err)
	}
	state, err = cancelrun.StoreIfWaiting(ctx, rdb, q, info.ID, []byte(`{"state":"other"}`))
	if err != nil || state != "archived" || cancelrun.Waiting(state) {
		t.Errorf("StoreIfWaiting of an archived task: %q, %v", state, err)
	}
	if got, _ := insp.GetTaskInfo(q, info.ID); string(got.Result) != `{"state":"canceled"}` {
		t.Errorf("an archived task's result was overwritten: %s", got.Result)
	}
	if state, err := cancelrun.StoreIfWaiting(ctx, rdb, q, "no-such-task", []byte(`{}`)); state != "" || err != nil {
		t.Errorf("StoreIfWaiting of no task: %q, %v", state, err)
	}
}
