package metrics

import "github.com/prometheus/client_golang/prometheus"

var (
	// ApprovalWaitSeconds is how long suspended calls waited for a person (or their timer): from
	// the moment a call suspended to the durable write of what ended the wait, by pending kind
	// (approval, elicitation, client_exec) and outcome (approve, approve_edited, deny, accept,
	// decline, cancel, client_result, client_error, expire, no_client, stopped, moved_on …).
	ApprovalWaitSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_approval_wait_seconds", Help: "Time suspended calls waited for a decision.",
		// 0.25 s … about 3 days: people take seconds to days.
		Buckets: prometheus.ExponentialBuckets(0.25, 4, 11),
	}, []string{"kind", "outcome"})
	// DecisionSeconds is the time from a Resolve request reaching the agent to the decision
	// being durable in the store (what the person's click waits for before its answer), by
	// pending kind. Only resolves that recorded something count; refusals (stale, forbidden,
	// invalid) are in parley_resolve_seconds.
	DecisionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "parley_decision_seconds", Help: "Resolve request to durable decision.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"kind"})
)

func init() {
	Registry.MustRegister(ApprovalWaitSeconds, DecisionSeconds)
}
