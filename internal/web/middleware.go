package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/static"
)

// contentSecurityPolicy allows only the app's own scripts, styles and connections (the socket
// included), no inline code, no framing, and images only from the app (and data: URLs for
// small inline icons); model output can therefore never pull in a foreign resource.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// securityHeaders sets the headers every response carries; in production browsers are also
// told to use HTTPS only (the app expects TLS to end in front of it).
func (s *Server) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		if s.cfg.Production {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Permissions-Policy", "geolocation=(self), camera=(), microphone=()")
		return next(c)
	}
}

// recoverPanics turns a handler's panic into an internal error (logged with its stack and a
// reference by errorHandler) instead of a dropped connection.
func recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		return next(c)
	}
}

// requestLog logs one line per request: method, path (never the query, which may carry a
// secret), status, duration, the user and the conversation when the route names one. Errors are
// rendered here (through errorHandler) so the logged status is the one sent.
func (s *Server) requestLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := s.now()
		reqID := fault.NewRef()
		c.Response().Header().Set("X-Request-ID", reqID)
		if err := next(c); err != nil {
			c.Error(err)
		}
		r := c.Request()
		attrs := []slog.Attr{
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
			slog.Int("status", c.Response().Status),
			slog.Duration("duration", s.now().Sub(start)),
			slog.String("request_id", reqID),
		}
		if strings.Contains(c.Path(), "/conversations/:id") {
			attrs = append(attrs, slog.String("conversation_id", c.Param("id")))
		}
		if u := currentUser(c); u != nil {
			attrs = append(attrs, slog.String("user_id", u.ID))
		}
		if strings.Contains(c.Path(), "/calls/:call") {
			attrs = append(attrs, slog.String("tool_call_id", c.Param("call")))
		}
		level := slog.LevelInfo
		if probe(r.URL.Path) && c.Response().Status < 400 {
			// Probes and scrapes come every few seconds; their successes would drown the log.
			level = slog.LevelDebug
		}
		if c.Response().Status >= 500 {
			level = slog.LevelError
		}
		s.log.LogAttrs(r.Context(), level, "request", attrs...)
		return nil
	}
}

// errorRenderTimeout bounds the rendering of an error answer (deadline).
const errorRenderTimeout = 500 * time.Millisecond

// deadline bounds every request but the live ones (sockets, event streams) by RequestTimeout:
// whatever the database does, the caller hears back in time — a request that runs out of time
// is answered 503 unavailable with Retry-After (classify).
func (s *Server) deadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if longLived(r.URL.Path) {
			return next(c)
		}
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		c.SetRequest(r.WithContext(ctx))
		err := next(c)
		if err == nil {
			c.SetRequest(r)
			return nil
		}
		// The error is answered here, on a short deadline of its own: an error page's layout
		// reads the store too (the pending count, whether sign-up is open), and the request's
		// deadline may be what ended it.
		ectx, ecancel := context.WithTimeout(context.WithoutCancel(r.Context()), errorRenderTimeout)
		defer ecancel()
		c.SetRequest(r.WithContext(ectx))
		c.Error(err)
		c.SetRequest(r)
		return nil
	}
}

// limitBody caps every request body at MaxBodyBytes: a declared length over the cap is refused
// at once, and an undeclared one fails when reading passes the cap (→ 413).
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.ContentLength > s.cfg.MaxBodyBytes {
			return fault.Errorf(fault.KindTooLarge, "the body is larger than %d bytes", s.cfg.MaxBodyBytes)
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(c.Response(), r.Body, s.cfg.MaxBodyBytes)
		}
		if !longLived(r.URL.Path) && r.Body != nil && r.Body != http.NoBody {
			// A body sent slowly holds a connection and a goroutine: every route but the live
			// ones (sockets, event streams) must have read it within BodyTimeout. The deadline is
			// the connection's, on the wall clock (it bounds real I/O), and it is lifted once the
			// body is read: left in place it would cancel a slow handler's context later.
			rc := http.NewResponseController(c.Response().Writer)
			_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
			r.Body = &liftingBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			// A form is read here, so a body that did not arrive in time (or whole) is refused
			// instead of reaching a handler as an empty form.
			if r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
				if err := r.ParseForm(); err != nil {
					var mbe *http.MaxBytesError
					switch {
					case errors.As(err, &mbe):
						return fault.Errorf(fault.KindTooLarge, "the body is larger than %d bytes", mbe.Limit)
					case errors.Is(err, os.ErrDeadlineExceeded):
						// The server cancels the request's context once its connection fails, so
						// nothing context-bound (a rendered page) can answer: a plain 408 does.
						return c.String(http.StatusRequestTimeout, "the request body was not received in time\n")
					}
					return fault.New(fault.KindBadRequest, "the form could not be read", nil)
				}
			}
		}
		return next(c)
	}
}

// longLived reports whether path is a socket or an event stream, which read for as long as they
// live.
func longLived(path string) bool {
	return strings.HasSuffix(path, "/ws") || strings.HasSuffix(path, "/events")
}

// validParams answers 404 when a path parameter (a conversation, call, token or user id) holds
// a NUL byte or invalid UTF-8: such an id names nothing, and PostgreSQL refuses it as text, which
// would otherwise surface as a 500.
func validParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for _, v := range c.ParamValues() {
			if !agent.Storable(v) {
				return errNotFound
			}
		}
		return next(c)
	}
}

// limitAPI spends one token of the user's API budget per request.
func (s *Server) limitAPI(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := currentUser(c)
		if u == nil {
			return next(c)
		}
		if ok, wait := s.limits.api.allow(u.ID); !ok {
			return rateLimitedError("API requests", retryAfterSeconds(wait))
		}
		return next(c)
	}
}

// limitPages spends one token of the user's page budget on each page POST and socket upgrade
// (the reads of pages are free): a 429 with Retry-After beyond it.
func (s *Server) limitPages(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := currentUser(c)
		if u == nil || (c.Request().Method != http.MethodPost && !strings.HasSuffix(c.Request().URL.Path, "/ws")) {
			return next(c)
		}
		if ok, wait := s.limits.pages.allow(u.ID); !ok {
			return rateLimitedError("page actions", retryAfterSeconds(wait))
		}
		return next(c)
	}
}

// allowMessage spends one token of the current user's message budget: nil, or a 429 error for
// the handler to return. Both the page's composer and the API call it.
func (s *Server) allowMessage(c echo.Context) error {
	u := currentUser(c)
	if u == nil {
		return errNotSignedIn
	}
	if ok, wait := s.limits.messages.allow(u.ID); !ok {
		return rateLimitedError("messages", retryAfterSeconds(wait))
	}
	return nil
}

// noStore marks a response as private and never cached (pages with tokens, API answers).
func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-store")
		return next(c)
	}
}

// serveStatic answers /static/<hash>/<path>: a year of caching when the hash is current, a
// revalidated copy when it is an old hash of a known file, 404 otherwise.
// favicon: GET /favicon.ico, asked by browsers (and tools) that did not read the page's icon
// link, goes to the icon's content-hashed URL.
func favicon(c echo.Context) error {
	return c.Redirect(http.StatusMovedPermanently, staticURL("img/favicon.svg"))
}

func serveStatic(c echo.Context) error {
	data, current, ok := static.Lookup(c.Param("hash"), c.Param("*"))
	if !ok {
		return errNotFound
	}
	h := c.Response().Header()
	if current {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	h.Set("Content-Length", strconv.Itoa(len(data)))
	return c.Blob(http.StatusOK, contentType(c.Param("*")), data)
}

func contentType(name string) string {
	switch {
	case strings.HasSuffix(name, ".js"):
		return "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".css"):
		return "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		return "image/svg+xml"
	case strings.HasSuffix(name, ".svg"):
		return "image/svg+xml"
	case strings.HasSuffix(name, ".png"):
		return "image/png"
	}
	return "application/octet-stream"
}

// probe reports whether path is a health probe or the metrics scrape.
func probe(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// liftingBody lifts the body's read deadline once the body is read to its end. A body that
// failed (the deadline passed) keeps it, so the server's own drain of the rest fails fast too.
type liftingBody struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *liftingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}
