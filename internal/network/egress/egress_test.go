package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/internal/network/netguard"
	"github.com/airlock-run/airlock/record"
)

// proxy serves a Run on a loopback listener, each connection handed to
// Accept as it comes, as the worker does.
type proxy struct {
	run  *Run
	ln   net.Listener
	url  *url.URL
	wg   sync.WaitGroup
	once sync.Once
	recs []record.Egress
}

func startProxy(t *testing.T, run *Run) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{run: run, ln: ln, url: &url.URL{Scheme: "http", Host: ln.Addr().String()}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			run.Accept(c)
		}
	}()
	t.Cleanup(func() { p.close() })
	return p
}

// close stops accepting, closes the run and returns its records.
func (p *proxy) close() []record.Egress {
	p.once.Do(func() {
		p.ln.Close()
		p.recs = p.run.Close()
		p.wg.Wait()
	})
	return p.recs
}

func guard(t *testing.T, rules ...string) *netguard.Guard {
	t.Helper()
	g := &netguard.Guard{Timeout: 5 * time.Second}
	for _, s := range rules {
		r, err := netguard.ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		g.Rules = append(g.Rules, r)
	}
	return g
}

func hostPort(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return u.Hostname(), port
}

func proxyClient(p *proxy, tlsConf *tls.Config) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(p.url), TLSClientConfig: tlsConf}}
}

// ignoreBytes compares records without their byte counts and reasons.
var ignoreBytes = cmpopts.IgnoreFields(record.Egress{}, "BytesUp", "BytesDown", "Reason")

func TestServeHTTP(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	var gotProxyHdr atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotProxyHdr.Store(r.Header.Get("Proxy-Authorization") + r.Header.Get("Proxy-Connection") + "|" + r.RequestURI)
		io.WriteString(w, "hello from upstream")
	}))
	defer up.Close()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{}))
	c := proxyClient(p, nil)
	req, _ := http.NewRequest("GET", up.URL+"/path?q=1", nil)
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET through the proxy: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "hello from upstream" {
		t.Errorf("got %d %q, %v; want 200 and the upstream's body", resp.StatusCode, body, err)
	}
	if got := gotProxyHdr.Load(); got != "|/path?q=1" {
		t.Errorf("upstream got proxy headers and request URI %q, want none and origin form", got)
	}
	c.CloseIdleConnections()

	recs := p.close()
	host, port := hostPort(t, up.URL)
	if diff := cmp.Diff([]record.Egress{{Host: host, Port: port, Allowed: true}}, recs, ignoreBytes); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if r := recs[0]; r.BytesUp <= 0 || r.BytesDown <= int64(len(body)) || r.Reason != "" {
		t.Errorf("record %+v: want bytes both ways and no reason", r)
	}
}

func TestServeConnect(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "secure hello")
	}))
	defer up.Close()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{}))
	c := proxyClient(p, up.Client().Transport.(*http.Transport).TLSClientConfig)
	for range 2 {
		resp, err := c.Get(up.URL + "/x")
		if err != nil {
			t.Fatalf("GET https through the proxy: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(body) != "secure hello" {
			t.Errorf("got %d %q, %v; want 200", resp.StatusCode, body, err)
		}
	}
	c.CloseIdleConnections()

	recs := p.close()
	host, port := hostPort(t, up.URL)
	// Two requests, one tunnel: the client kept the connection.
	if diff := cmp.Diff([]record.Egress{{Host: host, Port: port, Allowed: true}}, recs, ignoreBytes); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if r := recs[0]; r.BytesUp <= 0 || r.BytesDown <= 0 {
		t.Errorf("record %+v: want bytes both ways", r)
	}
}

// rawRequest sends a request over a new connection to the proxy and reads
// the reply.
func rawRequest(t *testing.T, p *proxy, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the proxy's reply to %q: %v", req, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestServeDenied(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	hit := atomic.Bool{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit.Store(true) }))
	defer up.Close()
	upAddr := netip.MustParseAddrPort(up.Listener.Addr().String())
	host, port := hostPort(t, up.URL)

	denyRedis := guard(t, "127.0.0.1")
	denyRedis.Deny = netguard.NewServers(context.Background(), []string{upAddr.String()}, nil)
	var lookups atomic.Int32
	noDNS := guard(t, "127.0.0.1")
	noDNS.Resolver = &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		lookups.Add(1)
		return nil, errors.New("no DNS in tests")
	}}
	for _, tt := range []struct {
		name   string
		guard  *netguard.Guard
		req    string
		host   string
		port   int
		reason string
	}{
		{"no rule, absolute form", guard(t), "GET " + up.URL + "/ HTTP/1.1\r\nHost: " + up.Listener.Addr().String() + "\r\n\r\n", host, port, "refused"},
		{"no rule, CONNECT", guard(t), "CONNECT " + upAddr.String() + " HTTP/1.1\r\nHost: " + upAddr.String() + "\r\n\r\n", host, port, "refused"},
		{"deny entry", denyRedis, "CONNECT " + upAddr.String() + " HTTP/1.1\r\nHost: " + upAddr.String() + "\r\n\r\n", host, port, "Redis"},
		{"metadata address", guard(t, "127.0.0.1"), "GET http://169.254.169.254/latest/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n", "169.254.169.254", 80, "refused"},
		{"unlisted name, no lookup", noDNS, "CONNECT Leak.Example.Invalid:443 HTTP/1.1\r\nHost: leak.example.invalid:443\r\n\r\n", "leak.example.invalid", 443, "allow-list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := startProxy(t, NewRun(tt.guard, Limits{}))
			resp, body := rawRequest(t, p, tt.req)
			if resp.StatusCode != http.StatusForbidden || body == "" {
				t.Errorf("status %d %q, want 403 with a reason", resp.StatusCode, body)
			}
			recs := p.close()
			if diff := cmp.Diff([]record.Egress{{Host: tt.host, Port: tt.port}}, recs, ignoreBytes); diff != "" {
				t.Fatalf("records (-want +got):\n%s", diff)
			}
			if !strings.Contains(recs[0].Reason, tt.reason) {
				t.Errorf("reason %q, want it to mention %q", recs[0].Reason, tt.reason)
			}
		})
	}
	if hit.Load() {
		t.Error("the upstream was reached")
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("%d DNS lookups for an unlisted name", n)
	}
}

func TestServeMaxBytes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const size, limit = 1 << 20, 64 << 10
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(make([]byte, size))
	}))
	defer up.Close()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{MaxBytes: limit}))
	c := proxyClient(p, nil)
	resp, err := c.Get(up.URL)
	var n int
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		n, err = len(b), rerr
	}
	if err == nil || n >= size {
		t.Errorf("got %d bytes, %v; want an error or a truncated body", n, err)
	}
	if n > limit {
		t.Errorf("got %d bytes through a cap of %d", n, limit)
	}
	c.CloseIdleConnections()

	recs := p.close()
	if len(recs) != 1 {
		t.Fatalf("records %+v, want one", recs)
	}
	r := recs[0]
	if !r.Allowed || !strings.Contains(r.Reason, "cap") || r.BytesUp+r.BytesDown > limit {
		t.Errorf("record %+v: want allowed, cut at the cap, at most %d bytes", r, limit)
	}
}

// The cap holds for what a step sends too.
func TestServeMaxBytesUpload(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const size, limit = 1 << 20, 64 << 10
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
	}))
	defer up.Close()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{MaxBytes: limit}))
	c := proxyClient(p, nil)
	resp, err := c.Post(up.URL, "application/octet-stream", strings.NewReader(strings.Repeat("u", size)))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 && got.Load() == size {
			t.Errorf("the whole %d-byte upload went through a cap of %d", size, limit)
		}
	}
	c.CloseIdleConnections()
	recs := p.close()
	if len(recs) != 1 || !strings.Contains(recs[0].Reason, "cap") || recs[0].BytesUp > limit {
		t.Errorf("records %+v: want one cut at the cap, at most %d bytes up", recs, limit)
	}
}

func TestServeBadRequest(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{}))
	for _, req := range []string{
		"GET /relative HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"GET https://127.0.0.1/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"CONNECT 127.0.0.1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
		"CONNECT 127.0.0.1:0 HTTP/1.1\r\nHost: 127.0.0.1:0\r\n\r\n",
		"GET http://127.0.0.1:99999/ HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n",
	} {
		resp, _ := rawRequest(t, p, req)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: status %d, want 400", req, resp.StatusCode)
		}
	}
	recs := p.close()
	if len(recs) != 1 || recs[0].Host != "" || recs[0].Count != 5 || !strings.Contains(recs[0].Reason, "not a proxy request") || recs[0].BytesUp <= 0 {
		t.Errorf("records %+v for bad requests, want one entry counting the 5", recs)
	}
}

func TestServeAfterClose(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	run := NewRun(guard(t, "127.0.0.1"), Limits{})
	if recs := run.Close(); len(recs) != 0 {
		t.Errorf("records of an idle run: %+v", recs)
	}
	a, b := net.Pipe()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		run.Accept(a)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		a.Close()
		<-done
		t.Fatal("Accept after Close did not return")
	}
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := b.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("read from a connection served after Close: %v, want EOF (closed)", err)
	}
}

// Close ends a connection that is still open (a tunnel the client keeps).
func TestCloseEndsOpenTunnel(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upDone := make(chan struct{})
	go func() { // an upstream that echoes
		defer close(upDone)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	defer func() { ln.Close(); <-upDone }()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{}))
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	head := "CONNECT " + ln.Addr().String() + " HTTP/1.1\r\nHost: " + ln.Addr().String() + "\r\n\r\n"
	io.WriteString(c, head)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the tunnel: %q %v", buf, err)
	}

	closed := make(chan []record.Egress)
	go func() { closed <- p.close() }()
	select {
	case recs := <-closed:
		// Up: the request head and the 4 bytes; down: the 4 bytes.
		if len(recs) != 1 || recs[0].BytesUp != int64(len(head))+4 || recs[0].BytesDown != 4 {
			t.Errorf("records %+v, want one of %d bytes up (head included), 4 down", recs, len(head)+4)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the open tunnel")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel is still open after Close")
	}
}

func TestRecordsBounded(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p := startProxy(t, NewRun(guard(t), Limits{}))
	for range maxListed + 3 {
		resp, _ := rawRequest(t, p, "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
	}
	recs := p.close()
	if len(recs) != maxListed+1 {
		t.Fatalf("%d records, want %d and a summary", len(recs), maxListed+1)
	}
	if last := recs[maxListed]; last.Host != "(more)" || last.Count != 3 || last.BytesUp <= 0 || !strings.Contains(last.Reason, "3 more") {
		t.Errorf("summary record %+v, want 3 more", last)
	}
}
