package session_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
)

func newConn(t *testing.T) (*session.Conn, string) {
	t.Helper()
	prefix := "st-" + redistest.Queue(t) + ":"
	return session.NewConn(redistest.Client(t), prefix), prefix
}

// A session is held once: a second taker (a retry after its worker died),
// another queue's worker, or a taker of one never opened is refused.
func TestHoldOnce(t *testing.T) {
	c, _ := newConn(t)
	ctx := context.Background()
	if err := c.Hold(ctx, "never", "q", "w1", time.Now().Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "never opened") {
		t.Errorf("hold of a session never opened: %v", err)
	}
	if err := c.Create(ctx, session.Info{ID: "s1", TaskID: "s1", Queue: "q", OpenedAt: time.Now()}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Hold(ctx, "s1", "other", "w1", time.Now().Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "queue") {
		t.Errorf("hold from another queue: %v", err)
	}
	if err := c.Hold(ctx, "s1", "q", "w1", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	err := c.Hold(ctx, "s1", "q", "w2", time.Now().Add(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "never replayed") || !strings.Contains(err.Error(), "w1") {
		t.Errorf("a second hold: %v, want a refusal naming the holder", err)
	}
	in, err := c.Get(ctx, "s1")
	if err != nil || in.State != session.StateOpen || in.Worker != "w1" || in.SeenAt.IsZero() {
		t.Errorf("info %+v, %v", in, err)
	}
}

// Calls reach the holder and come back; a call to a session not open is
// refused at once (409 opening, 404 unknown, 410 ended), and the calls
// left when it ends are answered 410.
func TestCallsAndEnd(t *testing.T) {
	c, _ := newConn(t)
	ctx := context.Background()
	var se *session.Error
	if _, err := c.Call(ctx, "nope", session.Call{ID: "1", Op: session.OpStep}, time.Second); !errors.Is(err, session.ErrNotFound) {
		t.Errorf("call to an unknown session: %v", err)
	}
	if err := c.Create(ctx, session.Info{ID: "s2", TaskID: "s2", Queue: "q"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(ctx, "s2", session.Call{ID: "1", Op: session.OpStep}, time.Second); !errors.As(err, &se) || se.Status != http.StatusConflict {
		t.Errorf("call before a worker holds it: %v, want 409", err)
	}
	if err := c.Hold(ctx, "s2", "q", "w", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := c.Alive(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// The worker's bell names the session; the call is popped once.
		ids, err := c.Bells(ctx, "w", 5*time.Second)
		var call *session.Call
		if err == nil && (len(ids) != 1 || ids[0] != "s2") {
			err = fmt.Errorf("bells %q, want [s2]", ids)
		}
		if err == nil {
			call, err = c.Take(ctx, "s2")
		}
		if again, _ := c.Take(ctx, "s2"); again != nil {
			err = errors.New("a call taken twice")
		}
		if err == nil && (call == nil || string(call.Data) != "hi") {
			err = errors.New("wrong call")
		}
		if err == nil {
			err = c.Answer(ctx, "s2", call.ID, &session.Answer{Status: http.StatusOK, Data: []byte("back")})
		}
		done <- err
	}()
	a, err := c.Call(ctx, "s2", session.Call{ID: "2", Op: session.OpWrite, Data: []byte("hi")}, 5*time.Second)
	if err != nil || string(a.Data) != "back" {
		t.Fatalf("round trip: %+v, %v", a, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A call left in the list when the session ends is answered 410.
	res := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, "s2", session.Call{ID: "3", Op: session.OpStep}, 10*time.Second)
		res <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := c.End(ctx, "s2", record.StateExpired, "the session's idle timeout passed (no call for idle_timeout 1m0s)", time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-res:
		if !errors.As(err, &se) || se.Status != http.StatusGone || se.End != record.StateExpired ||
			!strings.Contains(se.Msg, "expired (the session's idle timeout passed (no call for idle_timeout 1m0s))") {
			t.Errorf("a call left when the session ended: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a call left when the session ended waited on")
	}
	if _, err := c.Call(ctx, "s2", session.Call{ID: "4", Op: session.OpStep}, time.Second); !errors.Is(err, session.ErrEnded) ||
		err.Error() != "session: the session ended: expired (the session's idle timeout passed (no call for idle_timeout 1m0s))" {
		t.Errorf("call after the end: %v, want ErrEnded saying why", err)
	}
	// Too large a call never reaches Redis.
	big := make([]byte, session.MaxCallBytes)
	if _, err := c.Call(ctx, "s2", session.Call{ID: "5", Op: session.OpWrite, Data: big}, time.Second); !errors.As(err, &se) || se.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a call above the bound: %v, want 413", err)
	}
}

// A caller whose answer does not come, and who finds the holder's beat
// older than DeadAfter, ends the session as failed.
func TestDeadHolderEndsFailed(t *testing.T) {
	c, prefix := newConn(t)
	ctx := context.Background()
	if err := c.Create(ctx, session.Info{ID: "s3", TaskID: "s3", Queue: "q"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Hold(ctx, "s3", "q", "gone-worker", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Its last beat, long ago.
	old := time.Now().Add(-time.Minute).UnixMicro()
	if err := redistest.Client(t).HSet(ctx, prefix+"session:{s3}", "seen_at", old).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Call(ctx, "s3", session.Call{ID: "1", Op: session.OpStep}, time.Minute)
	var se *session.Error
	if !errors.As(err, &se) || se.Status != http.StatusGone || se.End != record.StateFailed || !strings.Contains(se.Msg, "gone-worker") {
		t.Fatalf("call to a dead holder: %v", err)
	}
	if d := time.Since(start); d > 2*session.BeatEvery+time.Second {
		t.Errorf("took %s to see the holder dead", d)
	}
	if in, _ := c.Get(ctx, "s3"); in.State != session.StateEnded || in.End != record.StateFailed {
		t.Errorf("state after: %+v", in)
	}
}

// Calls waiting for a busy worker are bounded: one past MaxQueuedCalls is
// refused at once as busy (409), before it reaches the list.
func TestQueuedCallsBounded(t *testing.T) {
	c, _ := newConn(t)
	ctx := context.Background()
	if err := c.Create(ctx, session.Info{ID: "s4", TaskID: "s4", Queue: "q"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.Hold(ctx, "s4", "q", "w", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, session.MaxQueuedCalls)
	for i := range session.MaxQueuedCalls {
		go func() {
			_, err := c.Call(ctx, "s4", session.Call{ID: fmt.Sprint(i), Op: session.OpStep}, 3*time.Second)
			errs <- err
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := c.Call(ctx, "s4", session.Call{ID: "over", Op: session.OpStep}, time.Second); !errors.Is(err, session.ErrBusy) {
		t.Errorf("a call past the bound: %v, want ErrBusy", err)
	}
	if err := c.End(ctx, "s4", record.StateExpired, "the session's idle timeout passed (no call for idle_timeout 1m0s)", time.Minute); err != nil {
		t.Fatal(err)
	}
	for range session.MaxQueuedCalls {
		if err := <-errs; !errors.Is(err, session.ErrEnded) {
			t.Errorf("a waiting call at the end: %v", err)
		}
	}
}
