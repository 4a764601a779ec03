package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-run/airlock/limits"
)

// Request bodies. Every body a route reads is read by readAll, within the
// API's bound of bytes of bodies in flight (Options.MaxBodyBytesInFlight,
// api -max-body-bytes-in-flight): before its first byte is read, a body
// reserves its Content-Length (its route's cap when it has none: a
// chunked body, read through a reader that stops at the cap), and gives
// it back once read. A body that finds no room is answered 503 overloaded
// with Retry-After at once, unread. A route checks what it can before it
// reads (the token, the caller's session and its room, the
// Content-Length against the cap), so a request it refuses costs no body.
//
// A request refused before its body is read is answered with
// Connection: close (HTTP/1): net/http would otherwise read up to 256 KiB
// of what is left to keep the connection.

// DefaultMaxBodyBytesInFlight is Options.MaxBodyBytesInFlight when 0.
const DefaultMaxBodyBytesInFlight = 64 << 20

// bodyRetryAfter is the Retry-After of a body refused for room.
const bodyRetryAfter = time.Second

// newBodies bounds the bytes of request bodies in flight: bound in all, and
// per token the larger of half of it and the largest body a route takes
// (so that every body can be read).
func newBodies(bound, largest int64) *shares {
	return newShares(bound, max(bound/2, largest))
}

// readAll reads r's body, at most max bytes, within the bytes in flight:
// it answers 413 to a Content-Length above max (tooLarge(max) says why,
// field names what) before reading, 503 overloaded when the body finds
// no room, 413 to a chunked body that passes max and 400 to one that
// cannot be read, and returns false then.
func (h *Handler) readAll(w http.ResponseWriter, r *http.Request, max int64, field string, tooLarge func(int64) string) ([]byte, bool) {
	if r.ContentLength > max {
		h.fail(w, r, &Problem{Type: ProblemTooLarge, Status: http.StatusRequestEntityTooLarge, Field: field, Detail: tooLarge(max)})
		return nil, false
	}
	n := r.ContentLength
	if n < 0 {
		n = max // unknown: the cap, which the reader stops at
	}
	// A sign-in's body (console.go) comes with no token yet: it is counted
	// apart, in a small budget of its own.
	bodies, token := h.signIns, ""
	if t := tokenOf(r); t != nil {
		bodies, token = h.bodies, t.Name
	}
	if why := bodies.take(token, n, 0); why != shareOK {
		w.Header().Set("Retry-After", strconv.Itoa(int(bodyRetryAfter/time.Second)))
		detail := fmt.Sprintf("the API is reading as many request bodies as it may at once (%s, its -max-body-bytes-in-flight); this one (%d bytes) is not read: retry after %s",
			limits.Bytes(h.bodies.max), n, bodyRetryAfter)
		switch {
		case token == "":
			detail = fmt.Sprintf("the API is reading as many sign-ins as it may at once (%s); this one is not read: retry after %s", limits.Bytes(bodies.max), bodyRetryAfter)
		case why == shareToken:
			detail = fmt.Sprintf("token %s has as many request bodies in flight as one token may (%s, half of -max-body-bytes-in-flight, or the largest body); this one (%d bytes) is not read: retry after %s",
				token, limits.Bytes(h.bodies.share), n, bodyRetryAfter)
		}
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable, Detail: detail})
		return nil, false
	}
	defer bodies.give(token, n)
	var b []byte
	var err error
	if r.ContentLength >= 0 {
		// Known: read into a buffer of its size, nothing more.
		b = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, b)
	} else {
		b, err = io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		h.fail(w, r, &Problem{Type: ProblemTooLarge, Status: http.StatusRequestEntityTooLarge, Field: field, Detail: tooLarge(max)})
		return nil, false
	case err != nil:
		h.fail(w, r, &Problem{Type: ProblemBadRequest, Status: http.StatusBadRequest, Field: field, Detail: "reading the body: " + err.Error()})
		return nil, false
	}
	if rw, ok := w.(*responseWriter); ok {
		rw.bodyRead = true
	}
	return b, true
}

// closeUnread asks net/http to close the connection after the answer to
// an HTTP/1 request whose body was not read (a refusal), rather than read
// what is left of it to keep the connection.
func closeUnread(w http.ResponseWriter, r *http.Request) {
	if r == nil || r.ProtoMajor != 1 || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	if rw, ok := w.(*responseWriter); ok && rw.bodyRead {
		return
	}
	w.Header().Set("Connection", "close")
}

// streamBody hands the request's body to send, which reads it a chunk at
// a time (chunk bytes at most held at once): one chunk counts in flight
// against -max-body-bytes-in-flight and the token's share for the whole
// read. It answers 503 itself when the bytes in flight are full (ok
// false); otherwise it returns send's error.
func (h *Handler) streamBody(w http.ResponseWriter, r *http.Request, chunk int64, send func(io.Reader) error) (ok bool, err error) {
	token := "" // a sign-in's (console.go): no token yet
	if t := tokenOf(r); t != nil {
		token = t.Name
	}
	if why := h.bodies.take(token, chunk, 0); why != shareOK {
		w.Header().Set("Retry-After", strconv.Itoa(int(bodyRetryAfter/time.Second)))
		h.fail(w, r, &Problem{Type: ProblemOverloaded, Status: http.StatusServiceUnavailable,
			Detail: fmt.Sprintf("the API is reading as many request bodies as it may at once (%s, its -max-body-bytes-in-flight): this upload is not read; retry after %s", limits.Bytes(h.bodies.max), bodyRetryAfter)})
		return false, nil
	}
	defer h.bodies.give(token, chunk)
	// The server's read timeout bounds a whole body: a streamed one has
	// it renewed before each read, as long as it keeps coming.
	rc := http.NewResponseController(w)
	body := readerFunc(func(p []byte) (int, error) {
		_ = rc.SetReadDeadline(time.Now().Add(time.Minute))
		return r.Body.Read(p)
	})
	return true, send(body)
}

// readerFunc is an io.Reader of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
