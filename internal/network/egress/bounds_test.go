package egress

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlock-run/airlock/record"
)

// dial opens a connection to the proxy, closed at the test's end.
func dial(t *testing.T, p *proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// readReply reads the proxy's reply on c, or fails.
func readReply(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the proxy's reply: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(b)
}

// refusal finds the record's aggregate entry whose reason has s.
func refusal(recs []record.Egress, s string) (record.Egress, bool) {
	for _, e := range recs {
		if e.Host == "" && strings.Contains(e.Reason, s) {
			return e, true
		}
	}
	return record.Egress{}, false
}

// An endless request head, one line or many, is read to 64 KiB or 256
// lines and no further, refused with 431 (which the step can read),
// counted against the cap and recorded; the proxy's memory does not
// follow the head.
func TestHeadTooLarge(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const linesRead = MaxHeadLines*8 + 4<<10 // the lines, and what the last read took past them
	for _, tt := range []struct {
		name, start, chunk, want string
		minUp, maxUp             int64
	}{
		{"one endless line", "GET http://127.0.0.1/ HTTP/1.1\r\nX-Long: ", strings.Repeat("a", 32<<10), "over 64 KiB", MaxHeadBytes, MaxHeadBytes},
		{"endless request line", "GET http://127.0.0.1/", strings.Repeat("p", 32<<10), "over 64 KiB", MaxHeadBytes, MaxHeadBytes},
		{"endless headers", "CONNECT 127.0.0.1:9 HTTP/1.1\r\n", strings.Repeat("X-H: v\r\n", 4<<10), "over 256 lines", MaxHeadLines * 8, linesRead},
		{"endless empty headers", "CONNECT 127.0.0.1:9 HTTP/1.1\r\n", strings.Repeat("a:\n", 4<<10), "over 256 lines", MaxHeadLines * 3, linesRead},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const send = 32 << 20
			p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{MaxBytes: 1 << 30}))
			c := dial(t, p)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			sent := make(chan int64, 1)
			go func() {
				n, _ := io.WriteString(c, tt.start)
				total := int64(n)
				for total < send {
					k, err := io.WriteString(c, tt.chunk)
					total += int64(k)
					if err != nil {
						break
					}
				}
				sent <- total
			}()
			status, body := readReply(t, c)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if status != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(body, tt.want) {
				t.Errorf("reply %d %q, want 431 naming the bound", status, body)
			}
			c.Close()
			if n := <-sent; n >= send {
				t.Errorf("the proxy took all %d bytes of the head", n)
			}
			// The proxy and this test's client together: the head's
			// 32 MiB must not show.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
				t.Errorf("%d MiB allocated while a 32 MiB head was refused", grew>>20)
			}
			recs := p.close()
			e, ok := refusal(recs, tt.want)
			if !ok || len(recs) != 1 || e.Count != 1 || e.Allowed {
				t.Fatalf("records %+v, want the one refusal", recs)
			}
			if e.BytesUp < tt.minUp || e.BytesUp > tt.maxUp {
				t.Errorf("bytes_up %d, want the head read to its bound (%d to %d bytes) and no further", e.BytesUp, tt.minUp, tt.maxUp)
			}
			if used := p.run.used.Load(); used != e.BytesUp {
				t.Errorf("the run's cap was charged %d bytes, want the head's %d", used, e.BytesUp)
			}
		})
	}
}

// Request heads count against the run's cap: a head that passes it is
// refused, and so is every connection after it, at once.
func TestHeadCountsAgainstCap(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const limit = 1000
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{MaxBytes: limit}))
	c := dial(t, p)
	io.WriteString(c, "GET http://127.0.0.1/ HTTP/1.1\r\nX: "+strings.Repeat("a", 4000))
	if status, body := readReply(t, c); status != http.StatusForbidden || !strings.Contains(body, "egress cap") {
		t.Errorf("reply %d %q, want 403 at the cap", status, body)
	}
	for range 3 {
		c := dial(t, p)
		if status, body := readReply(t, c); status != http.StatusForbidden || !strings.Contains(body, "is reached") {
			t.Errorf("a connection past the cap: %d %q, want 403 at once", status, body)
		}
	}
	recs := p.close()
	if e, ok := refusal(recs, "cut at the run's egress cap"); !ok || e.Count != 1 || e.BytesUp > limit {
		t.Errorf("records %+v: want the head cut at the cap, at most %d bytes", recs, limit)
	}
	if e, ok := refusal(recs, "is reached"); !ok || e.Count != 3 || e.BytesUp != 0 {
		t.Errorf("records %+v: want 3 refused at once", recs)
	}
}

// Past MaxConns open at once, a new connection is refused at once and
// closed; one place freed is one connection more; the refusals are one
// entry.
func TestMaxConns(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const maxConns = 4
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{MaxConns: maxConns}))
	var held []net.Conn
	for range maxConns {
		held = append(held, dial(t, p))
	}
	open := func() int {
		p.run.mu.Lock()
		defer p.run.mu.Unlock()
		return p.run.open
	}
	deadline := time.Now().Add(5 * time.Second)
	for open() < maxConns && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	const extra = 50
	for range extra {
		c := dial(t, p)
		start := time.Now()
		status, body := readReply(t, c)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "-egress-max-conns") {
			t.Fatalf("connection past the cap: %d %q, want 503", status, body)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("connection past the cap still open: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("refused after %s, want at once", d)
		}
		c.Close()
	}
	if n := open(); n != maxConns {
		t.Errorf("%d open, want %d", n, maxConns)
	}
	held[0].Close()
	for open() >= maxConns && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if _, body := rawRequest(t, p, "CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"); strings.Contains(body, "max-conns") {
		t.Errorf("a place was freed, yet: %q", body)
	}
	recs := p.close()
	e, ok := refusal(recs, "-egress-max-conns")
	if !ok || e.Count != extra {
		t.Errorf("records %+v: want one entry counting %d refusals", recs, extra)
	}
	if e, ok := refusal(recs, "before a request head"); !ok || e.Count != 1 {
		t.Errorf("records %+v: want the closed one counted", recs)
	}
}

// A connection that sends nothing, or its head too slowly, is refused
// at the head's timeout with 408, and freed.
func TestHeadTimeout(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const idle = 300 * time.Millisecond
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{IdleTimeout: idle}))
	// The proxy's clock starts as it accepts: time from before the dial.
	start := time.Now()
	silent, slow := dial(t, p), dial(t, p)
	stop := make(chan struct{})
	go func() { // a byte every 50 ms: never idle, never done
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		io.WriteString(slow, "GET http://127.0.0.1/ HTTP/1.1\r\n")
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				if _, err := io.WriteString(slow, "a"); err != nil {
					return
				}
			}
		}
	}()
	for _, c := range []net.Conn{silent, slow} {
		if status, body := readReply(t, c); status != http.StatusRequestTimeout || !strings.Contains(body, "300ms") {
			t.Errorf("reply %d %q, want 408", status, body)
		}
	}
	close(stop)
	if d := time.Since(start); d < idle || d > idle+2*time.Second {
		t.Errorf("refused after %s, want the head's timeout of %s", d, idle)
	}
	recs := p.close()
	if e, ok := refusal(recs, "no complete request head within 300ms"); !ok || e.Count != 2 {
		t.Errorf("records %+v: want both refused", recs)
	}
}

// A tunnel on which nothing moves is closed at the idle timeout; one on
// which only one way moves is not.
func TestIdleTimeout(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	const idle = 500 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upDone := make(chan struct{})
	go func() { // upstream: the first connection says nothing; the second trickles
		defer close(upDone)
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if i == 0 {
				go func() { io.Copy(io.Discard, c); c.Close() }()
				continue
			}
			go func() {
				defer c.Close()
				for range 10 {
					time.Sleep(idle / 5)
					if _, err := io.WriteString(c, "x"); err != nil {
						return
					}
				}
			}()
		}
	}()
	defer func() { ln.Close(); <-upDone }()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{IdleTimeout: idle}))
	tunnel := func() (*bufio.Reader, time.Time) {
		// The proxy's idle clock starts before the client reads the 200:
		// time from before the request.
		start := time.Now()
		c := dial(t, p)
		io.WriteString(c, "CONNECT "+ln.Addr().String()+" HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		return br, start
	}
	br, start := tunnel()
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read a byte from a silent tunnel")
	}
	if d := time.Since(start); d < idle || d > idle+2*time.Second {
		t.Errorf("silent tunnel closed after %s, want the idle timeout of %s", d, idle)
	}
	br, _ = tunnel()
	got, err := io.ReadAll(br)
	if string(got) != strings.Repeat("x", 10) || err != nil {
		t.Errorf("the trickling tunnel gave %q, %v; want its 10 bytes (2 idle timeouts long, never idle)", got, err)
	}
	recs := p.close()
	if len(recs) != 2 || !strings.Contains(recs[0].Reason, "nothing moved for 500ms") || recs[1].Reason != "" {
		t.Errorf("records %+v: want the first closed idle, the second not", recs)
	}
}

// Hosts and reasons are bounded, and so is the list: 2,000 connections
// of all kinds give a record of a bounded size.
func TestRecordBoundedInBytes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	p := startProxy(t, NewRun(guard(t), Limits{}))
	long := strings.Repeat("h", 200) + ".example"
	for i := range 2000 {
		var req string
		switch i % 4 {
		case 0:
			req = "CONNECT " + long + ":443 HTTP/1.1\r\nHost: x\r\n\r\n"
		case 1:
			req = "CONNECT " + strings.Repeat("z", 1000) + ":443 HTTP/1.1\r\nHost: x\r\n\r\n"
		case 2:
			req = "GET /" + strings.Repeat("q", i) + " HTTP/1.1\r\nHost: x\r\n\r\n"
		case 3:
			req = "NOT HTTP " + strings.Repeat("\x01", i) + "\r\n\r\n"
		}
		c := dial(t, p)
		io.WriteString(c, req)
		io.Copy(io.Discard, c)
		c.Close()
	}
	recs := p.close()
	js, _ := json.Marshal(recs)
	if len(recs) > maxListed+1+8 || len(js) > 100<<10 {
		t.Errorf("%d entries, %d bytes of JSON; want at most %d entries, 100 KiB", len(recs), len(js), maxListed+1+8)
	}
	total := 0
	for _, e := range recs {
		total += max(e.Count, 1)
		if len(e.Host) > maxHost || len(e.Reason) > maxReason {
			t.Errorf("entry past its bounds: host %d bytes, reason %d", len(e.Host), len(e.Reason))
		}
	}
	if total != 2000 {
		t.Errorf("the record accounts for %d connections, want 2000", total)
	}
	for _, s := range []string{"host name over 253 bytes", "not a proxy request", "malformed request head"} {
		if _, ok := refusal(recs, s); !ok {
			t.Errorf("no entry for %q in %+v", s, recs[len(recs)-4:])
		}
	}
}

// A head of MaxHeadLines lines passes, whatever lines its body has, sent
// in the same write; one line more is refused.
func TestHeadLinesBound(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	var got atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got.Store(n)
	}))
	defer up.Close()
	p := startProxy(t, NewRun(guard(t, "127.0.0.1"), Limits{}))
	body := strings.Repeat("\n", 10000)
	head := func(headers int) string {
		var sb strings.Builder
		sb.WriteString("POST " + up.URL + "/ HTTP/1.1\r\nContent-Length: 10000\r\n")
		for i := range headers - 1 {
			fmt.Fprintf(&sb, "X-%d: v\r\n", i)
		}
		return sb.String() + "\r\n"
	}
	if resp, b := rawRequest(t, p, head(MaxHeadLines-1)+body); resp.StatusCode != 200 || got.Load() != 10000 {
		t.Errorf("a head of %d lines and a body of newlines: %d %q, upstream got %d bytes; want 200 and the body", MaxHeadLines, resp.StatusCode, b, got.Load())
	}
	if resp, b := rawRequest(t, p, head(MaxHeadLines)+body); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a head of %d lines: %d %q, want 431", MaxHeadLines+1, resp.StatusCode, b)
	}
	recs := p.close()
	if len(recs) != 2 || !recs[0].Allowed || recs[1].Count != 1 || !strings.Contains(recs[1].Reason, "256 lines") {
		t.Errorf("records %+v: want the first allowed, the second refused", recs)
	}
}
