// Package otlp installs the OpenTelemetry SDK with an OTLP/HTTP exporter
// in the binaries that export spans (worker, api), when the standard
// environment asks for it; without it, nothing is installed and tracing
// costs nothing (the spans are the API's no-op ones, and trace context
// still propagates: package tracing).
//
// Exporting is opt-in: OTEL_EXPORTER_OTLP_ENDPOINT (a base URL, to which
// /v1/traces is appended) or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the URL
// itself) turns it on. The exporter is this package's own (export.go:
// protobuf over HTTP, its request built with the OTLP protos' message
// packages, go.opentelemetry.io/proto/otlp, no gRPC linked); it reads
// OTEL_EXPORTER_OTLP_HEADERS and refuses an OTEL_EXPORTER_OTLP_PROTOCOL
// other than http/protobuf; the SDK reads
// OTEL_TRACES_SAMPLER (default parentbased_always_on) and the batch
// processor's OTEL_BSP_*; the resource takes OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES over the binary's own name.
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Environment variables read here (the exporter and the SDK read more).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvServiceName    = "OTEL_SERVICE_NAME"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
)

// Setup installs, when the environment asks for it (see the package
// doc), a tracer provider that exports the binary's spans by OTLP/HTTP
// as the global one, named service (version) unless OTEL_SERVICE_NAME
// says otherwise, with onError receiving the exporter's failures. It
// returns whether it did, and shutdown, which flushes the spans not yet
// sent and stops the exporter (a no-op when off): call it before exit.
// An endpoint that is not an http(s) URL, or a protocol other than
// OTLP/HTTP's, is an error naming the variable.
func Setup(ctx context.Context, service, version string, onError func(error)) (shutdown func(context.Context) error, on bool, err error) {
	off := func(context.Context) error { return nil }
	endpoint, which := os.Getenv(EnvTracesEndpoint), EnvTracesEndpoint
	if endpoint == "" {
		endpoint, which = os.Getenv(EnvEndpoint), EnvEndpoint
	}
	if endpoint == "" || strings.EqualFold(os.Getenv(EnvSDKDisabled), "true") {
		return off, false, nil
	}
	switch e := os.Getenv(EnvTracesExporter); e {
	case "", "otlp":
	case "none":
		return off, false, nil
	default:
		return off, false, fmt.Errorf("%s=%q: this build exports by otlp only (or none)", EnvTracesExporter, e)
	}
	if u, perr := url.Parse(endpoint); perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return off, false, fmt.Errorf("%s=%q: want an http:// or https:// URL with a host, e.g. http://127.0.0.1:4318", which, endpoint)
	}
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		if p := os.Getenv(k); p != "" && p != "http/protobuf" {
			return off, false, fmt.Errorf("%s=%q: this build exports OTLP over HTTP as protobuf only (http/protobuf, the default)", k, p)
		}
	}
	exp, err := newExporter(os.Getenv(EnvTracesEndpoint), os.Getenv(EnvEndpoint))
	if err != nil {
		return off, false, fmt.Errorf("OTLP exporter (%s): %w", which, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service), attribute.String("service.version", version)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		_ = exp.Shutdown(ctx)
		return off, false, fmt.Errorf("trace resource (%s, OTEL_RESOURCE_ATTRIBUTES): %w", EnvServiceName, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	if onError != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(onError))
	}
	return tp.Shutdown, true, nil
}

// FlushTimeout bounds the flush of Start's stop.
const FlushTimeout = 5 * time.Second

// Start is Setup for a command: it logs whether spans are exported, and
// where, and the exporter's failures (at warn), to log; stop flushes the
// spans not yet sent, within FlushTimeout, logging a failure. Call stop
// before the command exits.
func Start(ctx context.Context, service, version string, log zerolog.Logger) (stop func(), err error) {
	shutdown, on, err := Setup(ctx, service, version, func(err error) {
		log.Warn().Err(err).Msg("tracing: exporting spans")
	})
	if err != nil {
		return func() {}, fmt.Errorf("tracing: %w", err)
	}
	if !on {
		return func() {}, nil
	}
	to := os.Getenv(EnvTracesEndpoint)
	if to == "" {
		to = os.Getenv(EnvEndpoint)
	}
	log.Info().Str("endpoint", to).Msg("tracing: exporting spans by OTLP/HTTP")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), FlushTimeout)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flushing spans at exit")
		}
	}, nil
}
