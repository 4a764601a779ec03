package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// EnvHeaders holds the headers of every export request (W3C baggage
// syntax: key=value pairs, comma-separated, values URL-encoded).
const EnvHeaders = "OTEL_EXPORTER_OTLP_HEADERS"

// exportTimeout bounds one export request.
const exportTimeout = 10 * time.Second

// exporter sends spans to an OTLP/HTTP endpoint as protobuf
// (ExportTraceServiceRequest, POST <url>), built from the OTLP protos'
// message packages: OpenTelemetry's own exporter links the collector
// package's gRPC services, about 150 packages the worker would compile and
// carry for one POST.
type exporter struct {
	url     string
	headers http.Header
	client  *http.Client
	mu      sync.Mutex
	closed  bool
}

// newExporter returns an exporter posting to the traces URL: the traces
// endpoint as given, or the base endpoint with /v1/traces.
func newExporter(traces, base string) (*exporter, error) {
	u := traces
	if u == "" {
		u = strings.TrimSuffix(base, "/") + "/v1/traces"
	}
	h := http.Header{}
	if v := os.Getenv(EnvHeaders); v != "" {
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(kv, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("%s: %q is not key=value", EnvHeaders, kv)
			}
			dec, err := url.PathUnescape(strings.TrimSpace(val))
			if err != nil {
				return nil, fmt.Errorf("%s: value of %q: %w", EnvHeaders, k, err)
			}
			h.Set(k, dec)
		}
	}
	h.Set("Content-Type", "application/x-protobuf")
	return &exporter{url: u, headers: h, client: &http.Client{Timeout: exportTimeout}}, nil
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed || len(spans) == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(encodeRequest(spans)))
	if err != nil {
		return err
	}
	req.Header = e.headers.Clone()
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("OTLP export to %s: %w", e.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("OTLP export to %s: %s: %s", e.url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Shutdown implements sdktrace.SpanExporter.
func (e *exporter) Shutdown(context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return nil
}

// encodeRequest encodes spans as an ExportTraceServiceRequest
// (opentelemetry/proto/collector/trace/v1): one ResourceSpans per
// resource, one ScopeSpans per instrumentation scope, in order. The
// request's only field is TracesData's (resource_spans, 1): it is
// marshalled as that, whose package, unlike the collector's, links no
// gRPC.
func encodeRequest(spans []sdktrace.ReadOnlySpan) []byte {
	var data tracepb.TracesData
	for i := 0; i < len(spans); {
		res := spans[i].Resource()
		rs := &tracepb.ResourceSpans{Resource: &resourcepb.Resource{}}
		if res != nil {
			rs.Resource.Attributes = keyValues(res.Attributes())
		}
		for i < len(spans) && spans[i].Resource() == res {
			sc := spans[i].InstrumentationScope()
			ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: sc.Name, Version: sc.Version}}
			for i < len(spans) && spans[i].Resource() == res &&
				spans[i].InstrumentationScope().Name == sc.Name && spans[i].InstrumentationScope().Version == sc.Version {
				ss.Spans = append(ss.Spans, span(spans[i]))
				i++
			}
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		data.ResourceSpans = append(data.ResourceSpans, rs)
	}
	b, _ := proto.Marshal(&data) // messages built here always marshal
	return b
}

// span is s as an OTLP Span (opentelemetry/proto/trace/v1).
func span(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	out := &tracepb.Span{
		TraceId: tid[:], SpanId: sid[:], TraceState: sc.TraceState().String(),
		Name: s.Name(), Kind: tracepb.Span_SpanKind(kind(s.SpanKind())),
		StartTimeUnixNano: uint64(s.StartTime().UnixNano()), EndTimeUnixNano: uint64(s.EndTime().UnixNano()),
		Attributes: keyValues(s.Attributes()),
	}
	if parent.SpanID().IsValid() {
		psid := parent.SpanID()
		out.ParentSpanId = psid[:]
	}
	for _, ev := range s.Events() {
		out.Events = append(out.Events, &tracepb.Span_Event{TimeUnixNano: uint64(ev.Time.UnixNano()), Name: ev.Name, Attributes: keyValues(ev.Attributes)})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		out.Links = append(out.Links, &tracepb.Span_Link{TraceId: ltid[:], SpanId: lsid[:], Attributes: keyValues(l.Attributes)})
	}
	// codes.Code: Unset 0, Error 1, Ok 2; OTLP's StatusCode: Unset 0,
	// Ok 1, Error 2.
	st := s.Status()
	code := map[uint32]tracepb.Status_StatusCode{1: tracepb.Status_STATUS_CODE_ERROR, 2: tracepb.Status_STATUS_CODE_OK}[uint32(st.Code)]
	if code != tracepb.Status_STATUS_CODE_UNSET || st.Description != "" {
		out.Status = &tracepb.Status{Code: code, Message: st.Description}
	}
	return out
}

// kind maps trace.SpanKind to OTLP's SpanKind: the same numbers, 0 being
// unspecified.
func kind(k trace.SpanKind) int32 {
	if k < trace.SpanKindUnspecified || k > trace.SpanKindConsumer {
		return 0
	}
	return int32(k)
}

// keyValues are kvs as OTLP KeyValues (opentelemetry/proto/common/v1).
func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

// anyValue is v as an AnyValue: a string, bool, int, double, or an array
// of them; any other kind as its text.
func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRINGSLICE:
		return array(v.AsStringSlice(), attribute.StringValue)
	case attribute.BOOLSLICE:
		return array(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		return array(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		return array(v.AsFloat64Slice(), attribute.Float64Value)
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.Emit()}}
}

// array is xs as an AnyValue array, each element made a Value by value.
func array[T any](xs []T, value func(T) attribute.Value) *commonpb.AnyValue {
	arr := &commonpb.ArrayValue{}
	for _, x := range xs {
		arr.Values = append(arr.Values, anyValue(value(x)))
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: arr}}
}
