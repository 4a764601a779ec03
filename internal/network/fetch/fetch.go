// Package fetch downloads a run's inputs, by the worker and not by its
// steps: each through the address guard (internal/network/netguard), streamed
// into the workspace under a size cap, hashed on the way, with a bounded
// number of redirects, each of them checked again.
package fetch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/airlock-run/airlock/record"

	"github.com/airlock-run/airlock/internal/network/netguard"
)

// MaxRedirects bounds the redirects of one download.
const MaxRedirects = 5

// Request is one download.
type Request struct {
	URL      string
	Path     string // where in the workspace
	MaxBytes int64
	SHA256   string            // hex; "" for none
	Headers  map[string]string // secrets already expanded
}

// Result is what a download did, for the run record.
type Result = record.Input

// Error is a failed download. Transient ones (a 5xx or 429 status, a
// broken or timed-out connection) may succeed on a retry; the others
// (a refused address, another 4xx, too large, a digest mismatch, a bad
// redirect) will not.
type Error struct {
	Cause     error
	Transient bool
}

func (e *Error) Error() string { return e.Cause.Error() }
func (e *Error) Unwrap() error { return e.Cause }

// Fetcher downloads inputs.
type Fetcher struct {
	Guard *netguard.Guard
	// Timeout bounds one download, within the caller's context; default 5m.
	Timeout time.Duration
	client  *http.Client
}

// New returns a Fetcher dialing through g.
func New(g *netguard.Guard, timeout time.Duration) *Fetcher {
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	tr := &http.Transport{
		Proxy:                 nil, // never the worker's environment's proxy
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		// A server's response head (status line included, which errors
		// quote) is bounded while it is read, as Go's http.Server bounds
		// requests.
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           16,
		IdleConnTimeout:        30 * time.Second,
	}
	f := &Fetcher{Guard: g, Timeout: timeout}
	f.client = &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return fmt.Errorf("more than %d redirects", MaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("redirect to %s: only http and https", Redact(req.URL.String()))
			}
			// The new host is checked when it is dialed. Headers the spec
			// set (any of them may carry a secret, not only the
			// Authorization and Cookie that net/http drops) go to the
			// first host:port only.
			if !strings.EqualFold(req.URL.Host, via[0].URL.Host) {
				for k := range via[0].Header {
					if k != "User-Agent" {
						req.Header.Del(k)
					}
				}
			}
			return nil
		},
	}
	return f
}

// Dest is where downloads are written: a workspace (tmpfs.Workspace).
type Dest interface {
	// WriteStream creates rel and copies r into it, at most max bytes
	// (ErrTooLarge past it), removing the file on error.
	WriteStream(rel string, r io.Reader, max int64) (int64, error)
}

// ErrTooLarge is what a Dest's WriteStream returns past max (it may wrap
// it); tmpfs.ErrStreamTooLarge is one.
var ErrTooLarge = errors.New("more bytes than allowed")

// Fetch downloads r into ws. The error, when not nil, is an *Error.
func (f *Fetcher) Fetch(ctx context.Context, ws Dest, r Request) (Result, error) {
	start := time.Now()
	res := Result{URL: Redact(r.URL), Path: r.Path}
	var done func(err error, transient bool) (Result, error)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, f.Timeout)
	defer cancel()
	done = func(err error, transient bool) (Result, error) {
		res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		if err == nil {
			return res, nil
		}
		switch {
		case errors.Is(parent.Err(), context.DeadlineExceeded):
			// The task's own deadline: another attempt would have the same.
			err, transient = fmt.Errorf("timeout: the task's deadline passed after %s of download", time.Since(start).Round(time.Millisecond)), false
		case errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil:
			err, transient = fmt.Errorf("timeout: not downloaded within %s (the worker's -fetch-timeout)", f.Timeout), true
		}
		res.Error = err.Error()
		return res, &Error{Cause: err, Transient: transient}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL, nil)
	if err != nil {
		return done(fmt.Errorf("url: %v", err), false)
	}
	req.Header.Set("User-Agent", "airlock-fetch/1")
	for k, v := range r.Headers {
		req.Header.Set(k, v)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return done(cause(err), transient(err))
	}
	defer resp.Body.Close()
	res.Status, res.FinalURL = resp.StatusCode, Redact(resp.Request.URL.String())
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return done(fmt.Errorf("status %s", clip(resp.Status, 256)), resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests)
	}
	if resp.ContentLength > r.MaxBytes {
		return done(fmt.Errorf("%d bytes announced, above max_bytes %d", resp.ContentLength, r.MaxBytes), false)
	}
	h := sha256.New()
	// Hashed while the next bytes arrive and the previous are written.
	pipe := newHashPipe(resp.Body, h)
	defer pipe.Close()
	n, err := ws.WriteStream(r.Path, pipe, r.MaxBytes)
	res.Bytes = n
	switch {
	case errors.Is(err, ErrTooLarge):
		return done(fmt.Errorf("more than max_bytes %d", r.MaxBytes), false)
	case errors.Is(err, syscall.ENOSPC):
		return done(fmt.Errorf("the workspace quota is full after %d bytes", n), false)
	case err != nil:
		return done(cause(err), transient(err))
	}
	res.SHA256 = fmt.Sprintf("%x", h.Sum(nil))
	if r.SHA256 != "" && r.SHA256 != res.SHA256 {
		return done(fmt.Errorf("sha256 %s, want %s", res.SHA256, r.SHA256), false)
	}
	return done(nil, false)
}

// cause unwraps net/http's *url.Error, whose text repeats the URL (and
// with it anything secret in it).
func cause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// transient reports whether a failed request may succeed when tried again:
// not when the guard refused it or a redirect was bad.
func transient(err error) bool {
	if errors.Is(err, netguard.ErrRefused) {
		return false
	}
	var ue *url.Error
	if errors.As(err, &ue) && strings.Contains(ue.Err.Error(), "redirect") {
		return false
	}
	return true
}

// secretParams are query parameters whose values Redact hides.
var secretParams = []string{"token", "key", "secret", "password", "passwd", "pwd", "sig", "signature", "auth", "credential", "session"}

// Redact returns u without its credentials and with the values of
// secret-looking query parameters replaced.
func Redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if p.User != nil {
		p.User = url.User("REDACTED")
	}
	q, err := url.ParseQuery(p.RawQuery)
	if err != nil {
		// A query net/url cannot read (a ';', a bad escape) may still
		// hold a secret a server reads: none of it is shown.
		p.RawQuery = "REDACTED"
		return p.String()
	}
	changed := false
	for k := range q {
		lk := strings.ToLower(k)
		for _, s := range secretParams {
			if strings.Contains(lk, s) {
				q.Set(k, "REDACTED")
				changed = true
			}
		}
	}
	if changed {
		p.RawQuery = q.Encode()
	}
	return p.String()
}

// clip cuts s to at most n bytes, at a character boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
