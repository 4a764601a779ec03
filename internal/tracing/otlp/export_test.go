package otlp

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestEncodeRequest: what encodeRequest writes decodes, with the official
// protos, into the spans given: resource, scope, ids, parent, kind,
// attributes of every kind (arrays included), events, links and status.
func TestEncodeRequest(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	res := sdkresource.NewSchemaless(attribute.String("service.name", "svc"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	tr := tp.Tracer("scope", trace.WithInstrumentationVersion("1.0"))
	ctx, parent := tr.Start(context.Background(), "parent")
	_, child := tr.Start(ctx, "child", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.Link{SpanContext: parent.SpanContext(), Attributes: []attribute.KeyValue{attribute.String("why", "approver")}}))
	child.SetAttributes(attribute.String("s", "x"), attribute.Bool("b", true), attribute.Int64("i", -3), attribute.Float64("f", 1.5),
		attribute.StringSlice("ss", []string{"a", "b"}), attribute.Int64Slice("is", []int64{1, 2}))
	child.AddEvent("ev", trace.WithAttributes(attribute.Int("n", 7)))
	child.SetStatus(codes.Error, "bad")
	child.End()
	parent.End()

	var data tracepb.TracesData
	if err := proto.Unmarshal(encodeRequest(rec.Ended()), &data); err != nil {
		t.Fatal(err)
	}
	if len(data.ResourceSpans) != 1 || len(data.ResourceSpans[0].ScopeSpans) != 1 {
		t.Fatalf("resource and scope spans: %v", &data)
	}
	rs := data.ResourceSpans[0]
	if a := rs.Resource.Attributes; len(a) != 1 || a[0].Key != "service.name" || a[0].Value.GetStringValue() != "svc" {
		t.Errorf("resource: %v", rs.Resource)
	}
	ss := rs.ScopeSpans[0]
	if ss.Scope.Name != "scope" || ss.Scope.Version != "1.0" || len(ss.Spans) != 2 {
		t.Fatalf("scope spans: %v", ss)
	}
	c, p := ss.Spans[0], ss.Spans[1]
	csc, psc := child.SpanContext(), parent.SpanContext()
	tid, csid, psid := csc.TraceID(), csc.SpanID(), psc.SpanID()
	if c.Name != "child" || string(c.TraceId) != string(tid[:]) || string(c.SpanId) != string(csid[:]) ||
		string(c.ParentSpanId) != string(psid[:]) || len(p.ParentSpanId) != 0 || c.Kind != tracepb.Span_SPAN_KIND_CONSUMER {
		t.Errorf("child span: %v", c)
	}
	got := map[string]any{}
	for _, kv := range c.Attributes {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			got[kv.Key] = v.StringValue
		case *commonpb.AnyValue_BoolValue:
			got[kv.Key] = v.BoolValue
		case *commonpb.AnyValue_IntValue:
			got[kv.Key] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			got[kv.Key] = v.DoubleValue
		}
	}
	for k, want := range map[string]any{"s": "x", "b": true, "i": int64(-3), "f": 1.5} {
		if got[k] != want {
			t.Errorf("attribute %s: %v, want %v", k, got[k], want)
		}
	}
	for _, kv := range c.Attributes {
		if kv.Key == "ss" && len(kv.Value.GetArrayValue().GetValues()) != 2 || kv.Key == "is" && kv.Value.GetArrayValue().GetValues()[1].GetIntValue() != 2 {
			t.Errorf("array attribute %s: %v", kv.Key, kv.Value)
		}
	}
	if len(c.Events) != 1 || c.Events[0].Name != "ev" || c.Events[0].Attributes[0].Value.GetIntValue() != 7 {
		t.Errorf("events: %v", c.Events)
	}
	if len(c.Links) != 1 || string(c.Links[0].SpanId) != string(psid[:]) || c.Links[0].Attributes[0].Key != "why" {
		t.Errorf("links: %v", c.Links)
	}
	if c.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || c.Status.GetMessage() != "bad" || p.Status != nil {
		t.Errorf("status: child %v, parent %v", c.Status, p.Status)
	}
}
