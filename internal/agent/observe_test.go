package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"parley/internal/clock"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/telemetry"
)

// recorded traces an env's manager into an in-memory recorder, on the env's fake clock.
func recorded(t *testing.T) (*tracetest.SpanRecorder, func(*Config)) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, func(c *Config) {
		fake := c.Clock
		c.Tracer = telemetry.FromProvider(tp, func() time.Time { return fake.Now() })
	}
}

// spans indexes ended spans by name.
type spans []sdktrace.ReadOnlySpan

func (ss spans) named(name string) spans {
	var out spans
	for _, s := range ss {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func (ss spans) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	got := ss.named(name)
	if len(got) != 1 {
		var names []string
		for _, s := range ss {
			names = append(names, s.Name())
		}
		t.Fatalf("%d spans named %q, want 1; spans: %q", len(got), name, names)
	}
	return got[0]
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func childOf(s, parent sdktrace.ReadOnlySpan) bool {
	return s.Parent().SpanID() == parent.SpanContext().SpanID() && s.SpanContext().TraceID() == parent.SpanContext().TraceID()
}

func histSum(t *testing.T, h *prometheus.HistogramVec, labels ...string) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := h.WithLabelValues(labels...).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatalf("read histogram: %v", err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// TestTraceOfAnApprovedCall: one gated call approved after 3 s gives one trace: the turn, its
// two model calls, the suspension (3 s, approved by the owner through the session), the
// Resolve, the tool run under the Resolve, the appends; no span holds the call's arguments or
// the model's text; the approval histograms count it.
func TestTraceOfAnApprovedCall(t *testing.T) {
	eachStoreSerial(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		rec, withTracer := recorded(t)
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent to Bob."))
		e := newEnv(t, open, prov, emailTools, withTracer)
		waits, waitSum := histSum(t, metrics.ApprovalWaitSeconds, "approval", "approve")
		decisions, _ := histSum(t, metrics.DecisionSeconds, "approval")

		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		e.clk.Advance(3 * time.Second)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)

		ss := spans(rec.Ended())
		turn := ss.one(t, "invoke_agent parley")
		resolve := ss.one(t, "resolve send_email")
		await := ss.one(t, "await approval send_email")
		tool := ss.one(t, "execute_tool send_email")
		chats := ss.named("chat scripted")
		if len(chats) != 2 {
			t.Fatalf("%d chat spans, want 2", len(chats))
		}
		for _, s := range ss {
			if s.SpanContext().TraceID() != turn.SpanContext().TraceID() {
				t.Errorf("span %q is in another trace", s.Name())
			}
			for _, kv := range s.Attributes() {
				if v := kv.Value.String(); strings.Contains(v, "bob@example.test") || strings.Contains(v, "Lunch") || strings.Contains(v, "Sent to Bob") {
					t.Errorf("span %q records user data: %s=%s", s.Name(), kv.Key, v)
				}
			}
		}
		if turn.Parent().IsValid() || attr(turn, "gen_ai.operation.name").AsString() != "invoke_agent" ||
			attr(turn, "gen_ai.conversation.id").AsString() != e.conv || attr(turn, telemetry.KeyTurnOutcome).AsString() != "ended" {
			t.Errorf("turn span: parent %v, attributes %v", turn.Parent(), turn.Attributes())
		}
		if !childOf(chats[0], turn) || !childOf(chats[1], resolve) {
			t.Errorf("chat spans should hang under the turn, then under the resolve")
		}
		for _, c := range chats {
			if attr(c, "gen_ai.operation.name").AsString() != "chat" || attr(c, "gen_ai.request.model").AsString() != "scripted" ||
				c.SpanKind() != trace.SpanKindClient {
				t.Errorf("chat span attributes %v", c.Attributes())
			}
		}
		if !childOf(resolve, turn) || attr(resolve, telemetry.KeyResolveOutcome).AsString() != "ok" ||
			attr(resolve, telemetry.KeyDecidedBy).AsString() != e.owner.UserID {
			t.Errorf("resolve span: %v", resolve.Attributes())
		}
		if !childOf(await, turn) || len(await.Links()) != 1 || await.Links()[0].SpanContext.SpanID() != resolve.SpanContext().SpanID() {
			t.Errorf("await span should hang under the turn, linked to the resolve: parent %v links %v", await.Parent(), await.Links())
		}
		if got := await.EndTime().Sub(await.StartTime()); got != 3*time.Second {
			t.Errorf("the suspension lasted %v, want 3s", got)
		}
		for key, want := range map[attribute.Key]string{
			telemetry.KeyDecision: "approve", telemetry.KeyDecidedBy: e.owner.UserID,
			telemetry.KeyDecidedByRole: "member", telemetry.KeyDecidedByVia: "session", telemetry.KeyPendingKind: "approval",
			"gen_ai.tool.call.id": "c1",
		} {
			if got := attr(await, key).AsString(); got != want {
				t.Errorf("await %s = %q, want %q", key, got, want)
			}
		}
		if !childOf(tool, resolve) || attr(tool, "gen_ai.tool.call.id").AsString() != "c1" ||
			attr(tool, "gen_ai.tool.name").AsString() != "send_email" || attr(tool, "gen_ai.conversation.id").AsString() != e.conv ||
			attr(tool, "gen_ai.operation.name").AsString() != "execute_tool" {
			t.Errorf("tool span: parent %v, attributes %v", tool.Parent(), tool.Attributes())
		}
		appends := ss.named("append conversation_log")
		underResolve := 0
		for _, a := range appends {
			if childOf(a, resolve) && attr(a, telemetry.KeyStoreUrgent).AsBool() {
				underResolve++
			}
		}
		// message, answer + call, decision, result, final answer
		if len(appends) != 5 || underResolve != 1 {
			t.Errorf("%d appends (%d urgent under the resolve), want 5 (1)", len(appends), underResolve)
		}

		if n, sum := histSum(t, metrics.ApprovalWaitSeconds, "approval", "approve"); n-waits != 1 || sum-waitSum != 3 {
			t.Errorf("approval wait: +%d observations, +%v s; want +1, +3 s", n-waits, sum-waitSum)
		}
		if n, _ := histSum(t, metrics.DecisionSeconds, "approval"); n-decisions != 1 {
			t.Errorf("decision latency: +%d observations, want +1", n-decisions)
		}
	})
}

// TestTraceOfAWaitThatOutlivedTheActor: when the actor hibernated while the call waited, the
// turn's span ends parked, and the suspension is still one span with its whole wait, taken from
// the log, under the Resolve that ended it.
func TestTraceOfAWaitThatOutlivedTheActor(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		rec, withTracer := recorded(t)
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.IdleTimeout = time.Minute; c.DefaultTimeout = time.Hour; withTracer(c) })
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		e.clk.Advance(time.Minute)
		waitGone(t, e)
		// The actor ends the turn's span on its way out, just after it stops taking requests.
		ss := spans(rec.Ended())
		for deadline := time.Now().Add(10 * time.Second); len(ss.named("invoke_agent parley")) == 0 && time.Now().Before(deadline); ss = spans(rec.Ended()) {
			time.Sleep(time.Millisecond)
		}
		if turn := ss.one(t, "invoke_agent parley"); attr(turn, telemetry.KeyTurnOutcome).AsString() != "parked" {
			t.Fatalf("turn outcome %v, want parked", attr(turn, telemetry.KeyTurnOutcome))
		}
		e.clk.Advance(10 * time.Minute)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "deny", Reason: "not today"}, e.owner); err != nil {
			t.Fatalf("deny: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		ss = spans(rec.Ended())
		resolve := ss.one(t, "resolve send_email")
		await := ss.one(t, "await approval send_email")
		turns := ss.named("invoke_agent parley")
		if len(turns) != 2 || !childOf(await, turns[1]) || !childOf(resolve, turns[1]) || attr(turns[1], telemetry.KeyTurnOutcome).AsString() != "ended" {
			t.Errorf("the revived turn (%d turn spans) should hold the resolve and the suspension: parents %v, %v", len(turns), resolve.Parent(), await.Parent())
		}
		if got := await.EndTime().Sub(await.StartTime()); got < 11*time.Minute-time.Millisecond || got > 11*time.Minute {
			t.Errorf("the suspension lasted %v, want 11m (from the log's time)", got)
		}
		if !attr(await, telemetry.KeySinceFromLog).AsBool() || attr(await, telemetry.KeyDecision).AsString() != "deny" {
			t.Errorf("await attributes %v", await.Attributes())
		}
		if len(ss.named("execute_tool send_email")) != 0 {
			t.Errorf("a denied call ran")
		}
	})
}
