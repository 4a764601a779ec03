//go:build linux

package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// An attacker's review of sessions and cancel (issue 23): each test plays
// a hostile agent or API caller against the real worker binary (as root)
// and the real Redis, and asserts the safe outcome. See also
// session_attack_more_test.go (deadlines, exhaustion, secrets).

// attackOpen opens a session of spec js on b's queue, or fails t.
func attackOpen(t *testing.T, b *bundle, c *airlock.Client, js string) *airlock.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := c.OpenSession(ctx, b.spec(js))
	if err != nil {
		t.Fatalf("open: %v\nworker logs:\n%s", err, b.worker.logs.String())
	}
	return s
}

// mustStep runs script as one step of s and wants verdict ok.
func mustStep(t *testing.T, s *airlock.Session, name, script string) *record.Step {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := s.Run(ctx, sh(name, script))
	if err != nil || st.Verdict != record.VerdictOK {
		t.Fatalf("step %s: %+v, %v", name, st, err)
	}
	return st
}

// rawCall sends a call straight on the session's wire (session.Conn), past
// the Go client's own path checks, as a client of Redis could.
func rawCall(t *testing.T, prefix, id string, c session.Call) (*session.Answer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.ID = "raw-" + randHex(t, 6)
	start := time.Now()
	a, err := session.NewConn(redistest.Client(t), prefix).Call(ctx, id, c, 15*time.Second)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("%s %q: answered in %s: the worker blocked", c.Op, c.Path, d)
	}
	return a, err
}

// status is the HTTP status a session call's error says (200 for none,
// -1 for an error that is not a *session.Error).
func status(err error) int {
	var se *session.Error
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &se):
		return se.Status
	}
	return -1
}

// TestSessionAttackFiles (goal 1): the read and write calls on what a step
// prepared (links to host files and directories, FIFOs, sockets, huge
// sparse files, hard links, directories swapped for links between calls)
// and on hostile paths (absolute, "..", NUL, very long, unicode, the
// worker's own temporary names), sent past the client's checks: nothing
// of the host is read or written, the worker never blocks, and no
// temporary file is left behind.
func TestSessionAttackFiles(t *testing.T) {
	b := setup(t)
	s := attackOpen(t, b, b.client, `{"version":1,"timeout":"120s","session":{"idle_timeout":"60s"}}`)
	id := s.ID()
	host := t.TempDir() // a host directory a link points to
	if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host-only"), 0o644); err != nil {
		t.Fatal(err)
	}
	shadow, err := os.ReadFile("/etc/shadow")
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, "traps", `set -e
ln -s /etc/shadow out/shadow
ln -s /etc out/etc
ln -s `+host+` out/hostdir
mkdir -p out/real out/swap && echo inside > out/real/f
ln out/real/f out/hard
mkfifo out/fifo in/fifo
truncate -s 15M out/sparse
head -c 4194305 /dev/zero > out/big
perl -MSocket -e 'socket(S, PF_UNIX, SOCK_STREAM, 0) or die; bind(S, sockaddr_un("out/sock")) or die "$!"'
ln /etc/passwd out/hostlink 2>/dev/null || echo no-hard-link-across-filesystems
touch out/.airlock-write-0 && mkdir out/.airlock-write-1`)

	// Reads: never a host file, never through a link, never blocking. A
	// socket does not outlive its step (nothing listens on it after):
	// the parked workspace leaves it out, so the next call finds none.
	reads := map[string]int{
		"out/shadow": 400, "out/etc/passwd": 400, "out/hostdir/secret": 400, "out/fifo": 400, "out/sock": 404,
		"out/real": 400, "out/sparse": 413, "out/big": 413, "out/hostlink": 404,
		"/etc/passwd": 400, "../../../../etc/passwd": 400, "out/../../etc/passwd": 400, "out/real/f/..": 400,
		"out/\x00/etc/passwd": 400, ".": 400, "": 400, strings.Repeat("d/", 2100) + "f": 400,
		strings.Repeat("n", 300): 400, "out/ünï/файл": 404,
	}
	for p, want := range reads {
		a, err := rawCall(t, "", id, session.Call{Op: session.OpRead, Path: p})
		if got := status(err); got != want || (a != nil && len(a.Data) > 0) {
			t.Errorf("read %.40q: status %d (%v), want %d; data %q", p, got, err, want, dataOf(a))
		}
	}
	if a, err := rawCall(t, "", id, session.Call{Op: session.OpRead, Path: "out/hard"}); err != nil || string(a.Data) != "inside\n" {
		t.Errorf("read out/hard (a hard link within the workspace): %v %q", err, dataOf(a))
	}

	// Writes: the entry is replaced, never opened or followed.
	writes := map[string]int{
		"out/shadow": 200, "out/fifo": 200, "in/fifo": 200, "out/sock": 200, "out/hard": 200,
		"out/etc/airlock-attack": 400, "out/hostdir/secret": 400, "out/real": 400, "out/.airlock-write-1": 400,
		"out/.airlock-write-0": 200, "/tmp/airlock-attack": 400, "../airlock-attack": 400, "out/\x00x": 400,
		strings.Repeat("d/", 2100) + "f": 400, strings.Repeat("n", 300): 400, "out/ünï/файл": 200,
	}
	for p, want := range writes {
		if _, err := rawCall(t, "", id, session.Call{Op: session.OpWrite, Path: p, Data: []byte("attacker")}); status(err) != want {
			t.Errorf("write %.40q: status %d (%v), want %d", p, status(err), err, want)
		}
	}
	// A directory swapped for a link to the host between two calls.
	if err := s.WriteFile(context.Background(), "out/swap/a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	mustStep(t, s, "swap", "rm -rf out/swap && ln -s "+host+" out/swap")
	if err := s.WriteFile(context.Background(), "out/swap/secret", []byte("attacker")); status(err) != 400 {
		t.Errorf("write through a swapped directory: %v, want 400", err)
	}
	if got, _ := os.ReadFile(filepath.Join(host, "secret")); string(got) != "host-only" {
		t.Errorf("the host file was written: %q", got)
	}
	if ents, _ := os.ReadDir(host); len(ents) != 1 {
		t.Errorf("the host directory holds %d entries, want 1", len(ents))
	}
	if _, err := os.Stat("/etc/airlock-attack"); err == nil {
		t.Error("a write reached /etc")
	}
	if after, _ := os.ReadFile("/etc/shadow"); string(after) != string(shadow) {
		t.Fatal("/etc/shadow changed")
	}
	st := mustStep(t, s, "check", `cat out/real/f; test -f out/shadow && ! test -L out/shadow && cat out/shadow; echo
find . -name '.airlock-write-*' | sort`)
	if st.Stdout != "inside\nattacker\n./out/.airlock-write-0\n./out/.airlock-write-1\n" {
		t.Errorf("after the writes: %q (want the hard link's other name untouched, the link replaced, no temporary left)", st.Stdout)
	}
	if _, err := s.Delete(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func dataOf(a *session.Answer) string {
	if a == nil {
		return ""
	}
	return string(a.Data[:min(len(a.Data), 64)])
}

// TestSessionAttackRawTask (goal 2): a session's task put on a queue by a
// raw asynq client, past the client: with no state hash it is refused
// before any step; with the state of a session whose holder died (as
// after a kill -9, when asynq gives the task again) it is not replayed;
// and under the id of another queue's live session it runs nothing and
// leaves that session open.
func TestSessionAttackRawTask(t *testing.T) {
	needRoot(t)
	b := newBundle(t)
	other := redistest.Queue(t)
	b.worker = b.startWorker("-queues", b.queue+"=1,"+other+"=1", "-concurrency", "3", "-max-sessions", "3")
	ctx := context.Background()

	rec := rawSessionTask(t, b, b.queue, "")
	if rec.State != record.StateFailed || len(rec.Steps) != 0 || !strings.Contains(rec.Error, "never opened") {
		t.Errorf("a raw session task without state: %s %q, %d steps", rec.State, rec.Error, len(rec.Steps))
	}

	// The state a held session leaves when its worker is SIGKILLed.
	conn := session.NewConn(redistest.Client(t), "")
	dead := "dead-" + randHex(t, 8)
	t.Cleanup(func() { redistest.Client(t).Del(context.Background(), "airlock:session:{"+dead+"}") })
	if err := conn.Create(ctx, session.Info{ID: dead, TaskID: dead, Queue: b.queue, OpenedAt: time.Now()}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Hold(ctx, dead, b.queue, "killed-worker", time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// Taken over (its holder does not beat), with nothing to resume from:
	// it never answered its open. Its spec's steps never run again.
	rec = rawSessionTask(t, b, b.queue, dead)
	if rec.State != record.StateFailed || len(rec.Steps) != 0 || !strings.Contains(rec.Error, "stopped before its open was answered") {
		t.Errorf("a dead holder's session given again: %s %q, %d steps", rec.State, rec.Error, len(rec.Steps))
	}

	// A live session of this queue; the same id put on the other queue.
	s := attackOpen(t, b, b.client, `{"version":1,"timeout":"60s","session":{}}`)
	rec = rawSessionTask(t, b, other, s.ID())
	if rec.State != record.StateFailed || len(rec.Steps) != 0 {
		t.Errorf("a raw task under a live session's id: %s %q, %d steps", rec.State, rec.Error, len(rec.Steps))
	}
	st, err := s.Run(ctx, sh("after", "echo still-mine"))
	if err != nil || st.Stdout != "still-mine\n" {
		in, _ := conn.Get(ctx, s.ID())
		t.Errorf("HOLE: a raw task of another queue under the session's id ended the live session: %v (state %+v)", err, in)
	}
	_, _ = s.Delete(ctx)
}

// rawSessionTask enqueues a session spec as is into queue with task id
// (random when ""), and waits for its record.
func rawSessionTask(t *testing.T, b *bundle, queue, id string) *record.Run {
	t.Helper()
	return rawTask(t, b, queue, id, `{"version":1,"timeout":"30s","session":{},"steps":[{"name":"marker","run":["true"]}]}`)
}

// rawTask enqueues payload as is into queue with task id (random when
// ""), past the client's checks, and waits for its record.
func rawTask(t *testing.T, b *bundle, queue, id, payload string) *record.Run {
	t.Helper()
	opts := []asynq.Option{asynq.Queue(queue), asynq.Retention(time.Hour), asynq.MaxRetry(0)}
	if id != "" {
		opts = append(opts, asynq.TaskID(id))
	}
	info, err := asynq.NewClientFromRedisClient(redistest.Client(t)).Enqueue(asynq.NewTask(tasks.TypeRun, []byte(payload)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rec, err := b.client.Wait(ctx, queue, info.ID)
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, b.worker.logs.String())
	}
	return rec
}

// TestSessionAttackOtherCaller (goal 2) through the real api binary:
// another token (runs:write) and a guessed id get 404 on every session
// route, and hostile file paths 400; then the same token's cancel of the
// session's run by the runs route must not end it either (a session's
// calls are its opener's).
func TestSessionAttackOtherCaller(t *testing.T) {
	b := setup(t)
	api := newAPIClient(t, startAPI(t, b))
	var opened struct {
		SessionID string `json:"session_id"`
	}
	api.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "60s", "session": map[string]any{}}, 201, &opened)
	sid := opened.SessionID
	octet := map[string]string{"Content-Type": "application/octet-stream"}
	routes := []struct {
		method, path string
		body         any
		h            map[string]string
	}{
		{"POST", "/steps", map[string]any{"run": []string{"sh", "-c", "echo x > out/x"}}, nil},
		{"PUT", "/files/out%2Fx", "attacker", octet},
		{"GET", "/files/out%2Fx", nil, nil},
		{"POST", "/close", nil, nil},
		{"DELETE", "", nil, nil},
	}
	for _, r := range routes {
		if code, _, body := api.send(r.method, "/v1/sessions/"+sid+r.path, apiEnqueuer, r.body, r.h, false); code != 404 {
			t.Errorf("another token: %s %s: %d %s", r.method, r.path, code, body)
		}
		guessed := "/v1/sessions/" + strings.Replace(sid, sid[:8], "00000000", 1) + r.path
		if code, _, body := api.send(r.method, guessed, apiAgent, r.body, r.h, false); code != 404 {
			t.Errorf("a guessed id: %s %s: %d %s", r.method, r.path, code, body)
		}
	}
	for _, p := range []string{"%2Fetc%2Fpasswd", "..%2F..%2Fetc%2Fpasswd", "out%2F..%2F..%2Fx", "out%00x", "out/%2E%2E/%2E%2E/x"} {
		for _, m := range []string{"GET", "PUT"} {
			var body any
			if m == "PUT" {
				body = "attacker"
			}
			if code, _, resp := api.send(m, "/v1/sessions/"+sid+"/files/"+p, apiAgent, body, octet, true); code != 400 && code != 404 {
				t.Errorf("%s files/%s: %d %s", m, p, code, resp)
			}
		}
	}
	var st record.Step
	api.json("POST", "/v1/sessions/"+sid+"/steps", apiAgent, map[string]any{"run": []string{"sh", "-c", "ls out; echo ok"}}, 200, &st)
	if st.Stdout != "ok\n" {
		t.Errorf("another token's calls reached the workspace: %q", st.Stdout)
	}
	// A token without runs:read may not read a run (403), nor through
	// the cancel route's answer: a finished run of the agent's, whose
	// stdout the enqueuer must not see.
	var enq struct {
		TaskID string `json:"task_id"`
	}
	api.json("POST", "/v1/runs", apiAgent, map[string]any{"version": 1, "queue": b.queue,
		"steps": []any{map[string]any{"run": []string{"echo", "agent-only-stdout"}}}}, 201, &enq)
	b.wait(enq.TaskID)
	if code, _, body := api.do("GET", "/v1/runs/"+enq.TaskID, apiEnqueuer, nil, nil); code != 403 {
		t.Errorf("enqueuer's GET of a run: %d %s", code, body)
	}
	if code, _, body := api.do("DELETE", "/v1/runs/"+enq.TaskID, apiEnqueuer, nil, nil); strings.Contains(string(body), "agent-only-stdout") {
		t.Errorf("HOLE: a token without runs:read reads a run's record (stdout included) through DELETE /v1/runs: %d", code)
	}
	// The runs route, with the same token: it must not end the session.
	code, _, body := api.do("DELETE", "/v1/runs/"+sid+"?queue="+b.queue, apiEnqueuer, nil, nil)
	after, _, afterBody := api.do("POST", "/v1/sessions/"+sid+"/steps", apiAgent, map[string]any{"run": []string{"true"}}, nil)
	if code != 404 || after != 200 {
		t.Errorf("HOLE: token enqueuer's DELETE /v1/runs/{session id}: %d %.160s; the opener's next step: %d %.200s", code, body, after, afterBody)
	}
}

// TestSessionAttackCancel (goal 5): another principal's MCP server cannot
// cancel a session (nor a run) it did not open; a close racing a cancel
// ends one way only (parked with its approval, or canceled with none, and
// then never run again); a parked session cannot be canceled.
func TestSessionAttackCancel(t *testing.T) {
	b := setup(t, "-concurrency", "2", "-max-sessions", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	victim := airlock.NewClient(redistest.Client(t), airlock.ClientOptions{Principal: "victim", Retention: time.Hour})
	t.Cleanup(func() { victim.Close() })
	spec := `{"version":1,"timeout":"120s","session":{},"output":{"result":"out/r.json"}}`
	s := attackOpen(t, b, victim, spec)
	mallory := mcpStdio(t, b, "-principal", "mallory")
	// Another principal's session is unknown to mallory: the words of
	// no task at all (TestReadsAreTheCallers).
	if e := call(t, mallory, "cancel_run", `{"task_id": "`+s.ID()+`"}`, true).err(t); !strings.Contains(e.Error, `task "`+s.ID()+`" not found`) {
		t.Errorf("mallory's cancel_run: %+v", e)
	}
	for _, tool := range []string{"run_in_session", "close_session"} {
		args := `{"session_id": "` + s.ID() + `"` + map[bool]string{true: `, "run": ["true"]}`, false: `}`}[tool == "run_in_session"]
		if e := call(t, mallory, tool, args, true).err(t); !strings.Contains(e.Error, "no session") {
			t.Errorf("mallory's %s: %+v", tool, e)
		}
	}
	mustStep(t, s, "still", "true")
	if _, err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	store := approvalsOf(t)
	for i := range 6 {
		s := attackOpen(t, b, victim, spec)
		mustStep(t, s, "result", `echo '{"n": 1}' > out/r.json`)
		closed, canceled := make(chan error, 1), make(chan error, 1)
		go func() { _, err := s.Close(ctx); closed <- err }()
		time.Sleep(time.Duration(i*6) * time.Millisecond)
		go func() { _, err := victim.Cancel(ctx, b.queue, s.ID()); canceled <- err }()
		cerr, kerr := <-closed, <-canceled
		rec, err := victim.Status(ctx, b.queue, s.ID())
		if err != nil {
			t.Fatal(err)
		}
		pending := store(s.ID())
		t.Logf("race %d: close %v, cancel %v: %s, pending approvals %d", i, cerr, kerr, rec.State, pending)
		switch rec.State {
		case record.StateParked:
			if pending != 1 || !errors.Is(kerr, airlock.ErrFinal) {
				t.Errorf("parked with %d pending approvals, cancel %v", pending, kerr)
			}
			if _, err := victim.Cancel(ctx, b.queue, s.ID()); !errors.Is(err, airlock.ErrFinal) || store(s.ID()) != 1 {
				t.Errorf("cancel of a parked session: %v", err)
			}
		case record.StateCanceled:
			if pending != 0 || kerr != nil {
				t.Errorf("HOLE: canceled with %d pending approvals (cancel %v)", pending, kerr)
			}
			b.stillCanceled(s.ID())
		default:
			t.Errorf("race %d: the session ended %s: %s", i, rec.State, rec.Error)
		}
	}
}

// approvalsOf returns how many pending approvals a task has.
func approvalsOf(t *testing.T) func(taskID string) int {
	st := approve.NewStore(redistest.Client(t), approve.Options{})
	return func(taskID string) int {
		as, err := st.List(context.Background(), approve.StatePending, 10000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range as {
			if a.TaskID == taskID {
				n++
			}
		}
		return n
	}
}
