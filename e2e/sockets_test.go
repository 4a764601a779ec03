//go:build linux

package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/record"
)

// TestLateSocketInBindUnreachable (issue 31, RB1): unix sockets the host
// makes in a -ro-bind source after the worker started (so the start-time
// check saw none) — a Go listener that hands out a secret, a datagram
// socket and a redis-server holding a secret, all mode 0777 in a 0777
// directory — are refused to a step without network: connect and sendto
// fail with EACCES, redis-cli cannot read the secret nor write a key. A
// socket the step makes in its workspace still works.
func TestLateSocketInBindUnreachable(t *testing.T) {
	t.Parallel()
	src, err := os.MkdirTemp("", "airlock-late-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(src) })
	if err := os.Chmod(src, 0o777); err != nil {
		t.Fatal(err)
	}
	b := setup(t, append(probeBind(t), "-ro-bind", src+":/opt/late", "-concurrency", "1")...)

	// The worker runs; now the host makes its sockets.
	reached := make(chan string, 8)
	ln, err := net.Listen("unix", filepath.Join(src, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hostsecret7\n"))
			c.Close()
			reached <- "stream"
		}
	}()
	dg, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(src, "d.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dg.Close() })
	go func() {
		buf := make([]byte, 16)
		for {
			if _, _, err := dg.ReadFrom(buf); err != nil {
				return
			}
			reached <- "datagram"
		}
	}()
	for _, s := range []string{"s.sock", "d.sock"} {
		if err := os.Chmod(filepath.Join(src, s), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	redisSock := startSocketRedis(t, src)

	checks := []string{"read=/opt/late/s.sock", "dgram=/opt/late/d.sock", "unix-self=/workspace/tmp/own.sock"}
	got, rec := b.probe(checks...)
	want := map[string]string{"read:/opt/late/s.sock": "EACCES", "dgram=/opt/late/d.sock": "EACCES", "unix-self=/workspace/tmp/own.sock": "ok"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (all: %q)", k, got[k], v, got)
		}
	}
	if !strings.Contains(rec.Isolation.Root, "host trees idmapped: their unix sockets refused") {
		t.Errorf("root tier %q does not say the host trees are idmapped", rec.Isolation.Root)
	}
	if redisSock != "" {
		rec := b.run(`{"version": 1, "steps": [{"run": ["sh", "-c",
			"redis-cli -s /opt/late/redis.sock GET airlock:hostsecret 2>&1; redis-cli -s /opt/late/redis.sock SET airlock:pwned 1 2>&1; true"]}]}`)
		out := stepOf(t, rec, 0).Stdout
		if strings.Contains(out, "redissecret") || !strings.Contains(out, "Permission denied") {
			t.Errorf("redis-cli through the late socket: %q", out)
		}
		if v, _ := exec.Command("redis-cli", "-s", redisSock, "EXISTS", "airlock:pwned").Output(); strings.TrimSpace(string(v)) != "0" {
			t.Errorf("the step wrote a key in the host's redis: EXISTS says %q", v)
		}
		t.Logf("redis-cli in the step: %q", out)
	}
	select {
	case what := <-reached:
		t.Errorf("a %s from a step reached the host's socket", what)
	case <-time.After(100 * time.Millisecond):
	}
	if rec.Verdict != record.VerdictOK {
		t.Errorf("probe run: %s", mustJSON(t, rec))
	}
}

// startSocketRedis starts a redis-server listening only on dir/redis.sock
// (mode 0777) that holds the key airlock:hostsecret; "" when the machine
// has no redis-server.
func startSocketRedis(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Logf("no redis-server: the redis part is skipped")
		return ""
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command("redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "777",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if !eventually(5*time.Second, func() bool {
		return exec.Command("redis-cli", "-s", sock, "SET", "airlock:hostsecret", "redissecret").Run() == nil
	}) {
		t.Fatal("redis-server on the unix socket did not answer")
	}
	return sock
}
