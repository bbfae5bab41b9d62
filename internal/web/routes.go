package web

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/static"
)

// routes is the one route table.
func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	// The client's address is the connection's, unless it comes through a trusted proxy
	// (TrustedProxies): then X-Forwarded-For names it. An untrusted X-Forwarded-For is ignored, so
	// sign-in limits cannot be dodged by inventing a header.
	e.IPExtractor = s.ipExtractor()
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.requestLog, recoverPanics, s.securityHeaders, s.deadline, s.limitBody, s.authenticate, s.checkScope, s.checkCSRF, validParams)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	// Unauthenticated on the app's port, like the probes: it carries counts, durations and tool
	// names, never conversation content, users or secrets. Restrict it at the proxy when the
	// port is public (docs/operations.md, "Metrics").
	e.GET("/metrics", echo.WrapHandler(metrics.Handler()))
	e.GET(static.Prefix+":hash/*", serveStatic)
	e.GET("/favicon.ico", favicon)

	// Signing in.
	e.GET("/login", s.loginForm)
	e.POST("/login", s.login)
	e.GET("/setup", s.setupForm)
	e.POST("/setup", s.setup)
	e.GET("/signup", s.signupForm)
	e.POST("/signup", s.signup)
	e.GET("/invite", s.inviteForm)
	e.POST("/invite", s.invite)
	e.POST("/logout", s.logout)
	e.GET("/", s.home)

	// The pages of a signed-in user. Every page handler has the same shape: load → check → act →
	// render or redirect. Without JavaScript every form is a plain POST answered with a redirect
	// (or the page re-rendered with its errors); hooks.js sends the same forms over fetch with
	// X-Parley-Fetch and gets JSON.
	pages := e.Group("", s.requireUser, s.limitPages, noStore)
	pages.GET("/conversations", s.conversationsPage)
	pages.POST("/conversations", s.createConversationPage)
	pages.GET("/conversations/:id", s.conversationPage)
	pages.POST("/conversations/:id/messages", s.postMessagePage)
	pages.POST("/conversations/:id/cancel", s.cancelPage)
	pages.POST("/conversations/:id/rename", s.renamePage)
	pages.POST("/conversations/:id/delete", s.deletePage)
	pages.POST("/conversations/:id/calls/:call/resolve", s.resolvePage)
	pages.GET("/conversations/:id/ws", s.conversationSocket)
	pages.GET("/inbox", s.inboxPage)
	pages.GET("/inbox/ws", s.inboxSocket)
	pages.POST("/inbox/bulk", s.inboxBulkPage)
	pages.POST("/inbox/claim", s.inboxClaimPage)
	pages.GET("/tokens", s.tokensPage)
	pages.POST("/tokens", s.createToken)
	pages.POST("/tokens/:token/revoke", s.revokeToken)
	pages.GET("/account", s.accountPage)
	pages.POST("/account/password", s.changePassword)
	pages.POST("/account/signout-all", s.signOutEverywhere)
	pages.GET("/grants", s.grantsPage)
	pages.POST("/grants/:grant/revoke", s.revokeGrantPage)
	// A plan preview spends the previews budget, not the page budget (plan.go).
	e.POST("/conversations/:id/calls/:call/plan", s.planPage, s.requireUser, s.limitPreviews, noStore)
	admin := e.Group("/admin", s.requireUser, s.requireRole(store.RoleAdmin), noStore)
	admin.GET("/users", s.adminUsers)
	admin.POST("/users", s.createUser)
	admin.POST("/users/:user/role", s.setRole)
	admin.POST("/users/:user/disabled", s.setDisabled)
	admin.POST("/users/:user/password", s.resetPassword)
	admin.POST("/signup", s.setSignup)
	admin.GET("/invitations", s.adminInvitations)
	admin.POST("/invitations", s.createInvitation)
	admin.POST("/invitations/:invitation/revoke", s.revokeInvitation)
	admin.GET("/audit", s.auditPage)
	admin.GET("/grants", s.adminGrantsPage)
	admin.POST("/grants/:grant/revoke", s.adminRevokeGrantPage)

	// The JSON API.
	api := e.Group("/api/v1", s.requireUser, s.limitAPI, noStore)
	api.POST("/conversations", s.apiCreateConversation)
	api.GET("/conversations", s.apiListConversations)
	api.GET("/conversations/:id", s.apiGetConversation)
	api.PATCH("/conversations/:id", s.apiRenameConversation)
	api.DELETE("/conversations/:id", s.apiDeleteConversation)
	api.POST("/conversations/:id/messages", s.apiSendMessage)
	api.POST("/conversations/:id/cancel", s.apiCancel)
	api.POST("/conversations/:id/calls/:call/resolve", s.apiResolve)
	api.POST("/conversations/:id/calls/:call/plan", s.apiPlan, s.limitPreviews)
	api.GET("/conversations/:id/events", s.apiEvents)
	api.GET("/approvals", s.apiApprovals)
	api.POST("/approvals/resolve", s.apiBulkResolve)
	api.POST("/conversations/:id/calls/:call/claim", s.apiClaim)
	api.DELETE("/conversations/:id/calls/:call/claim", s.apiClaim)
	api.GET("/grants", s.apiGrants)
	api.DELETE("/grants/:grant", s.apiRevokeGrant)
	api.GET("/admin/grants", s.apiAllGrants)
	api.GET("/audit", s.apiAudit)
	api.Any("/*", func(c echo.Context) error { return unknownAction(e, c) })
	return e
}

// unknownAction answers a request under /api/v1 that no route took: 405 with Allow when the
// path exists with other methods, else 404.
func unknownAction(e *echo.Echo, c echo.Context) error {
	path := c.Request().URL.Path
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodPut, http.MethodDelete} {
		if m == c.Request().Method {
			continue
		}
		probe := e.NewContext(nil, nil)
		e.Router().Find(m, path, probe)
		if probe.Path() != "" && probe.Path() != "/api/v1/*" {
			allow = append(allow, m)
		}
	}
	if len(allow) == 0 {
		return errUnknownAction
	}
	c.Response().Header().Set("Allow", strings.Join(allow, ", "))
	return fault.New(fault.KindMethodNotAllowed, "this endpoint does not take "+c.Request().Method+"; it takes "+strings.Join(allow, ", "), nil)
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
	return c.JSON(http.StatusOK, okJSON{OK: true})
}

// readyz answers 200 when the store answers and its schema is the one this binary was built for
// (migrations current), else 503 with the reason; a load balancer sends traffic only then.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), healthTimeout)
	defer cancel()
	if err := store.Ready(ctx, s.store); err != nil {
		s.log.WarnContext(c.Request().Context(), "readiness check failed", "err", err)
		msg := "the store does not answer"
		switch {
		case errors.Is(err, store.ErrSchemaBehind):
			msg = "the database schema is behind this binary: run `web migrate`"
		case errors.Is(err, store.ErrSchemaTooNew):
			msg = "the database schema is newer than this binary"
		}
		return c.JSON(http.StatusServiceUnavailable, errorBody{Error: errorJSON{
			Kind: "unavailable", Message: msg, Details: map[string]any{}}})
	}
	if err := s.agent.Ready(); err != nil {
		// The store answers but this process does not take writes yet (it is re-joining the
		// cluster after losing the database, or shutting down): a balancer must not send it traffic.
		msg := "this server does not take writes yet"
		if fe, ok := errors.AsType[*fault.Error](err); ok {
			msg = fe.Message
		}
		return c.JSON(http.StatusServiceUnavailable, errorBody{Error: errorJSON{
			Kind: "unavailable", Message: msg, Details: map[string]any{}}})
	}
	body := readyJSON{OK: true}
	if s.readyDetails != nil {
		body.Details = s.readyDetails()
	}
	return c.JSON(http.StatusOK, body)
}

// The page sockets' counters (ws.go) are read at scrape time: the process has one set.
func init() {
	metrics.Register(func() metrics.Snapshot {
		return metrics.Snapshot{Sockets: SocketsOpen.Load(), Dropped: map[string]int64{"socket": SocketOverflows.Load()}}
	})
}

// ipExtractor reads the client's address: the connection's, or X-Forwarded-For as the trusted
// proxies wrote it (the nearest untrusted hop).
func (s *Server) ipExtractor() echo.IPExtractor {
	if len(s.cfg.TrustedProxies) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, cidr := range s.cfg.TrustedProxies {
		if _, n, err := net.ParseCIDR(cidr); err == nil {
			opts = append(opts, echo.TrustIPRange(n))
		}
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}
