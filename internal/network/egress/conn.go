package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// errHeadTooLarge and errCap end a read from a step's connection: past
// the request head's bounds, past the run's byte cap.
var (
	errHeadTooLarge = errors.New("request head over its bounds")
	errCap          = errors.New("egress cap")
)

// timedConn is one side of a proxied connection whose reads and writes
// must make progress: while head is set, reads end at that instant (the
// request head's timeout); after, a read ends once nothing moved either
// way (last, shared by both sides) for idle, and a write once it made no
// progress for idle.
type timedConn struct {
	net.Conn
	idle     time.Duration
	last     *atomic.Int64 // unix nanoseconds of the last byte moved, either side
	head     time.Time
	timedOut atomic.Bool
}

func (t *timedConn) Read(p []byte) (int, error) {
	for {
		d := t.head
		if d.IsZero() {
			d = time.Unix(0, t.last.Load()).Add(t.idle)
		}
		_ = t.Conn.SetReadDeadline(d)
		n, err := t.Conn.Read(p)
		if n > 0 {
			t.last.Store(time.Now().UnixNano())
			return n, err
		}
		if !isTimeout(err) {
			return n, err
		}
		if t.head.IsZero() && time.Since(time.Unix(0, t.last.Load())) < t.idle {
			continue // the other way moved meanwhile: wait on
		}
		t.timedOut.Store(true)
		return n, err
	}
}

func (t *timedConn) Write(p []byte) (int, error) {
	_ = t.Conn.SetWriteDeadline(time.Now().Add(t.idle))
	n, err := t.Conn.Write(p)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	if isTimeout(err) {
		t.timedOut.Store(true)
	}
	return n, err
}

// CloseWrite half-closes the connection when it can, and closes it
// otherwise.
func (t *timedConn) CloseWrite() error {
	if cw, ok := t.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return t.Conn.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// meter is what the proxy reads of a step's connection, every byte of
// it: each is charged to the run's cap as it is read (a byte past the
// cap is dropped, not passed on) and counted, and while headLeft is not
// negative it bounds the request head, read after read, so that no more
// than MaxHeadBytes of it, and no more than MaxHeadLines lines, is ever
// read. (The lines bound what parsing holds: 64 KiB of 4-byte header
// lines is a map of 13,000 entries, about 1 MiB.)
type meter struct {
	r        io.Reader
	run      *Run
	headLeft int64 // bytes the request head may still take; -1 once it is read
	n        int64 // bytes read and within the cap
	lines    int   // lines of the head read so far
	lineLen  int   // bytes of the current line, without CR
	headEnd  bool  // the blank line that ends the head was read
	over     bool  // the head passed MaxHeadBytes
	tooLong  bool  // the head passed MaxHeadLines
	capped   bool  // the run's cap was reached
}

func (m *meter) Read(p []byte) (int, error) {
	if m.capped {
		return 0, errCap
	}
	if m.headLeft >= 0 {
		if m.tooLong {
			return 0, errHeadTooLarge
		}
		if m.headLeft == 0 {
			m.over = true
			return 0, errHeadTooLarge
		}
		if int64(len(p)) > m.headLeft {
			p = p[:m.headLeft]
		}
	}
	k, err := m.r.Read(p)
	if k > 0 {
		if !m.run.take(k) {
			m.capped = true
			return 0, errCap
		}
		m.n += int64(k)
		if m.headLeft > 0 {
			m.headLeft -= int64(k)
			if m.countLines(p[:k]) {
				m.tooLong = true
				return 0, errHeadTooLarge
			}
		}
	}
	return k, err
}

// countLines counts the head's lines in p, up to the blank line that ends
// it, and reports whether they passed MaxHeadLines. (A blank line first
// ends the parse too: as a malformed request line.)
func (m *meter) countLines(p []byte) bool {
	for _, c := range p {
		if m.headEnd {
			break
		}
		switch c {
		case '\n':
			if m.lineLen == 0 {
				m.headEnd = true
			} else {
				m.lines++
				m.lineLen = 0
			}
		case '\r':
		default:
			m.lineLen++
		}
	}
	return m.lines > MaxHeadLines
}

// linger lets a step read a reply the proxy refused it with: the proxy's
// side is half-closed and what the step still sends is read and dropped,
// for at most lingerTime and lingerBytes, so that the step's unread bytes
// do not reset the connection before the reply is read (as net/http's
// server does).
func linger(c net.Conn) {
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	if cw.CloseWrite() != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

const (
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)
