package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/store"
)

// The scope rule: what an API token of each scope may do. It lives here alone; checkScope asks
// it for every request (it runs globally, after authentication and routing), so no route can
// forget it.
//
// A full token acts as its user wherever tokens work (the JSON API and the sockets). A resolve
// token may only resolve calls — POST …/calls/{call}/resolve — and read what it needs to find
// them: the caller's pending approvals (GET /api/v1/approvals) and one conversation with its
// pending calls (GET /api/v1/conversations/{id}). Everything else is 403 permission_denied.
// What the token's user may resolve is still the agent's policy: the scope only narrows. A
// resolve token may not approve "and remember" (a grant): that needs a full token.

// resolveScopeRoutes are the routes (echo route patterns) a resolve token may use.
var resolveScopeRoutes = map[string]bool{
	http.MethodPost + " /api/v1/conversations/:id/calls/:call/resolve": true,
	http.MethodGet + " /api/v1/approvals":                              true,
	http.MethodPost + " /api/v1/approvals/resolve":                     true,
	http.MethodGet + " /api/v1/conversations/:id":                      true,
}

// scopeAllows reports whether a token of scope may call the route (method and echo pattern).
func scopeAllows(scope, method, route string) bool {
	switch scope {
	case store.ScopeFull, "":
		return true
	case store.ScopeResolve:
		return resolveScopeRoutes[method+" "+route]
	}
	return false // a scope this binary does not know grants nothing
}

// scopeMayRemember reports whether a token of scope may approve "and remember" (create a
// grant): a grant lets later calls run without anyone deciding them, which is more than
// resolving one call, so a resolve token may not; a full token and a browser may.
func scopeMayRemember(scope string) bool {
	return scope == store.ScopeFull || scope == ""
}

// errRememberScope is the answer to a resolve token that asks for a grant.
var errRememberScope = fault.New(fault.KindPermissionDenied,
	"this API token may resolve calls but not remember approvals: approving \"and remember\" needs a full-scope token",
	map[string]any{"scope": store.ScopeResolve})

// checkRememberScope refuses a resolution that asks for a grant when the request's token may
// not make one (scopeMayRemember).
func checkRememberScope(c echo.Context, r agent.Resolution) error {
	if r.Remember == nil {
		return nil
	}
	if scope, ok := c.Get(keyScope).(string); ok && !scopeMayRemember(scope) {
		return errRememberScope
	}
	return nil
}

// errResolveScope is the answer to a resolve token outside its scope.
var errResolveScope = fault.New(fault.KindPermissionDenied,
	"this API token may only resolve calls: POST /api/v1/conversations/{id}/calls/{tool_call_id}/resolve, GET /api/v1/approvals and GET /api/v1/conversations/{id}",
	map[string]any{"scope": store.ScopeResolve})

// checkScope refuses a Bearer-authenticated request its token's scope does not allow.
func (s *Server) checkScope(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		scope, ok := c.Get(keyScope).(string)
		if !ok || scopeAllows(scope, c.Request().Method, c.Path()) {
			return next(c)
		}
		if scope == store.ScopeResolve {
			return errResolveScope
		}
		return fault.New(fault.KindPermissionDenied, "this API token's scope grants nothing here", map[string]any{"scope": scope})
	}
}
