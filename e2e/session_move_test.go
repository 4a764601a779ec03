//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// secondWorker starts another worker of b's queue, on a workspace root
// of its own and b's session store.
func (b *bundle) secondWorker(name string) *workerProc {
	b.t.Helper()
	return b.startWorker("-workspace-root", filepath.Join(filepath.Dir(b.root), name))
}

// killWorker SIGKILLs wp and, at the test's end, detaches the mounts its
// slots left below root (a killed worker's next one on the root would
// sweep them).
func killWorker(t *testing.T, wp *workerProc, root string) {
	t.Helper()
	_ = wp.cmd.Process.Kill()
	<-wp.done
	t.Cleanup(func() {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		lines := strings.Split(string(b), "\n")
		for i := len(lines) - 1; i >= 0; i-- { // the deepest first
			if f := strings.Fields(lines[i]); len(f) > 4 && (f[4] == root || strings.HasPrefix(f[4], root+"/")) {
				_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
	})
}

// holder is the worker holding session id now ("" when none).
func holder(t *testing.T, b *bundle, id string) string {
	t.Helper()
	_, in, err := b.client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return in.Worker
}

// TestSessionPauseResumeElsewhere: a paused session frees its worker;
// that worker is killed; the next call resumes it on a second worker,
// its files byte for byte, modes and links as the steps left them, its
// earlier steps in its record.
func TestSessionPauseResumeElsewhere(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"3m","session":{"idle_timeout":"2m"},
		"steps":[{"name":"prep","run":["sh","-c","mkdir -p out/deep && echo kept > out/deep/f && chmod 0640 out/deep/f && ln -s deep/f out/link"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	blob := make([]byte, 1<<20)
	_, _ = rand.Read(blob)
	if err := s.WriteFile(ctx, "in/blob", blob); err != nil {
		t.Fatal(err)
	}
	a, err := s.Pause(ctx)
	if err != nil || a.State != session.StatePaused {
		t.Fatalf("pause: %+v, %v", a, err)
	}
	if !eventually(5*time.Second, func() bool {
		rec, err := b.client.Status(ctx, b.queue, s.ID())
		return err == nil && rec.State == airlock.StatePaused
	}) {
		rec, err := b.client.Status(ctx, b.queue, s.ID())
		t.Errorf("status of a paused session: %s %q, %v", rec.State, rec.Error, err)
	}
	if h := holder(t, b, s.ID()); h != "" {
		t.Errorf("a paused session is held by %q", h)
	}
	// The worker that held it dies: nothing of the session was there.
	killWorker(t, b.worker, b.root)
	second := b.secondWorker("ws2")
	start := time.Now()
	if a, err := s.Resume(ctx); err != nil || a.State != session.StateOpen {
		t.Fatalf("resume: %+v, %v", a, err)
	}
	t.Logf("resume on another worker (1 MiB workspace) answered in %s", time.Since(start))
	if h := holder(t, b, s.ID()); !strings.Contains(h, "/"+strconv.Itoa(second.cmd.Process.Pid)+"/") {
		t.Errorf("held by %q, want the second worker (pid %d)", h, second.cmd.Process.Pid)
	}
	got, err := s.ReadFile(ctx, "in/blob")
	if err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("in/blob after the move: %d bytes, %v", len(got), err)
	}
	st, err := s.Run(ctx, tasks.Step{Name: "look", Run: []string{"sh", "-c", "stat -c '%a %F' out/deep/f out/link; readlink out/link; cat out/link"}})
	if err != nil || st.Stdout != "640 regular file\n777 symbolic link\ndeep/f\nkept\n" {
		t.Fatalf("modes and links after the move: %+v, %v", st, err)
	}
	// Pause and resume again, timed, on the same 1 MiB workspace.
	var resumes []time.Duration
	for range 10 {
		if _, err := s.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := s.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		resumes = append(resumes, time.Since(t0))
	}
	t.Logf("resume of a paused session (1 MiB workspace): p50 %s, max %s", pct(resumes, .5), pct(resumes, 1))
	rec, err := s.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Steps) != 2 || rec.Steps[0].Name != "prep" || rec.Steps[1].Name != "look" || rec.Session == nil || rec.Session.Calls < 4 {
		t.Errorf("the record after moves: %d steps %+v, session %+v", len(rec.Steps), rec.Steps, rec.Session)
	}
}

// TestSessionSurvivesDeploy: worker A stops (SIGTERM) mid-conversation,
// worker B starts: the next call answers from B with the files intact.
func TestSessionSurvivesDeploy(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"2m","session":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.Run(ctx, sh("one", "echo before-deploy > out/notes")); err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("step: %+v, %v", st, err)
	}
	_ = b.worker.cmd.Process.Signal(syscall.SIGTERM)
	<-b.worker.done
	second := b.secondWorker("ws2")
	st, err := s.Run(ctx, sh("two", "cat out/notes && echo after-deploy >> out/notes"))
	if err != nil || st.Stdout != "before-deploy\n" {
		t.Fatalf("the call after the deploy: %+v, %v\nworker A: %s", st, err, b.worker.logs.String())
	}
	if h := holder(t, b, s.ID()); !strings.Contains(h, "/"+strconv.Itoa(second.cmd.Process.Pid)+"/") {
		t.Errorf("held by %q, want worker B (pid %d)", h, second.cmd.Process.Pid)
	}
	got, err := s.ReadFile(ctx, "out/notes")
	if err != nil || string(got) != "before-deploy\nafter-deploy\n" {
		t.Fatalf("out/notes: %q, %v", got, err)
	}
	if _, err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSessionSurvivesKill: the worker dies (SIGKILL) during a step: that
// call answers "not applied"; the next runs on another worker from the
// last completed step; the lost step never ran there.
func TestSessionSurvivesKill(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"3m","session":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.Run(ctx, sh("one", "echo 1 > out/count")); err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("step: %+v, %v", st, err)
	}
	second := b.secondWorker("ws2")
	lost := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, sh("lost", "echo 2 >> out/count; sleep 60"))
		lost <- err
	}()
	if !eventually(20*time.Second, func() bool {
		return strings.Contains(b.worker.logs.String(), `"step":"lost"`) || len(procsMatching("sleep 60")) > 0
	}) {
		t.Fatal("the step never started")
	}
	killWorker(t, b.worker, b.root)
	start := time.Now()
	select {
	case err := <-lost:
		if !errors.Is(err, airlock.ErrNotApplied) || !strings.Contains(err.Error(), "not applied") {
			t.Fatalf("the call the kill interrupted: %v, want ErrNotApplied", err)
		}
		t.Logf("the interrupted call answered %q after %s", err, time.Since(start).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatal("the interrupted call did not answer")
	}
	start = time.Now()
	st, err := s.Run(ctx, sh("next", "cat out/count"))
	if err != nil || st.Stdout != "1\n" {
		t.Fatalf("the next call: %+v, %v (want the state after step one only)", st, err)
	}
	t.Logf("the next call ran on the second worker after %s", time.Since(start).Round(time.Millisecond))
	if h := holder(t, b, s.ID()); !strings.Contains(h, "/"+strconv.Itoa(second.cmd.Process.Pid)+"/") {
		t.Errorf("held by %q, want the second worker (pid %d)", h, second.cmd.Process.Pid)
	}
	rec, err := s.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range rec.Steps {
		names = append(names, st.Name)
	}
	if strings.Join(names, ",") != "one,next" {
		t.Errorf("the record's steps %v: want one,next (the lost step was not applied, nothing ran twice)", names)
	}
}

// TestSessionBigFiles: a 64 MiB file goes into a session and comes back
// through the HTTP API, streamed: the API's peak RSS stays under 100 MB.
func TestSessionBigFiles(t *testing.T) {
	b := setup(t)
	base, proc := startAPIProc(t, b)
	api := &apiClient{t: t, base: base, c: &http.Client{}}
	var opened struct {
		SessionID string `json:"session_id"`
	}
	api.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "5m",
		"session": map[string]any{}, "limits": map[string]any{"workspace": "200MiB"}}, 201, &opened)
	id := opened.SessionID
	const size = 64 << 20
	seed := make([]byte, 1<<20)
	_, _ = rand.Read(seed)
	body := func() io.Reader { return io.LimitReader(&repeat{b: seed}, size) }
	want := sha256.New()
	_, _ = io.Copy(want, body())
	// Unknown length (chunked): streamed.
	req, _ := http.NewRequest("PUT", base+"/v1/sessions/"+id+"/files/in/big.bin", io.NopCloser(body()))
	req.Header.Set("Authorization", "Bearer "+apiAgent)
	res, err := api.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(out), `"size":67108864`) {
		t.Fatalf("upload: %d %s", res.StatusCode, out)
	}
	var st record.Step
	api.json("POST", "/v1/sessions/"+id+"/steps", apiAgent, map[string]any{"run": []string{"sh", "-c", "sha256sum in/big.bin | cut -d' ' -f1"}}, 200, &st)
	if got := strings.TrimSpace(st.Stdout); got != hex.EncodeToString(want.Sum(nil)) {
		t.Fatalf("the file in the workspace: sha256 %s, want %x", got, want.Sum(nil))
	}
	req, _ = http.NewRequest("GET", base+"/v1/sessions/"+id+"/files/in/big.bin", nil)
	req.Header.Set("Authorization", "Bearer "+apiAgent)
	res, err = api.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || err != nil || n != size || !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("download: %d, %d bytes, %v", res.StatusCode, n, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", proc.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")))
			t.Logf("the API's peak RSS after 64 MiB in and out: %d MiB", v>>10)
			if v > 100<<10 {
				t.Errorf("the API's peak RSS %d kB, want under 100 MB", v)
			}
		}
	}
	api.do("DELETE", "/v1/sessions/"+id, apiAgent, nil, nil)
}

// repeat reads b over and over.
type repeat struct {
	b []byte
	i int
}

func (r *repeat) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.i:])
	r.i = (r.i + n) % len(r.b)
	return n, nil
}
