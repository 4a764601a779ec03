//go:build linux

package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

func sh(name, script string) tasks.Step {
	return tasks.Step{Name: name, Run: []string{"sh", "-c", script}}
}

// The seed's flow call by call through the Go client: a file written by
// one call is read by the next step, a failing step does not end the
// session, reads never follow a link, and the close parks the output
// with a record of every step in order.
func TestSessionCallByCall(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := b.spec(`{"version":1,"timeout":"60s","session":{"idle_timeout":"20s"},
		"files":{"in/export.csv":"id,amount,junk\n1,10,x\n2,32,y\n"},
		"steps":[{"name":"look","run":["sh","-c","wc -l < in/export.csv"]}],
		"output":{"result":"out/report.json","schema":{"type":"object","required":["total"]}}}`)
	start := time.Now()
	s, err := b.client.OpenSession(ctx, spec)
	if err != nil {
		t.Fatalf("open: %v\n%s", err, b.worker.logs.String())
	}
	t.Logf("open (with one step) answered in %s", time.Since(start))
	if len(s.Opened.Steps) != 1 || strings.TrimSpace(s.Opened.Steps[0].Stdout) != "3" {
		t.Fatalf("the open's steps: %+v", s.Opened.Steps)
	}
	st, err := s.Run(ctx, sh("clean", `cut -d, -f1,2 in/export.csv > out/clean.csv && echo cleaned`))
	if err != nil || st.Verdict != record.VerdictOK || st.Stdout != "cleaned\n" {
		t.Fatalf("clean: %+v, %v", st, err)
	}
	got, err := s.ReadFile(ctx, "out/clean.csv")
	if err != nil || string(got) != "id,amount\n1,10\n2,32\n" {
		t.Fatalf("read out/clean.csv: %q, %v", got, err)
	}
	// The caller looks, then writes a file the next step reads.
	if err := s.WriteFile(ctx, "in/threshold", []byte("20")); err != nil {
		t.Fatal(err)
	}
	st, err = s.Run(ctx, tasks.Step{Name: "broken", Run: []string{"sh", "-c", "exit 3"}})
	if err != nil || st.Verdict != record.VerdictExit || st.ExitCode == nil || *st.ExitCode != 3 {
		t.Fatalf("a failing step: %+v, %v", st, err)
	}
	st, err = s.Run(ctx, sh("report", `t=$(cat in/threshold); awk -F, -v t=$t 'NR>1 {s+=$2; if ($2>t) n++} END {printf "{\"total\":%d,\"over\":%d}", s, n}' out/clean.csv > out/report.json`))
	if err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("report: %+v, %v", st, err)
	}
	// A link a step made is never followed by a read.
	if st, err := s.Run(ctx, sh("link", "ln -s /etc/shadow out/l")); err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("link: %+v, %v", st, err)
	}
	if data, err := s.ReadFile(ctx, "out/l"); err == nil || len(data) > 0 {
		t.Fatalf("read through a link: %q, %v", data, err)
	}
	// A write replaces what a step left at its path, a FIFO or a link
	// included, never opening it (the worker would block, or write
	// through the link).
	if st, err := s.Run(ctx, sh("traps", "mkfifo in/fifo && ln -s /etc/hostname in/link")); err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("traps: %+v, %v", st, err)
	}
	host, _ := os.ReadFile("/etc/hostname")
	for _, p := range []string{"in/fifo", "in/link", "in/link"} {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.WriteFile(wctx, p, []byte("mine"))
		wcancel()
		if err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
	}
	if after, _ := os.ReadFile("/etc/hostname"); string(after) != string(host) {
		t.Fatal("a write went through the link to the host's /etc/hostname")
	}
	if st, err := s.Run(ctx, sh("check", `test -f in/fifo && test -f in/link && ! test -L in/link && cat in/link`)); err != nil || st.Stdout != "mine" {
		t.Fatalf("the written files: %+v, %v", st, err)
	}
	var fe *tasks.FieldError
	if _, err := s.Run(ctx, tasks.Step{Run: nil}); err == nil || !strings.Contains(err.Error(), "step.run") {
		t.Errorf("an empty step: %v, want an error naming step.run", err)
	}
	if err := s.WriteFile(ctx, "../x", []byte("y")); !errors.As(err, &fe) {
		t.Errorf("write ../x: %v, want a field error", err)
	}
	rec, err := s.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range rec.Steps {
		names = append(names, st.Name)
	}
	if rec.State != record.StateParked || rec.Session == nil || rec.Session.Ended != "close" ||
		strings.Join(names, ",") != "look,clean,broken,report,link,traps,check" || rec.ResultBytes != int64(len(`{"total":42,"over":1}`)) {
		t.Fatalf("closed: state %s, session %+v, steps %v, result %d bytes, error %q", rec.State, rec.Session, names, rec.ResultBytes, rec.Error)
	}
	a, err := approve.NewStore(redistest.Client(t), approve.Options{}).Get(ctx, rec.ApprovalID)
	if err != nil || string(a.Result) != `{"total":42,"over":1}` {
		t.Fatalf("the parked result: %v, %v", a, err)
	}
	if rec.Decision == nil || rec.Attempt != 1 {
		t.Errorf("decision %+v, attempt %d", rec.Decision, rec.Attempt)
	}
	// One step failed and the output is valid: the close's state and
	// verdict (parked, ok), and the count of failed steps (docs/record.md).
	if rec.Verdict != record.VerdictOK || rec.Session.StepsFailed != 1 {
		t.Errorf("closed with one failed step: verdict %s, steps_failed %d; want ok and 1", rec.Verdict, rec.Session.StepsFailed)
	}
	// Over: a call is refused as ended.
	if _, err := s.Run(ctx, sh("late", "true")); !errors.Is(err, airlock.ErrSessionEnded) {
		t.Errorf("a call after the close: %v, want ErrSessionEnded", err)
	}
}

// A session left idle ends expired and frees its slot; a one-shot run
// then runs. A worker holding its -max-sessions refuses another open with
// ErrNoRoom (429), and keeps its other slot for one-shot runs.
func TestSessionIdleExpiryAndRoom(t *testing.T) {
	b := setup(t, "-concurrency", "2", "-max-sessions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"30s","session":{"idle_timeout":"1s"}}`))
	if err != nil {
		t.Fatalf("open: %v\n%s", err, b.worker.logs.String())
	}
	_, err = b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"30s","session":{}}`))
	var se *session.Error
	if !errors.Is(err, airlock.ErrNoRoom) || !errors.As(err, &se) || se.RetryAfter <= 0 {
		t.Fatalf("a second session: %v, want ErrNoRoom with a Retry-After", err)
	}
	// The other slot runs one-shot runs meanwhile.
	if rec := b.run(`{"version":1,"steps":[{"run":["true"]}]}`); rec.State != record.StateCompleted {
		t.Fatalf("a one-shot run beside the session: %s %s", rec.State, rec.Error)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := s.Run(ctx, sh("late", "true")); !errors.Is(err, airlock.ErrSessionEnded) {
		t.Fatalf("a call after the idle timeout: %v, want ErrSessionEnded", err)
	}
	rec := b.wait(s.ID())
	if rec.State != record.StateExpired || rec.Session == nil || rec.Session.Ended != "idle_timeout" ||
		rec.Error != "the session's idle timeout passed (no call for idle_timeout 1s)" {
		t.Fatalf("idle session: %s, session %+v, error %q", rec.State, rec.Session, rec.Error)
	}
	// Its place is free again.
	s2, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"30s","session":{}}`))
	if err != nil {
		t.Fatalf("open after the expiry: %v", err)
	}
	if rec, err := s2.Delete(ctx); err != nil || rec.State != record.StateCanceled || rec.Attempt != 1 {
		t.Fatalf("delete: %+v, %v", rec, err)
	}
}

// Delete ends a session at once, even mid-step: the step's processes are
// killed, the call waiting on it is answered, the run ends canceled at its
// first attempt and is never run again.
func TestSessionDeleteMidStep(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"60s","session":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	marker := numMarker()
	ran := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, sh("long", "sleep 3"+marker))
		ran <- err
	}()
	if !eventually(5*time.Second, func() bool { return len(procsMatching("sleep 3"+marker)) > 0 }) {
		t.Fatal("the step never started")
	}
	start := time.Now()
	rec, err := s.Delete(ctx)
	if err != nil || rec.State != record.StateCanceled || rec.Attempt != 1 || rec.Session == nil || rec.Session.Ended != "canceled" {
		t.Fatalf("delete: %+v, %v", rec, err)
	}
	t.Logf("deleted mid-step in %s", time.Since(start))
	select {
	case err := <-ran:
		if !errors.Is(err, airlock.ErrSessionEnded) {
			t.Errorf("the step's call: %v, want ErrSessionEnded", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the step's call was never answered")
	}
	if p := procsMatching("sleep 3" + marker); len(p) > 0 {
		t.Errorf("the step outlived its session: %v", p)
	}
	time.Sleep(2 * time.Second)
	if again, err := b.client.Status(ctx, b.queue, s.ID()); err != nil || again.State != record.StateCanceled || again.Attempt != 1 {
		t.Errorf("later: %+v, %v", again, err)
	}
}

// The holder beats from the moment it holds the session: an open whose
// inputs take longer than session.DeadAfter to download is not taken for
// a dead worker's.
func TestSessionSlowOpenIsAlive(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(session.DeadAfter + 3*time.Second)
		io.WriteString(w, "late but fine")
	}))
	t.Cleanup(slow.Close)
	b := setup(t, "-fetch-allow", "127.0.0.1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"60s","session":{},
		"inputs":[{"url":"`+slow.URL+`/x","path":"in/x"}]}`))
	if err != nil {
		t.Fatalf("open with a slow input: %v\n%s", err, b.worker.logs.String())
	}
	if got, err := s.ReadFile(ctx, "in/x"); err != nil || string(got) != "late but fine" {
		t.Fatalf("the input: %q, %v", got, err)
	}
	if rec, err := s.Delete(ctx); err != nil || rec.State != record.StateCanceled {
		t.Fatalf("delete: %+v, %v", rec, err)
	}
}
