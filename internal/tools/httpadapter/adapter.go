// Package httpadapter is Parley's boundary to external HTTP systems: the adapter contract
// (Invoke → a normalized Result or Error), the HTTP adapter, the runtime-authored `http.request`
// action and the SSRF-safe client every outbound call uses.
//
// Adapters report the first failure and never retry: the agent's loop is the one retry
// scheduler, reading Error.Retryable and Error.RetryAfter.
package httpadapter

import (
	"context"
	"fmt"
	"parley/internal/fault"
	"time"
)

// CallContext is what an adapter knows about the call it serves.
type CallContext struct {
	// ToolCallID is the call's id in its conversation; Key (tools.Call.Key) is its idempotency
	// key, the same on every attempt and unique in the whole store.
	ToolCallID     string
	Key            string
	ConversationID string
	Tool           string
	Attempt        int
}

// Adapter is one kind of external system. Call gets a request map it owns the shape of and
// returns exactly one of a Result or an Error.
type Adapter interface {
	// Name identifies the adapter in results, errors and logs.
	Name() string
	Call(ctx context.Context, request any, cc CallContext) (*Result, *Error)
}

// Result is an adapter's normalized success.
type Result struct {
	Adapter string `json:"adapter"`
	// Payload is the normalized response (for HTTP: status, headers, trailers, body).
	Payload map[string]any `json:"payload"`
	// Metadata describes the request (for HTTP: method and URL), never credentials.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// Error is an adapter's normalized failure.
type Error struct {
	Adapter string     `json:"adapter"`
	Kind    fault.Kind `json:"kind"`
	// Message is stable and human-readable.
	Message string `json:"message"`
	// Details is plain data (maps, slices, strings, numbers) safe to log and show.
	Details map[string]any `json:"details,omitempty"`
	// Retryable marks a failure worth another attempt: timeouts, 429, 5xx, connection errors.
	Retryable bool `json:"retryable"`
	// RetryAfter is the wait the remote side asked for (Retry-After), zero when none.
	RetryAfter time.Duration `json:"-"`
}

// Error implements error.
func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %s", e.Adapter, e.Kind, e.Message) }

// ToMap converts the error to plain data for a step failure.
func (e *Error) ToMap() map[string]any {
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	m := map[string]any{
		"adapter":   e.Adapter,
		"kind":      string(e.Kind),
		"message":   e.Message,
		"details":   details,
		"retryable": e.Retryable,
	}
	if e.RetryAfter > 0 {
		m["retry_after_ms"] = e.RetryAfter.Milliseconds()
	}
	return m
}

// ToolError converts the error to the tool error the model reads; Retryable and RetryAfter
// carry over for the loop's retry scheduler.
func (e *Error) ToolError() *fault.Error {
	te := fault.New(e.Kind, e.Message, e.Details)
	te.Retryable = e.Retryable
	te.RetryAfter = e.RetryAfter
	return te
}

// Invoke runs adapter a on request and normalizes its answer: exactly one of the two return
// values is non-nil, and both carry the adapter's name. A panic in the adapter becomes an
// internal Error rather than a crash.
func Invoke(ctx context.Context, a Adapter, request any, cc CallContext) (res *Result, aerr *Error) {
	name := a.Name()
	defer func() {
		if r := recover(); r != nil {
			res, aerr = nil, &Error{Adapter: name, Kind: fault.KindInternal, Message: "the adapter failed unexpectedly", Details: map[string]any{"panic": fmt.Sprint(r)}}
		}
	}()
	res, aerr = a.Call(ctx, request, cc)
	switch {
	case aerr != nil:
		aerr.Adapter = name
		return nil, aerr
	case res == nil:
		return nil, &Error{Adapter: name, Kind: fault.KindInternal, Message: "the adapter returned neither a result nor an error"}
	}
	res.Adapter = name
	return res, nil
}
