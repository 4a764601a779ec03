//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/session"
)

// TestUploadsRefusedBeforeRead (issue 31, part 5): 120 parallel 4 MiB
// PUTs of a file into one's own session, busy with a long step, through
// the real api binary. Round 4 found each body read whole before the
// session's 409 (48 and 120 uploads took the API from 178 MB to 438 MB
// and 865 MB). Now the session's state and room, the caller and the
// Content-Length are checked before the body is read: the API's peak
// resident set stays under 150 MiB, a refused upload is answered before
// its body is sent (and with Connection: close, so that nothing reads
// it), and an API whose -max-body-bytes-in-flight is taken answers 503
// with Retry-After at once, naming the flag.
func TestUploadsRefusedBeforeRead(t *testing.T) {
	b := setup(t, "-concurrency", "2")
	base, proc := startAPIProc(t, b)
	small := startAPI(t, b, "-max-body-bytes-in-flight", "4MiB")
	api := newAPIClient(t, base)
	var opened struct {
		SessionID string `json:"session_id"`
	}
	api.json("POST", "/v1/sessions", apiAgent, map[string]any{"version": 1, "queue": b.queue, "timeout": "120s",
		"session": map[string]any{"idle_timeout": "60s"}}, 201, &opened)
	sid := url.PathEscape(opened.SessionID)
	filePath := func(name string) string { return "/v1/sessions/" + sid + "/files/" + url.PathEscape("in/"+name) }

	// The session is busy: a step that sleeps, found by its command line.
	marker := "upload-attack-" + numMarker()
	stepDone := make(chan string, 1)
	go func() {
		status, body := rawSend("POST", base+"/v1/sessions/"+sid+"/steps", "application/json",
			strings.NewReader(`{"run": ["sh", "-c", "sleep 60; echo `+marker+`"]}`))
		stepDone <- fmt.Sprintf("%d %s", status, body)
	}()
	if !eventually(20*time.Second, func() bool { return len(procsMatching(marker)) > 0 }) {
		t.Fatal("the session's step did not start in 20s")
	}
	defer func() {
		api.json("DELETE", "/v1/sessions/"+sid, apiAgent, nil, 200, nil) // kills the step
		t.Logf("the step's call: %s", <-stepDone)
	}()

	// An API whose bound of bodies in flight is taken (one upload of 4 MiB
	// whose body comes slowly) answers the next upload 503 at once.
	slow := holdUpload(t, small, "/v1/sessions/"+sid+"/files/in/slow.bin", session.MaxFileBytes, 1024)
	// Once the slow upload's handler reads, any body is refused: a
	// decision's (harmless: it names no approval) tells when.
	if !eventually(10*time.Second, func() bool {
		req, _ := http.NewRequest("POST", small+"/v1/approvals/ap-none/accept", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+apiApprover)
		req.Header.Set("Content-Type", "application/json")
		res, err := uploadClient.Do(req)
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusServiceUnavailable
	}) {
		t.Fatal("a decision's body was not refused while 4 MiB were read, -max-body-bytes-in-flight 4MiB")
	}
	start := time.Now()
	res, body := rawDo(t, "PUT", small+filePath("next.bin"), bytes.NewReader([]byte("tiny")))
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, "-max-body-bytes-in-flight") || !strings.Contains(body, "urn:airlock:problem:overloaded") {
		t.Errorf("an upload past -max-body-bytes-in-flight: %d %v %s", res.StatusCode, res.Header, body)
	}
	t.Logf("past -max-body-bytes-in-flight: %d in %s: %s", res.StatusCode, time.Since(start).Round(time.Millisecond), strings.TrimSpace(body))
	slow.Close()

	// The attack.
	before := statsOf(t, proc.Pid)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", proc.Pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the api's VmHWM: %v", err)
	}
	const uploads = 120
	data := bytes.Repeat([]byte("A"), session.MaxFileBytes)
	type answer struct {
		status int
		err    string
		took   time.Duration
	}
	answers := make([]answer, uploads)
	var wg sync.WaitGroup
	start = time.Now()
	for i := range uploads {
		wg.Go(func() {
			t0 := time.Now()
			status, body := rawSend("PUT", base+filePath(fmt.Sprintf("f%d.bin", i)), "application/octet-stream", bytes.NewReader(data))
			answers[i] = answer{status: status, took: time.Since(t0)}
			if status == 0 {
				answers[i].err = body
			}
		})
	}
	wg.Wait()
	after := statsOf(t, proc.Pid)
	counts := map[int]int{}
	var refusedTook []time.Duration
	for _, a := range answers {
		counts[a.status]++
		if a.status == http.StatusConflict {
			refusedTook = append(refusedTook, a.took)
		}
		if a.err != "" && counts[0] == 1 {
			t.Logf("a transport error: %s", a.err)
		}
	}
	sort.Slice(refusedTook, func(i, j int) bool { return refusedTook[i] < refusedTook[j] })
	median := time.Duration(0)
	if len(refusedTook) > 0 {
		median = refusedTook[len(refusedTook)/2]
	}
	t.Logf("%d uploads of %d MiB in %s: statuses %v (0: transport error); 409 median %s; api VmRSS %d MiB before, peak (VmHWM) %d MiB, VmRSS %d MiB after",
		uploads, session.MaxFileBytes>>20, time.Since(start).Round(time.Millisecond), counts, median.Round(time.Millisecond), before.RSS>>20, after.HWM>>20, after.RSS>>20)
	if after.HWM > 150<<20 {
		t.Errorf("HOLE: the api's resident set peaked at %d MiB over %d parallel uploads into a busy session, want under 150 MiB", after.HWM>>20, uploads)
	}
	// At most the session's waiting calls, and the one it serves, go
	// through; every other upload is refused. A client still writing its
	// body when the API closes the connection after the 409 may see the
	// close (a broken pipe, a reset) rather than the answer: a refusal too.
	if refused := counts[http.StatusConflict] + counts[0]; refused < uploads-(session.MaxQueuedCalls+1) {
		t.Errorf("%d uploads refused (409 or the connection closed), want at least %d", refused, uploads-(session.MaxQueuedCalls+1))
	}

	// A refused upload is answered before its body comes: headers alone,
	// then the answer.
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n",
		filePath("headers-only.bin"), apiAgent, session.MaxFileBytes)
	start = time.Now()
	res, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to an upload whose body did not come: %v", err)
	}
	body = readAll(res.Body)
	if res.StatusCode != http.StatusConflict || !res.Close {
		t.Errorf("an upload into the busy session, its body not sent: %d (close %v) %s", res.StatusCode, res.Close, body)
	}
	t.Logf("headers only: %d in %s, the connection closed after it: %v", res.StatusCode, time.Since(start).Round(time.Millisecond), res.Close)
}

// rawSend sends one request with apiAgent's token, outside the validating
// transport (its bodies are large, and sent in parallel), and returns the
// status and body; status 0 and the error for a transport error.
func rawSend(method, u, contentType string, body io.Reader) (int, string) {
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+apiAgent)
	req.Header.Set("Content-Type", contentType)
	res, err := uploadClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	return res.StatusCode, readAll(res.Body)
}

// uploadClient sends the uploads, each on a connection of its own.
var uploadClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 2 * time.Minute}

// rawDo is rawSend that fails t on a transport error, and returns the
// response.
func rawDo(t *testing.T, method, u string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiAgent)
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := uploadClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	return res, readAll(res.Body)
}

func readAll(r io.Reader) string {
	b, _ := io.ReadAll(r)
	return string(b)
}

// holdUpload starts an upload of size bytes to path, sends sent bytes of
// its body and holds the rest; closing the connection ends it.
func holdUpload(t *testing.T, base, path string, size, sent int) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s",
		path, apiAgent, size, strings.Repeat("s", sent))
	return conn
}
