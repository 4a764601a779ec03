// Package egress is the HTTP proxy through which a networked run's steps
// reach the outside: they have no route of their own (their network
// namespace holds only loopback), and the slot's helper hands every
// connection made to its proxy port to the worker, which serves it here.
// Each destination goes through the address guard (internal/netguard):
// the operator's allow-list, the refused ranges, never the worker's Redis.
// Every connection, allowed or not, is kept for the run record, and the
// bytes of a run are capped.
//
// It speaks HTTP/1.1 proxying: CONNECT host:port (HTTPS and any TLS), and
// plain-HTTP requests in absolute form (GET http://host/path), one request
// per connection. Nothing else leaves: no UDP, no DNS (names are resolved
// by the worker, for CONNECT and absolute URLs).
package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-run/airlock/internal/netguard"
	"github.com/airlock-run/airlock/record"
)

// Port is where a step finds the proxy, on its own loopback.
const Port = 3128

// URL is the proxy's address as a step's environment gives it.
const URL = "http://127.0.0.1:3128"

// maxRecords bounds the connections a run's record lists.
const maxRecords = 256

// Run is the egress of one run: its guard, its byte cap, what it did.
type Run struct {
	Guard    *netguard.Guard
	MaxBytes int64 // both directions, all connections; 0: no cap

	ctx    context.Context
	cancel context.CancelFunc
	used   atomic.Int64

	mu      sync.Mutex
	records []record.Egress
	dropped int
	conns   sync.WaitGroup
}

// NewRun starts the egress of a run.
func NewRun(g *netguard.Guard, maxBytes int64) *Run {
	r := &Run{Guard: g, MaxBytes: maxBytes}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// Close ends the run's connections and waits for them; its records are
// final after it.
func (r *Run) Close() []record.Egress {
	r.cancel()
	r.conns.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.records
	if r.dropped > 0 {
		out = append(out, record.Egress{Host: "(more)", Reason: fmt.Sprintf("%d more connections not listed", r.dropped)})
	}
	return out
}

func (r *Run) add(e record.Egress) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) >= maxRecords {
		r.dropped++
		return -1
	}
	r.records = append(r.records, e)
	return len(r.records) - 1
}

func (r *Run) update(i int, f func(*record.Egress)) {
	if i < 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.records[i])
}

// Serve serves one connection a step made to the proxy, and closes it.
func (r *Run) Serve(c net.Conn) {
	r.conns.Add(1)
	defer r.conns.Done()
	defer c.Close()
	if r.ctx.Err() != nil {
		return
	}
	stop := context.AfterFunc(r.ctx, func() { c.Close() })
	defer stop()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReaderSize(c, 16<<10)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	host, port, err := target(req)
	if err != nil {
		reply(c, http.StatusBadRequest, err.Error())
		return
	}
	i := r.add(record.Egress{Host: host, Port: port})
	up, err := r.Guard.DialContext(r.ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		why := err.Error()
		status := http.StatusBadGateway
		if errors.Is(err, netguard.ErrRefused) {
			status = http.StatusForbidden
		}
		r.update(i, func(e *record.Egress) { e.Reason = why })
		reply(c, status, why)
		return
	}
	defer up.Close()
	stopUp := context.AfterFunc(r.ctx, func() { up.Close() })
	defer stopUp()
	r.update(i, func(e *record.Egress) { e.Allowed = true })
	var sent int64
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
	} else {
		// Forward the one request in origin form, without the proxy's
		// own headers, its body streamed and counted; the connection
		// closes after the response.
		req.RequestURI = ""
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		req.Close = true
		cw := &capWriter{w: up, r: r}
		err := req.Write(cw)
		sent = cw.n
		if err != nil {
			why := err.Error()
			if cw.capped {
				why = fmt.Sprintf("cut at the run's egress cap of %d bytes", r.MaxBytes)
			}
			r.update(i, func(e *record.Egress) { e.BytesUp, e.Reason = sent, why })
			return
		}
	}
	upBytes, downBytes, why := r.splice(c, br, up)
	r.update(i, func(e *record.Egress) {
		e.BytesUp, e.BytesDown = sent+upBytes, downBytes
		if why != "" {
			e.Reason = why
		}
	})
}

// capWriter counts what it writes against the run's cap.
type capWriter struct {
	w      io.Writer
	r      *Run
	n      int64
	capped bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if !c.r.take(len(p)) {
		c.capped = true
		return 0, errors.New("egress cap")
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// take charges n bytes to the run and reports whether its cap holds.
func (r *Run) take(n int) bool {
	total := r.used.Add(int64(n))
	return r.MaxBytes <= 0 || total <= r.MaxBytes
}

// target is where a proxy request goes.
func target(req *http.Request) (string, int, error) {
	var host, port string
	if req.Method == http.MethodConnect {
		h, p, err := net.SplitHostPort(req.Host)
		if err != nil {
			return "", 0, fmt.Errorf("CONNECT %q: want host:port", req.Host)
		}
		host, port = h, p
	} else {
		if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" {
			return "", 0, errors.New("only CONNECT and absolute http:// requests are proxied (set HTTPS_PROXY for https)")
		}
		host, port = req.URL.Hostname(), req.URL.Port()
		if port == "" {
			port = "80"
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q", port)
	}
	return strings.ToLower(host), n, nil
}

// splice copies both ways, counting against the run's cap; it returns the
// bytes each way and why it ended early, if it did.
func (r *Run) splice(c net.Conn, br *bufio.Reader, up net.Conn) (int64, int64, string) {
	var upN, downN atomic.Int64
	var capped atomic.Bool
	count := func(n int) bool {
		if !r.take(n) {
			capped.Store(true)
			return false
		}
		return true
	}
	var wg sync.WaitGroup
	pump := func(dst net.Conn, src io.Reader, n *atomic.Int64) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				if !count(k) {
					break
				}
				if _, werr := dst.Write(buf[:k]); werr != nil {
					break
				}
				n.Add(int64(k))
			}
			if err != nil {
				break
			}
		}
		// Half-close so the other side sees the end, then let the other
		// pump finish.
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go pump(up, br, &upN)
	go pump(c, up, &downN)
	wg.Wait()
	if capped.Load() {
		return upN.Load(), downN.Load(), fmt.Sprintf("cut at the run's egress cap of %d bytes", r.MaxBytes)
	}
	return upN.Load(), downN.Load(), ""
}

func reply(c net.Conn, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}
