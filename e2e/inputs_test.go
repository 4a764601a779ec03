//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// partner is a real HTTP server on 127.0.0.1 that the worker downloads
// from: an export behind a bearer token, a big binary, redirects, errors.
type partner struct {
	srv    *httptest.Server
	token  string
	export []byte // /export.csv
	binary []byte // /binary: 2 MiB of random bytes
	flaky  atomic.Int32
	auth   atomic.Int32 // requests to /export.csv with the right token
}

func newPartner(t *testing.T) *partner {
	t.Helper()
	p := &partner{token: "tok-" + randHex(t, 16), binary: make([]byte, 2<<20)}
	if _, err := rand.Read(p.binary); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString("id,amount,status,_internal\n")
	for i := range 500 {
		fmt.Fprintf(&sb, "%d,%d.50,paid,x%d\n", i, i%97, i)
	}
	p.export = []byte(sb.String())
	mux := http.NewServeMux()
	mux.HandleFunc("/export.csv", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+p.token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		p.auth.Add(1)
		w.Write(p.export)
	})
	mux.HandleFunc("/binary", func(w http.ResponseWriter, r *http.Request) { w.Write(p.binary) })
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		// No Content-Length: the size is found while streaming.
		buf := make([]byte, 64<<10)
		for range 32 { // 2 MiB
			if _, err := w.Write(buf); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/announced", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(8<<20))
		w.Write(make([]byte, 1024))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(20 * time.Second):
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/missing", http.NotFound)
	mux.HandleFunc("/flaky", func(w http.ResponseWriter, r *http.Request) {
		if p.flaky.Add(1) == 1 {
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("second time lucky\n"))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *partner) port() string {
	_, port, _ := net.SplitHostPort(p.srv.Listener.Addr().String())
	return port
}

func randHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// secretsDir writes name=value files into a directory of their own.
func secretsDir(t *testing.T, kv ...string) string {
	t.Helper()
	d := t.TempDir()
	for i := 0; i < len(kv); i += 2 {
		if err := os.WriteFile(filepath.Join(d, kv[i]), []byte(kv[i+1]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// secretForms are the spellings of a secret that must appear nowhere.
func secretForms(v string) []string {
	return []string{v, base64.StdEncoding.EncodeToString([]byte(v)), url.QueryEscape(v)}
}

// redisHolds lists the keys of the test database whose content holds any
// of needles, whatever their type.
func redisHolds(t *testing.T, needles []string) []string {
	t.Helper()
	ctx := context.Background()
	rdb := redistest.Client(t)
	var hits []string
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	n := 0
	for iter.Next(ctx) {
		key := iter.Val()
		n++
		var vals []string
		switch typ, _ := rdb.Type(ctx, key).Result(); typ {
		case "string":
			v, _ := rdb.Get(ctx, key).Result()
			vals = []string{v}
		case "hash":
			m, _ := rdb.HGetAll(ctx, key).Result()
			for k, v := range m {
				vals = append(vals, k, v)
			}
		case "list":
			vals, _ = rdb.LRange(ctx, key, 0, -1).Result()
		case "set":
			vals, _ = rdb.SMembers(ctx, key).Result()
		case "zset":
			vals, _ = rdb.ZRange(ctx, key, 0, -1).Result()
		case "stream":
			msgs, _ := rdb.XRange(ctx, key, "-", "+").Result()
			for _, m := range msgs {
				for k, v := range m.Values {
					vals = append(vals, k, fmt.Sprint(v))
				}
			}
		}
		for _, v := range vals {
			for _, nd := range needles {
				if strings.Contains(v, nd) {
					hits = append(hits, key)
				}
			}
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the scan saw no key: it would prove nothing")
	}
	return hits
}

// TestFetchInputWithSecret: the seed's pipeline at its start: the worker
// downloads a partner's export with a bearer token it holds, and a 2 MiB
// binary (above the payload cap); the token shows nowhere.
func TestFetchInputWithSecret(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	b := setupWithPolicy(t, `{"secrets": {"PARTNER_TOKEN": {"queues": ["{{queue}}"], "hosts": ["127.0.0.1"], "env": true}}}`,
		"-fetch-allow", "127.0.0.1", "-secrets-dir", secretsDir(t, "PARTNER_TOKEN", p.token))
	query := "q-" + randHex(t, 8)
	spec := fmt.Sprintf(`{"version": 1, "secrets": ["PARTNER_TOKEN"],
		"inputs": [
			{"url": %q, "path": "in/export.csv", "sha256": %q,
			 "headers": {"Authorization": "Bearer ${secret:PARTNER_TOKEN}"}},
			{"url": %q, "path": "in/blob.bin", "max_bytes": "4MiB", "sha256": %q}],
		"steps": [{"run": ["sh", "-c", "sha256sum in/export.csv in/blob.bin; echo tok=$TOK; printf %%s \"$TOK\" | base64; echo err=$TOK >&2"],
		           "env": {"TOK": "${secret:PARTNER_TOKEN}"}}]}`,
		p.srv.URL+"/export.csv?token="+query, sha(string(p.export)), p.srv.URL+"/binary", sha(string(p.binary)))
	rec := b.run(spec)
	if rec.State != record.StateCompleted || len(rec.Inputs) != 2 {
		t.Fatalf("want completed with two inputs:\n%s", mustJSON(t, rec))
	}
	in := rec.Inputs[0]
	if in.Status != 200 || in.Bytes != int64(len(p.export)) || in.SHA256 != sha(string(p.export)) || in.DurationMS <= 0 || in.Path != "in/export.csv" {
		t.Errorf("input 0: %s", mustJSON(t, in))
	}
	if strings.Contains(in.URL, query) || !strings.Contains(in.URL, "token=REDACTED") {
		t.Errorf("the query secret is in the record's url: %s", in.URL)
	}
	if rec.Inputs[1].Bytes != 2<<20 || rec.Inputs[1].SHA256 != sha(string(p.binary)) {
		t.Errorf("input 1: %s", mustJSON(t, rec.Inputs[1]))
	}
	st := stepOf(t, rec, 0)
	// The step sees the bytes the server sent, byte for byte.
	for _, want := range []string{sha(string(p.export)) + "  in/export.csv", sha(string(p.binary)) + "  in/blob.bin", "tok=[REDACTED]"} {
		if !strings.Contains(st.Stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, st.Stdout)
		}
	}
	if st.Stderr != "err=[REDACTED]\n" {
		t.Errorf("stderr %q", st.Stderr)
	}
	if p.auth.Load() != 1 {
		t.Errorf("the partner saw %d authorized requests, want 1", p.auth.Load())
	}
	js := mustJSON(t, rec)
	logs := b.worker.logs.String()
	for _, f := range append(secretForms(p.token), query) {
		if strings.Contains(js, f) {
			t.Errorf("the record holds %q:\n%s", f, js)
		}
		if strings.Contains(logs, f) {
			t.Errorf("the worker's logs hold %q", f)
		}
	}
	if hits := redisHolds(t, secretForms(p.token)); len(hits) > 0 {
		t.Errorf("Redis keys hold the token: %v", hits)
	}
}

// fetchFail runs specs whose one input must fail, all at once, and checks
// each record: failed, verdict fetch, an error with want, not retried
// unless transient.
type fetchCase struct {
	name, input, want string
	timeout           string // the spec's; default 60s
	workspace         string // limits.workspace; default the worker's
}

func runFetchCases(t *testing.T, b *bundle, cases []fetchCase) {
	t.Helper()
	ids := make([]string, len(cases))
	for i, c := range cases {
		timeout, lim := "60s", ""
		if c.timeout != "" {
			timeout = c.timeout
		}
		if c.workspace != "" {
			lim = `"limits": {"workspace": "` + c.workspace + `"},`
		}
		e, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "max_retry": 2, "timeout": "`+timeout+`", `+lim+`
			"inputs": [`+c.input+`], "steps": [{"run": ["true"]}]}`))
		if err != nil {
			t.Fatalf("%s: enqueue: %v", c.name, err)
		}
		ids[i] = e.TaskID
	}
	for i, c := range cases {
		rec := b.wait(ids[i])
		if rec.State != record.StateFailed || rec.Verdict != record.VerdictFetch || !strings.Contains(rec.Error, "inputs[0]") ||
			!strings.Contains(rec.Error, c.want) || len(rec.Steps) != 0 {
			t.Errorf("%s: want a fetch failure saying %q:\n%s", c.name, c.want, mustJSON(t, rec))
			continue
		}
		// Deterministic failures are not retried: max_retry 2, one attempt.
		if rec.Attempt != 1 {
			t.Errorf("%s: attempt %d, want 1 (not retried)", c.name, rec.Attempt)
		}
		if len(rec.Inputs) != 1 || rec.Inputs[0].Error == "" {
			t.Errorf("%s: the record's input: %s", c.name, mustJSON(t, rec.Inputs))
		}
	}
}

func inputJSON(u string, extra ...string) string {
	return fmt.Sprintf(`{"url": %q, "path": "in/x"%s}`, u, strings.Join(append([]string{""}, extra...), ", "))
}

// TestFetchRefusedAddresses: every spelling of a loopback, private or
// link-local address is refused, with and without -fetch-allow; a
// redirect to one too.
func TestFetchRefusedAddresses(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	port := p.port()
	forms := func() []fetchCase {
		return []fetchCase{
			{name: "decimal", input: inputJSON("http://2130706433:" + port + "/binary"), want: "numeric host"},
			{name: "hex", input: inputJSON("http://0x7f.1:" + port + "/binary"), want: "numeric host"},
			{name: "short", input: inputJSON("http://127.1:" + port + "/binary"), want: "numeric host"},
			{name: "ipv6 loopback", input: inputJSON("http://[::1]:" + port + "/binary"), want: "refused"},
			{name: "mapped private", input: inputJSON("http://[::ffff:10.0.0.1]/x"), want: "refused"},
			{name: "metadata", input: inputJSON("http://169.254.169.254/latest/meta-data/"), want: "refused"},
			{name: "private", input: inputJSON("http://10.0.0.1/x"), want: "refused"},
			{name: "other loopback", input: inputJSON("http://127.0.0.2:" + port + "/binary"), want: "refused"},
		}
	}
	t.Run("default", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cases := append(forms(),
			fetchCase{name: "loopback", input: inputJSON(p.srv.URL + "/binary"), want: "refused"},
			fetchCase{name: "mapped loopback", input: inputJSON("http://[::ffff:127.0.0.1]:" + port + "/binary"), want: "refused"},
			fetchCase{name: "name resolving to loopback", input: inputJSON("http://localhost:" + port + "/binary"), want: "refused"})
		runFetchCases(t, b, cases)
		// Not http(s): refused at enqueue, naming the field.
		code, _, stderr := b.enqueueCLI(`{"version": 1, "queue": "`+b.queue+`", "inputs": [`+inputJSON("file:///etc/passwd")+`], "steps": [{"run": ["true"]}]}`, "-")
		if code != 2 || !strings.Contains(stderr, "inputs[0].url") {
			t.Errorf("file:// input: exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("fetch-allow 127.0.0.1", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "-fetch-allow", "127.0.0.1")
		redirect := func(to string) string { return inputJSON(p.srv.URL + "/redirect?to=" + url.QueryEscape(to)) }
		cases := append(forms(),
			fetchCase{name: "redirect to metadata", input: redirect("http://169.254.169.254/latest/meta-data/"), want: "refused"},
			fetchCase{name: "redirect to ipv6 loopback", input: redirect("http://[::1]:" + port + "/binary"), want: "refused"},
			fetchCase{name: "redirect to decimal", input: redirect("http://2130706433:" + port + "/binary"), want: "numeric host"},
			fetchCase{name: "redirect to file", input: redirect("file:///etc/passwd"), want: "only http and https"})
		runFetchCases(t, b, cases)
		// The one address opened is reachable, and the record shows the
		// redirect it followed.
		rec := b.run(`{"version": 1, "inputs": [` + inputJSON(p.srv.URL+"/redirect?to=/binary") + `], "steps": [{"run": ["true"]}]}`)
		if rec.State != record.StateCompleted || rec.Inputs[0].Bytes != 2<<20 || !strings.HasSuffix(rec.Inputs[0].FinalURL, "/binary") {
			t.Fatalf("allowed redirect:\n%s", mustJSON(t, rec))
		}
	})
}

// TestFetchLimits: size, quota, digest, status and time limits of inputs.
func TestFetchLimits(t *testing.T) {
	t.Parallel()
	p := newPartner(t)
	b := setup(t, "-fetch-allow", "127.0.0.1", "-fetch-max-bytes", "3MiB")
	u := p.srv.URL
	runFetchCases(t, b, []fetchCase{
		{name: "max_bytes streamed", input: inputJSON(u+"/chunked", `"max_bytes": "1MiB"`), want: "max_bytes"},
		{name: "max_bytes announced", input: inputJSON(u+"/announced", `"max_bytes": "1MiB"`), want: "announced"},
		{name: "worker max", input: inputJSON(u + "/announced"), want: "max_bytes 3145728"},
		{name: "quota", input: inputJSON(u+"/binary", `"max_bytes": "3MiB"`), workspace: "1MiB", want: "quota"},
		{name: "sha256", input: inputJSON(u+"/binary", `"sha256": "`+strings.Repeat("ab", 32)+`"`), want: "sha256"},
		{name: "status", input: inputJSON(u + "/missing"), want: "404"},
		{name: "unauthorized", input: inputJSON(u + "/export.csv"), want: "401"},
		{name: "timeout", input: inputJSON(u + "/slow"), timeout: "2s", want: "the task's deadline passed"},
	})
	// A transient failure (503) is retried; the second attempt succeeds.
	rec := b.run(`{"version": 1, "max_retry": 1, "inputs": [` + inputJSON(u+"/flaky") + `], "steps": [{"run": ["cat", "in/x"]}]}`)
	if rec.State != record.StateCompleted || rec.Attempt != 2 || stepOf(t, rec, 0).Stdout != "second time lucky\n" {
		t.Fatalf("want the 503 retried and the second attempt completed:\n%s", mustJSON(t, rec))
	}
}

// TestSecretsDeclaredAndProvided: a secret used but not declared is
// refused at enqueue (and by the worker, past the client); one declared
// but not provided fails the run naming it.
func TestSecretsDeclaredAndProvided(t *testing.T) {
	t.Parallel()
	b := setupWithPolicy(t, `{"secrets": {"HAVE_IT": {"queues": ["{{queue}}"], "env": true}, "NOT_HERE": {"queues": ["{{queue}}"], "env": true}}}`,
		"-secrets-dir", secretsDir(t, "HAVE_IT", "value-"+randHex(t, 8)))
	undeclared := `{"version": 1, "queue": "` + b.queue + `", "steps": [{"run": ["true"], "env": {"X": "${secret:NOT_DECLARED}"}}]}`
	code, _, stderr := b.enqueueCLI(undeclared, "-")
	if code != 2 || !strings.Contains(stderr, "steps[0].env") || !strings.Contains(stderr, "NOT_DECLARED") {
		t.Errorf("undeclared secret at enqueue: exit %d, stderr %q", code, stderr)
	}
	elsewhere := `{"version": 1, "queue": "` + b.queue + `", "secrets": ["HAVE_IT"], "steps": [{"run": ["echo", "${secret:HAVE_IT}"]}]}`
	code, _, stderr = b.enqueueCLI(elsewhere, "-")
	if code != 2 || !strings.Contains(stderr, "steps[0].run") {
		t.Errorf("secret in run: exit %d, stderr %q", code, stderr)
	}
	rec := b.runRaw(undeclared)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, "NOT_DECLARED") || len(rec.Steps) != 0 {
		t.Errorf("undeclared secret past the client:\n%s", mustJSON(t, rec))
	}
	rec = b.run(`{"version": 1, "secrets": ["HAVE_IT", "NOT_HERE"], "steps": [{"run": ["true"], "env": {"X": "${secret:NOT_HERE}"}}]}`)
	if rec.State != record.StateFailed || rec.Verdict != record.VerdictError || !strings.Contains(rec.Error, "NOT_HERE") ||
		!strings.Contains(rec.Error, "AIRLOCK_SECRET_NOT_HERE") || len(rec.Steps) != 0 {
		t.Errorf("unknown secret:\n%s", mustJSON(t, rec))
	}
}

// TestSecretInArtifactsParks: an output that holds a secret's value is
// parked whatever the policy says, staged redacted, shown redacted.
func TestSecretInArtifactsParks(t *testing.T) {
	t.Parallel()
	token := "leak-" + randHex(t, 12)
	// A policy that promotes such a run, its steps having seen the secret.
	b := setupWithPolicy(t, `{"default": "promote", "rules": [{"name": "all", "when": {"secret_in_env": true}, "then": "promote"}],
		"secrets": {"API_KEY": {"queues": ["{{queue}}"], "env": true}}}`,
		"-store", t.TempDir(), "-secrets-dir", secretsDir(t, "API_KEY", token))
	rec := b.run(`{"version": 1, "secrets": ["API_KEY"],
		"steps": [{"run": ["sh", "-c", "printf '{\"total\": 1, \"note\": \"%s\"}' \"$K\" > out/result.json; printf 'k=%s\\n' \"$K\" > out/a.csv"],
		           "env": {"K": "${secret:API_KEY}"}}],
		"output": {"result": "out/result.json", "artifacts": ["out/*.csv"]}}`)
	if rec.State != record.StateParked || rec.Decision == nil || rec.Decision.Rule != "secret" {
		t.Fatalf("want parked by the secret rule despite a promote policy:\n%s", mustJSON(t, rec))
	}
	reasons := strings.Join(rec.Decision.Reasons, " ")
	if !strings.Contains(reasons, "API_KEY") || strings.Contains(reasons, token) {
		t.Errorf("reasons: %q", reasons)
	}
	code, out, stderr := b.approveCLI("show", rec.ApprovalID)
	if code != 0 || !strings.Contains(out, "API_KEY") || strings.Contains(out+stderr, token) {
		t.Errorf("approve show: exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = b.approveCLI("show", "-json", rec.ApprovalID)
	if code != 0 || !strings.Contains(out, "[REDACTED]") || strings.Contains(out, token) {
		t.Errorf("approve show -json: exit %d\n%s", code, out)
	}
	if hits := redisHolds(t, secretForms(token)); len(hits) > 0 {
		t.Errorf("Redis keys hold the secret: %v", hits)
	}
}

// TestBase64Files: a file given as base64 is written byte for byte.
func TestBase64Files(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	rec := b.run(`{"version": 1, "files": {"bytes.bin": {"base64": "` + base64.StdEncoding.EncodeToString(all) + `"}, "text.txt": "héllo"},
		"steps": [{"run": ["sh", "-c", "wc -c < bytes.bin; sha256sum bytes.bin text.txt"]}]}`)
	want := fmt.Sprintf("256\n%s  bytes.bin\n%s  text.txt\n", sha(string(all)), sha("héllo"))
	if got := stepOf(t, rec, 0).Stdout; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if rec.Workspace.InputBytes != 256+int64(len("héllo")) {
		t.Errorf("input bytes %d", rec.Workspace.InputBytes)
	}
	code, _, stderr := b.enqueueCLI(`{"version": 1, "queue": "`+b.queue+`", "files": {"x": {"base64": "not base64!"}}, "steps": [{"run": ["true"]}]}`, "-")
	if code != 2 || !strings.Contains(stderr, "files") {
		t.Errorf("bad base64: exit %d, stderr %q", code, stderr)
	}
}

// TestClientResult: a backend reads a promoted run's result from the
// store; before that, the error says why.
func TestClientResult(t *testing.T) {
	t.Parallel()
	store := t.TempDir()
	b := setup(t, "-store", store)
	ctx := context.Background()
	rec := b.run(reportSpec(`{"total": 42}`, `"run_id": "res-1",`))
	var npe *airlock.NotPromotedError
	_, err := b.client.Result(ctx, rec.TaskID)
	if !errors.As(err, &npe) || npe.State != record.StateParked || !strings.Contains(err.Error(), rec.ApprovalID) {
		t.Fatalf("Result of a parked run: %v", err)
	}
	if code, _, stderr := b.enqueueCLI("", "-result", rec.TaskID); code != 3 || !strings.Contains(stderr, "parked") {
		t.Errorf("enqueue -result of a parked run: exit %d, stderr %q", code, stderr)
	}
	if code, out, stderr := b.approveCLI("accept", rec.ApprovalID, "-by", "alice"); code != 0 {
		t.Fatalf("accept: %d %s %s", code, out, stderr)
	}
	if final := b.waitFinal(rec.TaskID); final.State != record.StatePromoted {
		t.Fatalf("want promoted:\n%s", mustJSON(t, final))
	}
	p, err := b.client.Result(ctx, rec.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Result) != `{"total": 42}` || p.Manifest.TaskID != rec.TaskID || p.Where != filepath.Join(store, "res-1", rec.TaskID) {
		t.Errorf("published: %s", mustJSON(t, p))
	}
	code, out, stderr := b.enqueueCLI("", "-result", rec.TaskID, "-queue", b.queue)
	var got struct {
		Result json.RawMessage `json:"result"`
		Where  string          `json:"where"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || string(got.Result) != `{"total":42}` || got.Where != p.Where {
		t.Errorf("enqueue -result: exit %d\n%s\n%s", code, out, stderr)
	}
	// Rejected and failed runs, and an unknown task.
	rec = b.run(reportSpec(`{"total": 1}`, ""))
	if code, _, _ := b.approveCLI("reject", rec.ApprovalID, "-by", "bob", "-comment", "no"); code != 0 {
		t.Fatal("reject")
	}
	b.waitFinal(rec.TaskID)
	if _, err := b.client.Result(ctx, rec.TaskID); !errors.As(err, &npe) || npe.State != record.StateRejected {
		t.Errorf("Result of a rejected run: %v", err)
	}
	rec = b.run(`{"version": 1, "steps": [{"run": ["false"]}]}`)
	if _, err := b.client.Result(ctx, rec.TaskID); !errors.As(err, &npe) || npe.State != record.StateFailed {
		t.Errorf("Result of a failed run: %v", err)
	}
	if _, err := b.client.Result(ctx, "no-such-task"); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("Result of an unknown task: %v", err)
	}
	if _, err := b.client.ResultIn(ctx, b.queue, "no-such-task"); !errors.Is(err, airlock.ErrNotFound) {
		t.Errorf("ResultIn of an unknown task: %v", err)
	}
}
