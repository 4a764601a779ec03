// Package otlptest is a real OTLP/HTTP trace endpoint for tests: an HTTP
// server on a loopback port that takes POST /v1/traces, decodes each
// body as OpenTelemetry's ExportTraceServiceRequest (protobuf, or JSON;
// gzip when the request says so), answers as a collector does, and keeps
// the spans for the test to look at.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxBody bounds one export request's body, as decoded.
const maxBody = 16 << 20

// Span is one span the endpoint received, with its resource's service
// name; ids in hex ("" for no parent).
type Span struct {
	Service string
	Name    string
	TraceID string
	SpanID  string
	Parent  string
	Kind    tracepb.Span_SpanKind
	Attrs   map[string]string // every attribute, as text
	Links   []string          // the linked spans' ids
	Error   bool              // status error
	Start   time.Time
	End     time.Time
}

// Endpoint is a running OTLP/HTTP endpoint.
type Endpoint struct {
	// URL is the base URL: OTEL_EXPORTER_OTLP_ENDPOINT's value.
	URL  string
	srv  *httptest.Server
	mu   sync.Mutex
	got  []Span
	errs []error
}

// Start starts an endpoint, closed when the test ends.
func Start(t testing.TB) *Endpoint {
	t.Helper()
	e := &Endpoint{}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	e.URL = e.srv.URL
	t.Cleanup(func() {
		e.srv.Close()
		for _, err := range e.Errors() {
			t.Errorf("OTLP endpoint: %v", err)
		}
	})
	return e
}

func (e *Endpoint) fail(w http.ResponseWriter, status int, err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
	http.Error(w, err.Error(), status)
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
		e.fail(w, http.StatusNotFound, fmt.Errorf("%s %s: want POST /v1/traces", r.Method, r.URL.Path))
		return
	}
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			e.fail(w, http.StatusBadRequest, err)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	if err == nil && len(b) > maxBody {
		err = fmt.Errorf("body above %d bytes", maxBody)
	}
	if err != nil {
		e.fail(w, http.StatusBadRequest, err)
		return
	}
	// An ExportTraceServiceRequest: its only field is TracesData's
	// (resource_spans, 1), so it decodes as that, without the collector
	// package, which links gRPC.
	var req tracepb.TracesData
	ct := r.Header.Get("Content-Type")
	switch ct {
	case "application/x-protobuf":
		err = proto.Unmarshal(b, &req)
	case "application/json":
		err = protojson.Unmarshal(b, &req)
	default:
		err = fmt.Errorf("Content-Type %q: want application/x-protobuf or application/json", ct)
	}
	if err != nil {
		e.fail(w, http.StatusBadRequest, fmt.Errorf("decoding ExportTraceServiceRequest: %w", err))
		return
	}
	e.keep(&req)
	// An empty ExportTraceServiceResponse: no bytes.
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (e *Endpoint) keep(req *tracepb.TracesData) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := text(attr(rs.GetResource().GetAttributes(), "service.name"))
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), Parent: hex.EncodeToString(s.GetParentSpanId()),
					Kind: s.GetKind(), Attrs: map[string]string{}, Error: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano()))}
				for _, kv := range s.GetAttributes() {
					sp.Attrs[kv.GetKey()] = text(kv.GetValue())
				}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hex.EncodeToString(l.GetSpanId()))
				}
				e.got = append(e.got, sp)
			}
		}
	}
}

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

// text is an attribute's value as text.
func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonpb.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case nil:
		return ""
	}
	return v.String()
}

// Spans returns the spans received so far.
func (e *Endpoint) Spans() []Span {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// Errors returns the requests the endpoint refused.
func (e *Endpoint) Errors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

// Await waits up to d for spans that satisfy done, and returns the spans
// received by then.
func (e *Endpoint) Await(d time.Duration, done func([]Span) bool) []Span {
	deadline := time.Now().Add(d)
	for {
		s := e.Spans()
		if done(s) || time.Now().After(deadline) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
}
