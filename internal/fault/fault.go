// Package fault is the error vocabulary every layer of Parley shares: the kinds callers and
// the model branch on, the coded Error that carries one, typed Problems (a JSON path and a
// message) for invalid input, and Internal, which logs a cause and returns only its reference.
// It is a leaf: it imports nothing of Parley's, so the store, the model clients, the tools, the
// agent and the web layer may all use it.
package fault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"
)

// Kind is one word of the curated error-kind vocabulary. Callers and the model branch on it, so
// this list is the single source of truth: adding a kind is a deliberate change, not an ad-hoc
// string. Grouped by origin; docs/api.md documents each kind.
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
	KindCancelled        Kind = "cancelled"         // the owner stopped the turn (or moved on) before the call had a result
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
	KindIterationCap Kind = "iteration_cap"  // a user turn hit the LLM-call cap
	KindTooManyCalls Kind = "too_many_calls" // a model answer held more tool calls than the cap
	KindInternal     Kind = "internal"       // an internal error; details carry only a reference id
)

// Model providers and the HTTP face.
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
	KindDeclined, KindCancelled, KindStale, KindClientError, KindNoClient, KindHTTPError, KindNetwork, KindBlockedHost,
	KindConflict, KindIterationCap, KindTooManyCalls, KindInternal, KindProviderHTTPError, KindModelNotSupported,
	KindUsageLimitReached, KindRateLimited, KindNotAuthenticated, KindInvalidResponse, KindTooLarge,
	KindBadRequest, KindUnsupportedMedia, KindMethodNotAllowed, KindServiceUnavailable,
}

// Problem is one thing wrong with an input: where (a JSON pointer into it, "" for the whole)
// and what.
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error is a coded error: shown to the model in a tool's result envelope and to people in the
// API's error envelope. Any other error is internal and is hidden behind a reference id.
type Error struct {
	Kind    Kind           `json:"kind"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	// Problems lists what is wrong with an invalid input, each with its path; Map shows them as
	// details.problems.
	Problems []Problem `json:"-"`
	// Retryable marks a failure the loop's retry scheduler may try again (timeouts, 429, 5xx,
	// connection errors). It never reaches the model.
	Retryable bool `json:"-"`
	// RetryAfter is the wait the remote side asked for (Retry-After), zero when none.
	RetryAfter time.Duration `json:"-"`
	// cause is what an Internal error hides from its caller (Unwrap): the layer that answers
	// may still ask what kind of failure it was (Unavailable), never show it.
	cause error
}

// Unwrap is the cause an Internal error was made from (nil for the others).
func (e *Error) Unwrap() error { return e.cause }

// New builds an error of kind with a message and optional details.
func New(kind Kind, message string, details map[string]any) *Error {
	return &Error{Kind: kind, Message: message, Details: details}
}

// Errorf builds an error of kind with a formatted message.
func Errorf(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Invalid is an invalid_args error listing problems.
func Invalid(message string, problems ...Problem) *Error {
	return &Error{Kind: KindInvalidArgs, Message: message, Problems: problems}
}

// InvalidAt is an invalid_args error with one problem at path.
func InvalidAt(message, path, problem string) *Error {
	return Invalid(message, Problem{Path: path, Message: problem})
}

// InvalidField is an invalid_args error about one field of a JSON object body: the message is
// also the problem at /field.
func InvalidField(field, message string) *Error {
	return Invalid(message, Problem{Path: "/" + field, Message: message})
}

// Error implements error.
func (e *Error) Error() string { return string(e.Kind) + ": " + e.Message }

// Is lets errors.Is match two errors of the same kind (and message, when the target has one).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Message == "" || t.Message == e.Message)
}

// DetailsMap is the error's details as plain data: Details with the problems, if any, under
// "problems". It is never nil.
func (e *Error) DetailsMap() map[string]any {
	if len(e.Problems) == 0 {
		if e.Details == nil {
			return map[string]any{}
		}
		return e.Details
	}
	d := make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		d[k] = v
	}
	d["problems"] = e.Problems
	return d
}

// Map converts the error to plain data for an envelope, a step failure or a log entry.
func (e *Error) Map() map[string]any {
	return map[string]any{"kind": string(e.Kind), "message": e.Message, "details": e.DetailsMap()}
}

// KindOf is the kind of err's coded error, "" when its chain holds none.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// NewRef returns a short random reference id for an internal error.
func NewRef() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "ref_" + hex.EncodeToString(b[:])
}

// Internal logs cause under a new reference and returns the internal error that carries only
// that reference: what went wrong stays in the log, the caller (a person, the model) gets the
// reference to quote.
func Internal(log *slog.Logger, what string, cause error) *Error {
	ref := NewRef()
	if log == nil {
		log = slog.Default()
	}
	log.Error(what, "ref", ref, "err", cause)
	e := New(KindInternal, "internal error (reference "+ref+")", map[string]any{"ref": ref})
	e.cause = cause
	return e
}

// Unavailable reports whether err comes from a dependency that is not answering rather than a
// fault of the request or the code: a connection refused, reset or cut, a deadline passed, a
// network error, or a database that says it cannot take connections now (SQLSTATE class 08,
// 57P01–57P03, 53300). The server answers those 503 unavailable, with Retry-After.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		code := se.SQLState()
		return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300"
	}
	return false
}
