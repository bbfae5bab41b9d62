// Package openai is the llm.Provider for OpenAI Chat Completions and every server that speaks
// it (Ollama, vLLM, llama.cpp's server, LM Studio …), built on the official SDK
// github.com/openai/openai-go/v3. The SDK brings the transport, authentication, status errors
// and the SSE decoder; this package encodes the request and decodes the chunks' fields itself
// (wireRequest, streamChunk: the SDK's reflective codecs were most of a model call's CPU), and
// adds what the agent needs on top: tool-call argument fragments reassembled by index, text
// deltas emitted as they arrive, failures mapped to *llm.Error, a stream cut mid-way reported as
// retryable, and tool-call ids made unique.
//
// The SDK's own retries are disabled: the agent's loop is the one retry scheduler, so a failed
// call comes back at once with its Retry-After.
package openai

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
)

// Config configures a Provider.
type Config struct {
	// APIKey is sent as a bearer token. Local servers (Ollama, llama.cpp) ignore it; when empty,
	// the SDK falls back to OPENAI_API_KEY from the environment. It is never logged.
	APIKey string
	// BaseURL is the API root, e.g. "http://127.0.0.1:11434/v1" for Ollama; empty is OpenAI's.
	BaseURL string
	// Model is the model name sent with every request (required).
	Model string
	// HTTPClient carries the requests; nil uses http.DefaultClient.
	HTTPClient *http.Client
	// Clock reads HTTP-date Retry-After values; nil is the wall clock.
	Clock clock.Clock
}

// Provider streams Chat Completions. It is safe for concurrent use.
type Provider struct {
	client openai.Client
	model  string
}

var _ llm.Provider = (*Provider)(nil)

// New builds a Provider. It refuses an empty model name.
func New(cfg Config) (*Provider, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("openai provider: a model name is required")
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	opts := []option.RequestOption{
		option.WithMaxRetries(0),
		option.WithMiddleware(llm.StatusMiddleware(clk.Now)),
	}
	if cfg.APIKey != "" {
		opts = append(opts, option.WithAPIKey(cfg.APIKey))
	}
	if cfg.BaseURL != "" {
		opts = append(opts, option.WithBaseURL(cfg.BaseURL))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Provider{client: openai.NewClient(opts...), model: cfg.Model}, nil
}

// Name returns "openai:<model>".
func (p *Provider) Name() string { return "openai:" + p.model }

// ToolFormat returns "openai": Request.Tools are Chat Completions tool definitions.
func (p *Provider) ToolFormat() string { return "openai" }

// Stream sends req and streams the answer. Text deltas are emitted as they arrive; tool calls
// are emitted once the answer is complete (their argument fragments may interleave by index
// until then), in index order. A call whose id is empty, repeats an id of this answer, or
// repeats an id already used in req.Messages gets a fresh "call_<random>" id: Chat Completions
// is stateless and only needs the ids of one request to match each other, so the fresh id is
// the one stored and sent back later, and no mapping to the provider's id is needed.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	body, err := p.body(req)
	if err != nil {
		return llm.Response{}, err
	}
	// The body is encoded here (see body) and sent through the SDK's client, which still does the
	// authentication, the status mapping and the SSE decoding, as NewStreaming would.
	var raw *http.Response
	err = p.client.Post(ctx, "chat/completions", body, &raw)
	stream := ssestream.NewStream[streamChunk](ssestream.NewDecoder(raw), err)
	defer stream.Close()

	var (
		resp     llm.Response
		text     strings.Builder
		calls    []*partialCall             // in order of first appearance
		current  = map[int64]*partialCall{} // the call each index is filling
		finished bool
	)
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Usage.PromptTokens != 0 || chunk.Usage.CompletionTokens != 0 {
			resp.Usage = llm.Usage{InputTokens: int(chunk.Usage.PromptTokens), OutputTokens: int(chunk.Usage.CompletionTokens)}
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue // n > 1 is never requested; ignore any extra choice
			}
			// A refusal is the model's answer too: show it as text.
			if d := ch.Delta.Content + ch.Delta.Refusal; d != "" {
				text.WriteString(d)
				if err := emit(llm.Event{Type: llm.EventTextDelta, Text: d}); err != nil {
					return llm.Response{}, err
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				pc := current[tc.Index]
				// A new id at an index already filled starts another call: some servers send
				// each complete call in its own chunk and leave out "index" (so it reads 0).
				if pc == nil || tc.ID != "" && pc.id != "" && tc.ID != pc.id {
					pc = &partialCall{index: tc.Index}
					current[tc.Index] = pc
					calls = append(calls, pc)
				}
				if tc.ID != "" && pc.id == "" {
					pc.id = tc.ID
				}
				if tc.Function.Name != "" && pc.name == "" {
					pc.name = tc.Function.Name
				}
				pc.args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				finished = true
				resp.StopReason = ch.FinishReason
			}
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
	resp.ToolCalls = assembleCalls(calls, usedIDs(req.Messages))
	for i := range resp.ToolCalls {
		if err := emit(llm.Event{Type: llm.EventToolCall, ToolCall: &resp.ToolCalls[i]}); err != nil {
			return llm.Response{}, err
		}
	}
	return resp, nil
}

// streamChunk is the part of a Chat Completions stream chunk this package reads, decoded by
// encoding/json: the SDK's ChatCompletionChunk, decoded by its reflective decoder that keeps
// every field's metadata, cost more per chunk than the rest of a stream's handling.
type streamChunk struct {
	Choices []struct {
		Index int64 `json:"index"`
		Delta struct {
			Content   string `json:"content"`
			Refusal   string `json:"refusal"`
			ToolCalls []struct {
				Index    int64  `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// partialCall gathers one tool call's fragments.
type partialCall struct {
	index int64
	id    string
	name  string
	args  strings.Builder
}

// assembleCalls orders the calls by index (then by first appearance) and makes their ids
// unique.
func assembleCalls(calls []*partialCall, used map[string]bool) []llm.ToolCall {
	if len(calls) == 0 {
		return nil
	}
	sort.SliceStable(calls, func(a, b int) bool { return calls[a].index < calls[b].index })
	out := make([]llm.ToolCall, 0, len(calls))
	for _, pc := range calls {
		id := pc.id
		if id == "" || used[id] {
			id = freshID(used)
		}
		used[id] = true
		out = append(out, llm.ToolCall{ID: id, Name: pc.name, Args: normalizeArgs(pc.args.String())})
	}
	return out
}

// normalizeArgs turns the reassembled argument text into JSON: empty is {}, and text that is
// not JSON (a model's malformed output) is kept as a JSON string, so the agent's schema check
// reports invalid_args to the model instead of the raw bytes breaking the log.
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

// usedIDs collects the tool-call ids the conversation already holds.
func usedIDs(msgs []llm.Message) map[string]bool {
	used := map[string]bool{}
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			used[tc.ID] = true
		}
		if m.ToolCallID != "" {
			used[m.ToolCallID] = true
		}
	}
	return used
}

func freshID(used map[string]bool) string {
	for {
		var b [12]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		id := "call_" + hex.EncodeToString(b[:])
		if !used[id] {
			return id
		}
	}
}

// mapStreamError maps what the SDK's stream reports. Errors from the status middleware are
// already *llm.Error; an error event inside the stream is a provider failure worth retrying;
// a read failure is a stream cut mid-way.
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
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		return &llm.Error{Kind: string(fault.KindProviderHTTPError), Message: streamErrorMessage(se), Retryable: true, Err: err}
	}
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typ) {
		return &llm.Error{Kind: string(fault.KindInvalidResponse), Message: "the provider sent a chunk that is not JSON", Retryable: true, Err: err}
	}
	return llm.StreamCutError(err)
}

func streamErrorMessage(se *ssestream.StreamError) string {
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(se.Event.Data, &body) == nil && body.Error.Message != "" {
		return body.Error.Message
	}
	return "the provider reported an error in the stream"
}

// wireRequest is a streaming Chat Completions request as the SDK's ChatCompletionNewParams
// encodes it (openai_test.go checks that the two agree), encoded with encoding/json: the SDK's
// reflective encoder of its parameter unions, plus its edit of the encoded body to add
// "stream", was the largest part of this package's CPU per model call (docs/benchmarks.md).
type wireRequest struct {
	Messages      []wireMessage     `json:"messages"`
	Model         string            `json:"model"`
	MaxTokens     int               `json:"max_tokens,omitempty"`
	StreamOptions wireStreamOptions `json:"stream_options"`
	Stream        bool              `json:"stream"`
	// The tools are appended to the encoded object as they are (see body).
}

type wireStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Role       string         `json:"role"`
}

type wireToolCall struct {
	ID       string           `json:"id"`
	Function wireToolFunction `json:"function"`
	Type     string           `json:"type"`
}

type wireToolFunction struct {
	Arguments string `json:"arguments"`
	Name      string `json:"name"`
}

// body encodes req as a streaming Chat Completions request. Tool definitions are sent
// verbatim, as the registry exported them.
func (p *Provider) body(req llm.Request) ([]byte, error) {
	w := wireRequest{Model: p.model, StreamOptions: wireStreamOptions{IncludeUsage: true}, Stream: true,
		Messages: make([]wireMessage, 0, len(req.Messages)+1)}
	if req.System != "" {
		w.Messages = append(w.Messages, wireMessage{Role: "system", Content: &req.System})
	}
	for i, m := range req.Messages {
		switch m.Role {
		case llm.RoleUser:
			w.Messages = append(w.Messages, wireMessage{Role: "user", Content: &m.Content})
		case llm.RoleAssistant:
			a := wireMessage{Role: "assistant"}
			if m.Content != "" || len(m.ToolCalls) == 0 {
				a.Content = &m.Content
			}
			for _, tc := range m.ToolCalls {
				if tc.Provider {
					continue // provider-hosted calls do not exist in Chat Completions
				}
				args := string(tc.Args)
				if args == "" {
					args = "{}"
				}
				a.ToolCalls = append(a.ToolCalls, wireToolCall{ID: tc.ID, Type: "function", Function: wireToolFunction{Name: tc.Name, Arguments: args}})
			}
			w.Messages = append(w.Messages, a)
		case llm.RoleTool:
			w.Messages = append(w.Messages, wireMessage{Role: "tool", Content: &m.Content, ToolCallID: m.ToolCallID})
		default:
			return nil, fmt.Errorf("openai provider: message %d has unknown role %q", i, m.Role)
		}
	}
	if req.MaxTokens > 0 {
		// max_tokens rather than max_completion_tokens: every compatible server reads it.
		w.MaxTokens = req.MaxTokens
	}
	b, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("openai provider: encode the request: %w", err)
	}
	if len(req.Tools) == 0 {
		return b, nil
	}
	// The tool definitions go in verbatim, checked once: as json.RawMessage fields, encoding/json
	// would scan and re-compact each of them again on every model call.
	size := len(b) + len(`,"tools":[]`)
	for i, t := range req.Tools {
		if !json.Valid(t) {
			return nil, fmt.Errorf("openai provider: tool %d is not valid JSON", i)
		}
		size += len(t) + 1
	}
	out := make([]byte, 0, size)
	out = append(out, b[:len(b)-1]...) // without the closing brace
	out = append(out, `,"tools":[`...)
	for i, t := range req.Tools {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, t...)
	}
	return append(out, "]}"...), nil
}
