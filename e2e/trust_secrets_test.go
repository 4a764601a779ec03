//go:build linux

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/tasks"
)

// Secrets are granted (issue 21): the worker's policy file says which
// queues and catalog actions may use each secret, to which hosts an input
// header may carry it, and whether steps may see it in their environment.

// setupWithPolicy starts a worker whose -policy is pol, "{{queue}}"
// replaced by the test's queue.
func setupWithPolicy(t *testing.T, pol string, flags ...string) *bundle {
	t.Helper()
	needRoot(t)
	b := newBundle(t)
	path := writePolicy(t, strings.ReplaceAll(pol, "{{queue}}", b.queue))
	b.worker = b.startWorker(append([]string{"-policy", path}, flags...)...)
	return b
}

// refused asserts a run ended failed, verdict error, before any step ran,
// its error holding each of want.
func refused(t *testing.T, rec *record.Run, want ...string) {
	t.Helper()
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || len(rec.Steps) != 0 {
		t.Errorf("want failed/error with no step run:\n%s", mustJSON(t, rec))
	}
	for _, w := range want {
		if !strings.Contains(rec.Error, w) {
			t.Errorf("error %q lacks %q", rec.Error, w)
		}
	}
}

// TestSecretNotGrantedToQueue: a spec on a queue its secret is not granted
// to fails with verdict error naming the secret and the grant, before any
// step runs and before the value is looked up; the client, the enqueue
// CLI refuse it first, from the grants the worker published.
func TestSecretNotGrantedToQueue(t *testing.T) {
	t.Parallel()
	token := "tok-" + randHex(t, 16)
	b := setupWithPolicy(t, `{"secrets": {
		"PARTNER_TOKEN": {"queues": ["some-other-queue"], "actions": ["csv-report"], "hosts": ["127.0.0.1"], "env": true},
		"NOT_PROVIDED": {"queues": ["some-other-queue"], "env": true}}}`,
		"-secrets-dir", secretsDir(t, "PARTNER_TOKEN", token))
	spec := `{"version": 1, "queue": "` + b.queue + `", "secrets": ["PARTNER_TOKEN"],
		"steps": [{"run": ["sh", "-c", "echo ran; echo $TOK"], "env": {"TOK": "${secret:PARTNER_TOKEN}"}}]}`
	rec := b.runRaw(spec)
	refused(t, rec, "secrets[0]", "secret PARTNER_TOKEN: not granted to queue "+fmt.Sprintf("%q", b.queue), "policy secrets: section")
	if strings.Contains(mustJSON(t, rec), token) {
		t.Errorf("the record holds the token")
	}
	// Not looked up: a secret the worker does not even hold is refused for
	// its grant, not for its absence.
	rec = b.runRaw(`{"version": 1, "queue": "` + b.queue + `", "secrets": ["NOT_PROVIDED"], "steps": [{"run": ["true"]}]}`)
	refused(t, rec, "secret NOT_PROVIDED: not granted to queue")
	if strings.Contains(rec.Error, "AIRLOCK_SECRET_") {
		t.Errorf("the value was looked for: %s", rec.Error)
	}
	// Naming the granted queue in a task put on this one borrows nothing:
	// the queue is the one the task was taken from.
	rec = b.runRaw(strings.Replace(spec, `"queue": "`+b.queue+`"`, `"queue": "some-other-queue"`, 1))
	refused(t, rec, "secret PARTNER_TOKEN: not granted to queue "+fmt.Sprintf("%q", b.queue))
	if rec.Queue != b.queue {
		t.Errorf("the record's queue is %q, the spec's claim; want the task's, %q", rec.Queue, b.queue)
	}
	// The client sees the published grants and refuses first.
	_, err := b.client.Enqueue(context.Background(), b.spec(spec))
	var fe *tasks.FieldError
	if !errors.As(err, &fe) || fe.Field != "secrets[0]" || !strings.Contains(fe.Msg, "secret PARTNER_TOKEN: not granted to queue") {
		t.Errorf("client Enqueue: %v", err)
	}
	code, _, stderr := b.enqueueCLI(spec, "-")
	if code != 2 || !strings.Contains(stderr, "secrets[0]") || !strings.Contains(stderr, "not granted") {
		t.Errorf("enqueue CLI: exit %d, stderr %q", code, stderr)
	}
	// Claiming the action the secret is granted to does not help a
	// free-form spec: refused before it reaches a worker's grants, or by
	// them.
	claim := strings.Replace(spec, `"version": 1,`, `"version": 1, "action": "csv-report",`, 1)
	rec = b.runRaw(claim)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || len(rec.Steps) != 0 || strings.Contains(mustJSON(t, rec), token) {
		t.Errorf("a free-form spec claiming the granted action:\n%s", mustJSON(t, rec))
	}
}

// TestSecretEnvNotGranted: a secret granted to the queue with env: false
// (the default) may not be put in a step's environment: refused naming the
// env field, no step run; the client refuses it too.
func TestSecretEnvNotGranted(t *testing.T) {
	t.Parallel()
	token := "tok-" + randHex(t, 16)
	b := setupWithPolicy(t, `{"secrets": {"PARTNER_TOKEN": {"queues": ["{{queue}}"], "hosts": ["127.0.0.1"]}}}`,
		"-secrets-dir", secretsDir(t, "PARTNER_TOKEN", token))
	spec := `{"version": 1, "queue": "` + b.queue + `", "secrets": ["PARTNER_TOKEN"],
		"steps": [{"run": ["sh", "-c", "echo $TOK | rev > out/r.txt"], "env": {"TOK": "${secret:PARTNER_TOKEN}"}}]}`
	rec := b.runRaw(spec)
	refused(t, rec, `steps[0].env["TOK"]`, "secret PARTNER_TOKEN: not granted to steps' environments", "env: true")
	_, err := b.client.Enqueue(context.Background(), b.spec(spec))
	var fe *tasks.FieldError
	if !errors.As(err, &fe) || fe.Field != `steps[0].env["TOK"]` {
		t.Errorf("client Enqueue: %v", err)
	}
}

// headerServer is a real HTTP server on 127.0.0.1 that records the
// Authorization header of each request it gets.
type headerServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string // Authorization of each request, "" when none
}

func newHeaderServer(t *testing.T, h http.HandlerFunc) *headerServer {
	t.Helper()
	s := &headerServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Header.Get("Authorization"))
		s.mu.Unlock()
		if h != nil {
			h(w, r)
			return
		}
		w.Write([]byte("export\n"))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *headerServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

func (s *headerServer) hostPort() string { return s.srv.Listener.Addr().String() }

// TestSecretHeaderHosts: a secret in an input header goes to the granted
// host:port and works; to another host:port (or another spelling of the
// granted host) the run is refused, naming the host, and that server gets
// no request at all; a redirect from the granted host to another drops
// the header.
func TestSecretHeaderHosts(t *testing.T) {
	t.Parallel()
	token := "tok-" + randHex(t, 16)
	other := newHeaderServer(t, nil)
	granted := newHeaderServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, other.srv.URL+"/landed", http.StatusFound)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("export\n"))
	})
	b := setupWithPolicy(t, `{"secrets": {"PARTNER_TOKEN": {"queues": ["{{queue}}"], "hosts": ["`+granted.hostPort()+`"]}}}`,
		"-fetch-allow", "127.0.0.1", "-fetch-allow", "localhost", "-secrets-dir", secretsDir(t, "PARTNER_TOKEN", token))
	input := func(url string) string {
		return `{"version": 1, "queue": "` + b.queue + `", "secrets": ["PARTNER_TOKEN"],
			"inputs": [{"url": "` + url + `", "path": "in/export.csv", "headers": {"Authorization": "Bearer ${secret:PARTNER_TOKEN}"}}],
			"steps": [{"run": ["cat", "in/export.csv"]}]}`
	}
	// The granted host: the server checks the header.
	rec := b.run(input(granted.srv.URL + "/export.csv"))
	if rec.State != record.StateCompleted || stepOf(t, rec, 0).Stdout != "export\n" {
		t.Fatalf("to the granted host:\n%s", mustJSON(t, rec))
	}
	if got := granted.requests(); len(got) != 1 || got[0] != "Bearer "+token {
		t.Errorf("the granted server saw %q", got)
	}
	// Another port of the same address; the same server by another name,
	// or by the IPv4-mapped spelling of its address (issue 31).
	_, grantedPort, _ := net.SplitHostPort(granted.hostPort())
	for _, url := range []string{other.srv.URL + "/export.csv", "http://localhost:" + grantedPort + "/export.csv",
		"http://[::ffff:127.0.0.1]:" + grantedPort + "/export.csv"} {
		rec = b.runRaw(input(url))
		refused(t, rec, `inputs[0].headers["Authorization"]`, "secret PARTNER_TOKEN: not granted to host", "policy secrets: section")
		if len(rec.Inputs) != 0 { // refused before the value was read: nothing fetched
			t.Errorf("inputs: %s", mustJSON(t, rec.Inputs))
		}
		if strings.Contains(mustJSON(t, rec), token) {
			t.Errorf("the record holds the token")
		}
	}
	if got := other.requests(); len(got) != 0 {
		t.Errorf("the ungranted server got %d requests: %q", len(got), got)
	}
	if got := granted.requests(); len(got) != 1 {
		t.Errorf("the granted server got a request under another name: %q", got)
	}
	// The client refuses the ungranted host before enqueueing.
	_, err := b.client.Enqueue(context.Background(), b.spec(input(other.srv.URL+"/export.csv")))
	var fe *tasks.FieldError
	if !errors.As(err, &fe) || fe.Field != `inputs[0].headers["Authorization"]` || !strings.Contains(fe.Msg, other.hostPort()) {
		t.Errorf("client Enqueue to the ungranted host: %v", err)
	}
	// A redirect from the granted host to another: the header stays behind.
	rec = b.run(input(granted.srv.URL + "/redirect"))
	if rec.State != record.StateCompleted {
		t.Fatalf("redirected:\n%s", mustJSON(t, rec))
	}
	if got := other.requests(); len(got) != 1 || got[0] != "" {
		t.Errorf("the redirect's target saw %q, want one request without Authorization", got)
	}
}

// TestSecretInEnvParked: a step that saw a secret in its environment
// (granted env: true) is parked under a policy whose promote rule lacks
// secret_in_env: true, and promoted under one whose rule has it.
func TestSecretInEnvParked(t *testing.T) {
	t.Parallel()
	token := "tok-" + randHex(t, 16)
	const grant = `"secrets": {"API_KEY": {"queues": ["{{queue}}"], "env": true}}`
	spec := `{"version": 1, "secrets": ["API_KEY"],
		"steps": [{"run": ["sh", "-c", "test ${#K} -eq 36 && echo '{\"saw\": true}' > out/result.json"], "env": {"K": "${secret:API_KEY}"}}],
		"output": {"result": "out/result.json"}}`
	for _, tc := range []struct {
		name, rule string
		state      record.State
		decided    string
	}{
		{"promote rule without secret_in_env", `{"queue": ["{{queue}}"]}`, record.StateParked, "secret-in-env"},
		{"promote rule with secret_in_env: true", `{"queue": ["{{queue}}"], "secret_in_env": true}`, record.StatePromoted, "env-ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupWithPolicy(t, `{"default": "promote", "rules": [{"name": "env-ok", "when": `+tc.rule+`, "then": "promote"}], `+grant+`}`,
				"-store", t.TempDir(), "-secrets-dir", secretsDir(t, "API_KEY", token))
			rec := b.run(spec)
			if rec.State != tc.state || rec.Decision == nil || rec.Decision.Rule != tc.decided {
				t.Fatalf("want %s by %s:\n%s", tc.state, tc.decided, mustJSON(t, rec))
			}
			if tc.state == record.StateParked && !strings.Contains(strings.Join(rec.Decision.Reasons, " "), "the steps saw secret API_KEY in their environment") {
				t.Errorf("reasons: %q", rec.Decision.Reasons)
			}
			if strings.Contains(mustJSON(t, rec), token) {
				t.Errorf("the record holds the token")
			}
		})
	}
}

// TestSecretCutOracle: a step on a queue granted a secret it may not see
// (env: false, header only) prints, at the end of what its stream keeps,
// a guess of the secret's first bytes: what the record keeps must not
// depend on whether the guess was right (the trim of a value cut at the
// cap would otherwise tell, byte by byte).
func TestSecretCutOracle(t *testing.T) {
	t.Parallel()
	token := "tok-" + randHex(t, 16)
	b := setupWithPolicy(t, `{"secrets": {"PARTNER_TOKEN": {"queues": ["{{queue}}"], "hosts": ["partner.example"]}}}`,
		"-secrets-dir", secretsDir(t, "PARTNER_TOKEN", token))
	const keep = 1024 // limits.output: what each stream keeps
	probe := func(guess string) string {
		filler := strings.Repeat("x", keep-len(guess))
		return fmt.Sprintf(`{"run": ["sh", "-c", "printf '%%s%%s' %s %s; printf 'more than the cap'"]}`, filler, guess)
	}
	rec := b.run(`{"version": 1, "secrets": ["PARTNER_TOKEN"], "limits": {"output": "1KiB"},
		"steps": [` + probe(token[:6]) + `, ` + probe("zzzzzz") + `]}`)
	if rec.State != record.StateCompleted {
		t.Fatalf("want completed:\n%s", mustJSON(t, rec))
	}
	right, wrong := stepOf(t, rec, 0), stepOf(t, rec, 1)
	if !right.StdoutTruncated || !wrong.StdoutTruncated {
		t.Fatalf("the streams were not cut at the cap: %+v %+v", right, wrong)
	}
	if len(right.Stdout) != len(wrong.Stdout) {
		t.Errorf("a right guess keeps %d bytes, a wrong one %d: an oracle of the secret's first bytes", len(right.Stdout), len(wrong.Stdout))
	}
	if strings.Contains(right.Stdout, token[:6]) {
		t.Errorf("the record keeps the secret's first bytes")
	}
}

// TestSecretGrantedToAction: a secret granted to a catalog action reaches
// that action's runs on any queue; another action of the catalog that
// declares it is refused, naming the action; a free-form spec that claims
// the granted action is refused before it runs.
func TestSecretGrantedToAction(t *testing.T) {
	t.Parallel()
	token := "tok-" + randHex(t, 16)
	dir := t.TempDir()
	def := `description: probe
params: {type: object, additionalProperties: false}
spec:
  secrets: [API_KEY]
  steps:
    - run: [sh, -c, 'test ${#K} -eq 36 && echo saw']
      env: {K: "${secret:API_KEY}"}
`
	for _, name := range []string{"granted-action", "other-action"} {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(def), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := setupWithPolicy(t, `{"secrets": {"API_KEY": {"actions": ["granted-action"], "env": true}}}`,
		"-actions", dir, "-secrets-dir", secretsDir(t, "API_KEY", token))
	rec := b.runRaw(`{"version": 1, "queue": "` + b.queue + `", "action": "granted-action", "params": {}}`)
	if rec.State != record.StateCompleted || stepOf(t, rec, 0).Stdout != "saw\n" {
		t.Fatalf("the granted action:\n%s", mustJSON(t, rec))
	}
	rec = b.runRaw(`{"version": 1, "queue": "` + b.queue + `", "action": "other-action", "params": {}}`)
	refused(t, rec, `secret API_KEY: not granted to queue "`+b.queue+`" or action "other-action"`)
	rec = b.runRaw(`{"version": 1, "queue": "` + b.queue + `", "action": "granted-action", "secrets": ["API_KEY"],
		"steps": [{"run": ["sh", "-c", "echo $K"], "env": {"K": "${secret:API_KEY}"}}]}`)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || len(rec.Steps) != 0 {
		t.Errorf("a free-form spec claiming the granted action:\n%s", mustJSON(t, rec))
	}
}
