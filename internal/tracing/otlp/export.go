package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// EnvHeaders holds the headers of every export request (W3C baggage
// syntax: key=value pairs, comma-separated, values URL-encoded).
const EnvHeaders = "OTEL_EXPORTER_OTLP_HEADERS"

// exportTimeout bounds one export request.
const exportTimeout = 10 * time.Second

// exporter sends spans to an OTLP/HTTP endpoint as protobuf
// (ExportTraceServiceRequest, POST <url>), encoded here with protowire:
// OpenTelemetry's own exporter links the OTLP protos' gRPC services, about
// 150 packages the worker would compile and carry for one POST.
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
// resource, one ScopeSpans per instrumentation scope, in order.
func encodeRequest(spans []sdktrace.ReadOnlySpan) []byte {
	type scopeKey struct{ name, version string }
	var out []byte
	for i := 0; i < len(spans); {
		res := spans[i].Resource()
		j := i
		for j < len(spans) && spans[j].Resource() == res {
			j++
		}
		var rs []byte
		var resMsg []byte
		if res != nil {
			for _, kv := range res.Attributes() {
				resMsg = appendBytes(resMsg, 1, appendKeyValue(nil, kv))
			}
		}
		rs = appendBytes(rs, 1, resMsg)
		for k := i; k < j; {
			sc := spans[k].InstrumentationScope()
			key := scopeKey{sc.Name, sc.Version}
			var ss []byte
			scope := protowire.AppendTag(nil, 1, protowire.BytesType)
			scope = protowire.AppendString(scope, key.name)
			if key.version != "" {
				scope = protowire.AppendTag(scope, 2, protowire.BytesType)
				scope = protowire.AppendString(scope, key.version)
			}
			ss = appendBytes(ss, 1, scope)
			for k < j {
				s := spans[k].InstrumentationScope()
				if (scopeKey{s.Name, s.Version}) != key {
					break
				}
				ss = appendBytes(ss, 2, encodeSpan(spans[k]))
				k++
			}
			rs = appendBytes(rs, 2, ss)
		}
		out = appendBytes(out, 1, rs)
		i = j
	}
	return out
}

// encodeSpan encodes one Span (opentelemetry/proto/trace/v1).
func encodeSpan(s sdktrace.ReadOnlySpan) []byte {
	sc, parent := s.SpanContext(), s.Parent()
	tid, sid := sc.TraceID(), sc.SpanID()
	b := appendBytes(nil, 1, tid[:])
	b = appendBytes(b, 2, sid[:])
	if ts := sc.TraceState().String(); ts != "" {
		b = appendBytes(b, 3, []byte(ts))
	}
	if parent.SpanID().IsValid() {
		psid := parent.SpanID()
		b = appendBytes(b, 4, psid[:])
	}
	b = appendBytes(b, 5, []byte(s.Name()))
	b = protowire.AppendTag(b, 6, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(kind(s.SpanKind())))
	b = appendFixed64(b, 7, uint64(s.StartTime().UnixNano()))
	b = appendFixed64(b, 8, uint64(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		b = appendBytes(b, 9, appendKeyValue(nil, kv))
	}
	for _, ev := range s.Events() {
		e := appendFixed64(nil, 1, uint64(ev.Time.UnixNano()))
		e = appendBytes(e, 2, []byte(ev.Name))
		for _, kv := range ev.Attributes {
			e = appendBytes(e, 3, appendKeyValue(nil, kv))
		}
		b = appendBytes(b, 11, e)
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		m := appendBytes(nil, 1, ltid[:])
		m = appendBytes(m, 2, lsid[:])
		for _, kv := range l.Attributes {
			m = appendBytes(m, 4, appendKeyValue(nil, kv))
		}
		b = appendBytes(b, 13, m)
	}
	st := s.Status()
	var status []byte
	if st.Description != "" {
		status = appendBytes(status, 2, []byte(st.Description))
	}
	// codes.Code: Unset 0, Error 1, Ok 2; OTLP's StatusCode: Unset 0,
	// Ok 1, Error 2.
	code := map[uint32]uint64{0: 0, 1: 2, 2: 1}[uint32(st.Code)]
	if code != 0 {
		status = protowire.AppendTag(status, 3, protowire.VarintType)
		status = protowire.AppendVarint(status, code)
	}
	if len(status) > 0 {
		b = appendBytes(b, 15, status)
	}
	return b
}

// kind maps trace.SpanKind to OTLP's SpanKind: the same numbers, 0 being
// unspecified.
func kind(k trace.SpanKind) int32 {
	if k < trace.SpanKindUnspecified || k > trace.SpanKindConsumer {
		return 0
	}
	return int32(k)
}

// appendKeyValue encodes a KeyValue (opentelemetry/proto/common/v1).
func appendKeyValue(b []byte, kv attribute.KeyValue) []byte {
	b = appendBytes(b, 1, []byte(kv.Key))
	return appendBytes(b, 2, anyValue(kv.Value))
}

// anyValue encodes an AnyValue: string 1, bool 2, int 3, double 4, array 5.
func anyValue(v attribute.Value) []byte {
	switch v.Type() {
	case attribute.STRING:
		return appendBytes(nil, 1, []byte(v.AsString()))
	case attribute.BOOL:
		b := protowire.AppendTag(nil, 2, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b := protowire.AppendTag(nil, 3, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return appendFixed64(nil, 4, math.Float64bits(v.AsFloat64()))
	}
	var arr []byte
	switch v.Type() {
	case attribute.STRINGSLICE:
		for _, s := range v.AsStringSlice() {
			arr = appendBytes(arr, 1, anyValue(attribute.StringValue(s)))
		}
	case attribute.BOOLSLICE:
		for _, x := range v.AsBoolSlice() {
			arr = appendBytes(arr, 1, anyValue(attribute.BoolValue(x)))
		}
	case attribute.INT64SLICE:
		for _, x := range v.AsInt64Slice() {
			arr = appendBytes(arr, 1, anyValue(attribute.Int64Value(x)))
		}
	case attribute.FLOAT64SLICE:
		for _, x := range v.AsFloat64Slice() {
			arr = appendBytes(arr, 1, anyValue(attribute.Float64Value(x)))
		}
	default:
		return appendBytes(nil, 1, []byte(v.Emit()))
	}
	return appendBytes(nil, 5, arr)
}

// appendBytes appends a length-delimited field: bytes, a string or an
// embedded message.
func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}
