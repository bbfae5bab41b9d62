// Package telemetry is Parley's tracing: OpenTelemetry spans named and attributed after the
// GenAI semantic conventions, exported with OTLP when the standard OTEL_* variables ask for it,
// and W3C trace context on the HTTP requests Parley makes (model providers, webhook and http
// tools).
//
// Tracing is off unless configured, and off is free: a nil *Tracer is valid, every method on
// it returns at once without allocating, and callers keep their contexts unchanged. Spans never
// carry message text, tool arguments, results or secrets: those are user data. They carry ids
// (conversation, tool call, user), names, kinds, counts and outcomes.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of Parley's spans.
const ScopeName = "parley"

// Tracer starts Parley's spans. The nil *Tracer is tracing switched off.
type Tracer struct {
	tr       trace.Tracer
	now      func() time.Time            // the clock of every span's start and end
	shutdown func(context.Context) error // nil when the provider is not ours to stop
}

// On reports whether spans are recorded. Callers check it before building attributes.
func (t *Tracer) On() bool { return t != nil }

// FromProvider traces through tp (tests pass an SDK provider with an in-memory recorder),
// timing spans on now (time.Now when nil; tests pass their fake clock's). The caller owns tp
// and shuts it down.
func FromProvider(tp trace.TracerProvider, now func() time.Time) *Tracer {
	if now == nil {
		now = time.Now
	}
	return &Tracer{tr: tp.Tracer(ScopeName), now: now}
}

// Shutdown flushes the spans not yet exported and stops the exporter, within ctx. It is a no-op
// for a nil Tracer or one built by FromProvider.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	if err := t.shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: shut the tracer provider down: %w", err)
	}
	return nil
}

// Config says whether and how to export, read from the standard variables (FromEnv).
type Config struct {
	// Protocol is "http/protobuf" or "grpc".
	Protocol string
	// EndpointURL is the exporter's URL when one was given through the variables ("" leaves
	// the exporter's default, localhost:4318 or :4317). For http/protobuf it is the traces URL
	// (…/v1/traces).
	EndpointURL string
}

// FromEnv reads the standard OpenTelemetry variables through getenv and reports whether traces
// are to be exported: OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none switch them off;
// otherwise they are on when OTEL_TRACES_EXPORTER names otlp or when
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. The protocol comes
// from OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf by
// default, or grpc). Other exporters and http/json are refused with an error, so a
// misconfiguration shows at start-up instead of as missing traces.
func FromEnv(getenv func(string) string) (cfg Config, on bool, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Config{}, false, nil
	}
	wantOTLP := false
	for _, e := range strings.Split(getenv("OTEL_TRACES_EXPORTER"), ",") {
		switch e = strings.TrimSpace(e); e {
		case "":
		case "none":
			return Config{}, false, nil
		case "otlp":
			wantOTLP = true
		default:
			return Config{}, false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: Parley exports traces with otlp only (or none)", e)
		}
	}
	base, traces := getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if !wantOTLP && base == "" && traces == "" {
		return Config{}, false, nil
	}
	cfg.Protocol = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if cfg.Protocol == "" {
		cfg.Protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if cfg.Protocol == "" {
		cfg.Protocol = "http/protobuf"
	}
	switch cfg.Protocol {
	case "http/protobuf":
		// The signal-specific endpoint is used as it is; the base one gets the signal's path.
		if traces != "" {
			cfg.EndpointURL = traces
		} else if base != "" {
			cfg.EndpointURL = strings.TrimRight(base, "/") + "/v1/traces"
		}
	case "grpc":
		cfg.EndpointURL = traces
		if cfg.EndpointURL == "" {
			cfg.EndpointURL = base
		}
	default:
		return Config{}, false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: use http/protobuf or grpc", cfg.Protocol)
	}
	return cfg, true, nil
}

// New builds the tracer the environment asks for (FromEnv): nil, and nothing started, when
// tracing is off. Otherwise spans go through a batching processor to an OTLP exporter; the
// exporter reads the other standard variables itself (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _COMPRESSION, _CERTIFICATE …), the provider reads OTEL_TRACES_SAMPLER and OTEL_BSP_*, and the
// resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name defaults to parley).
// The caller must Shutdown the returned tracer.
func New(ctx context.Context, getenv func(string) string, version string) (*Tracer, error) {
	cfg, on, err := FromEnv(getenv)
	if err != nil || !on {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch cfg.Protocol {
	case "grpc":
		var opts []otlptracegrpc.Option
		if cfg.EndpointURL != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.EndpointURL))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	default:
		var opts []otlptracehttp.Option
		if cfg.EndpointURL != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(cfg.EndpointURL))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", "parley")}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	// Later detectors win: the environment's service name and attributes override the default.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, errors.Join(fmt.Errorf("telemetry: resource: %w", err), exp.Shutdown(ctx))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Tracer{tr: tp.Tracer(ScopeName), now: time.Now, shutdown: tp.Shutdown}, nil
}

// propagator writes and reads W3C traceparent/tracestate headers.
var propagator = propagation.TraceContext{}

// Inject writes ctx's span as a W3C traceparent (and tracestate) header on h, so the receiver
// can continue the trace. It writes nothing when ctx carries no span (tracing off), and leaves a
// traceparent the request already has (set by its configuration) alone.
func Inject(ctx context.Context, h http.Header) {
	if !trace.SpanContextFromContext(ctx).IsValid() || h.Get("traceparent") != "" {
		return
	}
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Carry writes a span context as W3C trace-context fields (traceparent and, when set,
// tracestate), for a request that crosses processes some other way than HTTP; nil when sc is
// not valid (tracing off, or no span).
func Carry(sc trace.SpanContext) map[string]string {
	if !sc.IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagator.Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), c)
	return c
}

// Carried reads what Carry wrote: the remote span context, or an invalid one when the fields
// are missing or malformed (they came from another process: untrusted, and only ever a parent).
func Carried(fields map[string]string) trace.SpanContext {
	if len(fields) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagator.Extract(context.Background(), propagation.MapCarrier(fields)))
}

// Transport wraps base (http.DefaultTransport when nil) so every request carries the trace
// context of its own context (Inject). It is for clients whose requests are built elsewhere,
// such as the model providers' SDKs.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return injecting{base}
}

type injecting struct{ base http.RoundTripper }

func (t injecting) RoundTrip(r *http.Request) (*http.Response, error) {
	if trace.SpanContextFromContext(r.Context()).IsValid() && r.Header.Get("traceparent") == "" {
		r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
		Inject(r.Context(), r.Header)
	}
	return t.base.RoundTrip(r)
}
