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

// A session is held by one live worker: a second taker while it beats,
// another queue's worker, or a taker of one never opened is refused; once
// its holder stops beating, another takes it over, resuming it.
func TestHoldOnce(t *testing.T) {
	c, _ := newConn(t)
	ctx := context.Background()
	if _, err := c.Hold(ctx, "never", "q", "w1", time.Now().Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "never opened") {
		t.Errorf("hold of a session never opened: %v", err)
	}
	if err := c.Create(ctx, session.Info{ID: "s1", TaskID: "s1", Queue: "q", OpenedAt: time.Now()}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Hold(ctx, "s1", "other", "w1", time.Now().Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "queue") {
		t.Errorf("hold from another queue: %v", err)
	}
	if h, err := c.Hold(ctx, "s1", "q", "w1", time.Now().Add(time.Minute)); err != nil || h.Resumed {
		t.Fatal(h, err)
	}
	if err := c.Alive(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Hold(ctx, "s1", "q", "w2", time.Now().Add(time.Minute))
	if err == nil || !strings.Contains(err.Error(), "alive") || !strings.Contains(err.Error(), "w1") {
		t.Errorf("a second hold: %v, want a refusal naming the live holder", err)
	}
	in, err := c.Get(ctx, "s1")
	if err != nil || in.State != session.StateOpen || in.Worker != "w1" || in.SeenAt.IsZero() {
		t.Errorf("info %+v, %v", in, err)
	}
	// Its answer commits a checkpoint; only the holder commits.
	if err := c.Commit(ctx, "s1", "w2", "open", "ck-0", &session.Answer{Status: 201}, false); !errors.Is(err, session.ErrFenced) {
		t.Errorf("a commit by another worker: %v, want ErrFenced", err)
	}
	if err := c.Commit(ctx, "s1", "w1", "open", "ck-1", &session.Answer{Status: 201}, false); err != nil {
		t.Fatal(err)
	}
	// w1 stops beating: w2 takes the session over, from ck-1.
	if err := c.Gone(ctx, "w1"); err != nil {
		t.Fatal(err)
	}
	h, err := c.Hold(ctx, "s1", "q", "w2", time.Now().Add(time.Minute))
	if err != nil || !h.Resumed || h.Checkpoint != "ck-1" {
		t.Fatalf("takeover: %+v, %v", h, err)
	}
	if err := c.Commit(ctx, "s1", "w1", "c2", "ck-x", &session.Answer{Status: 200}, false); !errors.Is(err, session.ErrFenced) {
		t.Errorf("a commit by the holder taken over: %v, want ErrFenced", err)
	}
	// Paused by its holder, it is held again by the next taker.
	if err := c.Pause(ctx, "s1", "w2"); err != nil {
		t.Fatal(err)
	}
	if h, err := c.Hold(ctx, "s1", "q", "w3", time.Now().Add(time.Minute)); err != nil || !h.Resumed || h.Checkpoint != "ck-1" {
		t.Errorf("resume of a paused session: %+v, %v", h, err)
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
	if _, err := c.Hold(ctx, "s2", "q", "w", time.Now().Add(time.Minute)); err != nil {
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
			call, err = c.Take(ctx, "s2", "w")
		}
		if again, _ := c.Take(ctx, "s2", "w"); again != nil {
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

// A caller whose answer does not come, and who finds its holder's beat
// gone, learns that its call was not applied when the holder had taken
// it; the session is paused, for another worker to resume. A call the dead
// holder never took waits on, for that worker.
func TestDeadHolderNotApplied(t *testing.T) {
	c, _ := newConn(t)
	ctx := context.Background()
	if err := c.Create(ctx, session.Info{ID: "s3", TaskID: "s3", Queue: "q"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Hold(ctx, "s3", "q", "gone-worker", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// The holder takes the call, and dies with it.
	go func() {
		for range 50 {
			if call, _ := c.Take(ctx, "s3", "gone-worker"); call != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := c.Call(ctx, "s3", session.Call{ID: "1", Op: session.OpStep}, time.Minute)
	var se *session.Error
	if !errors.Is(err, session.ErrNotApplied) || !errors.As(err, &se) || !strings.Contains(se.Msg, "gone-worker") || !strings.Contains(se.Msg, "not applied") {
		t.Fatalf("call to a dead holder: %v", err)
	}
	if d := time.Since(start); d > 2*session.BeatEvery+time.Second {
		t.Errorf("took %s to see the holder dead", d)
	}
	in, _ := c.Get(ctx, "s3")
	if in.State != session.StatePaused || in.Worker != "" {
		t.Errorf("state after: %+v", in)
	}
	// A call sent now waits for the next holder, which serves it.
	go func() {
		if h, err := c.Hold(ctx, "s3", "q", "next-worker", time.Now().Add(time.Minute)); err != nil || !h.Resumed {
			t.Errorf("resume: %+v, %v", h, err)
			return
		}
		_ = c.Alive(ctx, "next-worker")
		for range 100 {
			if call, _ := c.Take(ctx, "s3", "next-worker"); call != nil {
				_ = c.Commit(ctx, "s3", "next-worker", call.ID, "", &session.Answer{Status: http.StatusOK}, false)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if _, err := c.Call(ctx, "s3", session.Call{ID: "2", Op: session.OpStep}, time.Minute); err != nil {
		t.Errorf("the call after the takeover: %v", err)
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
	if _, err := c.Hold(ctx, "s4", "q", "w", time.Now().Add(time.Minute)); err != nil {
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
