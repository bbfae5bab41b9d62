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

// modelClient is the model providers' HTTP client. Its transport keeps up to modelIdlePerHost
// idle connections to the provider (net/http's default keeps 2 per host, so with more turns
// streaming at once than that every answer dialed and closed a connection of its own: 5% of
// the server's CPU in the approvals profile). With tracing on, each request carries the
// traceparent of its model call's span.
func (a *App) modelClient() *http.Client {
	var rt http.RoundTripper = http.DefaultTransport
	if def, ok := http.DefaultTransport.(*http.Transport); ok {
		tr := def.Clone()
		tr.MaxIdleConns = modelIdlePerHost
		tr.MaxIdleConnsPerHost = modelIdlePerHost
		// As the providers' SDK clients: a provider that takes the request and never answers
		// ends the call after this long instead of holding the turn.
		tr.ResponseHeaderTimeout = modelHeaderTimeout
		rt = tr
	}
	if a.tracer.On() {
		rt = telemetry.Transport(rt)
	}
	return &http.Client{Transport: rt}
}

// modelHeaderTimeout bounds the wait for a model provider's response headers (the SDKs'
// default clients use the same).
const modelHeaderTimeout = 10 * time.Minute

// modelIdlePerHost bounds the idle connections kept to a model provider: about as many as the
// turns that stream at once on a busy process. More streams than that still run; the
// connections above the bound are closed when they go idle.
const modelIdlePerHost = 64

// closeTracer flushes and stops the exporter within tracerShutdown.
func (a *App) closeTracer() error {
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdown)
	defer cancel()
	return a.tracer.Shutdown(ctx)
}
