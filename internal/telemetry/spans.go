package telemetry

import (
	"context"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// The spans of a conversation. Their names and gen_ai.* attributes follow the OpenTelemetry
// GenAI semantic conventions (semconv v1.41: invoke_agent, chat, execute_tool); the suspension,
// resolve and append spans are Parley's own, with parley.* attributes.

// Attribute keys of Parley's own.
const (
	KeyPendingKind    = attribute.Key("parley.pending.kind")    // approval, elicitation, client_exec
	KeyDecision       = attribute.Key("parley.decision")        // approve, deny, accept, expire, cancelled …
	KeyDecidedBy      = attribute.Key("parley.decided_by")      // the deciding user's id (system for timers)
	KeyDecidedByRole  = attribute.Key("parley.decided_by.role") // member, reviewer, admin
	KeyDecidedByVia   = attribute.Key("parley.decided_by.via")  // session, token, system
	KeyWaitSeconds    = attribute.Key("parley.suspension.wait_seconds")
	KeySinceFromLog   = attribute.Key("parley.suspension.since_from_log") // the start came from the log, not this process's memory
	KeyToolAttempt    = attribute.Key("parley.tool.attempt")
	KeyTurnOutcome    = attribute.Key("parley.turn.outcome") // ended, parked
	KeyStoreEntries   = attribute.Key("parley.store.entries")
	KeyStoreCalls     = attribute.Key("parley.store.calls")
	KeyStoreUrgent    = attribute.Key("parley.store.urgent")
	KeyResolveOutcome = attribute.Key("parley.resolve.outcome") // ok, or the error kind
)

// AgentName is gen_ai.agent.name of every invoke_agent span.
const AgentName = "parley"

// Span is a started span; the zero Span (tracing off) ignores every call.
type Span struct {
	s   trace.Span
	now func() time.Time
}

// Recording reports whether the span records (tracing on).
func (s Span) Recording() bool { return s.s != nil }

// Context is the span's identity, to start children from ("" when off).
func (s Span) Context() trace.SpanContext {
	if s.s == nil {
		return trace.SpanContext{}
	}
	return s.s.SpanContext()
}

// Set adds attributes.
func (s Span) Set(kv ...attribute.KeyValue) {
	if s.s != nil {
		s.s.SetAttributes(kv...)
	}
}

// End ends the span; a non-empty errType (an error kind, never a message: messages can hold user
// data) marks it failed with error.type.
func (s Span) End(errType string) {
	if s.s == nil {
		return
	}
	if errType != "" {
		s.s.SetAttributes(semconv.ErrorTypeKey.String(errType))
		s.s.SetStatus(codes.Error, errType)
	}
	s.s.End(trace.WithTimestamp(s.now()))
}

// ContextWith returns ctx carrying parent as its span (so HTTP requests made under it carry its
// traceparent, and spans started from it are its children); ctx itself when parent is invalid.
func ContextWith(ctx context.Context, parent trace.SpanContext) context.Context {
	if !parent.IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, parent)
}

func (t *Tracer) start(parent trace.SpanContext, name string, kind trace.SpanKind, at time.Time, links []trace.Link, kv ...attribute.KeyValue) Span {
	if at.IsZero() {
		at = t.now()
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(kv...), trace.WithTimestamp(at)}
	if len(links) > 0 {
		opts = append(opts, trace.WithLinks(links...))
	}
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	_, s := t.tr.Start(ctx, name, opts...)
	return Span{s, t.now}
}

// Turn starts the span of one user turn in this process, "invoke_agent parley": from the
// message (or, after a restart or hibernation, from the actor's revival) to the turn's end, or
// until the actor leaves memory while the turn waits (parked).
func (t *Tracer) Turn(parent trace.SpanContext, convID string, at time.Time) Span {
	if t == nil {
		return Span{}
	}
	kv := []attribute.KeyValue{
		semconv.GenAIOperationNameInvokeAgent,
		semconv.GenAIAgentNameKey.String(AgentName),
		semconv.GenAIConversationIDKey.String(convID),
	}
	return t.start(parent, "invoke_agent "+AgentName, trace.SpanKindInternal, at, nil, kv...)
}

// ModelOf splits a provider's Name ("openai:gpt-4o", "demo") into gen_ai.provider.name and
// gen_ai.request.model.
func ModelOf(providerName string) (provider, model string) {
	if p, m, ok := strings.Cut(providerName, ":"); ok {
		return p, m
	}
	return providerName, providerName
}

// Chat starts the span of one model call, "chat {model}" (a client span: the request leaves
// the process). Neither the prompt nor the answer is recorded.
func (t *Tracer) Chat(parent trace.SpanContext, convID, providerName string, maxTokens int) Span {
	if t == nil {
		return Span{}
	}
	provider, model := ModelOf(providerName)
	kv := []attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameKey.String(provider),
		semconv.GenAIRequestModelKey.String(model),
		semconv.GenAIConversationIDKey.String(convID),
	}
	if maxTokens > 0 {
		kv = append(kv, semconv.GenAIRequestMaxTokensKey.Int(maxTokens))
	}
	return t.start(parent, "chat "+model, trace.SpanKindClient, time.Time{}, nil, kv...)
}

// EndChat ends a model call's span with the usage the provider reported (when it reported
// any) and its stop reason.
func (s Span) EndChat(inputTokens, outputTokens int, finish, errType string) {
	if s.s == nil {
		return
	}
	if inputTokens > 0 || outputTokens > 0 {
		s.s.SetAttributes(semconv.GenAIUsageInputTokensKey.Int(inputTokens), semconv.GenAIUsageOutputTokensKey.Int(outputTokens))
	}
	if finish != "" {
		s.s.SetAttributes(semconv.GenAIResponseFinishReasonsKey.StringSlice([]string{finish}))
	}
	s.End(errType)
}

// Tool starts the span of one attempt of a server tool call, "execute_tool {name}". Its
// arguments and result are not recorded.
func (t *Tracer) Tool(parent trace.SpanContext, convID, callID, name string, attempt int) Span {
	if t == nil {
		return Span{}
	}
	return t.start(parent, "execute_tool "+name, trace.SpanKindInternal, time.Time{}, nil,
		semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolNameKey.String(name),
		semconv.GenAIToolCallIDKey.String(callID),
		semconv.GenAIConversationIDKey.String(convID),
		KeyToolAttempt.Int(attempt),
	)
}

// Who is the person (or the system) behind a request.
type Who struct{ ID, Role, Via string }

// Resolve starts the span of one Resolve, "resolve {tool}", from when the request reached the
// agent (at). link, when valid, is a span the resolve belongs to without being its child (the
// turn, when the resolve has a caller's trace of its own).
func (t *Tracer) Resolve(parent, link trace.SpanContext, at time.Time, convID, callID, tool, kind string, by Who) Span {
	if t == nil {
		return Span{}
	}
	var links []trace.Link
	if link.IsValid() && !link.Equal(parent) {
		links = []trace.Link{{SpanContext: link}}
	}
	return t.start(parent, "resolve "+tool, trace.SpanKindInternal, at, links,
		semconv.GenAIConversationIDKey.String(convID),
		semconv.GenAIToolCallIDKey.String(callID),
		semconv.GenAIToolNameKey.String(tool),
		KeyPendingKind.String(kind),
		KeyDecidedBy.String(by.ID), KeyDecidedByRole.String(by.Role), KeyDecidedByVia.String(by.Via),
	)
}

// Suspension is one suspended call from when it began waiting (since) to its resolution (end):
// who decided and how. It is recorded whole when it ends, not held open while it waits, so a
// wait that outlives the process (hibernation, a restart) is still one span with its true
// duration: since comes from the log when this process did not see the call suspend
// (sinceFromLog).
type Suspension struct {
	ConvID, CallID, Tool, Kind string
	Since, End                 time.Time
	SinceFromLog               bool
	Decision                   string
	By                         Who
}

// RecordSuspension records s as a finished span, "await {kind} {tool}", under parent (the turn
// when this process holds it, else the request that ended the wait), linked to link when valid.
func (t *Tracer) RecordSuspension(parent, link trace.SpanContext, s Suspension) {
	if t == nil {
		return
	}
	var links []trace.Link
	if link.IsValid() && !link.Equal(parent) {
		links = []trace.Link{{SpanContext: link}}
	}
	kv := []attribute.KeyValue{
		semconv.GenAIConversationIDKey.String(s.ConvID),
		semconv.GenAIToolCallIDKey.String(s.CallID),
		semconv.GenAIToolNameKey.String(s.Tool),
		KeyPendingKind.String(s.Kind),
		KeyWaitSeconds.Float64(s.End.Sub(s.Since).Seconds()),
		KeyDecision.String(s.Decision),
	}
	if s.SinceFromLog {
		kv = append(kv, KeySinceFromLog.Bool(true))
	}
	if s.By.ID != "" {
		kv = append(kv, KeyDecidedBy.String(s.By.ID))
	}
	if s.By.Role != "" {
		kv = append(kv, KeyDecidedByRole.String(s.By.Role))
	}
	if s.By.Via != "" {
		kv = append(kv, KeyDecidedByVia.String(s.By.Via))
	}
	sp := t.start(parent, "await "+s.Kind+" "+s.Tool, trace.SpanKindInternal, s.Since, links, kv...)
	sp.s.End(trace.WithTimestamp(s.End))
}

// Append starts the span of one durable append to a conversation's log: the entries, the
// tool_calls rows, and whether a person waits for it (urgent).
func (t *Tracer) Append(parent trace.SpanContext, convID string, entries, calls int, urgent bool) Span {
	if t == nil {
		return Span{}
	}
	return t.start(parent, "append conversation_log", trace.SpanKindInternal, time.Time{}, nil,
		semconv.GenAIConversationIDKey.String(convID),
		KeyStoreEntries.Int(entries), KeyStoreCalls.Int(calls), KeyStoreUrgent.Bool(urgent),
	)
}
