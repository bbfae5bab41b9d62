// Package metrics holds Parley's Prometheus collectors. Packages record through the package-level
// vars; /metrics serves Registry. The names are part of the operator's contract (README).
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Registry is the registry /metrics serves: Parley's collectors plus the Go and process ones.
var Registry = prometheus.NewRegistry()

var (
	// LiveActors is the number of conversation actors in memory.
	LiveActors = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "parley_live_actors", Help: "Conversation actors in memory.",
	})
	// Revivals counts actors started from the store (after hibernation or a restart).
	Revivals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_actor_revivals_total", Help: "Actors rehydrated from the store.",
	})
	// Pending is the number of suspended calls by pending kind.
	Pending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "parley_pending_calls", Help: "Suspended tool calls by kind.",
	}, []string{"kind"})
	// ResolveSeconds is the time from a resolve request to its acknowledgement, by outcome.
	ResolveSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_resolve_seconds", Help: "Resolve acknowledgement latency.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"outcome"})
	// LLMSeconds is the duration of model calls by provider and outcome.
	LLMSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_llm_call_seconds", Help: "Model call latency.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
	}, []string{"provider", "outcome"})
	// LLMTokens counts tokens by provider and direction (input, output).
	LLMTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_llm_tokens_total", Help: "Model tokens.",
	}, []string{"provider", "direction"})
	// ToolSeconds is the duration of server tool runs by tool and outcome (ok, tool_error, internal).
	ToolSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_tool_call_seconds", Help: "Server tool call latency.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 3, 12),
	}, []string{"tool", "outcome"})
	// Sockets is the number of open WebSocket connections.
	Sockets = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "parley_sockets", Help: "Open WebSocket connections.",
	})
	// DroppedFrames counts connections or subscribers dropped because their queue overflowed.
	DroppedFrames = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_dropped_frames_total", Help: "Queue overflows that forced a resync, by where.",
	}, []string{"where"})
	// ExpiriesFired counts suspended calls resolved by their durable timer.
	ExpiriesFired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_expiries_fired_total", Help: "Suspended calls expired by their timer.",
	})
	// Retries counts retry attempts scheduled, by step kind (llm, tool).
	Retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_retries_total", Help: "Retries scheduled by the loop.",
	}, []string{"step"})
)

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		LiveActors, Revivals, Pending, ResolveSeconds, LLMSeconds, LLMTokens, ToolSeconds,
		Sockets, DroppedFrames, ExpiriesFired, Retries,
	)
}

// Handler serves Registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{})
}
