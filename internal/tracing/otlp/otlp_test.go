package otlp

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-run/airlock/internal/testkit/otlptest"
	"github.com/airlock-run/airlock/internal/tracing"
)

// restoreGlobals puts back the global provider and propagator Setup
// replaces.
func restoreGlobals(t *testing.T) {
	tp, prop := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
	})
}

// TestSetupOffByDefault: without an endpoint nothing is installed: the
// global provider stays the API's, whose spans carry the caller's
// context and record nothing.
func TestSetupOffByDefault(t *testing.T) {
	restoreGlobals(t)
	for _, env := range []map[string]string{
		{},
		{EnvEndpoint: "http://127.0.0.1:1", EnvSDKDisabled: "true"},
		{EnvEndpoint: "http://127.0.0.1:1", EnvTracesExporter: "none"},
	} {
		t.Setenv(EnvEndpoint, env[EnvEndpoint])
		t.Setenv(EnvTracesEndpoint, "")
		t.Setenv(EnvSDKDisabled, env[EnvSDKDisabled])
		t.Setenv(EnvTracesExporter, env[EnvTracesExporter])
		before := otel.GetTracerProvider()
		shutdown, on, err := Setup(context.Background(), "svc", "v", nil)
		if err != nil || on {
			t.Fatalf("%v: on %v, err %v", env, on, err)
		}
		if otel.GetTracerProvider() != before {
			t.Errorf("%v: the global provider was replaced", env)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}
	parent := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	_, span := tracing.Tracer(nil).Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "x")
	if span.IsRecording() || span.SpanContext().TraceID() != parent.TraceID() {
		t.Errorf("without an SDK: recording %v, trace %s", span.IsRecording(), span.SpanContext().TraceID())
	}
}

// TestSetupRefusesWhatItCannotExport: a bad endpoint, a gRPC protocol or
// another exporter are errors naming the variable.
func TestSetupRefusesWhatItCannotExport(t *testing.T) {
	restoreGlobals(t)
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{EnvEndpoint: "127.0.0.1:4318"}, EnvEndpoint},
		{map[string]string{EnvTracesEndpoint: "ftp://x/v1/traces"}, EnvTracesEndpoint},
		{map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvProtocol: "grpc"}, EnvProtocol},
		{map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesProtocol: "grpc"}, EnvTracesProtocol},
		{map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesExporter: "zipkin"}, EnvTracesExporter},
	} {
		for _, k := range []string{EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol, EnvTracesExporter, EnvSDKDisabled} {
			t.Setenv(k, tt.env[k])
		}
		_, on, err := Setup(context.Background(), "svc", "v", nil)
		if err == nil || on || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: on %v, err %v; want an error naming %s", tt.env, on, err, tt.want)
		}
	}
}

// TestSetupExportsToAnOTLPEndpoint: with OTEL_EXPORTER_OTLP_ENDPOINT, the
// spans reach a real OTLP/HTTP endpoint, with their parentage and the
// service name of OTEL_SERVICE_NAME, at the latest when shutdown flushes
// them.
func TestSetupExportsToAnOTLPEndpoint(t *testing.T) {
	restoreGlobals(t)
	ep := otlptest.Start(t)
	t.Setenv(EnvEndpoint, ep.URL)
	t.Setenv(EnvTracesEndpoint, "")
	t.Setenv(EnvServiceName, "airlock-test")
	t.Setenv(EnvSDKDisabled, "")
	t.Setenv(EnvTracesExporter, "")
	t.Setenv(EnvProtocol, "")
	t.Setenv(EnvTracesProtocol, "")
	shutdown, on, err := Setup(context.Background(), "airlock-worker", "1.2.3", func(err error) { t.Errorf("exporter: %v", err) })
	if err != nil || !on {
		t.Fatalf("on %v, err %v", on, err)
	}
	if _, ok := otel.GetTextMapPropagator().(propagation.TraceContext); !ok {
		t.Errorf("global propagator %T", otel.GetTextMapPropagator())
	}
	parent := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ctx, run := tracing.Tracer(nil).Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), tracing.SpanRun)
	_, step := tracing.Tracer(nil).Start(ctx, tracing.SpanStep)
	step.End()
	run.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	spans := ep.Spans()
	if len(spans) != 2 {
		t.Fatalf("spans %+v, want 2", spans)
	}
	byName := map[string]otlptest.Span{}
	for _, s := range spans {
		byName[s.Name] = s
		if s.Service != "airlock-test" || s.TraceID != parent.TraceID().String() {
			t.Errorf("span %s: service %q, trace %s", s.Name, s.Service, s.TraceID)
		}
	}
	if r, s := byName[tracing.SpanRun], byName[tracing.SpanStep]; r.Parent != parent.SpanID().String() || s.Parent != r.SpanID {
		t.Errorf("parentage: run %s ← %s, step ← %s", r.SpanID, r.Parent, s.Parent)
	}
}
