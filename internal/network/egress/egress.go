// Package egress is the HTTP proxy through which a networked run's steps
// reach the outside: they have no route of their own (their network
// namespace holds only loopback), and the slot's helper hands every
// connection made to its proxy port to the worker, which serves it here.
// Each destination goes through the address guard (internal/network/netguard):
// the operator's allow-list, the refused ranges, never the worker's Redis.
// Every connection, allowed or not, is accounted for in the run record,
// whose list is bounded (records.go).
//
// Nothing a step sends costs the worker more than the run's Limits
// imply: a request head is read to MaxHeadBytes and MaxHeadLines at most,
// within HeadTimeout, and its bytes count against the run's cap; a run
// holds at most MaxConns connections open (Accept refuses the next at
// once, before reading anything); a connection on which nothing moves
// for IdleTimeout is closed. Per connection the worker holds its
// descriptor and the upstream's, a 4 KiB read buffer, the parsed head
// and two 32 KiB copy buffers.
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

	"github.com/airlock-run/airlock/internal/network/netguard"
	"github.com/airlock-run/airlock/record"
)

// Port is where a step finds the proxy, on its own loopback.
const Port = 3128

// URL is the proxy's address as a step's environment gives it.
const URL = "http://127.0.0.1:3128"

// Bounds of every connection, whatever the run's limits.
const (
	// MaxHeadBytes bounds a request head (request line and headers), as
	// net/http's server does: past it the connection is refused with 431.
	MaxHeadBytes = 64 << 10
	// MaxHeadLines bounds the lines of a request head (the request line
	// and its headers): past it, the connection is refused with 431.
	MaxHeadLines = 256
	// HeadTimeout bounds the time a connection has to send its whole
	// request head (or the idle timeout, when shorter): past it the
	// connection is refused with 408.
	HeadTimeout = 10 * time.Second
)

// Defaults of Limits.
const (
	DefaultMaxConns    = 64
	DefaultIdleTimeout = 30 * time.Second
)

// Limits bound the egress of one run.
type Limits struct {
	// MaxBytes caps the bytes of the run through the proxy, both ways,
	// all connections, request heads included; 0: no cap.
	MaxBytes int64
	// MaxConns caps the run's connections open at once: past it a new
	// connection is refused at once, before anything is read of it.
	// 0: DefaultMaxConns.
	MaxConns int
	// IdleTimeout closes a connection on which nothing moved, either way,
	// for that long. 0: DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// Run is the egress of one run: its guard, its limits, what it did.
type Run struct {
	Guard  *netguard.Guard
	Limits Limits

	ctx    context.Context
	cancel context.CancelFunc
	used   atomic.Int64

	mu       sync.Mutex
	closed   bool
	open     int // connections admitted and not yet done
	records  []record.Egress
	more     record.Egress // the connections past maxListed
	refusals []record.Egress
	conns    sync.WaitGroup
}

// NewRun starts the egress of a run.
func NewRun(g *netguard.Guard, l Limits) *Run {
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	r := &Run{Guard: g, Limits: l}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r
}

// Close ends the run's connections and waits for them; its records are
// final after it, and a connection served after it is closed at once.
func (r *Run) Close() []record.Egress {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.conns.Wait()
	return r.list()
}

func (r *Run) headTimeout() time.Duration {
	return min(HeadTimeout, r.Limits.IdleTimeout)
}

// admit takes a place among the run's open connections for c, or refuses
// c at once (and closes it): the run is over, it has MaxConns open, or
// its bytes are spent.
func (r *Run) admit(c net.Conn) bool {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.Close()
		return false
	}
	why, status := "", 0
	switch {
	case r.open >= r.Limits.MaxConns:
		why, status = r.reasonConns(), http.StatusServiceUnavailable
	case r.Limits.MaxBytes > 0 && r.used.Load() >= r.Limits.MaxBytes:
		why, status = r.reasonCapReached(), http.StatusForbidden
	}
	if why != "" {
		r.refusedLocked(why, 0)
		r.mu.Unlock()
		// A short reply to a new connection fits its socket's buffer; the
		// deadline is for connections that are not sockets.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		reply(c, status, why)
		c.Close()
		return false
	}
	r.open++
	r.conns.Add(1)
	r.mu.Unlock()
	return true
}

func (r *Run) release() {
	r.mu.Lock()
	r.open--
	r.mu.Unlock()
	r.conns.Done()
}

// Accept takes one connection a step made to the proxy: past the run's
// limits (or after Close) it refuses it at once and closes it; otherwise
// it serves it, then closes it, in a goroutine of its own. It never waits
// on the step: a caller that receives connections one at a time and
// hands each to Accept before the next holds no more than MaxConns of
// them, however fast a step opens them.
func (r *Run) Accept(c net.Conn) {
	if r.admit(c) {
		go r.serve(c)
	}
}

// serve serves a connection admit took, and closes it.
func (r *Run) serve(c net.Conn) {
	defer r.release()
	defer c.Close()
	stop := context.AfterFunc(r.ctx, func() { c.Close() })
	defer stop()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	tc := &timedConn{Conn: c, idle: r.Limits.IdleTimeout, last: &last, head: time.Now().Add(r.headTimeout())}
	m := &meter{r: tc, run: r, headLeft: MaxHeadBytes}
	br := bufio.NewReaderSize(m, 4<<10)
	req, err := http.ReadRequest(br)
	if err != nil {
		r.refuseHead(tc, m, err)
		return
	}
	tc.head, m.headLeft = time.Time{}, -1
	host, port, err := target(req)
	if err != nil {
		why := reasonNotProxy
		if errors.Is(err, errHostTooLong) {
			why = reasonHostTooLong
		}
		r.refused(why, m.n)
		r.replyAndLinger(tc, http.StatusBadRequest, err.Error())
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
		r.end(i, m.n, 0, why)
		r.replyAndLinger(tc, status, why)
		return
	}
	defer up.Close()
	stopUp := context.AfterFunc(r.ctx, func() { up.Close() })
	defer stopUp()
	r.allow(i)
	tu := &timedConn{Conn: up, idle: r.Limits.IdleTimeout, last: &last}
	if req.Method == http.MethodConnect {
		if _, err := io.WriteString(tc, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			r.end(i, m.n, 0, r.why(m, tc, tu, err))
			return
		}
	} else {
		// Forward the one request in origin form, without the proxy's
		// own headers, its body streamed (and charged as it is read);
		// the connection closes after the response.
		req.RequestURI = ""
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		req.Close = true
		if err := req.Write(tu); err != nil {
			r.end(i, m.n, 0, r.why(m, tc, tu, err))
			return
		}
	}
	down, downCapped := r.splice(tc, br, tu)
	why := ""
	if downCapped {
		why = r.reasonCap()
	} else {
		why = r.why(m, tc, tu, nil)
	}
	r.end(i, m.n, down, why)
}

// allow marks the listed connection at i allowed.
func (r *Run) allow(i int) {
	if i < 0 {
		return
	}
	r.mu.Lock()
	r.records[i].Allowed = true
	r.mu.Unlock()
}

// why a proxied connection ended early, if it did: the cap, the idle
// timeout, or err.
func (r *Run) why(m *meter, tc, tu *timedConn, err error) string {
	switch {
	case m.capped:
		return r.reasonCap()
	case tc.timedOut.Load() || tu.timedOut.Load():
		return r.reasonIdle()
	case err != nil && r.ctx.Err() == nil:
		return err.Error()
	}
	return ""
}

// refuseHead records and answers a connection whose request head could
// not be read.
func (r *Run) refuseHead(tc *timedConn, m *meter, err error) {
	if r.ctx.Err() != nil {
		return // the run is over; so is its record
	}
	switch {
	case m.capped:
		r.refused(r.reasonCap(), m.n)
		r.replyAndLinger(tc, http.StatusForbidden, r.reasonCap())
	case m.over:
		r.refused(reasonHeadTooLarge, m.n)
		r.replyAndLinger(tc, http.StatusRequestHeaderFieldsTooLarge, reasonHeadTooLarge)
	case m.tooLong:
		r.refused(reasonHeadLines, m.n)
		r.replyAndLinger(tc, http.StatusRequestHeaderFieldsTooLarge, reasonHeadLines)
	case tc.timedOut.Load():
		why := r.reasonHeadTimeout()
		r.refused(why, m.n)
		r.replyAndLinger(tc, http.StatusRequestTimeout, why)
	case m.n == 0 && errors.Is(err, io.EOF):
		r.refused(reasonNoHead, 0)
	default:
		r.refused(reasonHeadBad, m.n)
		r.replyAndLinger(tc, http.StatusBadRequest, "malformed request head: "+clip(err.Error(), maxReason))
	}
}

// replyAndLinger refuses a connection with status and msg, and lets the
// step read it.
func (r *Run) replyAndLinger(tc *timedConn, status int, msg string) {
	reply(tc, status, clip(msg, maxReason))
	linger(tc.Conn)
}

// take charges n bytes to the run and reports whether its cap holds.
func (r *Run) take(n int) bool {
	total := r.used.Add(int64(n))
	return r.Limits.MaxBytes <= 0 || total <= r.Limits.MaxBytes
}

// errHostTooLong refuses a destination longer than any DNS name.
var errHostTooLong = errors.New("host name over 253 bytes")

// target is where a proxy request goes.
func target(req *http.Request) (string, int, error) {
	var host, port string
	if req.Method == http.MethodConnect {
		h, p, err := net.SplitHostPort(req.Host)
		if err != nil {
			return "", 0, fmt.Errorf("CONNECT %q: want host:port", clip(req.Host, maxHost))
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
	if len(host) > maxHost {
		return "", 0, errHostTooLong
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q", clip(port, 16))
	}
	return strings.ToLower(host), n, nil
}

// splice copies both ways until both are done: what the step sends (br,
// over its meter, which charges it) and what comes back, charged here. It
// returns the bytes that came back and whether the cap cut them.
func (r *Run) splice(c *timedConn, br *bufio.Reader, up *timedConn) (int64, bool) {
	var down atomic.Int64
	var capped atomic.Bool
	var wg sync.WaitGroup
	pump := func(dst *timedConn, src io.Reader, charge bool) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			k, err := src.Read(buf)
			if k > 0 {
				if charge && !r.take(k) {
					capped.Store(true)
					break
				}
				if _, werr := dst.Write(buf[:k]); werr != nil {
					break
				}
				if charge {
					down.Add(int64(k))
				}
			}
			if err != nil {
				break
			}
		}
		// Half-close so the other side sees the end, then let the other
		// pump finish.
		_ = dst.CloseWrite()
	}
	wg.Add(2)
	go pump(up, br, false)
	go pump(c, up, true)
	wg.Wait()
	return down.Load(), capped.Load()
}

func reply(c io.Writer, status int, msg string) {
	body := msg + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
}
