package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

const token = "api-test-token-0123456789"

func tokenFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, args, strings.NewReader(stdin), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestFlags checks -h, the errors of flags and token files (exit 2, said
// once) and -hash-token.
func TestFlags(t *testing.T) {
	if code, out, _ := run(t, "", "-h"); code != 0 || !strings.Contains(out, "NAME SCOPE[,SCOPE...] TOKEN") {
		t.Errorf("-h: %d %q", code, out)
	}
	good := tokenFile(t, "a runs:read "+token+"\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "-tokens FILE is required"},
		{[]string{"-tokens", good, "-tls-cert", "x"}, "-tls-cert and -tls-key go together"},
		{[]string{"-tokens", good, "-max-payload", "0"}, "-max-payload: must be positive"},
		{[]string{"-tokens", good, "-max-body-bytes-in-flight", "lots"}, "-max-body-bytes-in-flight: \"lots\" is not a size"},
		{[]string{"-tokens", good, "-max-body-bytes-in-flight", "1MiB"}, "-max-body-bytes-in-flight: 1MiB is below the largest body a route takes (4MiB"},
		{[]string{"-tokens", good, "-max-body-bytes-in-flight", "8MiB", "-max-payload", "16777216"}, "-max-body-bytes-in-flight: 8MiB is below the largest body a route takes (16MiB"},
		{[]string{"-tokens", good, "extra"}, `unexpected argument "extra"`},
		{[]string{"-tokens", good, "-prefix", "a{b"}, "must not hold a brace"},
		{[]string{"-tokens", tokenFile(t, "a runs:nope "+token)}, `tokens:1: unknown scope "runs:nope"`},
		{[]string{"-tokens", filepath.Join(t.TempDir(), "none")}, "-tokens: open"},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		code, _, stderr := run(t, "", tc.args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("api %v: exit %d, stderr %q; want 2 and %q once", tc.args, code, stderr, tc.want)
		}
	}
	code, out, _ := run(t, token+"\n", "-hash-token")
	if code != 0 || strings.TrimSpace(out) != httpapi.HashToken(token) {
		t.Errorf("-hash-token: %d %q", code, out)
	}
	if code, _, stderr := run(t, "short\n", "-hash-token"); code != exitUsage || !strings.Contains(stderr, "at least 16") {
		t.Errorf("-hash-token of a short token: %d %q", code, stderr)
	}
}

// syncBuffer collects log lines its writers append concurrently.
type syncBuffer = logtest.Buffer

// start runs the command in the background until the returned stop is
// called, and returns the URL it logged.
func start(t *testing.T, args ...string) (url string, stop func() int, logs *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs = &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, strings.NewReader(""), &bytes.Buffer{}, logs) }()
	deadline := time.Now().Add(10 * time.Second)
	for url == "" {
		for _, line := range strings.Split(logs.String(), "\n") {
			var l struct {
				Message string `json:"message"`
				URL     string `json:"url"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "api started" {
				url = l.URL
			}
		}
		select {
		case code := <-done:
			cancel()
			t.Fatalf("api exited %d at start:\n%s", code, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("api not started after 10s:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	var once sync.Once
	code := 0
	stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	t.Cleanup(func() { stop() })
	return url, stop, logs
}

// TestServeAndShutdown starts the server on a free port, reads /healthz
// and a run with a token, and checks that SIGTERM (ctx) ends a long poll
// at once and exits 0.
func TestServeAndShutdown(t *testing.T) {
	q := redistest.Queue(t)
	url, stop, logs := start(t, "-addr", "127.0.0.1:0", "-redis", redistest.URL(t), "-tokens", tokenFile(t, "a runs:read,runs:write "+token+"\n"))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res, err := c.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("healthz: %d", res.StatusCode)
	}
	// The console is on by default, and its address logged.
	if res, err := c.Get(url + "/ui/"); err != nil || res.StatusCode != 200 || res.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET /ui/: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	req, _ := http.NewRequest("POST", url+"/v1/runs", strings.NewReader(`{"version": 1, "queue": "`+q+`", "steps": [{"run": ["true"]}]}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var en httpapi.Enqueued
	_ = json.NewDecoder(res.Body).Decode(&en)
	res.Body.Close()
	if res.StatusCode != 201 || en.TaskID == "" {
		t.Fatalf("enqueue: %d %+v", res.StatusCode, en)
	}
	// A long poll on a run nobody serves, cut by the shutdown.
	type answer struct {
		status int
		state  string
		err    error
	}
	ans := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("GET", url+"/v1/runs/"+en.TaskID+"?wait=5m", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := c.Do(req)
		if err != nil {
			ans <- answer{err: err}
			return
		}
		defer res.Body.Close()
		var rec struct{ State string }
		_ = json.NewDecoder(res.Body).Decode(&rec)
		ans <- answer{status: res.StatusCode, state: rec.State}
	}()
	time.Sleep(300 * time.Millisecond)
	begin := time.Now()
	if code := stop(); code != 0 {
		t.Errorf("exit %d after shutdown:\n%s", code, logs.String())
	}
	a := <-ans
	if a.err != nil || a.status != 200 || a.state != "pending" {
		t.Errorf("long poll at shutdown: %+v", a)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	for _, want := range []string{`"message":"approval console"`, `/ui/"`, `"message":"api stopping"`, `"message":"api stopped"`, `"path":"/v1/runs","status":201`, `"token":"a"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("logs hold the token")
	}
}

// TestNoUI: -ui=false serves no console.
func TestNoUI(t *testing.T) {
	url, stop, logs := start(t, "-addr", "127.0.0.1:0", "-ui=false", "-redis", redistest.URL(t), "-tokens", tokenFile(t, "a approvals:read "+token+"\n"))
	res, err := http.Get(url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 404 {
		t.Errorf("-ui=false: GET /ui/ %d, want 404", res.StatusCode)
	}
	if code := stop(); code != 0 || strings.Contains(logs.String(), "approval console") {
		t.Errorf("exit %d; logs:\n%s", code, logs.String())
	}
}

// TestTLS serves HTTPS with -tls-cert and -tls-key.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	url, stop, _ := start(t, "-addr", "127.0.0.1:0", "-redis", redistest.URL(t), "-tokens", tokenFile(t, "a runs:read "+token+"\n"),
		"-tls-cert", certFile, "-tls-key", keyFile)
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("url %s", url)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS == nil {
		t.Errorf("https healthz: %d", res.StatusCode)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
}
