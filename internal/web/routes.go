package web

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/store"
	"parley/static"
)

// routes is the one route table.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	// The client's address is the connection's: X-Forwarded-For is not trusted, so login
	// throttling cannot be dodged by inventing a header.
	e.IPExtractor = echo.ExtractIPDirect()
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestLog, recoverPanics, s.securityHeaders, s.limitBody, s.authenticate, s.checkCSRF)

	e.GET("/healthz", s.healthz)
	e.GET(static.Prefix+":hash/*", serveStatic)

	// Signing in.
	e.GET("/login", s.loginForm)
	e.POST("/login", s.login)
	e.GET("/signup", s.signupForm)
	e.POST("/signup", s.signup)
	e.POST("/logout", s.logout)
	e.GET("/", s.home)

	// Account pages.
	acct := e.Group("", s.requireUser, noStore)
	acct.GET("/tokens", s.tokensPage)
	acct.POST("/tokens", s.createToken)
	acct.POST("/tokens/:token/revoke", s.revokeToken)
	admin := e.Group("/admin", s.requireUser, s.requireRole(store.RoleAdmin), noStore)
	admin.GET("/users", s.adminUsers)
	admin.POST("/users/:user/role", s.setRole)
	admin.POST("/signup", s.setSignup)

	// The JSON API.
	api := e.Group("/api/v1", s.requireUser, s.limitAPI, noStore)
	api.POST("/conversations", s.apiCreateConversation)
	api.GET("/conversations", s.apiListConversations)
	api.GET("/conversations/:id", s.apiGetConversation)
	api.POST("/conversations/:id/messages", s.apiSendMessage)
	api.POST("/conversations/:id/calls/:call/resolve", s.apiResolve)
	api.GET("/conversations/:id/events", s.apiEvents)
	api.GET("/approvals", s.apiApprovals)
	api.Any("/*", func(echo.Context) error { return errUnknownAction })

	s.pageRoutes(e)
	return e
}

// home sends a signed-in user to their conversations and anyone else to the sign-in form.
func (s *Server) home(c echo.Context) error {
	if currentUser(c) == nil {
		return c.Redirect(http.StatusSeeOther, "/login")
	}
	return c.Redirect(http.StatusSeeOther, "/conversations")
}

// healthTimeout bounds the store's answer to a health check, so a hung database reads as down
// rather than as a hung probe.
const healthTimeout = 3 * time.Second

// healthz answers 200 when the store does.
func (s *Server) healthz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), healthTimeout)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.WarnContext(c.Request().Context(), "health check: store unreachable", "err", err)
		return c.JSON(http.StatusServiceUnavailable, errorBody{Error: errorJSON{
			Kind: "unavailable", Message: "the store does not answer", Details: map[string]any{}}})
	}
	return c.JSON(http.StatusOK, map[string]any{"ok": true})
}
