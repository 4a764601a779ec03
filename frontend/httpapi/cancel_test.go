package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/redis/cancelrun"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// TestCancelPending checks DELETE /v1/runs/{task_id} of a run no worker
// took: 200 with a canceled record naming the token, the run's event, GET
// reading the same record, a second DELETE answering it again, and the
// scope and queue checks.
func TestCancelPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	en := e.enqueue(e.spec(false, ""))
	from, err := e.events.Last(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1/runs/" + en.TaskID

	// A reader may not cancel; a token bound to another queue finds no
	// such task, and may not name this one.
	e.do(request{method: "DELETE", path: path, token: tokReader}).problem(t, http.StatusForbidden)
	e.do(request{method: "DELETE", path: path, token: tokElsewhere}).problem(t, http.StatusNotFound)
	e.do(request{method: "DELETE", path: path + "?queue=" + e.queue, token: tokElsewhere}).problem(t, http.StatusForbidden)
	if rec := e.run(en.TaskID, ""); rec.State != "pending" {
		t.Fatalf("after refused cancels, state %s, want pending", rec.State)
	}

	r := e.do(request{method: "DELETE", path: path, token: tokWriter})
	if r.status != http.StatusOK {
		t.Fatalf("DELETE: %d %s", r.status, r.body)
	}
	var rec record.Run
	r.json(t, &rec)
	if rec.State != record.StateCanceled || rec.Verdict != record.VerdictCanceled || rec.Attempt != 1 ||
		rec.Error != "canceled by writer before it started" || rec.RunID != en.RunID || rec.Principal != "writer" || len(rec.Steps) != 0 {
		t.Errorf("canceled record: %+v", rec)
	}
	if got := e.run(en.TaskID, "wait=5s"); got.State != record.StateCanceled || got.Error != rec.Error {
		t.Errorf("GET after the cancel: %+v", got)
	}
	// The run's event, for the waiters and event streams.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ev events.Event
	err = e.events.Follow(ctx, from, 100*time.Millisecond, nil, func(x events.Event) (bool, error) {
		ev = x
		return x.TaskID == en.TaskID, nil
	})
	if err != nil || ev.State != record.StateCanceled || ev.Verdict != record.VerdictCanceled || ev.Principal != "writer" {
		t.Errorf("event %+v, %v; want the run's canceled event", ev, err)
	}
	// Idempotent: the same record again. Another token, even with the
	// scope and the queue, cancels only its own runs: this one is 404.
	r = e.do(request{method: "DELETE", path: path, token: tokWriter})
	var again record.Run
	if r.json(t, &again); r.status != http.StatusOK || again.Error != rec.Error {
		t.Errorf("second DELETE: %d %+v", r.status, again)
	}
	e.do(request{method: "DELETE", path: path, token: tokBound}).problem(t, http.StatusNotFound)
	e.do(request{method: "DELETE", path: "/v1/runs/no-such-task", token: tokWriter}).problem(t, http.StatusNotFound)
	r = e.do(request{method: "PUT", path: path, token: tokWriter, invalid: true})
	if r.problem(t, http.StatusMethodNotAllowed); r.header.Get("Allow") != "GET, HEAD, DELETE" {
		t.Errorf("Allow %q", r.header.Get("Allow"))
	}
}

// TestCancelFinal checks 409 already-final, with the record, for a run
// that was over.
func TestCancelFinal(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	en := e.enqueue(e.spec(false, ""))
	if rec := e.run(en.TaskID, "wait=20s"); rec.State != record.StateCompleted {
		t.Fatalf("run: %+v", rec)
	}
	p := e.do(request{method: "DELETE", path: "/v1/runs/" + en.TaskID + "?queue=" + e.queue, token: tokWriter}).problem(t, http.StatusConflict)
	if p.Type != httpapi.ProblemAlreadyFinal || p.State != "completed" || p.TaskID != en.TaskID ||
		p.Record == nil || p.Record.State != record.StateCompleted || p.Record.Worker != "fake" {
		t.Errorf("problem %+v (record %+v)", p, p.Record)
	}
	if rec := e.run(en.TaskID, ""); rec.State != record.StateCompleted {
		t.Errorf("after the refused cancel: %+v", rec)
	}
}

// TestCancelRunningNotStopped checks a running run whose worker does not
// store a canceled record (the fake worker knows nothing of cancels): the
// mark and asynq's cancel go out, and after airlock.CancelWait the answer
// is 202 with a record that is not final.
func TestCancelRunningNotStopped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	e.serveFake()
	en := e.enqueue(e.spec(false, "hold"))
	deadline := time.Now().Add(10 * time.Second)
	for e.run(en.TaskID, "").State != "active" {
		if time.Now().After(deadline) {
			t.Fatal("the run never became active")
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	r := e.do(request{method: "DELETE", path: "/v1/runs/" + en.TaskID, token: tokWriter})
	var rec record.Run
	if r.json(t, &rec); r.status != http.StatusAccepted || record.Final(rec.State) {
		t.Errorf("DELETE of a run its worker does not stop: %d %+v", r.status, rec)
	}
	if d := time.Since(start); d < 4*time.Second || d > 30*time.Second {
		t.Errorf("answered after %s, want about airlock.CancelWait", d)
	}
	by, ok, err := cancelrun.Get(context.Background(), redistest.Client(t), e.prefix, e.queue, en.TaskID)
	if err != nil || !ok || by != "writer" {
		t.Errorf("cancel mark: %q %v %v; want one naming writer", by, ok, err)
	}
	if !strings.HasPrefix(cancelrun.Key(e.prefix, e.queue, en.TaskID), e.prefix+"cancel:") {
		t.Error("the mark is not under the API's prefix")
	}
}
