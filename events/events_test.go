package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/internal/testkit/testclock"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// TestAppendFollow: entries appended after Last are followed in order,
// with every field; entries before it are not.
func TestAppendFollow(t *testing.T) {
	ctx := context.Background()
	// A prefix of the test's own: the stream is the test's alone.
	prefix := "test:" + redistest.Queue(t) + ":"
	stream := events.NewStream(redistest.Client(t), prefix)
	t.Cleanup(func() { redistest.Client(t).Del(context.Background(), stream.Key()) })
	run := "run-" + redistest.Queue(t)
	if err := stream.Append(ctx, events.Event{RunID: run, State: "before"}); err != nil {
		t.Fatal(err)
	}
	from, err := stream.Last(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := testclock.Epoch().Add(4*time.Minute + 5*time.Second + 6)
	want := []events.Event{
		{RunID: run, TaskID: "t1", State: "parked", Verdict: "ok", ApprovalID: "ap-1", Principal: "agent@corp", Time: at},
		{RunID: run, TaskID: "t1", State: "promoted", Verdict: "ok", ApprovalID: "ap-1", Time: at.Add(time.Second)},
		{RunID: run, TaskID: "t2", State: "failed", Verdict: "error", Error: "worker: no luck", Time: at.Add(2 * time.Second)},
	}
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		time.Sleep(50 * time.Millisecond) // Follow is blocked reading by then
		for _, e := range want {
			if err := stream.Append(ctx, e); err != nil {
				t.Error(err)
			}
		}
	}()
	// Follow may see the last event before its Append has returned: the
	// test (and its client) ends after the appends.
	defer func() { <-appended }()
	var got []events.Event
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ticks := 0
	err = stream.Follow(fctx, from, 20*time.Millisecond, func() (bool, error) { ticks++; return false, nil }, func(e events.Event) (bool, error) {
		if e.RunID == run {
			got = append(got, e)
		}
		return len(got) == len(want), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(events.Event{}, "ID")); diff != "" {
		t.Errorf("followed events (-want +got):\n%s", diff)
	}
	if got[0].ID == "" || got[0].ID <= from {
		t.Errorf("entry id %q not after %q", got[0].ID, from)
	}
	if ticks == 0 {
		t.Error("tick was never called while Follow blocked")
	}
	if stream.Key() != prefix+"events" {
		t.Errorf("Key() = %s", stream.Key())
	}
}
