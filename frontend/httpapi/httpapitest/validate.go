// Package httpapitest checks real requests and responses of the HTTP API
// against its OpenAPI document (httpapi.OpenAPI), with kin-openapi's
// openapi3filter, so that the document cannot drift from the server: a
// test sends its requests through Transport (or a reverse proxy built with
// Proxy), and every request and response that does not match the
// document fails the test.
package httpapitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/airlock-run/airlock/frontend/httpapi"
)

func init() {
	// Event streams are validated as text (their status and headers);
	// openapi3filter has no decoder for them.
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

var (
	loadOnce sync.Once
	doc      *openapi3.T
	router   routers.Router
	loadErr  error
)

// Document loads and validates httpapi.OpenAPI (once), and returns it.
func Document() (*openapi3.T, error) {
	loadOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, loadErr = loader.LoadFromData(httpapi.OpenAPI)
		if loadErr != nil {
			loadErr = fmt.Errorf("openapi.json: %w", loadErr)
			return
		}
		if loadErr = doc.Validate(context.Background()); loadErr != nil {
			loadErr = fmt.Errorf("openapi.json is not a valid OpenAPI document: %w", loadErr)
			return
		}
		// Match any host: the document's one server is "/".
		routed := *doc
		routed.Servers = nil
		router, loadErr = legacy.NewRouter(&routed)
	})
	return doc, loadErr
}

type invalidKey struct{}

// Invalid marks a request the test knows to break the document (no token,
// a body above the cap, a path it does not hold): it is not validated, but
// its response still is.
func Invalid(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), invalidKey{}, true))
}

// Transport returns a RoundTripper that validates every request (unless
// marked Invalid) and every response against the document, failing t, and
// sends them through base (http.DefaultTransport when nil).
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if _, err := Document(); err != nil {
		t.Fatal(err)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{t: t, base: base}
}

type transport struct {
	t    testing.TB
	base http.RoundTripper
}

// authenticate accepts a bearer header of any value: which tokens are
// known is the server's business, not the document's.
func authenticate(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	if tok, ok := strings.CutPrefix(h, "Bearer "); !ok || strings.TrimSpace(tok) == "" {
		return fmt.Errorf("no bearer token")
	}
	return nil
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	what := req.Method + " " + req.URL.RequestURI()
	invalid, _ := req.Context().Value(invalidKey{}).(bool)
	route, params, rerr := findRoute(req)
	var in *openapi3filter.RequestValidationInput
	if rerr != nil {
		if !invalid {
			tr.t.Errorf("openapi: %s: no route in openapi.json: %v", what, rerr)
		}
	} else {
		check := req.Clone(req.Context())
		check.Body = io.NopCloser(bytes.NewReader(body))
		in = &openapi3filter.RequestValidationInput{
			Request: check, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: authenticate, MultiError: true},
		}
		if !invalid {
			if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
				tr.t.Errorf("openapi: request %s does not match openapi.json: %v", what, err)
			}
		}
	}
	resp, err := tr.base.RoundTrip(req)
	if err != nil || in == nil {
		return resp, err
	}
	streaming := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var rb []byte
	if !streaming {
		rb, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(rb))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true, AuthenticationFunc: authenticate},
	}
	out.SetBodyBytes(rb)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		tr.t.Errorf("openapi: response %d to %s does not match openapi.json: %v\nbody: %.2000s", resp.StatusCode, what, err, rb)
	}
	return resp, nil
}

// findRoute finds the document's operation of req; an escaped path
// (out%2Fclean.csv, one segment) is matched as sent.
func findRoute(req *http.Request) (*routers.Route, map[string]string, error) {
	r := req
	if req.URL.RawPath != "" {
		u := *req.URL
		u.Path = req.URL.RawPath
		r = req.Clone(req.Context())
		r.URL = &u
	}
	route, params, err := router.FindRoute(r)
	if err != nil {
		return nil, nil, err
	}
	for k, v := range params {
		if un, err := url.PathUnescape(v); err == nil {
			params[k] = un
		}
	}
	return route, params, nil
}

// Proxy returns a reverse proxy to target whose requests and responses are
// validated as Transport does: for clients the test does not control (a
// Python or Node program), whose every request is then checked.
func Proxy(t testing.TB, target *url.URL) http.Handler {
	p := httputil.NewSingleHostReverseProxy(target)
	p.Transport = Transport(t, nil)
	p.FlushInterval = -1 // event streams pass at once
	return p
}
