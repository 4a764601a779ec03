package asynqmsg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock/internal/redis/asynqkey"
	"github.com/airlock-run/airlock/internal/redis/asynqmsg"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

// TestSameBytesAsAsynq: a task asynq's client enqueued holds, in its
// "msg" field, the bytes Encode gives for the same task.
func TestSameBytesAsAsynq(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	c := asynq.NewClientFromRedisClient(rdb)
	deadline := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, tc := range []struct {
		name string
		opts []asynq.Option
		m    asynqmsg.Message
	}{
		{"defaults", nil, asynqmsg.Message{}},
		{"all", []asynq.Option{asynq.MaxRetry(7), asynq.Timeout(90 * time.Second), asynq.Retention(2 * time.Hour), asynq.Group("p:alice")},
			asynqmsg.Message{Retry: 7, Timeout: 90 * time.Second, Retention: 2 * time.Hour, Group: "p:alice"}},
		{"deadline", []asynq.Option{asynq.Deadline(deadline), asynq.MaxRetry(0)}, asynqmsg.Message{Deadline: deadline}},
		{"subsecond", []asynq.Option{asynq.Timeout(500 * time.Millisecond), asynq.MaxRetry(-3)}, asynqmsg.Message{Timeout: 500 * time.Millisecond, Retry: -3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := "msg-" + tc.name
			payload := []byte(`{"version":1}`)
			opts := append([]asynq.Option{asynq.Queue(q), asynq.TaskID(id)}, tc.opts...)
			if _, err := c.Enqueue(asynq.NewTask("airlock:run", payload), opts...); err != nil {
				t.Fatal(err)
			}
			want, err := rdb.HGet(ctx, asynqkey.Task(q, id), "msg").Bytes()
			if err != nil {
				t.Fatal(err)
			}
			m := tc.m
			m.Type, m.Payload, m.ID, m.Queue = "airlock:run", payload, id, q
			if tc.opts == nil {
				m.Retry = 25 // asynq's default
			}
			if got := asynqmsg.Encode(m); string(got) != string(want) {
				t.Errorf("Encode:\n got %x\nwant %x", got, want)
			}
		})
	}
}

// TestAsynqReadsAndRunsIt: a task written with Encode's bytes is read by
// asynq's Inspector as it was written, headers included, and run by
// asynq's server with its payload and headers.
func TestAsynqReadsAndRunsIt(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	m := asynqmsg.Message{
		Type: "airlock:run", Payload: []byte("payload"), ID: "msg-run", Queue: q, Retry: 3,
		Timeout: 42 * time.Second, Retention: time.Hour,
		Headers: map[string]string{"traceparent": "00-abc-def-01", "x": ""},
	}
	key := asynqkey.Task(q, m.ID)
	if err := rdb.HSet(ctx, key, "msg", asynqmsg.Encode(m), "state", "pending", "pending_since", time.Now().UnixNano()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.SAdd(ctx, asynqkey.Queues, q).Err(); err != nil {
		t.Fatal(err)
	}
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(q, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := asynqmsg.Message{Type: info.Type, Payload: info.Payload, Headers: info.Headers, ID: info.ID, Queue: info.Queue,
		Retry: info.MaxRetry, Timeout: info.Timeout, Retention: info.Retention}
	if diff := cmp.Diff(m, got); diff != "" {
		t.Errorf("as asynq reads it (-written +read):\n%s", diff)
	}
	stored, err := asynqmsg.Decode(asynqmsg.Encode(m))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m, stored.Message); diff != "" {
		t.Errorf("as Decode reads it (-written +read):\n%s", diff)
	}
	ran := make(chan *asynq.Task, 1)
	if err := rdb.LPush(ctx, asynqkey.Pending(q), m.ID).Err(); err != nil {
		t.Fatal(err)
	}
	redistest.Serve(t, q, func(_ context.Context, task *asynq.Task) error {
		ran <- task
		return nil
	})
	select {
	case task := <-ran:
		if string(task.Payload()) != "payload" || task.Headers()["traceparent"] != "00-abc-def-01" {
			t.Errorf("ran %q with headers %v", task.Payload(), task.Headers())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("asynq did not run the task")
	}
}

// TestDecodeWhatAsynqWrote: Decode reads a task asynq's server retried
// (its retry count and last error set by asynq itself) as asynq's
// Inspector does.
func TestDecodeWhatAsynqWrote(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	q := redistest.Queue(t)
	c := asynq.NewClientFromRedisClient(rdb)
	if _, err := c.Enqueue(asynq.NewTask("airlock:run", []byte("p")), asynq.Queue(q), asynq.TaskID("dec"), asynq.MaxRetry(4), asynq.Timeout(time.Minute)); err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{}, 1)
	redistest.Serve(t, q, func(context.Context, *asynq.Task) error {
		select {
		case failed <- struct{}{}:
		default:
		}
		return errors.New("failing on purpose")
	})
	<-failed
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var info *asynq.TaskInfo
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		if info, err = insp.GetTaskInfo(q, "dec"); err == nil && info.Retried > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("asynq did not retry the task: %+v, %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, err := rdb.HGet(ctx, asynqkey.Task(q, "dec"), "msg").Bytes()
	if err != nil {
		t.Fatal(err)
	}
	got, err := asynqmsg.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != "dec" || got.Queue != q || string(got.Payload) != "p" || got.Retry != 4 || got.Timeout != time.Minute ||
		got.Retried != info.Retried || got.ErrorMsg != info.LastErr || got.ErrorMsg == "" {
		t.Errorf("Decode: %+v; asynq's Inspector: retried %d, last error %q", got, info.Retried, info.LastErr)
	}
	if _, err := asynqmsg.Decode([]byte{0xff}); err == nil {
		t.Error("Decode of a broken message: no error")
	}
}
