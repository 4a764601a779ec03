//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
	"github.com/airlock-run/airlock/tasks"
)

// The attacker's review of sessions, continued (session_attack_test.go):
// deadlines, exhaustion of the worker and of Redis, secrets.

// openRetry opens a session, trying again while the worker has not given
// back the place of a session that just ended (ErrNoRoom).
func openRetry(t *testing.T, b *bundle, js string) *airlock.Session {
	t.Helper()
	for i := 0; ; i++ {
		s, err := b.client.OpenSession(context.Background(), b.spec(js))
		if err == nil {
			return s
		}
		if !errors.Is(err, airlock.ErrNoRoom) || i == 10 {
			t.Fatalf("open: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestSessionAttackDeadline (goal 3): what a step starts in the
// background (setsid, nohup, a double fork ignoring SIGTERM) does not
// outlive the step; calls that keep coming do not keep a session past its
// timeout; a step running at the timeout is stopped there; the slot is
// then free.
func TestSessionAttackDeadline(t *testing.T) {
	b := setup(t, "-concurrency", "2", "-max-sessions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	marker := "7" + numMarker() + "1"
	start := time.Now()
	s := openRetry(t, b, `{"version":1,"timeout":"8s","session":{"idle_timeout":"8s"}}`)
	mustStep(t, s, "daemons", `setsid sh -c 'sleep `+marker+`' </dev/null >/dev/null 2>&1 &
nohup sleep `+marker+` </dev/null >/dev/null 2>&1 &
(sh -c 'trap "" HUP TERM INT; exec sleep `+marker+`' </dev/null >/dev/null 2>&1 &)
echo forked`)
	if p := procsMatching("sleep " + marker); len(p) > 0 {
		t.Errorf("HOLE: processes a step started outlived it: %v", p)
	}
	// Calls every 300ms: the session still ends at its timeout.
	var ended time.Duration
	for time.Since(start) < 30*time.Second {
		if _, err := s.ReadFile(ctx, "in/none"); errors.Is(err, airlock.ErrSessionEnded) {
			ended = time.Since(start)
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if ended == 0 || ended > 12*time.Second {
		t.Errorf("a session of timeout 8s kept alive by calls ended after %s", ended)
	}
	if rec := b.wait(s.ID()); rec.State != record.StateExpired || rec.Session == nil || rec.Session.Ended != "timeout" {
		t.Errorf("expired session: %s %+v", rec.State, rec.Session)
	}
	// A step that runs into the timeout is stopped at it.
	s2 := openRetry(t, b, `{"version":1,"timeout":"4s","session":{}}`)
	t0 := time.Now()
	st, err := s2.Run(ctx, sh("long", "sleep 6"+marker))
	if d := time.Since(t0); err != nil && !errors.Is(err, airlock.ErrSessionEnded) || d > 7*time.Second || st != nil && st.Verdict != record.VerdictTimeout {
		t.Errorf("a step past the session's timeout: %+v, %v after %s", st, err, d)
	}
	if p := procsMatching("sleep 6" + marker); len(p) > 0 {
		t.Errorf("the step outlived the session: %v", p)
	}
	// Its place is given back: the next open (one at most) succeeds.
	s3 := openRetry(t, b, `{"version":1,"timeout":"10s","session":{}}`)
	_, _ = s3.Delete(ctx)
}

// TestSessionAttackExhaust (goal 4): opens past -max-sessions are refused
// at once; calls at and past the file bound, a workspace filled by writes,
// huge stdin and env; no temporary file left; calls queued behind a step
// by a caller who gave up cost Redis a bounded amount; 256 steps keep a
// bounded record and the 257th is refused; after a close, a 429 and an
// expiry, every key the sessions left under the test's prefix expires.
func TestSessionAttackExhaust(t *testing.T) {
	needRoot(t)
	b := newBundle(t)
	prefix := "atk-" + randHex(t, 4) + ":"
	rdb := redistest.Client(t)
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Prefix: prefix, Retention: time.Hour})
	t.Cleanup(func() { _ = redistest.DeleteMatching(context.Background(), rdb, prefix+"*") })
	b.worker = b.startWorker("-prefix", prefix, "-concurrency", "2", "-max-sessions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s := openRetry(t, b, `{"version":1,"timeout":"90s","session":{"idle_timeout":"60s"},"limits":{"workspace":"10MiB"}}`)
	for range 5 {
		t0 := time.Now()
		if _, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"30s","session":{}}`)); !errors.Is(err, airlock.ErrNoRoom) || time.Since(t0) > 5*time.Second {
			t.Errorf("an open past -max-sessions: %v after %s", err, time.Since(t0))
		}
	}
	full := bytes.Repeat([]byte("a"), session.MaxFileBytes)
	checks := []struct {
		what string
		err  error
		want int
	}{
		{"a file of MaxFileBytes", s.WriteFile(ctx, "in/a", full), 200},
		{"a file of MaxFileBytes+1", s.WriteFile(ctx, "in/b", append(full, 'b')), 413},
		{"a second one", s.WriteFile(ctx, "in/c", full), 200},
		{"a third, past the quota", s.WriteFile(ctx, "in/d", full), 413},
	}
	_, err := s.Run(ctx, tasks.Step{Run: []string{"true"}, Stdin: strings.Repeat("s", 6<<20)})
	checks = append(checks, struct {
		what string
		err  error
		want int
	}{"a step with 6 MiB of stdin", err, 413})
	for _, c := range checks {
		if status(c.err) != c.want {
			t.Errorf("%s: %v, want %d", c.what, c.err, c.want)
		}
	}
	mustStep(t, s, "free", "rm in/a in/c")
	st, err := s.Run(ctx, tasks.Step{Name: "stdin", Run: []string{"wc", "-c"}, Stdin: strings.Repeat("s", 1<<20)})
	if err != nil || strings.TrimSpace(st.Stdout) != "1048576" {
		t.Errorf("1 MiB of stdin: %+v %v", st, err)
	}
	st, err = s.Run(ctx, tasks.Step{Name: "env", Run: []string{"true"}, Env: map[string]string{"BIG": strings.Repeat("e", 3<<20)}})
	if err != nil || st.Verdict == record.VerdictOK {
		t.Errorf("3 MiB of env: %+v %v", st, err)
	}
	if st := mustStep(t, s, "left", "find . -name '.airlock-write-*' | wc -l"); strings.TrimSpace(st.Stdout) != "0" {
		t.Errorf("temporary files left: %q", st.Stdout)
	}
	queuedCalls(t, s, prefix)
	if _, err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// 256 steps of 16 KiB of stdout each; the 257th is refused.
	s2 := openRetry(t, b, `{"version":1,"timeout":"120s","session":{}}`)
	for i := range tasks.MaxSessionSteps {
		if _, err := s2.Run(ctx, sh("s"+strconv.Itoa(i), "head -c 16384 /dev/zero | tr '\\0' x")); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if _, err := s2.Run(ctx, sh("one-more", "true")); status(err) != 409 {
		t.Errorf("step 257: %v, want 409", err)
	}
	rec, err := s2.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(rec)
	if len(rec.Steps) != tasks.MaxSessionSteps || len(enc) > 1<<20+tasks.MaxSessionSteps*1024 || !rec.KeptOutput.Reached {
		t.Errorf("record of 256 steps: %d steps, %d bytes, kept %+v", len(rec.Steps), len(enc), rec.KeptOutput)
	}
	t.Logf("record of 256 steps: %d bytes", len(enc))

	s3 := openRetry(t, b, `{"version":1,"timeout":"30s","session":{"idle_timeout":"1s"}}`)
	if rec := b.wait(s3.ID()); rec.State != record.StateExpired {
		t.Errorf("idle session: %s", rec.State)
	}
	time.Sleep(time.Second) // the worker ends the session after the record
	noKeyWithoutTTL(t, prefix)
}

// queuedCalls has a caller send 12 write calls of MaxFileBytes at once
// while a step runs (as 12 HTTP PUTs would): what they hold in Redis must
// stay bounded.
func queuedCalls(t *testing.T, s *airlock.Session, prefix string) {
	t.Helper()
	ctx := context.Background()
	ran := make(chan error, 1)
	go func() { _, err := s.Run(ctx, sh("busy", "sleep 12")); ran <- err }()
	time.Sleep(500 * time.Millisecond)
	rdb := redistest.Client(t)
	conn := session.NewConn(rdb, prefix)
	// Half a MiB a call: enough to weigh, light enough to encode twelve
	// at once under -race on a loaded machine.
	data := bytes.Repeat([]byte("q"), 512<<10)
	answered := make(chan error, 12)
	for i := range 12 {
		go func() {
			_, err := conn.Call(ctx, s.ID(), session.Call{ID: fmt.Sprintf("queued-%d", i), Op: session.OpWrite, Path: "tmp/q", Data: data}, time.Minute)
			answered <- err
		}()
	}
	key := prefix + "session:{" + s.ID() + "}:calls"
	// The calls past session.MaxQueuedCalls are refused at once (busy).
	busy := 0
	for busy < 12-session.MaxQueuedCalls {
		select {
		case err := <-answered:
			if !errors.Is(err, session.ErrBusy) {
				t.Fatalf("a call past the bound: %v, want ErrBusy", err)
			}
			busy++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d calls refused as busy, want %d", busy, 12-session.MaxQueuedCalls)
		}
	}
	n, _ := rdb.LLen(ctx, key).Result()
	mem, _ := rdb.MemoryUsage(ctx, key).Result()
	t.Logf("calls queued behind a step: %d, %d MB in Redis", n, mem>>20)
	// Redis's allocator rounds each element up: a quarter more at most.
	if n > session.MaxQueuedCalls || mem > int64(session.MaxQueuedCalls*len(data))*4/3*5/4+64<<10 {
		t.Errorf("HOLE: %d calls, %d MB, queued on one session's list in Redis (bound: %d calls)", n, mem>>20, session.MaxQueuedCalls)
	}
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	for range session.MaxQueuedCalls {
		<-answered // the workspace's quota refuses most: the answers matter not
	}
}

// noKeyWithoutTTL lists every key under prefix and fails for a key of a
// session or a cancel that never expires.
func noKeyWithoutTTL(t *testing.T, prefix string) {
	t.Helper()
	ctx := context.Background()
	rdb := redistest.Client(t)
	keys, err := rdb.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var sessions, states int
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		typ, _ := rdb.Type(ctx, k).Result()
		t.Logf("%s (%s): ttl %s", k, typ, ttl)
		if strings.Contains(k, "session:") {
			sessions++
			if strings.HasSuffix(k, "}") {
				states++
			}
		}
		// A queue's published policy, grants and catalog are the
		// workers' configuration, and the events stream is bounded by
		// its length: what a run leaves must expire.
		if ttl < 0 && (strings.Contains(k, "session:") || strings.Contains(k, "cancel:")) {
			t.Errorf("key %s (%s) never expires", k, typ)
		}
	}
	// 3 sessions, one state hash each; the 5 opens refused for
	// -max-sessions leave none (their runs' records say why: refused).
	if states != 3 || sessions < states {
		t.Errorf("%d session keys under %s, %d state hashes, want one per session held", sessions, prefix, states)
	}
}

// TestSessionAttackArgvMemory (goal 4): the argv of a session's steps is
// bounded in what the worker holds (as the record lists it, 4 KiB per
// step), not kept whole for the session's life: 96 steps of ~1 MiB of
// arguments must not grow the worker by ~96 MiB.
func TestSessionAttackArgvMemory(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := openRetry(t, b, `{"version":1,"timeout":"150s","session":{}}`)
	mustStep(t, s, "warm", "true")
	before := rssKB(t, b.worker.cmd.Process.Pid)
	arg := strings.Repeat("A", 120<<10)
	var argvBytes int
	for i := range 96 {
		st, err := s.Run(ctx, tasks.Step{Name: fmt.Sprintf("a%d", i), Run: []string{"true", arg, arg, arg, arg, arg, arg, arg, arg}})
		if err != nil {
			t.Fatal(err)
		}
		argvBytes = 0
		for _, a := range st.Argv {
			argvBytes += len(a)
		}
	}
	after := rssKB(t, b.worker.cmd.Process.Pid)
	t.Logf("worker RSS %d MiB → %d MiB over 96 steps; a step's answer lists %d bytes of argv", before>>10, after>>10, argvBytes)
	if after-before > 48<<10 {
		t.Errorf("HOLE: the worker grew by %d MiB holding the session's argv (each step's kept whole until the close)", (after-before)>>10)
	}
	rec, err := s.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(rec)
	t.Logf("closed record: %d bytes", len(enc))
}

// rssKB reads the resident set of process pid, in KiB.
func rssKB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestSessionAttackSecrets (goal 6): a session's spec meets the secrets'
// grants as a one-shot spec does; a step call may not put in its
// environment a secret whose grant lacks env: true, nor one the spec did
// not declare; what a read call returns is redacted as every other way a
// secret leaves the worker is.
func TestSessionAttackSecrets(t *testing.T) {
	hostOnly, envTok, undeclared, elsewhere := "hst-"+randHex(t, 12), "env-"+randHex(t, 12), "und-"+randHex(t, 12), "els-"+randHex(t, 12)
	b := setupWithPolicy(t, `{"secrets": {
		"HOST_ONLY": {"queues": ["{{queue}}"], "hosts": ["127.0.0.1"]},
		"ENV_TOKEN": {"queues": ["{{queue}}"], "env": true},
		"UNDECLARED": {"queues": ["{{queue}}"], "env": true},
		"ELSEWHERE": {"queues": ["some-other-queue"], "env": true}}}`,
		"-secrets-dir", secretsDir(t, "HOST_ONLY", hostOnly, "ENV_TOKEN", envTok, "UNDECLARED", undeclared, "ELSEWHERE", elsewhere))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var fe *tasks.FieldError
	if _, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"60s","session":{},"secrets":["ELSEWHERE"]}`)); !errors.As(err, &fe) || fe.Field != "secrets[0]" {
		t.Errorf("a session with a secret not granted to its queue: %v", err)
	}
	if _, err := b.client.OpenSession(ctx, b.spec(`{"version":1,"timeout":"60s","session":{},"secrets":["HOST_ONLY"],
		"steps":[{"run":["true"],"env":{"T":"${secret:HOST_ONLY}"}}]}`)); !errors.As(err, &fe) || fe.Field != `steps[0].env["T"]` {
		t.Errorf("a session whose step puts HOST_ONLY in its env: %v", err)
	}
	raw := rawTask(t, b, b.queue, "", `{"version":1,"timeout":"30s","session":{},"secrets":["ELSEWHERE"],"steps":[{"run":["true"]}]}`)
	if raw.State != record.StateFailed || len(raw.Steps) != 0 || !strings.Contains(raw.Error, "not granted") {
		t.Errorf("a raw session task with a secret not granted: %s %q", raw.State, raw.Error)
	}

	s := openRetry(t, b, `{"version":1,"timeout":"60s","session":{},"secrets":["HOST_ONLY","ENV_TOKEN"]}`)
	rev := func(v string) string { r := []byte(v); slices.Reverse(r); return string(r) }
	leak := func(name, ref, value string) {
		st, err := s.Run(ctx, tasks.Step{Name: name, Run: []string{"sh", "-c", `printf %s "$T" | rev`}, Env: map[string]string{"T": ref}})
		if st != nil && strings.Contains(st.Stdout, rev(value)) {
			t.Errorf("HOLE: a step call put %s in its environment (grant or declaration bypassed); stdout %q", ref, st.Stdout)
		} else if err == nil {
			t.Logf("%s: not refused, but the step saw no value: %q", ref, st.Stdout)
		}
	}
	leak("host-only", "${secret:HOST_ONLY}", hostOnly)
	leak("undeclared", "${secret:UNDECLARED}", undeclared)
	leak("elsewhere", "${secret:ELSEWHERE}", elsewhere)
	// ENV_TOKEN is granted to steps' environments: a step writes it.
	if _, err := s.Run(ctx, tasks.Step{Name: "write", Run: []string{"sh", "-c", `printf %s "$T" > out/t.txt`}, Env: map[string]string{"T": "${secret:ENV_TOKEN}"}}); err != nil {
		t.Fatal(err)
	}
	if data, err := s.ReadFile(ctx, "out/t.txt"); err != nil || bytes.Contains(data, []byte(envTok)) {
		t.Errorf("HOLE: a read call returns a secret's value unredacted (it went through Redis as the answer): %v", err)
	}
	_, _ = s.Delete(ctx)
}
