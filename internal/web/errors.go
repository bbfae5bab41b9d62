package web

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/store"
	"parley/internal/tools"
)

// statusOf maps an error kind to its HTTP status. It is the one place the mapping lives: every
// handler returns errors, and errorHandler turns them into the envelope with this status.
func statusOf(k tools.Kind) int {
	switch k {
	case tools.KindBadRequest:
		return http.StatusBadRequest
	case tools.KindNotAuthenticated:
		return http.StatusUnauthorized
	case tools.KindPermissionDenied:
		return http.StatusForbidden
	case tools.KindNotFound, tools.KindUnknownTool:
		return http.StatusNotFound
	case tools.KindMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case tools.KindStale, tools.KindConflict:
		return http.StatusConflict
	case tools.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case tools.KindUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case tools.KindInvalidArgs:
		return http.StatusUnprocessableEntity
	case tools.KindRateLimited, tools.KindUsageLimitReached:
		return http.StatusTooManyRequests
	case tools.KindServiceUnavailable:
		return http.StatusServiceUnavailable
	case tools.KindInternal:
		return http.StatusInternalServerError
	default:
		// Any other kind describes a tool's failure the caller asked about; it is the request
		// that cannot be done, not the server that broke.
		return http.StatusUnprocessableEntity
	}
}

// kindOfStatus is the inverse used for echo's own errors (unknown route, wrong method, a
// body over the limit).
func kindOfStatus(status int) tools.Kind {
	switch status {
	case http.StatusBadRequest:
		return tools.KindBadRequest
	case http.StatusUnauthorized:
		return tools.KindNotAuthenticated
	case http.StatusForbidden:
		return tools.KindPermissionDenied
	case http.StatusNotFound:
		return tools.KindNotFound
	case http.StatusMethodNotAllowed:
		return tools.KindMethodNotAllowed
	case http.StatusConflict:
		return tools.KindConflict
	case http.StatusRequestEntityTooLarge:
		return tools.KindTooLarge
	case http.StatusUnsupportedMediaType:
		return tools.KindUnsupportedMedia
	case http.StatusUnprocessableEntity:
		return tools.KindInvalidArgs
	case http.StatusTooManyRequests:
		return tools.KindRateLimited
	case http.StatusServiceUnavailable:
		return tools.KindServiceUnavailable
	}
	if status >= 500 {
		return tools.KindInternal
	}
	return tools.KindBadRequest
}

// errorBody is the API's error envelope.
type errorBody struct {
	OK    bool      `json:"ok"`
	Error errorJSON `json:"error"`
}

type errorJSON struct {
	Kind    tools.Kind     `json:"kind"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// Errors the handlers share.
var (
	errNotFound      = tools.NewError(tools.KindNotFound, "not found", nil)
	errNotSignedIn   = tools.NewError(tools.KindNotAuthenticated, "sign in or send an API token", nil)
	errForbidden     = tools.NewError(tools.KindPermissionDenied, "you may not do this", nil)
	errBadCSRF       = tools.NewError(tools.KindPermissionDenied, "missing or invalid CSRF token", nil)
	errConversation  = tools.NewError(tools.KindNotFound, "no such conversation", nil)
	errUnknownAction = tools.NewError(tools.KindNotFound, "no such API endpoint", nil)
)

// rateLimitedError is a 429 with the wait the caller must respect.
func rateLimitedError(what string, wait int) *tools.Error {
	return tools.NewError(tools.KindRateLimited, fmt.Sprintf("too many %s; try again in %d s", what, wait),
		map[string]any{"retry_after_seconds": wait})
}

// classify turns any error a handler returned into a tool error and whether it is internal
// (to be logged with a reference and never shown).
func classify(err error) (e *tools.Error, internal bool) {
	var te *tools.Error
	if errors.As(err, &te) {
		return te, te.Kind == tools.KindInternal
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
		return tools.NewError(kindOfStatus(he.Code), strings.ToLower(msg[:1])+msg[1:], nil), false
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tools.Errorf(tools.KindTooLarge, "the body is larger than %d bytes", mbe.Limit), false
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
	if internal {
		ref := tools.NewRef()
		s.log.ErrorContext(c.Request().Context(), "internal error", "ref", ref, "method", c.Request().Method,
			"path", c.Request().URL.Path, "err", err)
		te = tools.NewError(tools.KindInternal, "internal error", map[string]any{"ref": ref})
	}
	status := statusOf(te.Kind)
	if status == http.StatusTooManyRequests {
		if wait, ok := te.Details["retry_after_seconds"].(int); ok {
			c.Response().Header().Set("Retry-After", strconv.Itoa(wait))
		}
	}
	var werr error
	switch {
	case c.Request().Method == http.MethodHead:
		werr = c.NoContent(status)
	case wantsJSON(c):
		details := te.Details
		if details == nil {
			details = map[string]any{}
		}
		werr = c.JSON(status, errorBody{Error: errorJSON{Kind: te.Kind, Message: te.Message, Details: details}})
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
