package app

import (
	"context"
	"net/http"
	"time"

	"parley/internal/telemetry"
)

// tracerShutdown bounds the flush of the spans not yet exported when the app closes: an
// unreachable collector must not hold the shutdown up.
const tracerShutdown = 5 * time.Second

// newTracer builds the tracer the standard OTEL_* variables ask for (telemetry.New), read
// through cfg.Getenv; nil, tracing off, when none is set or cfg has no Getenv (tests that build
// the Config directly).
func newTracer(ctx context.Context, cfg Config) (*telemetry.Tracer, error) {
	if cfg.Getenv == nil {
		return nil, nil
	}
	return telemetry.New(ctx, cfg.Getenv, "")
}

// modelClient is the model providers' HTTP client: with tracing on, each request carries the
// traceparent of its model call's span; nil (the SDK's default client) otherwise.
func (a *App) modelClient() *http.Client {
	if !a.tracer.On() {
		return nil
	}
	return &http.Client{Transport: telemetry.Transport(nil)}
}

// closeTracer flushes and stops the exporter within tracerShutdown.
func (a *App) closeTracer() error {
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdown)
	defer cancel()
	return a.tracer.Shutdown(ctx)
}
