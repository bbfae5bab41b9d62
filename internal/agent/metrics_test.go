package agent

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// histCount is the number of observations of one histogram series.
func histCount(t *testing.T, h *prometheus.HistogramVec, labels ...string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatalf("read histogram: %v", err)
	}
	return m.GetHistogram().GetSampleCount()
}

// counterValue reads a counter (without prometheus/testutil, whose diff dependency is not in
// go.mod).
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	return m.GetCounter().GetValue()
}

// TestPendingGaugeFollowsTheCallsAcrossHibernation: the pending count by kind rises when a call
// suspends, stays while the actor hibernates (the call is still pending), and falls when the call
// is answered on the revived actor or expires; live actors, revivals, resolve latency and
// expiries move with it.
func TestPendingGaugeFollowsTheCallsAcrossHibernation(t *testing.T) {
	eachStoreSerial(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(
			callTools(tc{"c1", "send_email", emailArgs}, tc{"q1", "ask_user", askArgs}), say("Done."),
			callTools(tc{"q2", "ask_user", askArgs}), say("Too late."))
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.IdleTimeout = time.Minute; c.DefaultTimeout = time.Hour })
		revivals := counterValue(t, metrics.Revivals)
		resolvedOK := histCount(t, metrics.ResolveSeconds, "ok")
		resolvedStale := histCount(t, metrics.ResolveSeconds, "stale")
		expired := counterValue(t, metrics.ExpiriesFired)

		e.send("email bob and ask me")
		e.waitStatus(store.StatusAwaiting)
		want := map[string]int{"approval": 1, "elicitation": 1}
		if s := e.m.Stats(); !equalCounts(s.Pending, want) || s.LiveActors != 1 {
			t.Fatalf("awaiting: stats %+v, want pending %v and 1 live", s, want)
		}
		if snap := metrics.Collect(); snap.Pending["approval"] < 1 || snap.LiveActors < 1 {
			t.Fatalf("the manager is not a metrics source: %+v", snap)
		}

		e.clk.Advance(time.Minute)
		waitGone(t, e)
		if s := e.m.Stats(); !equalCounts(s.Pending, want) || s.LiveActors != 0 {
			t.Fatalf("hibernated: stats %+v, want pending %v and 0 live", s, want)
		}

		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		if got := counterValue(t, metrics.Revivals) - revivals; got != 1 {
			t.Fatalf("revivals +%v, want +1", got)
		}
		if s := e.m.Stats(); !equalCounts(s.Pending, map[string]int{"elicitation": 1}) {
			t.Fatalf("after the approval: pending %v", s.Pending)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("second approve: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: []byte(`{"city":"Oslo"}`)}, e.owner); err != nil {
			t.Fatalf("answer: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if s := e.m.Stats(); len(s.Pending) != 0 {
			t.Fatalf("idle: pending %v", s.Pending)
		}
		if got := histCount(t, metrics.ResolveSeconds, "ok") - resolvedOK; got != 2 {
			t.Fatalf("resolve ok observations +%d, want +2", got)
		}
		if got := histCount(t, metrics.ResolveSeconds, "stale") - resolvedStale; got != 1 {
			t.Fatalf("resolve stale observations +%d, want +1", got)
		}

		e.send("ask me again")
		e.waitCall("q2", store.CallAwaiting)
		if s := e.m.Stats(); !equalCounts(s.Pending, map[string]int{"elicitation": 1}) {
			t.Fatalf("second question: pending %v", s.Pending)
		}
		e.clk.Advance(time.Hour + time.Second)
		e.waitCall("q2", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		if s := e.m.Stats(); len(s.Pending) != 0 {
			t.Fatalf("after the expiry: pending %v", s.Pending)
		}
		if got := counterValue(t, metrics.ExpiriesFired) - expired; got != 1 {
			t.Fatalf("expiries +%v, want +1", got)
		}
	})
}

// TestLoopMetrics: model calls and their tokens by provider, tool runs by tool and outcome, and
// retries by step are counted.
func TestLoopMetrics(t *testing.T) {
	eachStoreSerial(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"f1", "flaky", `{}`}), say("Worked."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{flakyTool(t, 1, 0, runs)} },
			func(c *Config) { c.RetryBase = time.Second })
		llmOK := histCount(t, metrics.LLMSeconds, "scripted", "ok")
		toolErr := histCount(t, metrics.ToolSeconds, "flaky", "tool_error")
		toolOK := histCount(t, metrics.ToolSeconds, "flaky", "ok")
		retries := counterValue(t, metrics.Retries.WithLabelValues("tool"))
		e.send("go")
		e.next("first failure", func(ev Event) bool {
			return ev.Type == EventToolCall && ev.ToolCallID == "f1" && ev.Call != nil && ev.Call.NextAttempt != nil
		})
		e.clk.Advance(time.Second)
		e.waitStatus(store.StatusIdle)
		if got := histCount(t, metrics.LLMSeconds, "scripted", "ok") - llmOK; got != 2 {
			t.Fatalf("model calls +%d, want +2", got)
		}
		if got := histCount(t, metrics.ToolSeconds, "flaky", "tool_error") - toolErr; got != 1 {
			t.Fatalf("failed tool runs +%d, want +1", got)
		}
		if got := histCount(t, metrics.ToolSeconds, "flaky", "ok") - toolOK; got != 1 {
			t.Fatalf("ok tool runs +%d, want +1", got)
		}
		if got := counterValue(t, metrics.Retries.WithLabelValues("tool")) - retries; got != 1 {
			t.Fatalf("tool retries +%v, want +1", got)
		}
	})
}

func equalCounts(got, want map[string]int) bool {
	if len(got) != len(want) {
		return false
	}
	for k, n := range want {
		if got[k] != n {
			return false
		}
	}
	return true
}
