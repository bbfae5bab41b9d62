package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
	"parley/internal/store"
)

// statusOf maps an error kind to its HTTP status. It is the one place the mapping lives: every
// handler returns errors, and errorHandler turns them into the envelope with this status.
func statusOf(k fault.Kind) int {
	switch k {
	case fault.KindBadRequest:
		return http.StatusBadRequest
	case fault.KindNotAuthenticated:
		return http.StatusUnauthorized
	case fault.KindPermissionDenied:
		return http.StatusForbidden
	case fault.KindNotFound, fault.KindUnknownTool:
		return http.StatusNotFound
	case fault.KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case fault.KindStale, fault.KindConflict:
		return http.StatusConflict
	case fault.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case fault.KindUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case fault.KindInvalidArgs:
		return http.StatusUnprocessableEntity
	case fault.KindRateLimited, fault.KindUsageLimitReached:
		return http.StatusTooManyRequests
	case fault.KindServiceUnavailable:
		return http.StatusServiceUnavailable
	case fault.KindInternal:
		return http.StatusInternalServerError
	default:
		// Any other kind describes a tool's failure the caller asked about; it is the request
		// that cannot be done, not the server that broke.
		return http.StatusUnprocessableEntity
	}
}

// kindOfStatus is the inverse used for echo's own errors (unknown route, wrong method, a
// body over the limit).
func kindOfStatus(status int) fault.Kind {
	switch status {
	case http.StatusBadRequest:
		return fault.KindBadRequest
	case http.StatusUnauthorized:
		return fault.KindNotAuthenticated
	case http.StatusForbidden:
		return fault.KindPermissionDenied
	case http.StatusNotFound:
		return fault.KindNotFound
	case http.StatusMethodNotAllowed:
		return fault.KindMethodNotAllowed
	case http.StatusConflict:
		return fault.KindConflict
	case http.StatusRequestEntityTooLarge:
		return fault.KindTooLarge
	case http.StatusUnsupportedMediaType:
		return fault.KindUnsupportedMedia
	case http.StatusUnprocessableEntity:
		return fault.KindInvalidArgs
	case http.StatusTooManyRequests:
		return fault.KindRateLimited
	case http.StatusServiceUnavailable:
		return fault.KindServiceUnavailable
	}
	if status >= 500 {
		return fault.KindInternal
	}
	return fault.KindBadRequest
}

// errorBody is the API's error envelope.
type errorBody struct {
	OK    bool      `json:"ok"`
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Kind    fault.Kind     `json:"kind"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// Errors the handlers share.
var (
	errNotFound      = fault.New(fault.KindNotFound, "not found", nil)
	errNotSignedIn   = fault.New(fault.KindNotAuthenticated, "sign in or send an API token", nil)
	errForbidden     = fault.New(fault.KindPermissionDenied, "you may not do this", nil)
	errBadCSRF       = fault.New(fault.KindPermissionDenied, "missing or invalid CSRF token", nil)
	errUnknownAction = fault.New(fault.KindNotFound, "no such API endpoint", nil)
)

// rateLimitedError is a 429 with the wait the caller must respect.
func rateLimitedError(what string, wait int) *fault.Error {
	return fault.New(fault.KindRateLimited, fmt.Sprintf("too many %s; try again in %d s", what, wait),
		map[string]any{"retry_after_seconds": wait})
}

// defaultRetryAfter is the Retry-After, in seconds, of a 503 that names no wait of its own.
const defaultRetryAfter = 2

// errUnavailable answers a request that failed because a dependency (the database) is not
// answering: 503 with Retry-After, never 500.
var errUnavailable = fault.New(fault.KindServiceUnavailable, "the database is not answering; try again shortly",
	map[string]any{"retry_after_seconds": defaultRetryAfter})

// classify turns any error a handler returned into a tool error and whether it is internal
// (to be logged with a reference and never shown).
func classify(err error) (e *fault.Error, internal bool) {
	var te *fault.Error
	if errors.As(err, &te) {
		if te.Kind == fault.KindInternal && fault.Unavailable(err) {
			return errUnavailable, false // the cause was logged where the Internal error was made
		}
		return te, te.Kind == fault.KindInternal
	}
	if fault.Unavailable(err) || errors.Is(err, context.Canceled) {
		// Out of time (the request's deadline), or the database does not answer: the caller
		// may try again. A request whose caller went away is answered the same (unread).
		return errUnavailable, false
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		if he.Code >= 500 {
			return nil, true
		}
		msg := http.StatusText(he.Code)
		if s, ok := he.Message.(string); ok && s != "" {
			msg = s
		}
		if msg == "" {
			msg = "request refused"
		}
		return fault.New(kindOfStatus(he.Code), strings.ToLower(msg[:1])+msg[1:], nil), false
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return fault.Errorf(fault.KindTooLarge, "the body is larger than %d bytes", mbe.Limit), false
	}
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound, false
	}
	return nil, true
}

// errorHandler is echo's HTTPErrorHandler: the API gets the JSON envelope, pages get a small
// HTML page; internal errors are logged with a reference that the caller sees instead.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	te, internal := classify(err)
	if internal && te != nil && te.Details["ref"] != nil {
		// fault.Internal logged the cause under this reference where it happened (the agent): the
		// caller gets that reference, and this log line ties it to the request.
		s.log.WarnContext(c.Request().Context(), "internal error", "ref", te.Details["ref"], "method", c.Request().Method, "path", c.Request().URL.Path)
	} else if internal {
		te = fault.Internal(s.log.With("method", c.Request().Method, "path", c.Request().URL.Path), "internal error", err)
	}
	status := statusOf(te.Kind)
	if te == errUnavailable {
		s.log.WarnContext(c.Request().Context(), "unavailable", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		wait, ok := te.Details["retry_after_seconds"].(int)
		if !ok && status == http.StatusServiceUnavailable {
			// Every 503 is a moment's absence (the database, a re-join, a shutdown handing
			// over): the caller is told when to try again.
			wait, ok = defaultRetryAfter, true
		}
		if ok {
			c.Response().Header().Set("Retry-After", strconv.Itoa(wait))
		}
	}
	var werr error
	switch {
	case c.Request().Method == http.MethodHead:
		werr = c.NoContent(status)
	case wantsJSON(c):
		werr = c.JSON(status, errorBody{Error: errorJSON{Kind: te.Kind, Message: te.Message, Details: te.DetailsMap()}})
	default:
		werr = s.renderError(c, status, te)
	}
	if werr != nil {
		s.log.WarnContext(c.Request().Context(), "writing error response", "err", werr)
	}
}

// wantsJSON reports whether the caller is a program: an API path, a Bearer token, or a client
// asking for JSON.
func wantsJSON(c echo.Context) bool {
	r := c.Request()
	return strings.HasPrefix(r.URL.Path, "/api/") || r.URL.Path == "/healthz" ||
		bearerToken(r) != "" || strings.Contains(r.Header.Get("Accept"), "application/json")
}
