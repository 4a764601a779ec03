package refused_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/redis/refused"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/testkit/testclock"
	"github.com/airlock-run/airlock/limits"
	"github.com/airlock-run/airlock/record"
)

// refusal is the record a worker stores for an open past -max-sessions.
func refusal(taskID string) *record.Run {
	at := testclock.Epoch().UTC()
	return &record.Run{
		TaskID: taskID, RunID: "5f0c4a53-0a7e-4c63-9d6c-2f1b8e0c1d2a", Queue: "reports", Principal: "agent",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", State: record.StateFailed, Verdict: record.VerdictSessionLimit,
		Error:     "this worker holds its -max-sessions 1 sessions; try again later",
		StartedAt: at, FinishedAt: at.Add(18 * time.Millisecond), DurationMS: 18.43, Attempt: 1, MaxRetry: 0,
		Worker: "host/1603 0.1.0-dev", Steps: []record.Step{},
		Session: &record.Session{IdleTimeout: limits.Duration(5 * time.Minute), Ended: "session_limit"},
	}
}

// TestEncodeSmall: the stored form of a refusal is small, and decodes to
// the record, its task and queue from the keys, steps an empty list.
func TestEncodeSmall(t *testing.T) {
	rec := refusal("3dea8c7d-df29-47fc-99dc-15cd127bed20")
	b, err := refused.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a refused open's record: %d bytes stored", len(b))
	if len(b) > 200 {
		t.Errorf("stored form: %d bytes, want at most 200", len(b))
	}
	got, err := refused.Decode("reports", rec.TaskID, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("decoded:\n%+v\nwant\n%+v", got, rec)
	}
	if got.Steps == nil {
		t.Error("steps decoded as nil, want an empty list")
	}
	// A refused run ran nothing: a record with steps is not one.
	rec.Steps = []record.Step{{Name: "s"}}
	if _, err := refused.Encode(rec); !errors.Is(err, refused.ErrRan) {
		t.Errorf("refused.Encode of a record with steps: %v, want refused.ErrRan", err)
	}
	for _, bad := range [][]byte{nil, {0}, {refused.FormatDict, 0xff, 0xff}} {
		if _, err := refused.Decode("reports", rec.TaskID, bad); err == nil {
			t.Errorf("refused.Decode(%x): no error", bad)
		}
	}
}

// TestStoreGetBounded: refused.Get reads what refused.Store stored; a queue keeps its
// last refusals up to the bound, the oldest going first; a task stored
// again keeps its place; both keys expire.
func TestStoreGetBounded(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	prefix := q + ":"
	t.Cleanup(func() { rdb.Del(context.Background(), refused.Key(prefix, q), refused.OrderKey(prefix, q)) })
	if _, ok, err := refused.Get(ctx, rdb, prefix, q, "none"); ok || err != nil {
		t.Fatalf("refused.Get of no refusal: %v, %v", ok, err)
	}
	ids := []string{"a", "b", "c", "d"}
	for _, id := range append(ids, "b") {
		b, err := refused.Encode(refusal(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := refused.StoreBounded(ctx, rdb, prefix, q, id, b, 3).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// "a" went when "d" came; "b" stored again did not push "b" twice.
	for _, id := range ids {
		rec, ok, err := refused.Get(ctx, rdb, prefix, q, id)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (id != "a") {
			t.Errorf("refusal %s kept: %v", id, ok)
		}
		if ok && (rec.TaskID != id || rec.Queue != q || rec.Verdict != record.VerdictSessionLimit) {
			t.Errorf("refusal %s: %+v", id, rec)
		}
		if c := refused.Exists(ctx, rdb, prefix, q, id); c.Err() != nil || refused.Found(c) != (id != "a") {
			t.Errorf("refused.Exists(%s): %v, %v", id, refused.Found(c), c.Err())
		}
	}
	if order := rdb.LRange(ctx, refused.OrderKey(prefix, q), 0, -1).Val(); !reflect.DeepEqual(order, []string{"b", "c", "d"}) {
		t.Errorf("order %q, want [b c d]", order)
	}
	for _, k := range []string{refused.Key(prefix, q), refused.OrderKey(prefix, q)} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 || ttl > refused.TTL {
			t.Errorf("%s expires in %s, want within %s", k, ttl, refused.TTL)
		}
	}
	// refused.Store works in a pipeline, as the worker's completer sends it.
	b, _ := refused.Encode(refusal("e"))
	p := rdb.Pipeline()
	cmd := refused.Store(ctx, p, prefix, q, "e", b)
	if _, err := p.Exec(ctx); err != nil || cmd.Err() != nil {
		t.Fatalf("refused.Store in a pipeline: %v, %v", err, cmd.Err())
	}
	if _, ok, err := refused.Get(ctx, rdb, prefix, q, "e"); !ok || err != nil {
		t.Errorf("refused.Get after a pipelined refused.Store: %v, %v", ok, err)
	}
}

// TestKeysShareASlot: a queue's two keys share the queue's hash tag, so
// that the script holds in a Redis Cluster.
func TestKeysShareASlot(t *testing.T) {
	for _, prefix := range []string{"", "airlock:", "tenant-a:"} {
		k, o := refused.Key(prefix, "reports"), refused.OrderKey(prefix, "reports")
		if tag(k) != "reports" || tag(o) != "reports" {
			t.Errorf("prefix %q: keys %s and %s, want hash tag {reports}", prefix, k, o)
		}
	}
	if refused.Key("", "q") != "airlock:refused:{q}" {
		t.Errorf("refused.Key of the default prefix: %s", refused.Key("", "q"))
	}
}

// tag is the hash tag of a key, as Redis Cluster reads it.
func tag(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] == '{' {
			for j := i + 1; j < len(k); j++ {
				if k[j] == '}' {
					return k[i+1 : j]
				}
			}
			return ""
		}
	}
	return ""
}
