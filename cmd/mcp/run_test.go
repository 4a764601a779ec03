package main

import (
	"bytes"
	"context"
	"github.com/airlock-run/airlock/frontend/mcpserver"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/testkit/logtest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.GoleakOptions()...) }

func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := Run(ctx, args, strings.NewReader(""), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(good, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"-http", "0.0.0.0:8080"}, 2, "mcp: -http 0.0.0.0:8080 is not a loopback address: -token-file is required"},
		{[]string{"-http", ":8080"}, 2, "-token-file is required"},
		{[]string{"-http", "example.com:8080"}, 2, "-token-file is required"},
		{[]string{"-http", "127.0.0.1:8080", "-token-file", short}, 2, "want one token of at least 16 characters"},
		{[]string{"-http", "127.0.0.1:8080", "-token-file", filepath.Join(dir, "none")}, 2, "-token-file: open"},
		{[]string{"-token-file", good}, 2, "-token-file, -tls-cert and -tls-key go with -http"},
		{[]string{"-http", "0.0.0.0:0", "-token-file", good, "-tls-cert", good}, 2, "-tls-cert and -tls-key go together"},
		{[]string{"-max-wait", "0s"}, 2, "-max-wait: must be positive"},
		{[]string{"-queue", "a,b c"}, 2, `-queue "b c"`},
		{[]string{"-queue", ","}, 2, "-queue: want at least one queue"},
		{[]string{"-principal", "agents of corp"}, 2, `-principal "agents of corp": want 1-64 of [A-Za-z0-9._@+-]`},
		{[]string{"-principal", ""}, 2, `-principal "": want 1-64`},
		{[]string{"-nope"}, 2, "mcp: flag provided but not defined: -nope (see mcp -h)\n"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-log-format", "xml"}, 2, "-log-format"},
	} {
		code, _, stderr := runArgs(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.stderr) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, stderr, tc.code, tc.stderr)
		}
	}
	code, stdout, _ := runArgs(t, "-h")
	if code != 0 || !strings.Contains(stdout, "usage: mcp") || !strings.Contains(stdout, "never approves") {
		t.Errorf("-h: exit %d, %q", code, stdout)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "127.9.9.9:1": true, "[::1]:1": true, "localhost:1": true,
		":1": false, "0.0.0.0:1": false, "[::]:1": false, "10.0.0.1:1": false, "host:1": false,
	} {
		if got, err := loopback(addr); err != nil || got != want {
			t.Errorf("loopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
}

// Run on stdio, in process, with the SDK's client on the other end of the
// pipes: the tools are listed, a call answers, and closing stdin ends Run
// with 0; nothing but the protocol is written on stdout.
func TestStdio(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(context.Background(), []string{"-redis", redistest.URL(t), "-queue", redistest.Queue(t)}, inR, outW, &stderr)
		outW.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != len(mcpserver.Tools) {
		t.Fatalf("tools: %v %v", res, err)
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_run", Arguments: map[string]any{"task_id": "none"}})
	if err != nil || !r.IsError {
		t.Fatalf("get_run of no task: %v %v", r, err)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d: %s", code, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("Run did not return once stdin closed")
	}
	logs := stderr.String()
	for _, want := range []string{`"message":"mcp started"`, `"tool":"get_run"`, `"message":"mcp stopped"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("stderr lacks %s:\n%s", want, logs)
		}
	}
}

// syncBuffer collects log lines its writers append concurrently.
type syncBuffer = logtest.Buffer
