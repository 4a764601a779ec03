//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock"
	"github.com/airlock-run/airlock/internal/redis/redisconn"
	"github.com/airlock-run/airlock/record"
)

// startRedisOn starts a redis-server of the test's own, without
// persistence, listening on every address of binds on one free port, and
// returns that port once it answers PING at each.
func startRedisOn(t *testing.T, binds ...string) int {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("needs redis-server")
	}
	for attempt := 0; attempt < 5; attempt++ {
		port := freePortOn(t, binds...)
		dir := t.TempDir()
		cmd := exec.Command(path, "--bind", strings.Join(binds, " "), "--port", strconv.Itoa(port),
			"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning")
		log, err := os.Create(filepath.Join(dir, "redis.log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		log.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		ok := true
		for _, h := range binds {
			if err := pingRedis(fmt.Sprintf("redis://%s/0", net.JoinHostPort(h, strconv.Itoa(port))), 10*time.Second); err != nil {
				ok = false
				b, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
				t.Logf("redis-server on port %d (attempt %d): %v\n%s", port, attempt, err, b)
			}
		}
		if ok {
			t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
			return port
		}
		_ = cmd.Process.Kill()
		<-done
	}
	t.Fatal("no redis-server could be started")
	return 0
}

// freePortOn returns a port free on every one of hosts.
func freePortOn(t *testing.T, hosts ...string) int {
	t.Helper()
	for tries := 0; tries < 50; tries++ {
		l, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		free := true
		for _, h := range hosts[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return port
		}
	}
	t.Fatal("no port free on all of", hosts)
	return 0
}

func pingRedis(url string, timeout time.Duration) error {
	rdb, _, err := redisconn.Open(url)
	if err != nil {
		return err
	}
	defer rdb.Close()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err = rdb.Ping(ctx).Err()
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// setupOnRedis is setup with a worker (and client) of the Redis at url
// rather than the tests' shared one.
func setupOnRedis(t *testing.T, url string, flags ...string) *bundle {
	t.Helper()
	needRoot(t)
	b := newBundle(t)
	b.url = url
	rdb, _, err := redisconn.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	b.client = airlock.NewClient(rdb, airlock.ClientOptions{Retention: time.Hour})
	t.Cleanup(func() { b.client.Close() })
	b.worker = b.startWorker(flags...)
	return b
}

// TestTrustRedisEveryAddress: the worker's Redis listens on 127.0.0.1 and
// 127.0.0.2; with 127.0.0.0/8 opened to both the egress proxy and the
// fetch, a step reaches it at neither address (HTTP through the proxy,
// CONNECT, a raw CONNECT that would write a key) and an input is not
// fetched from it; an HTTP server on 127.0.0.2 on another port is
// reached both ways.
func TestTrustRedisEveryAddress(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl in the steps' view")
	}
	port := startRedisOn(t, "127.0.0.1", "127.0.0.2")
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	// The Redis answers at 127.0.0.2 too: the refusal below is not a
	// closed port.
	if err := pingRedis(fmt.Sprintf("redis://127.0.0.2:%d/0", port), 5*time.Second); err != nil {
		t.Fatalf("the Redis does not answer at 127.0.0.2: %v", err)
	}
	// Another server on the same address, another port: reachable.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "narrow-rule-ok\n") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	other := ln.Addr().String()

	b := setupOnRedis(t, url, "-allow-network", "-egress-allow", "127.0.0.0/8", "-fetch-allow", "127.0.0.0/8")
	key := "airlock-trust-" + b.queue
	redis2, redis1 := net.JoinHostPort("127.0.0.2", strconv.Itoa(port)), net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	script := strings.Join([]string{
		`curl -sS -o /dev/null -w 'http2=%{http_code}\n' http://` + redis2 + `/`,
		`curl -sS -o /dev/null -w 'http1=%{http_code}\n' http://` + redis1 + `/`,
		`curl -sS -p -o /dev/null -w 'connect2=%{http_connect}\n' http://` + redis2 + `/ 2>/dev/null`,
		`curl -sS -p -o /dev/null -w 'connect1=%{http_connect}\n' http://` + redis1 + `/ 2>/dev/null`,
		`curl -sS -p -o /dev/null -w 'connect6=%{http_connect}\n' http://[::ffff:127.0.0.2]:` + strconv.Itoa(port) + `/ 2>/dev/null`,
		// A raw CONNECT, then a command, as a step would write a key.
		`exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT ` + redis2 + ` HTTP/1.1\r\nHost: ` + redis2 + `\r\n\r\nSET ` + key + ` 1\r\n' >&3; head -1 <&3 | tr -d '\r' | sed 's/^/raw: /'; exec 3>&-`,
		// The narrow rule: the same address, another port.
		`curl -sS -w 'other_http=%{http_code}\n' http://` + other + `/`,
		`curl -sS -p -w 'other_connect=%{http_connect}\n' http://` + other + `/`,
	}, "\n")
	rec := b.run(fmt.Sprintf(`{"version": 1, "network": true, "files": {"net.sh": %q}, "steps": [{"run": ["bash", "net.sh"]}]}`, script))
	if rec.State != record.StateCompleted {
		t.Fatalf("want completed:\n%s", mustJSON(t, rec))
	}
	out := stepOf(t, rec, 0).Stdout
	for _, want := range []string{"http2=403", "http1=403", "connect2=403", "connect1=403", "connect6=403", "raw: HTTP/1.1 403",
		"narrow-rule-ok\nother_http=200", "narrow-rule-ok\nother_connect=200"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, h := range []string{"127.0.0.2", "127.0.0.1", "::ffff:127.0.0.2"} {
		e, ok := egressOf(rec, h, port)
		if !ok || e.Allowed || !strings.Contains(e.Reason, "the worker's own Redis") {
			t.Errorf("the record's entry for %s:%d: %+v in\n%s", h, port, e, mustJSON(t, rec.Egress))
		}
	}
	oh, op := portOf(t, "http://"+other)
	if e, ok := egressOf(rec, oh, op); !ok || !e.Allowed {
		t.Errorf("the other server's entry: %+v", e)
	}
	rdb, _, err := redisconn.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Errorf("a step wrote to the worker's Redis: exists=%d err=%v", n, err)
	}

	// The fetch of inputs: refused at both addresses, the other server
	// fetched.
	for _, u := range []string{"http://" + redis2 + "/", "http://" + redis1 + "/", "http://[::ffff:127.0.0.2]:" + strconv.Itoa(port) + "/"} {
		rec := b.run(`{"version": 1, "inputs": [` + inputJSON(u) + `], "steps": [{"run": ["true"]}]}`)
		if rec.State != record.StateFailed || rec.Verdict != record.VerdictFetch || !strings.Contains(rec.Error, "the worker's own Redis") || len(rec.Steps) != 0 {
			t.Errorf("input %s: want a fetch failure naming the worker's Redis:\n%s", u, mustJSON(t, rec))
		}
	}
	rec = b.run(`{"version": 1, "inputs": [` + inputJSON("http://"+other+"/") + `], "steps": [{"run": ["cat", "in/x"]}]}`)
	if rec.State != record.StateCompleted || stepOf(t, rec, 0).Stdout != "narrow-rule-ok\n" {
		t.Errorf("input from the other server:\n%s", mustJSON(t, rec))
	}
}
