package httpapi_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/approve"
	"github.com/airlock-run/airlock/events"
	"github.com/airlock-run/airlock/frontend/console"
	"github.com/airlock-run/airlock/frontend/httpapi"
	"github.com/airlock-run/airlock/record"
)

// consoleReq is a request of the console's: its session cookie (from
// signIn), its CSRF token and its Origin, as the console's page sends
// them.
type consoleReq struct {
	method, path string
	cookie, csrf string
	origin       string // "": the server's own; "-": none
	body         string
}

func (e *env) console(rq consoleReq) resp {
	e.t.Helper()
	var body io.Reader
	if rq.body != "" {
		body = strings.NewReader(rq.body)
	}
	req, err := http.NewRequest(rq.method, e.srv.URL+rq.path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	if rq.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	switch rq.origin {
	case "":
		req.Header.Set("Origin", e.srv.URL)
	case "-":
	default:
		req.Header.Set("Origin", rq.origin)
	}
	if rq.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "__Host-airlock-console", Value: rq.cookie})
	}
	if rq.csrf != "" {
		req.Header.Set("X-CSRF-Token", rq.csrf)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// signIn signs in with token and returns the session cookie's value and
// the session.
func (e *env) signIn(token string) (string, httpapi.ConsoleSession) {
	e.t.Helper()
	r := e.console(consoleReq{method: "POST", path: "/ui/api/session", body: fmt.Sprintf(`{"token": %q}`, token)})
	if r.status != http.StatusOK {
		e.t.Fatalf("sign in: %d %s", r.status, r.body)
	}
	var s httpapi.ConsoleSession
	r.json(e.t, &s)
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "__Host-airlock-console" {
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Domain != "" || strings.Contains(c.Value, token) {
				e.t.Errorf("session cookie %+v: want Secure, HttpOnly, SameSite=Strict, Path=/, no Domain, the token not as is", c)
			}
			return c.Value, s
		}
	}
	e.t.Fatalf("sign in set no session cookie: %v", r.header)
	return "", s
}

var parked atomic.Int64

// parkFor parks an approval of action (or run id runID) with result and
// one CSV artifact; checked are the values the policy looked at.
func (e *env) parkFor(queue, action, runID, principal, result, csv string, checked ...record.Check) *approve.Approval {
	e.t.Helper()
	n := parked.Add(1)
	sum := sha256.Sum256([]byte(csv))
	rs := sha256.Sum256([]byte(result))
	a := &approve.Approval{
		ID: fmt.Sprintf("ap-console-%d", n), TaskID: fmt.Sprintf("t-console-%d", n), RunID: runID, State: approve.StatePending,
		Reasons: []string{"rule refund-rate-watch: /refund_rate is 0.2 >= 0.1"}, Checked: checked,
		Result: []byte(result), ResultSHA256: hex.EncodeToString(rs[:]),
		Artifacts: []record.Artifact{{Name: "out/clean.csv", Bytes: int64(len(csv)), SHA256: hex.EncodeToString(sum[:]), ContentType: "text/csv"}},
		Run:       approve.RunSummary{Queue: queue, Principal: principal, Action: action, Attempt: 1, Worker: "fake", Secrets: []string{"PARTNER_TOKEN"}},
	}
	if _, _, err := e.store.Quiet().Park(context.Background(), a, map[string][]byte{"out/clean.csv": []byte(csv)}); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// TestConsoleServed: the page, its script and its style are served with
// the console's CSP and headers; -ui=false serves none of them.
func TestConsoleServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	for path, ct := range map[string]string{"/ui/": "text/html", "/ui/approvals/ap-1": "text/html",
		"/ui/assets/app.js": "text/javascript", "/ui/assets/approval.js": "text/javascript", "/ui/assets/app.css": "text/css"} {
		r := e.console(consoleReq{method: "GET", path: path, origin: "-"})
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), ct) {
			t.Errorf("GET %s: %d %s", path, r.status, r.header.Get("Content-Type"))
		}
		if r.header.Get("Content-Security-Policy") != console.CSP || r.header.Get("X-Frame-Options") != "DENY" ||
			r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: headers %v", path, r.header)
		}
	}
	page := e.console(consoleReq{method: "GET", path: "/ui/", origin: "-"})
	if b := string(page.body); !strings.Contains(b, `src="/ui/assets/app.js"`) || strings.Contains(b, "<script>") || strings.Contains(b, "style=") ||
		strings.Contains(b, "http://") || strings.Contains(b, "https://") {
		t.Errorf("the page holds inline script or style, or a remote origin:\n%s", b)
	}
	for _, path := range []string{"/ui/assets/other.js", "/ui/nothing"} {
		if r := e.console(consoleReq{method: "GET", path: path, origin: "-"}); r.status != 404 || r.header.Get("Content-Security-Policy") != console.CSP {
			t.Errorf("GET %s: %d, CSP %q", path, r.status, r.header.Get("Content-Security-Policy"))
		}
	}
	off := newEnv(t, httpapi.Options{})
	if r := off.console(consoleReq{method: "GET", path: "/ui/", origin: "-"}); r.status != 404 {
		t.Errorf("without UI, GET /ui/: %d", r.status)
	}
}

// TestConsoleSignIn: only a token that holds approvals:read signs in,
// from the console's own origin; the session names it and says whether
// it may decide; signing out forgets the cookie.
func TestConsoleSignIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	for _, c := range []struct {
		name, body, origin string
		status             int
	}{
		{"unknown token", `{"token": "not-a-token-of-the-file"}`, "", 401},
		{"no approvals:read", fmt.Sprintf(`{"token": %q}`, tokWriter), "", 403},
		{"empty", `{}`, "", 400},
		{"another origin", fmt.Sprintf(`{"token": %q}`, tokApprover), "http://evil.example", 403},
		{"no origin", fmt.Sprintf(`{"token": %q}`, tokApprover), "-", 403},
	} {
		r := e.console(consoleReq{method: "POST", path: "/ui/api/session", body: c.body, origin: c.origin})
		p := r.problem(t, c.status)
		if r.header.Get("Set-Cookie") != "" || p.Detail == "" {
			t.Errorf("%s: %d %+v, cookie %q", c.name, r.status, p, r.header.Get("Set-Cookie"))
		}
	}
	cookie, s := e.signIn(tokApprover)
	if s.Name != "alice" || !s.CanDecide || len(s.CSRF) != 64 {
		t.Errorf("alice's session: %+v", s)
	}
	var again httpapi.ConsoleSession
	e.console(consoleReq{method: "GET", path: "/ui/api/session", cookie: cookie}).json(t, &again)
	if again != s {
		t.Errorf("GET session %+v, signed in as %+v", again, s)
	}
	_, aud := e.signIn(tokAuditor)
	if aud.Name != "auditor" || aud.CanDecide || aud.CSRF == s.CSRF {
		t.Errorf("auditor's session: %+v", aud)
	}
	if r := e.console(consoleReq{method: "GET", path: "/ui/api/session"}); r.status != 401 {
		t.Errorf("no cookie: %d", r.status)
	}
	if r := e.console(consoleReq{method: "GET", path: "/ui/api/session", cookie: "bm90LWEtdG9rZW4"}); r.status != 401 {
		t.Errorf("a forged cookie: %d", r.status)
	}
	// The bearer header is not the console's: its routes take the cookie.
	if r := e.do(request{method: "GET", path: "/ui/api/approvals", token: tokApprover, invalid: true}); r.status != 401 {
		t.Errorf("a bearer token on the console's route: %d", r.status)
	}
	if r := e.console(consoleReq{method: "DELETE", path: "/ui/api/session", cookie: cookie}); r.status != 403 {
		t.Errorf("sign out without the CSRF token: %d", r.status)
	}
	r := e.console(consoleReq{method: "DELETE", path: "/ui/api/session", cookie: cookie, csrf: s.CSRF})
	if r.status != 204 || !strings.Contains(r.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Errorf("sign out: %d, Set-Cookie %q", r.status, r.header.Get("Set-Cookie"))
	}
}

// TestConsoleDecide: a decision needs the cookie, the console's origin,
// the session's CSRF token and approvals:write; decided_by is the token's
// name; a second decision is 409 naming who decided first.
func TestConsoleDecide(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	a := e.parkFor(e.queue, "csv-report", "r1", "agent", `{"refund_rate": 0.2}`, "id\n1\n")
	alice, as := e.signIn(tokApprover)
	auditor, aus := e.signIn(tokAuditor)
	accept := "/ui/api/approvals/" + a.ID + "/accept"
	for _, c := range []struct {
		name string
		rq   consoleReq
		want int
	}{
		{"no CSRF token", consoleReq{method: "POST", path: accept, cookie: alice, body: `{}`}, 403},
		{"another session's CSRF token", consoleReq{method: "POST", path: accept, cookie: alice, csrf: aus.CSRF, body: `{}`}, 403},
		{"another origin", consoleReq{method: "POST", path: accept, cookie: alice, csrf: as.CSRF, origin: "http://evil.example", body: `{}`}, 403},
		{"no origin", consoleReq{method: "POST", path: accept, cookie: alice, csrf: as.CSRF, origin: "-", body: `{}`}, 403},
		{"read-only token", consoleReq{method: "POST", path: accept, cookie: auditor, csrf: aus.CSRF, body: `{}`}, 403},
		{"no cookie", consoleReq{method: "POST", path: accept, csrf: as.CSRF, body: `{}`}, 401},
	} {
		if r := e.console(c.rq); r.status != c.want {
			t.Errorf("%s: %d, want %d: %s", c.name, r.status, c.want, r.body)
		}
	}
	if got, err := e.store.Get(context.Background(), a.ID); err != nil || got.State != approve.StatePending {
		t.Fatalf("after refused decisions: %v, %v", got, err)
	}
	r := e.console(consoleReq{method: "POST", path: accept, cookie: alice, csrf: as.CSRF, body: `{"comment": "numbers checked"}`})
	var v struct {
		State     string `json:"state"`
		DecidedBy string `json:"decided_by"`
		Comment   string `json:"comment"`
	}
	r.json(t, &v)
	if r.status != 200 || v.State != "accepted" || v.DecidedBy != "alice" || v.Comment != "numbers checked" {
		t.Errorf("accept: %d %+v", r.status, v)
	}
	r = e.console(consoleReq{method: "POST", path: "/ui/api/approvals/" + a.ID + "/reject", cookie: alice, csrf: as.CSRF, body: `{"comment": "no"}`})
	if p := r.problem(t, 409); p.DecidedBy != "alice" || p.State != "accepted" || !strings.Contains(p.Detail, "already accepted by alice") {
		t.Errorf("a second decision: %+v", p)
	}
	var hist struct {
		History []approve.Event `json:"history"`
	}
	e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + a.ID + "/history", cookie: auditor}).json(t, &hist)
	if n := len(hist.History); n < 2 || hist.History[n-1].By != "alice" {
		t.Errorf("history: %+v", hist.History)
	}
}

// TestConsoleInbox: pending approvals, newest first, in pages with a
// cursor, filtered by queue, action and principal; a queue-bound token
// sees its queues' only.
func TestConsoleInbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	var ids []string
	for i := range 120 {
		action, principal, queue := "csv-report", "agent", e.queue
		if i%3 == 0 {
			action, principal = "note", "other"
		}
		if i%10 == 0 {
			queue = "elsewhere"
		}
		ids = append(ids, e.parkFor(queue, action, fmt.Sprint(i), principal, `{}`, "a\n1\n").ID)
		time.Sleep(time.Millisecond) // created_at orders them
	}
	cookie, _ := e.signIn(tokApprover)
	page := func(cookie, query string) httpapi.InboxPage {
		t.Helper()
		r := e.console(consoleReq{method: "GET", path: "/ui/api/approvals?" + query, cookie: cookie})
		var p httpapi.InboxPage
		r.json(t, &p)
		if r.status != 200 {
			t.Fatalf("GET ?%s: %d %s", query, r.status, r.body)
		}
		return p
	}
	var got []string
	cursor, pages := "", 0
	for {
		p := page(cookie, "after="+cursor)
		pages++
		if p.Pending == nil || *p.Pending != 120 || len(p.Approvals) > 50 {
			t.Fatalf("page %d: pending %v, %d approvals", pages, p.Pending, len(p.Approvals))
		}
		for _, a := range p.Approvals {
			got = append(got, a.ID)
		}
		if cursor = p.Next; cursor == "" || pages > 5 {
			break
		}
	}
	if pages != 3 || len(got) != 120 || got[0] != ids[119] || got[119] != ids[0] {
		t.Errorf("%d pages, %d approvals, first %s last %s: want 3 pages, newest first", pages, len(got), got[0], got[len(got)-1])
	}
	p := page(cookie, "action=note&principal=other")
	if len(p.Approvals) != 40 || p.Next != "" {
		t.Errorf("action=note&principal=other: %d approvals, next %q; want 40", len(p.Approvals), p.Next)
	}
	for _, a := range p.Approvals {
		if a.Action != "note" || a.Principal != "other" {
			t.Errorf("filtered page holds %+v", a)
		}
	}
	if p := page(cookie, "queue=elsewhere"); len(p.Approvals) != 12 {
		t.Errorf("queue=elsewhere: %d approvals, want 12", len(p.Approvals))
	}
	bound, _ := e.signIn(tokElsewhere)
	p = page(bound, "")
	if len(p.Approvals) != 12 || p.Pending != nil {
		t.Errorf("a token bound to queue elsewhere sees %d approvals (pending %v), want its 12 and no count of the others", len(p.Approvals), p.Pending)
	}
	if r := e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + ids[1], cookie: bound}); r.status != 403 {
		t.Errorf("a bound token reads another queue's approval: %d", r.status)
	}
	if r := e.console(consoleReq{method: "GET", path: "/ui/api/approvals?after=x", cookie: cookie}); r.problem(t, 400).Field != "after" {
		t.Errorf("a bad cursor: %s", r.body)
	}
}

// TestConsoleApproval: an approval's page holds the values the policy
// looked at, its artifacts' previews, and the change since the last
// accepted output of the same action: result values and CSV rows.
func TestConsoleApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	check := record.Check{Rule: "refund-rate-watch", Pointer: "/refund_rate"}
	old := e.parkFor(e.queue, "csv-report", "r1", "agent", `{"rows": 3, "refund_rate": 0.0900, "old": 1}`, "id,amount\n1,10\n2,20\n3,30\n", check)
	if _, err := e.store.Accept(context.Background(), old.ID, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	e.parkFor(e.queue, "note", "r2", "agent", `{"refund_rate": 5}`, "id,amount\n9,9\n") // another action
	// The same action accepted later in another queue: another catalog's.
	other := e.parkFor("elsewhere", "csv-report", "r1", "agent", `{"refund_rate": 0.5}`, "id,amount\n7,7\n")
	if _, err := e.store.Accept(context.Background(), other.ID, "alice", "ok"); err != nil {
		t.Fatal(err)
	}
	a := e.parkFor(e.queue, "csv-report", "r3", "agent", `{"rows": 3, "refund_rate": 0.0917, "new": true}`, "id,amount\n1,10\n3,30\n4,40\n", check)
	cookie, _ := e.signIn(tokAuditor)
	var got httpapi.ConsoleApproval
	r := e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + a.ID, cookie: cookie})
	r.json(t, &got)
	if r.status != 200 || got.Approval.ID != a.ID {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	if len(got.Highlights) != 1 || got.Highlights[0].Pointer != "/refund_rate" || got.Highlights[0].Rule != "refund-rate-watch" || got.Highlights[0].Reason == "" {
		t.Errorf("highlights: %+v", got.Highlights)
	}
	if p := got.Previews; len(p) != 1 || p[0].Kind != console.KindTable || p[0].RowCount != 3 || len(p[0].Rows) != 3 || p[0].SHA256 != a.Artifacts[0].SHA256 {
		t.Errorf("previews: %+v", p)
	}
	d := got.Diff
	if d.Against == nil || d.Against.ID != old.ID || d.Against.DecidedBy != "alice" || d.Against.Queue != e.queue || d.Basis != "action csv-report in queue "+e.queue {
		t.Fatalf("diff against %+v (%s), want %s: %s", d.Against, d.Basis, old.ID, d.Note)
	}
	changes := map[string]string{}
	for _, k := range d.Keys {
		changes[k.Pointer] = k.Change + fmt.Sprintf(" %s→%s", k.Before, k.After)
	}
	want := map[string]string{"/refund_rate": "changed 0.0900→0.0917", "/old": "removed 1→", "/new": "added →true"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("result changes %v, want %v", changes, want)
	}
	if len(d.Artifacts) != 1 || d.Artifacts[0].RowsAdded != 1 || d.Artifacts[0].RowsRemoved != 1 ||
		fmt.Sprint(d.Artifacts[0].Added) != "[[4 40]]" || fmt.Sprint(d.Artifacts[0].Removed) != "[[2 20]]" {
		t.Errorf("CSV diff: %+v", d.Artifacts)
	}
	if got.Run.Note == "" {
		t.Errorf("no run record, and no note saying so: %+v", got.Run)
	}
	// A free-form spec's run id is its caller's: another principal's
	// accepted output of the same run id is no baseline.
	mine := e.parkFor(e.queue, "", "nightly", "agent", `{"n": 1}`, "a\n1\n")
	theirs := e.parkFor(e.queue, "", "nightly", "mallory", `{"n": 2}`, "a\n1\n")
	for _, id := range []string{mine.ID, theirs.ID} {
		if _, err := e.store.Accept(context.Background(), id, "alice", "ok"); err != nil {
			t.Fatal(err)
		}
	}
	next := e.parkFor(e.queue, "", "nightly", "agent", `{"n": 3}`, "a\n1\n")
	var ng httpapi.ConsoleApproval
	e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + next.ID, cookie: cookie}).json(t, &ng)
	if ng.Diff.Against == nil || ng.Diff.Against.ID != mine.ID || ng.Diff.Against.Principal != "agent" {
		t.Errorf("free-form baseline: %+v (%s), want %s, the same principal's", ng.Diff.Against, ng.Diff.Basis, mine.ID)
	}
	// A result deeper than a page's tree is shown as its text.
	deep := strings.Repeat(`{"a":`, console.MaxTreeDepth+1) + "1" + strings.Repeat("}", console.MaxTreeDepth+1)
	dp := e.parkFor(e.queue, "deep", "r5", "agent", deep, "a\n1\n")
	var dg struct {
		Approval   struct{ Result any }
		ResultNote string `json:"result_note"`
	}
	e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + dp.ID, cookie: cookie}).json(t, &dg)
	if dg.Approval.Result != deep || !strings.Contains(dg.ResultNote, "levels deep") {
		t.Errorf("a deep result: %T, note %q", dg.Approval.Result, dg.ResultNote)
	}
	// The first of an action has nothing to compare with, and says so.
	first := e.parkFor(e.queue, "fresh", "r4", "agent", `{}`, "a\n1\n")
	var fg httpapi.ConsoleApproval
	e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + first.ID, cookie: cookie}).json(t, &fg)
	if fg.Diff.Against != nil || !strings.Contains(fg.Diff.Note, "no earlier accepted output of action fresh in queue "+e.queue) {
		t.Errorf("first of its action: %+v", fg.Diff)
	}
}

// TestConsoleArtifact: an artifact is an attachment the console types by
// its bytes (an image) or as bytes, never as the run declared it.
func TestConsoleArtifact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	svg := `<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><script>alert(2)</script></svg>`
	png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
	files := map[string]string{"out/evil.svg": svg, "out/evil.html": "<script>alert(3)</script>", "out/p.png": png}
	a := &approve.Approval{ID: "ap-console-art", TaskID: "t-console-art", RunID: "r", State: approve.StatePending,
		Run: approve.RunSummary{Queue: e.queue}}
	for name, body := range files {
		sum := sha256.Sum256([]byte(body))
		ct := map[string]string{"out/evil.svg": "image/svg+xml", "out/evil.html": "text/html", "out/p.png": "image/png"}[name]
		a.Artifacts = append(a.Artifacts, record.Artifact{Name: name, Bytes: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), ContentType: ct})
	}
	data := map[string][]byte{}
	for k, v := range files {
		data[k] = []byte(v)
	}
	if _, _, err := e.store.Quiet().Park(context.Background(), a, data); err != nil {
		t.Fatal(err)
	}
	cookie, _ := e.signIn(tokAuditor)
	for name, ct := range map[string]string{"out/evil.svg": "application/octet-stream", "out/evil.html": "application/octet-stream", "out/p.png": "image/png"} {
		r := e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + a.ID + "/artifacts/" + name, cookie: cookie})
		if r.status != 200 || r.header.Get("Content-Type") != ct || !strings.HasPrefix(r.header.Get("Content-Disposition"), "attachment;") ||
			r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Content-Security-Policy") != console.CSP || string(r.body) != files[name] {
			t.Errorf("%s: %d, headers %v", name, r.status, r.header)
		}
	}
	var got httpapi.ConsoleApproval
	e.console(consoleReq{method: "GET", path: "/ui/api/approvals/" + a.ID, cookie: cookie}).json(t, &got)
	kinds := map[string]string{}
	for _, p := range got.Previews {
		kinds[p.Name] = p.Kind
	}
	if kinds["out/evil.svg"] != console.KindText || kinds["out/evil.html"] != console.KindText || kinds["out/p.png"] != console.KindImage {
		t.Errorf("preview kinds: %v", kinds)
	}
}

// TestConsoleEvents: the console's stream says when an approval is
// parked; a token bound to queues hears of its queues' only.
func TestConsoleEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, httpapi.Options{UI: true})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(token string) *bufio.Scanner {
		cookie, _ := e.signIn(token)
		req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/ui/api/events", nil)
		req.AddCookie(&http.Cookie{Name: "__Host-airlock-console", Value: cookie})
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("events: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		sc := bufio.NewScanner(res.Body)
		sc.Scan() // the stream's first comment: it follows from here
		return sc
	}
	next := func(sc *bufio.Scanner) httpapi.ApprovalChange {
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var c httpapi.ApprovalChange
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					t.Fatalf("event %s: %v", data, err)
				}
				return c
			}
		}
		t.Fatalf("no approval event: %v", sc.Err())
		return httpapi.ApprovalChange{}
	}
	all, bound := open(tokAuditor), open(tokElsewhere)
	mine := e.parkFor(e.queue, "csv-report", "r", "agent", `{}`, "a\n1\n")
	theirs := e.parkFor("elsewhere", "csv-report", "r", "agent", `{}`, "a\n1\n")
	for _, a := range []*approve.Approval{mine, theirs} {
		if err := e.events.Append(ctx, eventOf(a)); err != nil {
			t.Fatal(err)
		}
	}
	if c := next(all); c.ID != mine.ID || c.State != record.StateParked {
		t.Errorf("first event: %+v, want %s parked", c, mine.ID)
	}
	if c := next(bound); c.ID != theirs.ID {
		t.Errorf("a token bound to queue elsewhere heard of %+v first, want %s (its queue's)", c, theirs.ID)
	}
}

func eventOf(a *approve.Approval) events.Event {
	return events.Event{RunID: a.RunID, TaskID: a.TaskID, State: record.StateParked, ApprovalID: a.ID}
}
