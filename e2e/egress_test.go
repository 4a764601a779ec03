//go:build linux

package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
)

// egressOf finds the record's connection to host:port.
func egressOf(rec *record.Run, host string, port int) (record.Egress, bool) {
	for _, e := range rec.Egress {
		if e.Host == host && e.Port == port {
			return e, true
		}
	}
	return record.Egress{}, false
}

func portOf(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(u.Port(), &p)
	return u.Hostname(), p
}

// TestEgressProxy: a networked run reaches an allowed host only through
// the worker's proxy (HTTP and CONNECT), never a denied one, never the
// worker's Redis, never anything directly; the record lists each
// connection.
func TestEgressProxy(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl in the steps' view")
	}
	body := make([]byte, 100<<10)
	rand.Read(body)
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(make([]byte, 1<<20))
			return
		}
		w.Write(body)
	}))
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "over tls\n") }))
	t.Cleanup(tlsSrv.Close)
	// A listener on an address the allow-list does not open.
	other, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nleaked"))
			c.Close()
		}
	}()

	b := setup(t, "-allow-network", "-egress-allow", "127.0.0.1", "-egress-max-bytes", "512KiB")
	ru, err := url.Parse(b.url)
	if err != nil {
		t.Fatal(err)
	}
	key := "airlock-egress-" + b.queue
	script := strings.Join([]string{
		`echo proxy=$HTTP_PROXY`,
		// Allowed, through the proxy: plain HTTP and HTTPS (CONNECT).
		`curl -sS -o body.bin -w 'plain=%{http_code}\n' ` + plain.URL + `/`,
		`sha256sum body.bin`,
		`curl -sS -k ` + tlsSrv.URL + `/`,
		// Denied: another loopback address, the worker's Redis (both ways).
		`curl -sS -o /dev/null -w 'other=%{http_code}\n' http://` + other.Addr().String() + `/`,
		`curl -sS -o /dev/null -w 'redis=%{http_code}\n' http://` + ru.Host + `/`,
		`curl -sS -p -o /dev/null -w 'redis_tunnel=%{http_connect}\n' http://` + ru.Host + `/ 2>/dev/null`,
		// A name the allow-list does not name is not even resolved.
		`curl -sS -o /dev/null -w 'name=%{http_code}\n' http://exfil-` + b.queue + `.example/`,
		// Direct, ignoring the proxy: no route.
		`curl -sS --noproxy '*' -m 3 -o /dev/null ` + plain.URL + `/ 2>&1 | head -1 | sed 's/^/direct: /'`,
		`(exec 3<>/dev/tcp/` + ru.Hostname() + `/` + ru.Port() + ` && printf 'SET ` + key + ` 1\r\n' >&3) 2>/dev/null || echo direct_redis=failed`,
		// The byte cap: 1 MiB through a 512 KiB budget.
		`curl -sS -o big.bin ` + plain.URL + `/big 2>/dev/null; echo big=$(wc -c < big.bin)`,
		`true`,
	}, "\n")
	rec := b.run(fmt.Sprintf(`{"version": 1, "network": true, "files": {"net.sh": %q}, "steps": [{"run": ["bash", "net.sh"]}]}`, script))
	if rec.State != record.StateCompleted {
		t.Fatalf("want completed:\n%s", mustJSON(t, rec))
	}
	out := stepOf(t, rec, 0).Stdout
	for _, want := range []string{"proxy=http://127.0.0.1:3128", "plain=200", sha(string(body)) + "  body.bin", "over tls",
		"other=403", "redis=403", "redis_tunnel=403", "name=403", "direct: curl: (7)", "direct_redis=failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if n, err := redistest.Client(t).Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Errorf("a step reached Redis: exists=%d err=%v", n, err)
	}
	// The record: each connection, allowed or not, with its bytes.
	h, p := portOf(t, plain.URL)
	if e, ok := egressOf(rec, h, p); !ok || !e.Allowed || e.BytesDown < int64(len(body)) || e.BytesUp == 0 {
		t.Errorf("the allowed connection: %+v in\n%s", e, mustJSON(t, rec.Egress))
	}
	h, p = portOf(t, tlsSrv.URL)
	if e, ok := egressOf(rec, h, p); !ok || !e.Allowed || e.BytesDown == 0 {
		t.Errorf("the CONNECT: %+v", e)
	}
	oh, op := portOf(t, "http://"+other.Addr().String())
	if e, ok := egressOf(rec, oh, op); !ok || e.Allowed || !strings.Contains(e.Reason, "refused") {
		t.Errorf("the denied connection: %+v", e)
	}
	rh, rp := portOf(t, b.url)
	if e, ok := egressOf(rec, rh, rp); !ok || e.Allowed || !strings.Contains(e.Reason, "Redis") {
		t.Errorf("the Redis connection: %+v", e)
	}
	if e, ok := egressOf(rec, "exfil-"+b.queue+".example", 80); !ok || e.Allowed || !strings.Contains(e.Reason, "names are resolved only") {
		t.Errorf("the unnamed host: %+v", e)
	}
	capped := false
	for _, e := range rec.Egress {
		capped = capped || strings.Contains(e.Reason, "egress cap")
	}
	if !capped || strings.Contains(out, "big=1048576") {
		t.Errorf("the 512 KiB cap did not cut the 1 MiB download:\n%s\n%s", out, mustJSON(t, rec.Egress))
	}
	if !strings.Contains(rec.Isolation.Network, "proxy") || !strings.Contains(rec.Isolation.Landlock, "port 3128") {
		t.Errorf("isolation: %s", mustJSON(t, rec.Isolation))
	}
}

// TestEgressNeedsAllowNetwork: network: true without -allow-network is
// refused, and a run without it has no proxy.
func TestEgressNeedsAllowNetwork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The client refuses it at enqueue (the worker's policy says no
	// network); past the client, the worker does.
	if _, err := b.client.Enqueue(context.Background(), b.spec(`{"version": 1, "network": true, "steps": [{"run": ["true"]}]}`)); err == nil || !strings.Contains(err.Error(), "allow-network") {
		t.Errorf("enqueue of a network run: %v", err)
	}
	rec := b.runRaw(`{"version": 1, "network": true, "steps": [{"run": ["true"]}]}`)
	if rec.State != record.StateFailed || !strings.Contains(rec.Error, "allow-network") || len(rec.Steps) != 0 {
		t.Errorf("network run on a worker without -allow-network:\n%s", mustJSON(t, rec))
	}
	rec = b.run(`{"version": 1, "steps": [{"run": ["sh", "-c", "echo proxy=$HTTP_PROXY"]}]}`)
	if got := stepOf(t, rec, 0).Stdout; got != "proxy=\n" || len(rec.Egress) != 0 {
		t.Errorf("a run without network: stdout %q, egress %v", got, rec.Egress)
	}
}
