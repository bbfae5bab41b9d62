// Package llm is the streaming model interface and its providers: OpenAI-compatible Chat
// Completions (package openai), Anthropic Messages (package anthropic) and the offline demo
// model (package demo).
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Role of a message.
type Role string

// Roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of the model's context.
type Message struct {
	Role Role
	// Content is the text of a user or assistant message, or a tool message's result envelope.
	Content string
	// ToolCalls are the calls an assistant message made, in order.
	ToolCalls []ToolCall
	// ToolCallID links a tool message to its call.
	ToolCallID string
}

// ToolCall is one call the model made.
type ToolCall struct {
	ID   string
	Name string
	Args json.RawMessage
	// Provider marks a call the provider ran itself (hosted web search); Result then holds the
	// provider's result block verbatim, to be rendered and replayed, never dispatched locally.
	Provider bool
	Result   json.RawMessage
}

// Tool is a tool definition in the provider's own format (see tools.Registry's exports).
type Tool = json.RawMessage

// Request is one LLM call.
type Request struct {
	System    string
	Messages  []Message
	Tools     []Tool
	MaxTokens int
}

// EventType names a stream event.
type EventType string

// Stream events.
const (
	EventTextDelta EventType = "text_delta"
	EventToolCall  EventType = "tool_call" // a complete call (arguments reassembled)
)

// Event is one piece of a streamed answer.
type Event struct {
	Type     EventType
	Text     string
	ToolCall *ToolCall
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Response is a complete answer.
type Response struct {
	Text       string
	ToolCalls  []ToolCall
	Usage      Usage
	StopReason string
}

// Provider streams one answer. emit is called for each event in order from the calling
// goroutine; an error from emit stops the stream and is returned. A stream cut mid-way returns
// an error and the partial answer must be discarded by the caller.
type Provider interface {
	Name() string
	// Tools picks the export format this provider reads: "openai", "anthropic" or "demo".
	ToolFormat() string
	Stream(ctx context.Context, req Request, emit func(Event) error) (Response, error)
}

// Error is a failed model call.
type Error struct {
	Status int // HTTP status, 0 for a transport failure
	// Kind is one of the tools error kinds (rate_limited, provider_http_error, network, …).
	Kind       string
	Message    string
	Retryable  bool          // 429, 5xx, network, a stream cut mid-way
	RetryAfter time.Duration // from Retry-After, 0 when none
	Err        error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("model call failed (%d %s): %s", e.Status, e.Kind, e.Message)
	}
	return fmt.Sprintf("model call failed (%s): %s", e.Kind, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// IsRetryable reports whether err is a model error the loop may retry, and after how long the
// provider asked it to wait.
func IsRetryable(err error) (bool, time.Duration) {
	var e *Error
	if errors.As(err, &e) {
		return e.Retryable, e.RetryAfter
	}
	return false, 0
}
