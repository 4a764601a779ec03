package fetch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-run/airlock/internal/network/netguard"
)

// dirDest writes downloads under a temporary directory.
type dirDest struct{ dir string }

func (d dirDest) WriteStream(rel string, r io.Reader, max int64) (int64, error) {
	p := filepath.Join(d.dir, rel)
	f, err := os.Create(p)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, io.LimitReader(r, max+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > max {
		n, err = max, fmt.Errorf("%s: %w", rel, ErrTooLarge)
	}
	if err != nil {
		os.Remove(p)
		return n, err
	}
	return n, nil
}

func loopbackGuard(t *testing.T) *netguard.Guard {
	t.Helper()
	r, err := netguard.ParseRule("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return &netguard.Guard{OpenPublic: true, Rules: []netguard.Rule{r}, Timeout: 5 * time.Second}
}

func newFetcher(t *testing.T, timeout time.Duration) *Fetcher {
	t.Helper()
	f := New(loopbackGuard(t), timeout)
	t.Cleanup(f.client.CloseIdleConnections)
	return f
}

func testServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// fetchErr fetches and wants an *Error.
func fetchErr(t *testing.T, f *Fetcher, ws Dest, r Request) (Result, *Error) {
	t.Helper()
	res, err := f.Fetch(context.Background(), ws, r)
	var fe *Error
	if !errors.As(err, &fe) {
		t.Fatalf("Fetch(%s) = %v, want an *Error", r.URL, err)
	}
	if res.Error != err.Error() {
		t.Errorf("Result.Error = %q, want the error's text %q", res.Error, err.Error())
	}
	return res, fe
}

func TestFetch(t *testing.T) {
	body := strings.Repeat("input data\n", 1000)
	var gotAuth, gotUA string
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotUA = r.Header.Get("Authorization"), r.Header.Get("User-Agent")
		io.WriteString(w, body)
	})
	f := newFetcher(t, 0)
	dir := t.TempDir()
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte(body)))
	u := srv.URL + "/data.txt"
	res, err := f.Fetch(context.Background(), dirDest{dir}, Request{
		URL: u, Path: "in.txt", MaxBytes: 1 << 20, SHA256: sum,
		Headers: map[string]string{"Authorization": "Bearer abcdef"},
	})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	want := Result{URL: u, FinalURL: u, Path: "in.txt", Status: 200, Bytes: int64(len(body)), SHA256: sum}
	if diff := cmp.Diff(want, res, cmpopts.IgnoreFields(Result{}, "DurationMS")); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
	if res.DurationMS <= 0 {
		t.Errorf("DurationMS = %v, want > 0", res.DurationMS)
	}
	if gotAuth != "Bearer abcdef" || gotUA != "airlock-fetch/1" {
		t.Errorf("server got Authorization %q, User-Agent %q", gotAuth, gotUA)
	}
	b, err := os.ReadFile(filepath.Join(dir, "in.txt"))
	if err != nil || string(b) != body {
		t.Errorf("file: %d bytes, %v; want the body", len(b), err)
	}
}

func TestFetchSHA256Mismatch(t *testing.T) {
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	res, fe := fetchErr(t, newFetcher(t, 0), dirDest{t.TempDir()}, Request{
		URL: srv.URL, Path: "f", MaxBytes: 100, SHA256: strings.Repeat("0", 64),
	})
	if fe.Transient || !strings.Contains(fe.Error(), "sha256") {
		t.Errorf("error %q, transient %v; want a sha256 mismatch, not transient", fe, fe.Transient)
	}
	if want := fmt.Sprintf("%x", sha256.Sum256([]byte("hello"))); res.SHA256 != want {
		t.Errorf("Result.SHA256 = %s, want %s", res.SHA256, want)
	}
}

func TestFetchStatus(t *testing.T) {
	for _, tt := range []struct {
		status    int
		transient bool
	}{
		{http.StatusNotFound, false},
		{http.StatusForbidden, false},
		{http.StatusInternalServerError, true},
		{http.StatusServiceUnavailable, true},
		{http.StatusTooManyRequests, true},
	} {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			srv := testServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(tt.status) })
			res, fe := fetchErr(t, newFetcher(t, 0), dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
			if fe.Transient != tt.transient {
				t.Errorf("Transient = %v, want %v (%v)", fe.Transient, tt.transient, fe)
			}
			if res.Status != tt.status {
				t.Errorf("Result.Status = %d, want %d", res.Status, tt.status)
			}
		})
	}
}

func TestFetchContentLengthAboveMax(t *testing.T) {
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5000")
		io.WriteString(w, strings.Repeat("x", 5000))
	})
	dir := t.TempDir()
	_, fe := fetchErr(t, newFetcher(t, 0), dirDest{dir}, Request{URL: srv.URL, Path: "f", MaxBytes: 1000})
	if fe.Transient || !strings.Contains(fe.Error(), "5000") {
		t.Errorf("error %q, transient %v; want the announced size, not transient", fe, fe.Transient)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); !os.IsNotExist(err) {
		t.Errorf("file written: %v", err)
	}
}

func TestFetchChunkedAboveMax(t *testing.T) {
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 16; i++ {
			if _, err := io.WriteString(w, strings.Repeat("y", 4096)); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	})
	dir := t.TempDir()
	res, fe := fetchErr(t, newFetcher(t, 0), dirDest{dir}, Request{URL: srv.URL, Path: "f", MaxBytes: 1000})
	if fe.Transient || !strings.Contains(fe.Error(), "max_bytes 1000") {
		t.Errorf("error %q, transient %v; want too large, not transient", fe, fe.Transient)
	}
	if res.Bytes > 1000 {
		t.Errorf("Result.Bytes = %d, above max", res.Bytes)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); !os.IsNotExist(err) {
		t.Errorf("file left behind: %v", err)
	}
}

func TestFetchRedirect(t *testing.T) {
	// /r/N redirects N times before serving.
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n > 0 {
			http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusFound)
			return
		}
		io.WriteString(w, "end")
	})
	f := newFetcher(t, 0)
	res, err := f.Fetch(context.Background(), dirDest{t.TempDir()}, Request{URL: srv.URL + "/r/" + strconv.Itoa(MaxRedirects), Path: "f", MaxBytes: 100})
	if err != nil {
		t.Fatalf("%d redirects: %v", MaxRedirects, err)
	}
	if res.FinalURL != srv.URL+"/r/0" || res.URL != srv.URL+"/r/5" {
		t.Errorf("URL %s, FinalURL %s", res.URL, res.FinalURL)
	}
	_, fe := fetchErr(t, f, dirDest{t.TempDir()}, Request{URL: srv.URL + "/r/" + strconv.Itoa(MaxRedirects+1), Path: "f", MaxBytes: 100})
	if fe.Transient || !strings.Contains(fe.Error(), "redirects") {
		t.Errorf("error %q, transient %v; want too many redirects, not transient", fe, fe.Transient)
	}
}

func TestFetchRedirectRefused(t *testing.T) {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(testServer(t, func(http.ResponseWriter, *http.Request) {}).URL, "http://"))
	for _, to := range []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://[::1]:" + port + "/",
		"http://127.0.0.2:" + port + "/",
		"http://10.0.0.1/",
		"http://2130706433:" + port + "/",
		// IPv6 spellings of a loopback or private IPv4 address (issue 31):
		// refused before dialing, not a "no route" after.
		"http://[::127.0.0.1]:" + port + "/",
		"http://[::ffff:0:127.0.0.1]:" + port + "/",
		"http://[2002:7f00:1::]:" + port + "/",
		"http://[::10.0.0.1]/",
	} {
		t.Run(to, func(t *testing.T) {
			srv := testServer(t, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) })
			_, fe := fetchErr(t, newFetcher(t, 0), dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
			if !errors.Is(fe, netguard.ErrRefused) || fe.Transient {
				t.Errorf("error %q, transient %v; want ErrRefused, not transient", fe, fe.Transient)
			}
		})
	}
}

func TestFetchRedirectScheme(t *testing.T) {
	for _, to := range []string{"ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://127.0.0.1/"} {
		t.Run(to, func(t *testing.T) {
			srv := testServer(t, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, to, http.StatusFound) })
			_, fe := fetchErr(t, newFetcher(t, 0), dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
			if fe.Transient || !strings.Contains(fe.Error(), "only http and https") {
				t.Errorf("error %q, transient %v; want a refused scheme, not transient", fe, fe.Transient)
			}
		})
	}
}

// Secret-bearing headers (a spec may put ${secret:...} in any header)
// must not follow a redirect to another host.
func TestFetchRedirectKeepsSecretHeadersOnHost(t *testing.T) {
	if addrs, err := net.DefaultResolver.LookupHost(context.Background(), "localhost"); err != nil || !slices.Contains(addrs, "127.0.0.1") {
		t.Skipf("localhost is not 127.0.0.1 here: %v %v", addrs, err)
	}
	var mu sync.Mutex
	got := http.Header{}
	other := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(other.URL, "http://"))
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://localhost:"+port+"/", http.StatusFound)
	})
	f := newFetcher(t, 0)
	_, err := f.Fetch(context.Background(), dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100,
		Headers: map[string]string{"Authorization": "Bearer SECRET-A", "X-Api-Key": "SECRET-B", "Private-Token": "SECRET-C"}})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Get("User-Agent") == "" {
		t.Fatal("the other host was not reached")
	}
	for _, h := range []string{"Authorization", "X-Api-Key", "Private-Token"} {
		if v := got.Get(h); v != "" {
			t.Errorf("another host (localhost) received %s: %s", h, v)
		}
	}
}

func TestFetchRefusedWithoutRule(t *testing.T) {
	hit := false
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) { hit = true })
	f := New(&netguard.Guard{OpenPublic: true}, 0)
	defer f.client.CloseIdleConnections()
	_, fe := fetchErr(t, f, dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
	if !errors.Is(fe, netguard.ErrRefused) || fe.Transient {
		t.Errorf("error %q, transient %v; want ErrRefused, not transient", fe, fe.Transient)
	}
	if hit {
		t.Error("the server was reached")
	}
}

// TestFetchRefusedNamesFlag: a download the guard refuses says which
// worker flag opens it, and that entry does.
func TestFetchRefusedNamesFlag(t *testing.T) {
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	f := New(&netguard.Guard{OpenPublic: true, Flag: "-fetch-allow"}, 0)
	defer f.client.CloseIdleConnections()
	res, fe := fetchErr(t, f, dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
	if !errors.Is(fe, netguard.ErrRefused) || !strings.Contains(fe.Error(), "open it on the worker with -fetch-allow 127.0.0.1") ||
		!strings.Contains(res.Error, "-fetch-allow 127.0.0.1") {
		t.Fatalf("error %q (record: %q), want ErrRefused naming -fetch-allow 127.0.0.1", fe, res.Error)
	}
	r, err := netguard.ParseRule("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	f = New(&netguard.Guard{OpenPublic: true, Flag: "-fetch-allow", Rules: []netguard.Rule{r}}, 0)
	defer f.client.CloseIdleConnections()
	if res, err := f.Fetch(context.Background(), dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100}); err != nil || res.Bytes != 2 {
		t.Errorf("with -fetch-allow 127.0.0.1: %v, %d bytes", err, res.Bytes)
	}
}

func TestFetchTimeout(t *testing.T) {
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	f := newFetcher(t, 200*time.Millisecond)
	start := time.Now()
	_, fe := fetchErr(t, f, dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
	if !fe.Transient || !strings.Contains(fe.Error(), "timeout") {
		t.Errorf("error %q, transient %v; want a transient timeout", fe, fe.Transient)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s, want about 200ms", d)
	}

	// The caller's own deadline: not transient.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := newFetcher(t, time.Minute).Fetch(ctx, dirDest{t.TempDir()}, Request{URL: srv.URL, Path: "f", MaxBytes: 100})
	var e *Error
	if !errors.As(err, &e) || e.Transient || !strings.Contains(e.Error(), "deadline") {
		t.Errorf("caller's deadline: %v; want a deadline error, not transient", err)
	}
}

func TestFetchBadURL(t *testing.T) {
	_, fe := fetchErr(t, newFetcher(t, 0), dirDest{t.TempDir()}, Request{URL: "http://[::1", Path: "f", MaxBytes: 100})
	if fe.Transient {
		t.Errorf("%v: transient", fe)
	}
}

func TestFetchNeverShowsSecretQuery(t *testing.T) {
	const secret = "SECRETVALUE"
	srv := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/404":
			w.WriteHeader(http.StatusNotFound)
		case "/refused":
			http.Redirect(w, r, "http://169.254.169.254/?token="+secret, http.StatusFound)
		case "/ftp":
			http.Redirect(w, r, "ftp://127.0.0.1/?token="+secret, http.StatusFound)
		case "/hop":
			http.Redirect(w, r, "/404?token="+secret, http.StatusFound)
		}
	})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	f := newFetcher(t, 0)
	for _, u := range []string{
		srv.URL + "/404?token=" + secret + "&x=1",
		srv.URL + "/refused?token=" + secret,
		srv.URL + "/ftp?token=" + secret,
		srv.URL + "/hop?token=" + secret,
		"http://user:" + secret + "@127.0.0.1:" + port + "/404",
		"http://127.0.0.2:" + port + "/?api_key=" + secret,
	} {
		res, fe := fetchErr(t, f, dirDest{t.TempDir()}, Request{URL: u, Path: "f", MaxBytes: 100})
		for what, s := range map[string]string{"URL": res.URL, "FinalURL": res.FinalURL, "Error": res.Error, "error": fe.Error()} {
			if strings.Contains(s, secret) {
				t.Errorf("%s: %s shows the secret: %s", u, what, s)
			}
		}
	}
}

func TestRedact(t *testing.T) {
	tests := map[string]string{
		"https://user:pw@h/p?token=abc&x=1":         "https://REDACTED@h/p?token=REDACTED&x=1",
		"https://h/p?x=1":                           "https://h/p?x=1",
		"https://h/p?Access_Token=abc&API_KEY=def":  "https://h/p?API_KEY=REDACTED&Access_Token=REDACTED",
		"https://h/p?X-Amz-Signature=abc&y=2":       "https://h/p?X-Amz-Signature=REDACTED&y=2",
		"https://h/p?password=a&session=b&secret=c": "https://h/p?password=REDACTED&secret=REDACTED&session=REDACTED",
		"https://user@h/":                           "https://REDACTED@h/",
		"http://h:8080/a/b":                         "http://h:8080/a/b",
		"http://[::1":                               "(unparsable URL)",
		"https://h/p?token=abc&token=def&sig=ghi":   "https://h/p?sig=REDACTED&token=REDACTED",
		"https://h/p?credential=a%2Fb&keep=k%2Fv":   "https://h/p?credential=REDACTED&keep=k%2Fv",
		"https://h/p?auth=abc#frag":                 "https://h/p?auth=REDACTED#frag",
	}
	got := map[string]string{}
	for in := range tests {
		got[in] = Redact(in)
	}
	if diff := cmp.Diff(tests, got); diff != "" {
		t.Errorf("Redact (-want +got):\n%s", diff)
	}
}

// A query Go's parser will not split (a ';' separator, a bad escape) keeps
// its secret values hidden all the same.
func TestRedactUnparsableQuery(t *testing.T) {
	for _, u := range []string{
		"https://h/p?token=SECRETVALUE;x=1",
		"https://h/p?x=1&token=SECRETVALUE%zz",
	} {
		if got := Redact(u); strings.Contains(got, "SECRETVALUE") {
			t.Errorf("Redact(%q) = %q, shows the secret", u, got)
		}
	}
	if u, _ := url.Parse("https://h/p?token=SECRETVALUE;x=1"); u == nil {
		t.Fatal("url.Parse rejects the URL itself")
	}
}

func TestErrorUnwrap(t *testing.T) {
	cause := errors.New("boom")
	e := &Error{Cause: cause}
	if e.Error() != "boom" || !errors.Is(e, cause) {
		t.Errorf("Error %q does not wrap its cause", e)
	}
}
