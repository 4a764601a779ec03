package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/frontend/httpapi/httpapitest"
	"github.com/airlock-run/airlock/internal/testkit/redistest"
	"github.com/airlock-run/airlock/record"
	"github.com/airlock-run/airlock/session"
)

// fakeSession is a session of the env's queue opened by token writer,
// held by a fake worker that answers each call 200 (a write with its
// size) when answer is true.
type fakeSession struct {
	id   string
	conn *session.Conn
	path string // its files route, without the file's path
}

// openFake writes the state of an open session of token writer, and
// serves its calls when answer is set, until the test ends.
func (e *env) openFake(answer bool) *fakeSession {
	e.t.Helper()
	ctx := context.Background()
	conn := session.NewConn(redistest.Client(e.t), e.prefix)
	id := uuid.NewString()
	if err := conn.Create(ctx, session.Info{ID: id, TaskID: id, Queue: e.queue, Principal: "writer", OpenedAt: time.Now()}, time.Hour); err != nil {
		e.t.Fatal(err)
	}
	if _, err := conn.Hold(ctx, id, e.queue, "fake", time.Now().Add(time.Hour)); err != nil {
		e.t.Fatal(err)
	}
	fs := &fakeSession{id: id, conn: conn, path: "/v1/sessions/" + id + "/files/"}
	if !answer {
		return fs
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sctx.Err() == nil {
			_ = conn.Alive(sctx, "fake")
			if _, err := conn.Bells(sctx, "fake", time.Second); err != nil {
				continue
			}
			c, err := conn.Take(sctx, id, "fake") // the call the bell rang for
			if err != nil || c == nil {
				continue
			}
			_ = conn.Answer(sctx, id, c.ID, &session.Answer{Status: http.StatusOK, State: session.StateOpen, Size: int64(len(c.Data))})
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return fs
}

// fill queues n calls nobody takes on the session (its list, as
// package session names it): it is busy.
func (s *fakeSession) fill(t *testing.T, prefix string, n int) {
	t.Helper()
	key := prefix + "session:{" + s.id + "}:calls"
	for range n {
		if err := redistest.Client(t).RPush(context.Background(), key, `{"id":"x","op":"read","path":"x"}`).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// rawConn opens a connection to the env's server and sends head (a
// request line and its headers, without the blank line) with token tok,
// then body; it is closed when the test ends.
func (e *env) rawConn(head, tok string, contentLength int, body string) net.Conn {
	e.t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s", head, tok, contentLength, body)
	return conn
}

// answerOf reads the answer on conn, failing the test when none comes in
// 5 s (the server waits for a body that never comes).
func answerOf(t *testing.T, conn net.Conn) (*http.Response, string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body came: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// TestUploadRefusedOnHeaders checks that an upload is refused on its
// headers alone, its 4 MiB body never sent: 404 another token's session,
// 413 a Content-Length above the cap, 409 a busy or not yet open session,
// 410 an ended one; and that the answer closes the connection (net/http
// reads nothing more of it).
func TestUploadRefusedOnHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	busy := e.openFake(false)
	busy.fill(t, e.prefix, session.MaxQueuedCalls)
	ended := e.openFake(false)
	if err := ended.conn.End(context.Background(), ended.id, record.StateCompleted, "closed", time.Hour); err != nil {
		t.Fatal(err)
	}
	opening := &fakeSession{id: uuid.NewString()}
	opening.path = "/v1/sessions/" + opening.id + "/files/"
	if err := busy.conn.Create(context.Background(), session.Info{ID: opening.id, TaskID: opening.id, Queue: e.queue, Principal: "writer"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		path   string
		tok    string
		length int
		status int
		ptype  string
	}{
		{"another token's", busy.path + "a.bin", tokEnqueuer, session.MaxFileBytes, http.StatusNotFound, httpapi.ProblemNotFound},
		// Above one call: streamed, after the same checks (the session is busy).
		{"above one call", busy.path + "a.bin", tokWriter, session.MaxFileBytes + 1, http.StatusConflict, httpapi.ProblemSessionBusy},
		{"busy", busy.path + "a.bin", tokWriter, session.MaxFileBytes, http.StatusConflict, httpapi.ProblemSessionBusy},
		{"not open yet", opening.path + "a.bin", tokWriter, session.MaxFileBytes, http.StatusConflict, httpapi.ProblemSessionBusy},
		{"ended", ended.path + "a.bin", tokWriter, session.MaxFileBytes, http.StatusGone, httpapi.ProblemSessionEnded},
		{"a bad path", busy.path + "..%2Fx", tokWriter, session.MaxFileBytes, http.StatusBadRequest, httpapi.ProblemBadRequest},
	} {
		res, body := answerOf(t, e.rawConn("PUT "+tc.path+" HTTP/1.1", tc.tok, tc.length, ""))
		if res.StatusCode != tc.status || !strings.Contains(body, tc.ptype) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, res.StatusCode, body, tc.status, tc.ptype)
		}
		if !res.Close {
			t.Errorf("%s: the answer keeps the connection (Connection: %q): net/http would read the body to reuse it", tc.name, res.Header.Get("Connection"))
		}
	}
	// A step into the busy session is refused before its body too.
	res, body := answerOf(t, e.rawConn("POST /v1/sessions/"+busy.id+"/steps HTTP/1.1", tokWriter, 1<<20, ""))
	if res.StatusCode != http.StatusConflict || !res.Close {
		t.Errorf("a step into the busy session: %d (close %v) %s", res.StatusCode, res.Close, body)
	}
}

// TestUploadsInProgressPerSession checks that parallel uploads into one
// session are read at most session.MaxQueuedCalls+1 at a time by one API
// server, the next refused 409 before its body; and that uploads, with a
// Content-Length or chunked, are written when the session takes them.
func TestUploadsInProgressPerSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{})
	s := e.openFake(true)
	// Slow uploads, one more than a session may have in progress: their
	// bodies never come whole, so the handlers that let them in read
	// until the connections close. Exactly one is refused, at once.
	slow := make([]net.Conn, maxSessionCalls+1)
	got := make([]string, len(slow))
	for i := range slow {
		slow[i] = e.rawConn(fmt.Sprintf("PUT %sslow%d.bin HTTP/1.1", s.path, i), tokWriter, session.MaxFileBytes, "x")
	}
	refused := -1
	for deadline := time.Now().Add(5 * time.Second); refused < 0 && time.Now().Before(deadline); {
		for i, c := range slow {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			b := make([]byte, 4096)
			n, _ := c.Read(b)
			if got[i] += string(b[:n]); strings.Contains(got[i], "calls in progress") {
				refused = i
			}
		}
	}
	if refused < 0 || !strings.HasPrefix(got[refused], "HTTP/1.1 409") {
		t.Fatalf("%d uploads of one session in parallel: none refused 409 (%q)", len(slow), got)
	}
	time.Sleep(100 * time.Millisecond)
	for i, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		b := make([]byte, 4096)
		n, _ := c.Read(b)
		if got[i] += string(b[:n]); i != refused && got[i] != "" {
			t.Errorf("upload %d in progress was answered: %q", i, got[i])
		}
		c.Close()
	}
	// Once they are over, uploads go through again.
	put := func(body io.Reader) resp {
		req, err := http.NewRequest("PUT", e.srv.URL+s.path+"in%2Fdata.bin", body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokWriter)
		req.Header.Set("Content-Type", "application/octet-stream")
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return resp{status: res.StatusCode, header: res.Header, body: b}
	}
	var r resp
	if !eventually(5*time.Second, func() bool { r = put(strings.NewReader("hello")); return r.status == http.StatusOK }) {
		t.Fatalf("an upload once the slow ones ended: %d %s", r.status, r.body)
	}
	var written struct{ Size int }
	r.json(t, &written)
	if written.Size != 5 {
		t.Errorf("written: %s", r.body)
	}
	// Chunked (no Content-Length): read through a reader that stops at
	// the cap.
	if r = put(struct{ io.Reader }{strings.NewReader("chunked")}); r.status != http.StatusOK {
		t.Errorf("a chunked upload: %d %s", r.status, r.body)
	}
	big := struct{ io.Reader }{io.LimitReader(zeros{}, session.MaxFileBytes+1)}
	req, _ := http.NewRequest("PUT", e.srv.URL+s.path+"big.bin", big)
	req.Header.Set("Authorization", "Bearer "+tokWriter)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := e.client.Do(httpapitest.Invalid(req))
	if err == nil {
		res.Body.Close()
		// Streamed in chunks; this fake worker answers before it takes
		// any, and the upload stops sending then.
		if res.StatusCode != http.StatusOK {
			t.Errorf("a chunked upload above one call: %d", res.StatusCode)
		}
	}
}

// maxSessionCalls is the most calls with a body one API server has in
// progress for one session: those that may wait, and the one served.
const maxSessionCalls = session.MaxQueuedCalls + 1

// zeros reads zero bytes without end.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestBodiesInFlight checks Options.MaxBodyBytesInFlight: with a 4 MiB
// upload being read, a bound of 4 MiB answers any other body 503
// overloaded with Retry-After at once, unread, naming the flag; the bytes
// are given back when the upload ends. A bound below the largest body is
// refused.
func TestBodiesInFlight(t *testing.T) {
	t.Parallel()
	if _, err := httpapi.New(redistest.Client(t), httpapi.Options{Tokens: testTokens(t, "q"), MaxBodyBytesInFlight: 1 << 20}); err == nil ||
		!strings.Contains(err.Error(), "below the largest body") {
		t.Errorf("a bound below 4 MiB: %v", err)
	}
	e := newEnv(t, httpapi.Options{MaxBodyBytesInFlight: session.MaxFileBytes})
	s := e.openFake(true)
	slow := e.rawConn("PUT "+s.path+"slow.bin HTTP/1.1", tokWriter, session.MaxFileBytes, "x")
	var r resp
	ok := eventually(5*time.Second, func() bool {
		r = e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: e.spec(false, "")})
		return r.status == http.StatusServiceUnavailable
	})
	if !ok {
		t.Fatalf("a spec while 4 MiB are read, bound 4 MiB: %d %s", r.status, r.body)
	}
	p := r.problem(t, http.StatusServiceUnavailable)
	if p.Type != httpapi.ProblemOverloaded || !strings.Contains(p.Detail, "-max-body-bytes-in-flight") || r.header.Get("Retry-After") != "1" {
		t.Errorf("503: %+v, Retry-After %q", p, r.header.Get("Retry-After"))
	}
	res, body := answerOf(t, e.rawConn("PUT "+s.path+"other.bin HTTP/1.1", tokWriter, 1<<20, ""))
	if res.StatusCode != http.StatusServiceUnavailable || !res.Close {
		t.Errorf("an upload, its body not sent: %d (close %v) %s", res.StatusCode, res.Close, body)
	}
	slow.Close()
	if !eventually(5*time.Second, func() bool {
		r = e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: e.spec(false, "")})
		return r.status == http.StatusCreated
	}) {
		t.Errorf("a spec once the upload ended: %d %s", r.status, r.body)
	}
	// Bodies in parallel within the bound all go through.
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	for i := range statuses {
		wg.Go(func() {
			statuses[i] = e.do(request{method: "POST", path: "/v1/runs", token: tokWriter, body: e.spec(false, "")}).status
		})
	}
	wg.Wait()
	for i, st := range statuses {
		if st != http.StatusCreated {
			t.Errorf("spec %d in parallel: %d", i, st)
		}
	}
}

// eventually polls cond for up to d.
func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// TestBodiesReadInOnePlace checks that no file of the package but body.go
// touches a request's Body: every body is read by readAll, within the
// bytes in flight.
func TestBodiesReadInOnePlace(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`\.Body\b`)
	for _, f := range files {
		if f == "body.go" || strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if body.MatchString(line) {
				t.Errorf("%s:%d reads a body outside body.go (readAll, within the bytes in flight): %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
