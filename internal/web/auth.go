package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/fault"
	"parley/internal/store"
)

// Cookie names. The session cookie carries a random token whose SHA-256 alone is stored; the
// pre-session CSRF cookie protects the sign-in and sign-up forms (double submit) before there
// is a session to hold the token.
const (
	sessionCookie = "parley_session"
	csrfCookie    = "parley_csrf"
	csrfHeader    = "X-CSRF-Token"
	csrfField     = "_csrf" // views.CSRFInput writes it
)

// Context keys.
const (
	keyUser      = "parley.user"
	keySession   = "parley.session"
	keyVia       = "parley.via"
	keyAnonCSRF  = "parley.anon_csrf"
	keyScope     = "parley.token_scope" // the Bearer token's scope; unset for a browser
	viaSession   = "session"
	viaToken     = "token"
	signupKey    = "signup"
	signupClosed = "closed"
	// signupOpenValue is the setting an admin writes to open sign-up.
	signupOpenValue = "open"
)

// sessionCookie is the session cookie's name: in production "__Host-" bound (the browser keeps
// it only when it is Secure, for the whole host, with no Domain: no sibling subdomain can set or
// shadow it).
func (s *Server) sessionCookie() string {
	if s.cfg.Production {
		return "__Host-" + sessionCookie
	}
	return sessionCookie
}

// currentUser is the signed-in user of the request, or nil.
func currentUser(c echo.Context) *store.User {
	u, _ := c.Get(keyUser).(*store.User)
	return u
}

// principal is the current user as the agent sees them.
func principal(c echo.Context) agent.Principal {
	u := currentUser(c)
	if u == nil {
		return agent.Principal{}
	}
	via, _ := c.Get(keyVia).(string)
	return agent.Principal{UserID: u.ID, Role: u.Role, Via: via}
}

// bearerToken returns the request's Bearer token, or "".
func bearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// tokenPath reports whether a Bearer token may authenticate a request for path: the JSON API
// and the sockets (docs/api.md, "Authentication").
func tokenPath(path string) bool {
	return strings.HasPrefix(path, "/api/") || strings.HasSuffix(path, "/ws")
}

// probePath reports whether path is an operator's probe (/healthz, /readyz, /metrics). They
// need no identity, and a monitoring script may send them the same headers as the rest: the
// Authorization header is ignored there, neither checked nor refused.
func probePath(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/metrics"
}

// tokenUser is the API token whose hash is hash and its user: from the token cache, else from
// the store (and then cached). Concurrent misses of one token share one lookup (a script that
// opens hundreds of streams at once costs two reads, not hundreds); each caller still stops
// waiting when its own request ends. An unknown, revoked or expired token is not_authenticated.
func (s *Server) tokenUser(ctx context.Context, hash []byte) (store.User, store.APIToken, error) {
	key := string(hash)
	u, t, ok := s.tokens.get(key)
	if !ok {
		ch := s.tokenLookups.DoChan(key, func() (any, error) {
			// Not the first caller's context alone: the others wait on this lookup too.
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenLookupTimeout)
			defer cancel()
			t, err := s.store.APITokenByHash(lctx, hash)
			if errors.Is(err, store.ErrNotFound) {
				return nil, errBadToken
			}
			if err != nil {
				return nil, fmt.Errorf("look up API token: %w", err)
			}
			u, err := s.store.UserByID(lctx, t.UserID)
			if err != nil {
				return nil, fmt.Errorf("load user of token %s: %w", t.ID, err)
			}
			if u.Disabled {
				return nil, errAccountDisabled
			}
			// Its use is recorded once per cache miss, and the store writes it at most once per
			// store.TokenTouchEvery: the tokens page shows when each token last worked.
			if err := s.store.TouchAPIToken(lctx, t.ID); err != nil {
				s.log.WarnContext(lctx, "record a token's use", "token_id", t.ID, "err", err)
			}
			s.tokens.put(key, t, u)
			return tokenLookup{u, t}, nil
		})
		select {
		case r := <-ch:
			if r.Err != nil {
				return store.User{}, store.APIToken{}, r.Err
			}
			l := r.Val.(tokenLookup)
			u, t = l.user, l.token
		case <-ctx.Done():
			return store.User{}, store.APIToken{}, ctx.Err()
		}
	}
	// The store refuses an expired token too, on its clock; a cached one expires here.
	if tokenExpired(t, s.now()) {
		s.tokens.forget(key)
		return store.User{}, store.APIToken{}, errTokenExpired
	}
	return u, t, nil
}

// tokenLookup is what a shared token lookup hands its waiters.
type tokenLookup struct {
	user  store.User
	token store.APIToken
}

// tokenExpired reports whether t has an expiry and it has come at now.
func tokenExpired(t store.APIToken, now time.Time) bool {
	return t.ExpiresAt != nil && !now.Before(*t.ExpiresAt)
}

var (
	errBadToken        = fault.New(fault.KindNotAuthenticated, "the API token is invalid or revoked", nil)
	errAccountDisabled = fault.New(fault.KindNotAuthenticated, "this account is disabled: ask an administrator", nil)
	errTokenExpired    = fault.New(fault.KindNotAuthenticated, "the API token has expired: create a new one on the tokens page", nil)
)

// authenticate identifies the caller from a Bearer token or the session cookie. A request with
// an invalid token is refused outright (a script must learn its token is wrong); a stale
// session cookie is cleared and the request continues anonymously.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		ctx := r.Context()
		if probePath(r.URL.Path) {
			return next(c)
		}
		if tok := bearerToken(r); tok != "" {
			if !tokenPath(r.URL.Path) {
				// Tokens are for programs; the account pages (where a token could mint more
				// tokens or change roles without CSRF) take a signed-in browser only.
				return fault.New(fault.KindNotAuthenticated, "API tokens work on /api/ and the WebSocket only", nil)
			}
			u, t, err := s.tokenUser(ctx, auth.Hash(tok))
			if err != nil {
				return err
			}
			c.Set(keyUser, &u)
			c.Set(keyVia, viaToken)
			c.Set(keyScope, t.Scope)
			return next(c)
		}
		ck, err := r.Cookie(s.sessionCookie())
		if err != nil || ck.Value == "" {
			return next(c)
		}
		sess, err := s.store.SessionByHash(ctx, auth.Hash(ck.Value))
		if errors.Is(err, store.ErrNotFound) || (err == nil && !s.now().Before(sess.ExpiresAt)) {
			s.clearCookie(c, s.sessionCookie())
			return next(c)
		}
		if err != nil {
			return fmt.Errorf("look up session: %w", err)
		}
		u, err := s.store.UserByID(ctx, sess.UserID)
		if errors.Is(err, store.ErrNotFound) || (err == nil && u.Disabled) {
			s.clearCookie(c, s.sessionCookie())
			return next(c)
		}
		if err != nil {
			return fmt.Errorf("load user of session: %w", err)
		}
		// Slide the idle timeout, writing at most once per half of it.
		now := s.now()
		if next := s.sessionExpiry(sess.CreatedAt, now); next.Sub(sess.ExpiresAt) >= s.cfg.SessionIdle/2 {
			if err := s.store.ExtendSession(ctx, sess.TokenHash, next); err != nil {
				s.log.WarnContext(ctx, "extend the session", "err", err)
			} else {
				sess.ExpiresAt = next
			}
		}
		c.Set(keyUser, &u)
		c.Set(keySession, &sess)
		c.Set(keyVia, viaSession)
		return next(c)
	}
}

// csrfToken is the token the current page's forms carry: the session's, or before sign-in the
// pre-session cookie's (set here on first use).
func (s *Server) csrfToken(c echo.Context) string {
	if sess, ok := c.Get(keySession).(*store.Session); ok {
		return sess.CSRF
	}
	if t, ok := c.Get(keyAnonCSRF).(string); ok {
		return t
	}
	if ck, err := c.Request().Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		c.Set(keyAnonCSRF, ck.Value)
		return ck.Value
	}
	t := auth.NewSecret("")
	s.setCookie(c, csrfCookie, t, 0)
	c.Set(keyAnonCSRF, t)
	return t
}

// expectedCSRF is the token an unsafe request must echo, or "" when there is none to match.
func (s *Server) expectedCSRF(c echo.Context) string {
	if sess, ok := c.Get(keySession).(*store.Session); ok {
		return sess.CSRF
	}
	if ck, err := c.Request().Cookie(csrfCookie); err == nil {
		return ck.Value
	}
	return ""
}

// checkCSRF guards every unsafe method. Bearer-token requests are exempt (a browser never
// attaches one by itself); everything else must pass Go's cross-origin check (Sec-Fetch-Site /
// Origin) and echo the CSRF token in the form field "_csrf" or the X-CSRF-Token header.
func (s *Server) checkCSRF(next echo.HandlerFunc) echo.HandlerFunc {
	cop := http.NewCrossOriginProtection()
	return func(c echo.Context) error {
		r := c.Request()
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		if via, _ := c.Get(keyVia).(string); via == viaToken {
			return next(c)
		}
		if err := cop.Check(r); err != nil {
			return errBadCSRF
		}
		got := r.Header.Get(csrfHeader)
		if got == "" && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			got = c.FormValue(csrfField)
		}
		if !auth.Equal(got, s.expectedCSRF(c)) {
			return errBadCSRF
		}
		return next(c)
	}
}

// requireUser refuses anonymous callers: pages redirect to the sign-in form, programs get 401.
func (s *Server) requireUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if currentUser(c) != nil {
			return next(c)
		}
		if wantsJSON(c) || c.Request().Method != http.MethodGet {
			return errNotSignedIn
		}
		return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(c.Request().URL.RequestURI()))
	}
}

// requireRole refuses users without one of roles (403).
func (s *Server) requireRole(roles ...store.Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			u := currentUser(c)
			if u == nil {
				return errNotSignedIn
			}
			if !slices.Contains(roles, u.Role) {
				return errForbidden
			}
			return next(c)
		}
	}
}

// setCookie sets an HttpOnly, SameSite=Lax cookie (Secure in production); maxAge 0 makes a
// browser-session cookie.
func (s *Server) setCookie(c echo.Context, name, value string, maxAge int) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, Secure: s.cfg.Production, SameSite: http.SameSiteLaxMode,
	})
}

func (s *Server) clearCookie(c echo.Context, name string) {
	c.SetCookie(&http.Cookie{
		Name: name, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.cfg.Production, SameSite: http.SameSiteLaxMode,
	})
}

// signupOpen reports whether anyone may create an account: only once an admin opened sign-up.
// It is closed by default, and always on an empty store: the first admin comes from the
// one-time setup link the server prints at start (SetupPath) or from `web user add`.
func (s *Server) signupOpen(c echo.Context) (bool, error) {
	v, err := s.store.GetSetting(c.Request().Context(), signupKey)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read sign-up setting: %w", err)
	}
	return v == signupOpenValue, nil
}
