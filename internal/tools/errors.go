package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Kind is one word of the curated error-kind vocabulary. Callers and the model branch on it, so
// this list is the single source of truth: adding a kind is a deliberate change, not an ad-hoc
// string. Adapted from seed 003 (Pixir), grouped by origin.
type Kind string

// Tools and the executor.
const (
	KindInvalidArgs      Kind = "invalid_args"      // arguments or a resolution failed the schema
	KindUnknownTool      Kind = "unknown_tool"      // the model named a tool that is not registered
	KindNotFound         Kind = "not_found"         // the thing named does not exist (or is not yours)
	KindResourceMissing  Kind = "resource_missing"  // a dependency of the tool is missing
	KindNoMatch          Kind = "no_match"          // a lookup matched nothing
	KindNotUnique        Kind = "not_unique"        // a lookup matched more than one thing
	KindReadFailed       Kind = "read_failed"       // reading a resource failed
	KindWriteFailed      Kind = "write_failed"      // writing a resource failed
	KindCommandFailed    Kind = "command_failed"    // the tool ran and reported failure
	KindTimeout          Kind = "timeout"           // a call or a suspension ran out of time
	KindPermissionDenied Kind = "permission_denied" // the caller may not do this
	KindDenied           Kind = "denied"            // a person denied the call at its approval gate
	KindDeclined         Kind = "declined"          // a person declined or cancelled a question
	KindStale            Kind = "stale"             // the call is unknown, expired or already resolved
	KindClientError      Kind = "client_error"      // a browser-side tool reported a failure
	KindNoClient         Kind = "no_client"         // no browser was connected to run a client tool
	KindHTTPError        Kind = "http_error"        // an HTTP target answered with status >= 400
	KindNetwork          Kind = "network"           // a transport failure (DNS, connect, reset)
	KindBlockedHost      Kind = "blocked_host"      // a target host is not allowed (policy or private address)
	KindConflict         Kind = "conflict"          // a concurrent change won (optimistic concurrency)
)

// The turn loop.
const (
	KindIterationCap Kind = "iteration_cap" // a user turn hit the LLM-call cap
	KindInternal     Kind = "internal"      // an internal error; details carry only a reference id
)

// Model providers.
const (
	KindProviderHTTPError  Kind = "provider_http_error"
	KindModelNotSupported  Kind = "model_not_supported"
	KindUsageLimitReached  Kind = "usage_limit_reached"
	KindRateLimited        Kind = "rate_limited"
	KindNotAuthenticated   Kind = "not_authenticated"
	KindInvalidResponse    Kind = "invalid_response"
	KindTooLarge           Kind = "too_large"
	KindBadRequest         Kind = "bad_request"
	KindUnsupportedMedia   Kind = "unsupported_media_type"
	KindMethodNotAllowed   Kind = "method_not_allowed"
	KindServiceUnavailable Kind = "unavailable"
)

// Kinds lists every kind of the vocabulary, for documentation and tests.
var Kinds = []Kind{
	KindInvalidArgs, KindUnknownTool, KindNotFound, KindResourceMissing, KindNoMatch, KindNotUnique,
	KindReadFailed, KindWriteFailed, KindCommandFailed, KindTimeout, KindPermissionDenied, KindDenied,
	KindDeclined, KindStale, KindClientError, KindNoClient, KindHTTPError, KindNetwork, KindBlockedHost,
	KindConflict, KindIterationCap, KindInternal, KindProviderHTTPError, KindModelNotSupported,
	KindUsageLimitReached, KindRateLimited, KindNotAuthenticated, KindInvalidResponse, KindTooLarge,
	KindBadRequest, KindUnsupportedMedia, KindMethodNotAllowed, KindServiceUnavailable,
}

// Error is a tool error: shown to the model (and to people) in the result envelope. Any other
// error a callback returns is an internal error and is hidden behind a reference id.
type Error struct {
	Kind    Kind           `json:"kind"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	// Retryable marks a failure the loop's retry scheduler may try again (timeouts, 429, 5xx,
	// connection errors). It never reaches the model.
	Retryable bool `json:"-"`
	// RetryAfter is the wait the remote side asked for (Retry-After), zero when none.
	RetryAfter time.Duration `json:"-"`
}

// NewError builds a tool error of kind with a message and optional details.
func NewError(kind Kind, message string, details map[string]any) *Error {
	return &Error{Kind: kind, Message: message, Details: details}
}

// Errorf builds a tool error of kind with a formatted message.
func Errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Error implements error.
func (e *Error) Error() string { return string(e.Kind) + ": " + e.Message }

// Is lets errors.Is match two tool errors of the same kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Message == "" || t.Message == e.Message)
}

// Map converts the error to plain data for a step failure or a log entry.
func (e *Error) Map() map[string]any {
	m := map[string]any{"kind": string(e.Kind), "message": e.Message}
	if len(e.Details) > 0 {
		m["details"] = e.Details
	} else {
		m["details"] = map[string]any{}
	}
	return m
}

// envelope is the JSON shape the model reads: {"ok":true,"result":…} or {"ok":false,"error":…}.
type envelope struct {
	OK     bool           `json:"ok"`
	Result any            `json:"result,omitempty"`
	Error  map[string]any `json:"error,omitempty"`
}

// OKEnvelope renders a success envelope. A result that cannot be encoded becomes an internal
// error envelope carrying no message.
func OKEnvelope(result any) json.RawMessage {
	if result == nil {
		result = map[string]any{}
	}
	b, err := marshalText(envelope{OK: true, Result: result})
	if err != nil {
		return ErrorEnvelope(NewError(KindInternal, "the tool's result could not be encoded", nil))
	}
	return b
}

// ErrorEnvelope renders an error envelope.
func ErrorEnvelope(e *Error) json.RawMessage {
	if e == nil {
		e = NewError(KindInternal, "internal error", nil)
	}
	b, err := marshalText(envelope{OK: false, Error: e.Map()})
	if err != nil {
		b, _ = marshalText(envelope{OK: false, Error: NewError(e.Kind, e.Message, nil).Map()})
	}
	return b
}

// marshalText encodes v without HTML escaping: the envelope is text for the model, where
// "\u003c" for "<" only costs bytes of the output bound. The page escapes it when it renders.
func marshalText(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
