package agent

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/telemetry"
	"parley/internal/tools"
)

// This file is what the actor tells observers: the spans of a turn (internal/telemetry names
// them) and the approval histograms. The rest of the package calls it through one-line hooks.
//
// The span tree of a turn in one process:
//
//	invoke_agent parley                  the turn: its first message to its end (or until the
//	│                                    actor leaves memory while it waits: parked)
//	├─ append conversation_log           every durable append (the message, the answer, …)
//	├─ chat {model}                      every model call (traceparent on its HTTP request)
//	├─ execute_tool {name}               every attempt of a server call (traceparent on webhook
//	│                                    and http tool requests)
//	├─ await {kind} {tool}               every suspension, recorded when it ends (below)
//	└─ resolve {tool}                    a Resolve: request → durable → reply
//	   ├─ append conversation_log        the decision
//	   ├─ execute_tool {name}            what the decision set going …
//	   └─ chat {model}                   … up to the turn's end
//
// Work is parented on its cause: a Resolve's span is the cause of the work it sets going (the
// approved tool, the model calls after it) until the turn ends or another Resolve takes over;
// with no Resolve it is the turn. A Resolve whose caller has a trace of its own is a child of
// the caller's span, linked to the turn.
//
// A suspension is not a span held open while it waits: it is recorded whole when the wait
// ends, from the moment it began. An approval may wait days, through hibernation (the actor
// leaves memory) and restarts; an open span would be lost with the process, and its children
// orphaned. The start is known durably (the tool_call entry's time, in the log), so the span
// always has its true duration; when this process did not see the call suspend (it was
// revived since), the span says so (parley.suspension.since_from_log) and hangs under the
// request that ended it. A request forwarded from another process carries its caller's span
// (W3C trace context in the forwarded request), so its work continues the caller's trace there.

// origin is where a request came from: the caller's span and when it reached the agent.
type origin struct {
	span trace.SpanContext
	at   time.Time
}

func originOf(ctx context.Context, clk clock.Clock) origin {
	return origin{span: trace.SpanContextFromContext(ctx), at: clk.Now()}
}

// traceState is the actor's tracing state; owned by run.
type traceState struct {
	turn      telemetry.Span    // the open turn's span in this process
	cause     trace.SpanContext // what the actor's work hangs under, when not the turn (a Resolve)
	prevCause trace.SpanContext // the cause before the request being handled (restored if it fails)
	req       *request          // the request being handled, while it is
	reqSpan   telemetry.Span    // its span (a Resolve's)
	decided   bool              // the request's decision was observed (DecisionSeconds)
	// since is when each awaiting call's current suspension began, for the calls this actor saw
	// suspend (the others use the log's time).
	since     map[string]suspended
	before    []suspended  // the touched calls that awaited before the commit in progress (scratch)
	beforeBuf [1]suspended // before's first backing array: most commits touch one call
}

type suspended struct {
	id   string
	kind tools.PendingKind
	at   time.Time
}

func (a *actor) tracer() *telemetry.Tracer { return a.m.cfg.Tracer }

// turnContext is the turn's span, started when a turn is open and has none in this process yet.
func (a *actor) turnContext() trace.SpanContext {
	t := a.tracer()
	if !t.On() {
		return trace.SpanContext{}
	}
	if !a.tr.turn.Recording() && a.st.turnOpen {
		var parent trace.SpanContext
		at := a.now()
		if r := a.tr.req; r != nil && r.kind == reqSend {
			parent = r.origin.span
			if !r.origin.at.IsZero() {
				at = r.origin.at
			}
		}
		a.tr.turn = t.Turn(parent, a.id, at)
	}
	return a.tr.turn.Context()
}

// traceParent is what the work the actor starts now hangs under.
func (a *actor) traceParent() trace.SpanContext {
	if a.tr.cause.IsValid() {
		return a.tr.cause
	}
	return a.turnContext()
}

// observeRequest runs before a request is dispatched: a Resolve gets its span, which becomes
// the cause of what it sets going.
func (a *actor) observeRequest(req *request) {
	a.tr.req, a.tr.decided = req, false
	t := a.tracer()
	if !t.On() || req.kind != reqResolve {
		return
	}
	tool, kind := "", ""
	if c := a.st.calls[req.callID]; c != nil {
		tool, kind = c.name, string(c.kind)
	}
	parent, link := req.origin.span, trace.SpanContext{}
	if parent.IsValid() {
		link = a.turnContext()
	} else {
		parent = a.turnContext()
	}
	at := req.origin.at
	if at.IsZero() {
		at = a.now()
	}
	a.tr.reqSpan = t.Resolve(parent, link, at, a.id, req.callID, tool, kind,
		telemetry.Who{ID: req.by.UserID, Role: string(req.by.Role), Via: req.by.Via})
	a.tr.prevCause, a.tr.cause = a.tr.cause, a.tr.reqSpan.Context()
}

// observedRequest runs once the request's reply is sent, before its continuation: the
// Resolve's span ends; a refused one gives the cause back.
func (a *actor) observedRequest(req *request, err error) {
	a.tr.req = nil
	if !a.tr.reqSpan.Recording() {
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = string(fault.KindInternal)
		if k := fault.KindOf(err); k != "" {
			outcome = string(k)
		}
		a.tr.cause = a.tr.prevCause
	}
	a.tr.reqSpan.Set(telemetry.KeyResolveOutcome.String(outcome))
	if err != nil {
		a.tr.reqSpan.End(outcome)
	} else {
		a.tr.reqSpan.End("")
	}
	a.tr.reqSpan = telemetry.Span{}
}

// observeStop ends the turn's span when the actor leaves memory with the turn still open.
func (a *actor) observeStop() {
	if a.tr.turn.Recording() {
		a.tr.turn.Set(telemetry.KeyTurnOutcome.String("parked"))
		a.tr.turn.End("")
		a.tr.turn = telemetry.Span{}
	}
}

// observeBefore notes which of the calls a stage touches await now (before its entries apply):
// the first time the step touches each, so a step that stages twice keeps how the call stood
// before the step. commitReady clears the notes once the step is written or dropped.
func (a *actor) observeBefore(touched []string) {
	if a.tr.before == nil {
		a.tr.before = a.tr.beforeBuf[:0]
	}
	for _, id := range touched {
		if slices.Contains(a.ready.touched, id) {
			continue // the step touched it already: its state before the step is noted (or was not awaiting)
		}
		if c := a.st.calls[id]; c != nil && c.status == store.CallAwaiting {
			a.tr.before = append(a.tr.before, suspended{id: id, kind: c.kind})
		}
	}
}

// observeAppend starts the span of the append about to be made, returning its context.
func (a *actor) observeAppend(b *store.Batch) (context.Context, telemetry.Span) {
	t := a.tracer()
	if !t.On() {
		return a.m.base, telemetry.Span{}
	}
	s := t.Append(a.traceParent(), a.id, len(b.Entries), len(b.Calls), b.Urgent)
	return telemetry.ContextWith(a.m.base, s.Context()), s
}

// observeAppended runs after an append: it ends its span, and once the append is durable it
// records the suspensions the batch ended (span and ApprovalWaitSeconds), notes the ones it
// began, observes a Resolve's DecisionSeconds and ends the turn's span when the turn ended.
func (a *actor) observeAppended(s telemetry.Span, b *store.Batch, touched []string, err error) {
	if err != nil {
		s.End("store_error")
		return
	}
	s.End("")
	now := a.now()
	for _, w := range a.tr.before {
		c := a.st.calls[w.id]
		if c == nil || (c.status == store.CallAwaiting && c.kind == w.kind) {
			continue // still waiting (say, for more approvers)
		}
		a.endSuspension(c, w.kind, now)
	}
	for _, id := range touched {
		c := a.st.calls[id]
		if c == nil || c.status != store.CallAwaiting {
			continue
		}
		if s, ok := a.tr.since[id]; !ok || s.kind != c.kind {
			if a.tr.since == nil {
				a.tr.since = map[string]suspended{}
			}
			a.tr.since[id] = suspended{id: id, kind: c.kind, at: now}
		}
	}
	if r := a.tr.req; r != nil && r.kind == reqResolve && !a.tr.decided && containsID(touched, r.callID) {
		a.tr.decided = true
		at := r.origin.at
		if at.IsZero() {
			at = now
		}
		kind := ""
		for _, w := range a.tr.before {
			if w.id == r.callID {
				kind = string(w.kind)
			}
		}
		metrics.DecisionSeconds.WithLabelValues(kind).Observe(now.Sub(at).Seconds())
	}
	if a.tr.turn.Recording() && !a.st.turnOpen {
		outcome := "ended"
		for _, e := range b.Entries {
			switch e.Type {
			case store.EntryTurnError:
				outcome = "error"
			case store.EntryTurnCancelled:
				outcome = "cancelled"
			}
		}
		a.tr.turn.Set(telemetry.KeyTurnOutcome.String(outcome))
		if outcome == "error" {
			a.tr.turn.End("turn_error")
		} else {
			a.tr.turn.End("")
		}
		a.tr.turn, a.tr.cause = telemetry.Span{}, trace.SpanContext{}
	}
}

// endSuspension observes the end of c's suspension of kind (it left it by the batch just
// committed).
func (a *actor) endSuspension(c *call, kind tools.PendingKind, now time.Time) {
	since, known := a.tr.since[c.id]
	delete(a.tr.since, c.id)
	start := since.at
	if !known || since.kind != kind {
		start, known = c.at, false // the tool_call entry's time, from the log
	}
	outcome := c.decision
	if c.status == store.CallAwaiting && kind == tools.PendingApproval {
		outcome = "approve" // approved, now waiting for the browser (a gated client call)
	} else if outcome == "" {
		outcome = c.status
	}
	metrics.ApprovalWaitSeconds.WithLabelValues(string(kind), outcome).Observe(now.Sub(start).Seconds())
	t := a.tracer()
	if !t.On() {
		return
	}
	who := telemetry.Who{ID: c.decidedBy}
	if r := a.tr.req; r != nil {
		who.ID = r.by.UserID
		who.Role, who.Via = string(r.by.Role), r.by.Via
	}
	parent, link := a.tr.turn.Context(), a.tr.reqSpan.Context()
	if !parent.IsValid() {
		parent, link = a.traceParent(), trace.SpanContext{}
	}
	t.RecordSuspension(parent, link, telemetry.Suspension{
		ConvID: a.id, CallID: c.id, Tool: c.name, Kind: string(kind), Since: start, End: now,
		SinceFromLog: !known, Decision: outcome, By: who,
	})
}

func containsID(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// observeChat starts a model call's span; ctx then carries it (traceparent on the request).
func (a *actor) observeChat(ctx context.Context, maxTokens int) (context.Context, telemetry.Span) {
	t := a.tracer()
	if !t.On() {
		return ctx, telemetry.Span{}
	}
	s := t.Chat(a.traceParent(), a.id, a.cfg().Provider.Name(), maxTokens)
	return telemetry.ContextWith(ctx, s.Context()), s
}

// endChat ends a model call's span (from the call's goroutine).
func endChat(s telemetry.Span, resp llm.Response, err error) {
	if !s.Recording() {
		return
	}
	errType := ""
	var le *llm.Error
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled):
		errType = "cancelled"
	case errors.As(err, &le) && le.Kind != "":
		errType = le.Kind
	default:
		errType = "error"
	}
	s.EndChat(resp.Usage.InputTokens, resp.Usage.OutputTokens, resp.StopReason, errType)
}

// observeTool starts the span of one attempt of c; ctx then carries it (traceparent on webhook
// and http tool requests).
func (a *actor) observeTool(ctx context.Context, c *call, attempt int) (context.Context, telemetry.Span) {
	t := a.tracer()
	if !t.On() {
		return ctx, telemetry.Span{}
	}
	s := t.Tool(a.traceParent(), a.id, c.id, c.name, attempt)
	return telemetry.ContextWith(ctx, s.Context()), s
}

// endTool ends a tool attempt's span (from the attempt's goroutine) with its outcome.
func endTool(s telemetry.Span, out tools.Outcome) {
	if !s.Recording() {
		return
	}
	errType := ""
	if out.Status != tools.OK {
		errType = string(out.Status)
		if out.Err != nil && out.Err.Kind != "" {
			errType = string(out.Err.Kind)
		}
	}
	s.End(errType)
}
