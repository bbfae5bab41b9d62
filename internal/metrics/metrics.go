// Package metrics holds Parley's Prometheus collectors. Packages record through the package-level
// vars; /metrics serves Registry. The names are part of the operator's contract (docs/operations.md, "Metrics").
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
	// Revivals counts actors started from the store with a log behind them (after hibernation
	// or a restart); a new conversation's first actor is not a revival.
	Revivals = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_actor_revivals_total", Help: "Actors rehydrated from the store.",
	})
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
	// ExpiriesFired counts suspended calls resolved by their durable timer.
	ExpiriesFired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "parley_expiries_fired_total", Help: "Suspended calls expired by their timer.",
	})
	// Retries counts retry attempts scheduled, by step kind (llm, tool).
	Retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_retries_total", Help: "Retries scheduled by the loop.",
	}, []string{"step"})
	// EffectRefusals counts runs the effect gate refused, by reason (tool, arguments, rule_denies,
	// not_approved, approvals): what was about to run was not what the record covered.
	EffectRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "parley_effect_refusals_total", Help: "Runs the effect gate refused, by reason.",
	}, []string{"reason"})
)

func init() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		Revivals, ResolveSeconds, LLMSeconds, LLMTokens, ToolSeconds, ExpiriesFired, Retries, EffectRefusals,
		scraped{},
	)
}

// Handler serves Registry in the Prometheus text format.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry, promhttp.HandlerOpts{})
}
