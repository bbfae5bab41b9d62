// Package anthropic is the llm.Provider for Anthropic Messages, built on the official SDK
// github.com/anthropics/anthropic-sdk-go. The SDK brings authentication, the version header and
// the SSE decoder; this package streams text deltas, reassembles tool_use inputs from their
// input_json_delta fragments, passes provider-hosted server tools (web search) through as
// llm.ToolCall{Provider: true} with their result block verbatim, replays those blocks verbatim
// in later requests, and maps failures to *llm.Error.
//
// The SDK's own retries are disabled: the agent's loop is the one retry scheduler.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
)

// DefaultMaxTokens is sent when a request names no limit (the Messages API requires one).
const DefaultMaxTokens = 4096

// Config configures a Provider. Only what it holds is used: the SDK's environment and profile
// defaults are switched off, so the caller (cmd/web) reads ANTHROPIC_API_KEY and
// ANTHROPIC_BASE_URL itself.
type Config struct {
	// APIKey is sent as x-api-key. It is never logged.
	APIKey string
	// BaseURL is the API root; empty is https://api.anthropic.com.
	BaseURL string
	// Model is the model name sent with every request (required).
	Model string
	// HTTPClient carries the requests; nil uses http.DefaultClient.
	HTTPClient *http.Client
	// Clock reads HTTP-date Retry-After values; nil is the wall clock.
	Clock clock.Clock
}

// Provider streams Messages. It is safe for concurrent use.
type Provider struct {
	client anthropic.Client
	model  string
}

var _ llm.Provider = (*Provider)(nil)

// New builds a Provider. It refuses an empty model name.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("anthropic provider: a model name is required")
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	opts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithMaxRetries(0),
		option.WithMiddleware(llm.StatusMiddleware(clk.Now)),
		option.WithAPIKey(cfg.APIKey),
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Provider{client: anthropic.NewClient(opts...), model: cfg.Model}, nil
}

// Name returns "anthropic:<model>".
func (p *Provider) Name() string { return "anthropic:" + p.model }

// ToolFormat returns "anthropic": Request.Tools are Messages tool definitions (and native
// server-tool definitions such as web search).
func (p *Provider) ToolFormat() string { return "anthropic" }

// block gathers one content block of the streamed answer.
type block struct {
	kind  string // "tool_use" or "server_tool_use"
	id    string
	name  string
	start string // the input given in content_block_start
	args  strings.Builder
	delta bool // input_json_delta fragments arrived
}

// maxContinuations bounds how many times one Stream continues a paused turn.
const maxContinuations = 3

// Stream sends req and streams the answer. Text deltas are emitted as they arrive; tool calls
// (local tool_use and provider server_tool_use, each with its result attached) are emitted in
// block order once the answer is complete (message_stop). A stream that ends before
// message_stop is a retryable error.
//
// An answer that stops with "pause_turn" (the provider paused a long server-tool turn) is
// continued here, by sending it back as the last assistant message, up to maxContinuations
// times; the parts come back as one answer, so the agent never sees a paused turn as final.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	var total llm.Response
	msgs := req.Messages
	for i := 0; ; i++ {
		part, err := p.streamOnce(ctx, llm.Request{System: req.System, Messages: msgs, Tools: req.Tools, MaxTokens: req.MaxTokens}, emit)
		if err != nil {
			return llm.Response{}, err
		}
		total.Text += part.Text
		total.ToolCalls = append(total.ToolCalls, part.ToolCalls...)
		total.Usage.InputTokens += part.Usage.InputTokens
		total.Usage.OutputTokens += part.Usage.OutputTokens
		total.StopReason = part.StopReason
		if part.StopReason != "pause_turn" || i == maxContinuations {
			return total, nil
		}
		msgs = append(append([]llm.Message(nil), msgs...), llm.Message{Role: llm.RoleAssistant, Content: part.Text, ToolCalls: part.ToolCalls})
	}
}

// streamOnce makes one request and streams its answer.
func (p *Provider) streamOnce(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return llm.Response{}, err
	}
	stream := p.client.Messages.NewStreaming(ctx, params)
	defer stream.Close()

	var (
		resp     llm.Response
		text     strings.Builder
		blocks   = map[int64]*block{}
		order    []int64
		results  = map[string]json.RawMessage{} // server tool results by tool_use_id
		finished bool
	)
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "message_start":
			u := ev.Message.Usage
			resp.Usage.InputTokens = int(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens)
			resp.Usage.OutputTokens = int(u.OutputTokens)
		case "content_block_start":
			cb := ev.ContentBlock
			switch {
			case cb.Type == "text":
				if cb.Text != "" {
					text.WriteString(cb.Text)
					if err := emit(llm.Event{Type: llm.EventTextDelta, Text: cb.Text}); err != nil {
						return llm.Response{}, err
					}
				}
			case cb.Type == "tool_use" || cb.Type == "server_tool_use":
				b := &block{kind: cb.Type, id: cb.ID, name: cb.Name, start: cb.JSON.Input.Raw()}
				blocks[ev.Index] = b
				order = append(order, ev.Index)
			case cb.ToolUseID != "" && strings.HasSuffix(cb.Type, "_tool_result"):
				// A server tool's result (web_search_tool_result, web_fetch_tool_result …): kept
				// verbatim to be rendered and replayed.
				results[cb.ToolUseID] = json.RawMessage(cb.RawJSON())
			}
		case "content_block_delta":
			switch ev.Delta.Type {
			case "text_delta":
				if ev.Delta.Text == "" {
					continue
				}
				text.WriteString(ev.Delta.Text)
				if err := emit(llm.Event{Type: llm.EventTextDelta, Text: ev.Delta.Text}); err != nil {
					return llm.Response{}, err
				}
			case "input_json_delta":
				if b := blocks[ev.Index]; b != nil {
					b.args.WriteString(ev.Delta.PartialJSON)
					b.delta = true
				}
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				resp.StopReason = string(ev.Delta.StopReason)
			}
			// message_delta usage is cumulative.
			if ev.Usage.OutputTokens > 0 {
				resp.Usage.OutputTokens = int(ev.Usage.OutputTokens)
			}
			if in := ev.Usage.InputTokens + ev.Usage.CacheCreationInputTokens + ev.Usage.CacheReadInputTokens; in > 0 {
				resp.Usage.InputTokens = int(in)
			}
		case "message_stop":
			finished = true
		}
	}
	if err := stream.Err(); err != nil {
		return llm.Response{}, mapStreamError(ctx, err)
	}
	if err := ctx.Err(); err != nil {
		return llm.Response{}, err
	}
	if !finished {
		return llm.Response{}, llm.StreamCutError(nil)
	}
	resp.Text = text.String()
	for _, i := range order {
		b := blocks[i]
		input := b.start
		if b.delta {
			input = b.args.String()
		}
		tc := llm.ToolCall{ID: b.id, Name: b.name, Args: normalizeArgs(input)}
		if b.kind == "server_tool_use" {
			tc.Provider = true
			tc.Result = results[b.id]
		}
		resp.ToolCalls = append(resp.ToolCalls, tc)
	}
	for i := range resp.ToolCalls {
		if err := emit(llm.Event{Type: llm.EventToolCall, ToolCall: &resp.ToolCalls[i]}); err != nil {
			return llm.Response{}, err
		}
	}
	return resp, nil
}

// normalizeArgs turns the reassembled input into JSON: empty is {}, and text that is not JSON
// is kept as a JSON string so the agent's schema check reports invalid_args to the model.
func normalizeArgs(s string) json.RawMessage {
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage(`{}`)
	}
	if json.Valid([]byte(s)) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// mapStreamError maps what the SDK's stream reports: the status middleware's *llm.Error as is,
// an error event inside the stream by its error type, anything else as a stream cut mid-way.
func mapStreamError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var le *llm.Error
	if errors.As(err, &le) {
		return le
	}
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		return streamAPIError(ae)
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return &llm.Error{Kind: string(fault.KindInvalidResponse), Message: "the provider sent an event that is not JSON", Retryable: true, Err: err}
	}
	return llm.StreamCutError(err)
}

// streamAPIError maps an error event sent inside a 200 stream, e.g.
// {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}, by its type to
// the status the same failure has outside a stream.
func streamAPIError(ae *anthropic.Error) *llm.Error {
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(ae.RawJSON()), &body)
	typ := body.Error.Type
	if typ == "" {
		typ = string(ae.Type())
	}
	status := map[string]int{
		"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
		"not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429,
		"api_error": 500, "overloaded_error": 529,
	}[typ]
	if status == 0 {
		status = 500 // an unknown error type mid-stream: treat as the provider's failure
	}
	msg := body.Error.Message
	if msg == "" {
		msg = "the provider reported an error in the stream"
	}
	e := llm.StatusError(status, nil, nil, time.Time{})
	e.Message, e.Err = msg, ae
	if typ != "invalid_request_error" && typ != "not_found_error" && typ != "request_too_large" &&
		typ != "authentication_error" && typ != "permission_error" {
		// Whatever else breaks an answer already under way (overload, an internal error, a
		// rate limit) is transient.
		e.Retryable = true
	}
	return e
}

// params builds the SDK's request. Tool definitions and provider result blocks are sent
// verbatim (param.Override).
func (p *Provider) params(req llm.Request) (anthropic.MessageNewParams, error) {
	maxTokens := int64(req.MaxTokens)
	if maxTokens <= 0 {
		maxTokens = DefaultMaxTokens
	}
	params := anthropic.MessageNewParams{Model: anthropic.Model(p.model), MaxTokens: maxTokens}
	if req.System != "" {
		params.System = []anthropic.TextBlockParam{{Text: req.System}}
	}
	for i, t := range req.Tools {
		if !json.Valid(t) {
			return anthropic.MessageNewParams{}, fmt.Errorf("anthropic provider: tool %d is not valid JSON", i)
		}
		tp := param.Override[anthropic.ToolParam](json.RawMessage(t))
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	msgs, err := messages(req.Messages)
	if err != nil {
		return anthropic.MessageNewParams{}, err
	}
	params.Messages = msgs
	return params, nil
}

// messages converts the conversation: tool results become tool_result blocks of a user
// message (consecutive ones grouped, as the API requires), provider calls are replayed as a
// server_tool_use block followed by their result block verbatim, and consecutive messages of
// one role are merged.
func messages(in []llm.Message) ([]anthropic.MessageParam, error) {
	var out []anthropic.MessageParam
	add := func(role anthropic.MessageParamRole, blocks ...anthropic.ContentBlockParamUnion) {
		if len(blocks) == 0 {
			return
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			return
		}
		out = append(out, anthropic.MessageParam{Role: role, Content: blocks})
	}
	for i, m := range in {
		switch m.Role {
		case llm.RoleUser:
			if m.Content != "" {
				add(anthropic.MessageParamRoleUser, anthropic.NewTextBlock(m.Content))
			}
		case llm.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if m.Content != "" {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, tc := range m.ToolCalls {
				args := tc.Args
				if len(args) == 0 {
					args = json.RawMessage(`{}`)
				}
				if !tc.Provider {
					blocks = append(blocks, anthropic.NewToolUseBlock(tc.ID, args, tc.Name))
					continue
				}
				if len(tc.Result) == 0 {
					// A server tool use whose result never arrived (a cut or paused answer):
					// the API refuses a server_tool_use without its result, so leave it out.
					continue
				}
				use, err := json.Marshal(map[string]any{"type": "server_tool_use", "id": tc.ID, "name": tc.Name, "input": args})
				if err != nil {
					return nil, fmt.Errorf("anthropic provider: message %d: encode server tool use %s: %w", i, tc.ID, err)
				}
				su := param.Override[anthropic.ServerToolUseBlockParam](json.RawMessage(use))
				res := param.Override[anthropic.WebSearchToolResultBlockParam](tc.Result)
				blocks = append(blocks, anthropic.ContentBlockParamUnion{OfServerToolUse: &su},
					anthropic.ContentBlockParamUnion{OfWebSearchToolResult: &res})
			}
			add(anthropic.MessageParamRoleAssistant, blocks...)
		case llm.RoleTool:
			add(anthropic.MessageParamRoleUser, anthropic.NewToolResultBlock(m.ToolCallID, m.Content, isErrorEnvelope(m.Content)))
		default:
			return nil, fmt.Errorf("anthropic provider: message %d has unknown role %q", i, m.Role)
		}
	}
	return out, nil
}

// isErrorEnvelope reports whether a tool message carries {"ok":false,…}, so the block is marked
// is_error and the model reads it as a failed call.
func isErrorEnvelope(content string) bool {
	var env struct {
		OK *bool `json:"ok"`
	}
	return json.Unmarshal([]byte(content), &env) == nil && env.OK != nil && !*env.OK
}
