// Package llmtest provides a scripted, in-process llm.Provider for tests of code that drives a
// model (the agent's turn loop): a queue of answers and failures, played in order, with every
// request recorded. Steps can stream text in pieces, fail part-way like a cut stream, block
// until the test releases them (to observe a "generating" state or cancel it), or compute the
// answer from the request.
package llmtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"parley/internal/fault"
	"parley/internal/llm"
)

// ErrNoStep is returned (wrapped in a non-retryable *llm.Error) when Stream is called with no
// step left in the script: the code under test made more model calls than the test expected.
var ErrNoStep = errors.New("llmtest: no scripted step left")

// Step is one scripted model call.
type Step struct {
	// Deltas are the text deltas streamed, in order. When empty, Text is streamed word by word.
	Deltas []string
	// Text is the answer's text when Deltas is empty.
	Text string
	// ToolCalls are emitted after the text, in order (Args nil becomes {}).
	ToolCalls []llm.ToolCall
	// StopReason defaults to "tool_use" with calls and "end_turn" without.
	StopReason string
	Usage      llm.Usage
	// Err, when set, is returned after the deltas (and before any tool call): a stream cut
	// mid-way, a 429 … Use the helpers RateLimited, ServerError, Cut, Unauthorized.
	Err error
	// Started, when non-nil, is closed when the call reaches this step (before anything is
	// emitted), so a test knows the model call is under way.
	Started chan struct{}
	// Release, when non-nil, makes the call wait (after the first delta, if any) until it is
	// closed or the context is done; a done context returns ctx.Err().
	Release <-chan struct{}
	// Respond, when set, computes the step from the request; its result's own Respond is ignored.
	Respond func(req llm.Request) Step
}

// Provider is a scripted llm.Provider. The zero value is not usable; use New.
type Provider struct {
	name   string
	format string

	mu       sync.Mutex
	steps    []Step        // guarded by mu
	requests []llm.Request // guarded by mu
}

var _ llm.Provider = (*Provider)(nil)

// New returns a provider that plays steps in order. Its tool format is "openai"; see
// WithFormat.
func New(steps ...Step) *Provider {
	return &Provider{name: "llmtest", format: "openai", steps: append([]Step(nil), steps...)}
}

// WithFormat sets the tool format the provider reports ("openai", "anthropic" or "demo") and
// returns p.
func (p *Provider) WithFormat(format string) *Provider {
	p.format = format
	return p
}

// Name returns "llmtest".
func (p *Provider) Name() string { return p.name }

// ToolFormat returns the configured format.
func (p *Provider) ToolFormat() string { return p.format }

// Push appends steps to the script.
func (p *Provider) Push(steps ...Step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.steps = append(p.steps, steps...)
}

// Remaining reports how many steps are left.
func (p *Provider) Remaining() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.steps)
}

// Calls reports how many model calls were made.
func (p *Provider) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.requests)
}

// Requests returns deep copies of the requests received, in order.
func (p *Provider) Requests() []llm.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]llm.Request, len(p.requests))
	for i, r := range p.requests {
		out[i] = cloneRequest(r)
	}
	return out
}

// LastRequest returns a copy of the latest request; ok is false before the first call.
func (p *Provider) LastRequest() (req llm.Request, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.requests) == 0 {
		return llm.Request{}, false
	}
	return cloneRequest(p.requests[len(p.requests)-1]), true
}

// Stream records req and plays the next step.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	p.mu.Lock()
	p.requests = append(p.requests, cloneRequest(req))
	if len(p.steps) == 0 {
		n := len(p.requests)
		p.mu.Unlock()
		return llm.Response{}, &llm.Error{Kind: string(fault.KindInternal), Message: fmt.Sprintf("model call %d was not scripted", n), Err: ErrNoStep}
	}
	st := p.steps[0]
	p.steps = p.steps[1:]
	p.mu.Unlock()

	if st.Respond != nil {
		started, release := st.Started, st.Release
		st = st.Respond(cloneRequest(req))
		if st.Started == nil {
			st.Started = started
		}
		if st.Release == nil {
			st.Release = release
		}
	}
	if st.Started != nil {
		close(st.Started)
	}
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	deltas := st.Deltas
	if len(deltas) == 0 && st.Text != "" {
		deltas = splitWords(st.Text)
	}
	var text strings.Builder
	for i, d := range deltas {
		if err := emit(llm.Event{Type: llm.EventTextDelta, Text: d}); err != nil {
			return llm.Response{}, err
		}
		text.WriteString(d)
		if i == 0 && st.Release != nil {
			if err := wait(ctx, st.Release); err != nil {
				return llm.Response{}, err
			}
		}
	}
	if len(deltas) == 0 && st.Release != nil {
		if err := wait(ctx, st.Release); err != nil {
			return llm.Response{}, err
		}
	}
	if st.Err != nil {
		return llm.Response{}, st.Err
	}
	resp := llm.Response{Text: text.String(), Usage: st.Usage, StopReason: st.StopReason}
	for _, tc := range st.ToolCalls {
		tc.Args = cloneRaw(tc.Args)
		if len(tc.Args) == 0 {
			tc.Args = json.RawMessage(`{}`)
		}
		tc.Result = cloneRaw(tc.Result)
		resp.ToolCalls = append(resp.ToolCalls, tc)
	}
	if resp.StopReason == "" {
		resp.StopReason = "end_turn"
		if len(resp.ToolCalls) > 0 {
			resp.StopReason = "tool_use"
		}
	}
	for i := range resp.ToolCalls {
		if err := emit(llm.Event{Type: llm.EventToolCall, ToolCall: &resp.ToolCalls[i]}); err != nil {
			return llm.Response{}, err
		}
	}
	return resp, nil
}

func wait(ctx context.Context, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Call builds a tool call. args may be nil ({}), a json.RawMessage or a string (taken as JSON
// text, verbatim), or any other value (encoded as JSON).
func Call(id, name string, args any) llm.ToolCall {
	var raw json.RawMessage
	switch a := args.(type) {
	case nil:
		raw = json.RawMessage(`{}`)
	case json.RawMessage:
		raw = a
	case string:
		raw = json.RawMessage(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			panic(fmt.Sprintf("llmtest.Call(%s): args do not encode: %v", name, err))
		}
		raw = b
	}
	return llm.ToolCall{ID: id, Name: name, Args: raw}
}

// Reply is a step that answers text and ends the turn.
func Reply(text string) Step { return Step{Text: text} }

// Calls is a step that makes the given tool calls.
func Calls(calls ...llm.ToolCall) Step { return Step{ToolCalls: calls} }

// RateLimited is the error of a 429 with Retry-After after.
func RateLimited(after time.Duration) *llm.Error {
	return &llm.Error{Status: 429, Kind: string(fault.KindRateLimited), Message: "rate limited (scripted)", Retryable: true, RetryAfter: after}
}

// ServerError is the error of a 5xx answer.
func ServerError(status int) *llm.Error {
	return &llm.Error{Status: status, Kind: string(fault.KindProviderHTTPError), Message: "server error (scripted)", Retryable: true}
}

// Unauthorized is the error of a 401.
func Unauthorized() *llm.Error {
	return &llm.Error{Status: 401, Kind: string(fault.KindNotAuthenticated), Message: "invalid API key (scripted)"}
}

// Cut is the error of a stream cut mid-way.
func Cut() *llm.Error { return llm.StreamCutError(nil) }

// Collect streams req from p and gathers the events, for tests of providers.
func Collect(ctx context.Context, p llm.Provider, req llm.Request) ([]llm.Event, llm.Response, error) {
	var evs []llm.Event
	resp, err := p.Stream(ctx, req, func(e llm.Event) error {
		if e.ToolCall != nil {
			tc := *e.ToolCall
			e.ToolCall = &tc
		}
		evs = append(evs, e)
		return nil
	})
	return evs, resp, err
}

func splitWords(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexAny(s, " \n\t")
		if i < 0 {
			return append(out, s)
		}
		j := i
		for j < len(s) && (s[j] == ' ' || s[j] == '\n' || s[j] == '\t') {
			j++
		}
		out = append(out, s[:j])
		s = s[j:]
	}
	return out
}

func cloneRaw(b json.RawMessage) json.RawMessage {
	if b == nil {
		return nil
	}
	return append(json.RawMessage(nil), b...)
}

func cloneRequest(r llm.Request) llm.Request {
	out := r
	out.Messages = make([]llm.Message, len(r.Messages))
	for i, m := range r.Messages {
		m.ToolCalls = append([]llm.ToolCall(nil), m.ToolCalls...)
		for j := range m.ToolCalls {
			m.ToolCalls[j].Args = cloneRaw(m.ToolCalls[j].Args)
			m.ToolCalls[j].Result = cloneRaw(m.ToolCalls[j].Result)
		}
		out.Messages[i] = m
	}
	out.Tools = make([]llm.Tool, len(r.Tools))
	for i, t := range r.Tools {
		out.Tools[i] = cloneRaw(t)
	}
	return out
}
