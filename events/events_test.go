package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/internal/redistest"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

// TestAppendFollow: entries appended after Last are followed in order,
// with every field; entries before it are not.
func TestAppendFollow(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Client(t)
	run := "run-" + redistest.Queue(t)
	if err := events.Append(ctx, rdb, events.Event{RunID: run, State: "before"}); err != nil {
		t.Fatal(err)
	}
	from, err := events.Last(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 15, 4, 5, 6, time.UTC)
	want := []events.Event{
		{RunID: run, TaskID: "t1", State: "parked", Verdict: "ok", ApprovalID: "ap-1", Time: at},
		{RunID: run, TaskID: "t1", State: "promoted", Verdict: "ok", ApprovalID: "ap-1", Time: at.Add(time.Second)},
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // Follow is blocked reading by then
		for _, e := range want {
			if err := events.Append(ctx, rdb, e); err != nil {
				t.Error(err)
			}
		}
	}()
	var got []events.Event
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = events.Follow(fctx, rdb, from, func(e events.Event) (bool, error) {
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
}
