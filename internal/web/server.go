// Package web is Parley's HTTP face: the route table, sign-in and authorization, the JSON API,
// Server-Sent Events, the pages and the WebSocket.
//
// What page handlers (pages*.go, ws*.go, inbox*.go, render*.go) get from Server:
//
//   - s.agent          the agent: the only door to conversation data (Create, List, View, Send,
//     Resolve, PendingApprovals, Subscribe, AttachClient), each asked with principal(c) and
//     applying the agent's policy (agent.MaySee, MayDecide, MayAnswer …)
//   - s.store          the store, for accounts, sessions, tokens and display names only
//   - s.clock, s.log   time and logging
//   - s.stopping       closed at shutdown: sockets close going-away and return
//   - s.cfg            Config: Production, DemoModel, limits
//   - currentUser(c)   the signed-in *store.User or nil; principal(c) the agent.Principal
//   - s.csrfToken(c)   the token every state-changing form carries as the hidden field views.CSRFField ("_csrf";
//     views.CSRFInput renders it); cookie-authenticated fetches send it as X-CSRF-Token
//   - s.render(c, status, component)   renders a templ component (buffered; errors → 500)
//   - s.layoutData(c, title)           views.LayoutData for views.Layout
//   - staticURL(name)  the content-hashed URL of an asset (static.URL)
//   - s.requireUser    middleware: pages redirect to /login, the API answers 401
//   - s.requireRole(roles...) middleware: 403 unless the user has one of the roles
//   - s.allowMessage(c)  the per-user message budget: nil or a 429 error to return
//   - errors: return a *fault.Error (or any error) from a handler; errorHandler maps its kind to the
//     status in one place (errors.go) and renders JSON for the API, HTML for pages.
//
// Every route is in the one route table (routes.go). Authentication runs globally (session
// cookie, or a Bearer token on /api/ and paths ending in /ws only); CSRF is checked globally on
// every unsafe method except Bearer-authenticated requests.
package web

import (
	"bytes"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"
	"golang.org/x/sync/singleflight"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/static"
	"parley/views"
)

// Server holds what every handler needs. Its fields are set by New and read-only afterwards;
// the mutable parts (limiters, throttle) guard themselves.
type Server struct {
	cfg   Config
	store store.Store // accounts, sessions, tokens and names only
	agent *agent.Manager
	clock clock.Clock
	log   *slog.Logger
	// The sign-in limits' rules (auth.Throttle.WaitOf, Counted); their counts are in the store,
	// shared by every process (auth_pages.go, reserveSignIn).
	throttle *auth.Throttle // per account: progressive
	perIP    *auth.Throttle // per client address, whatever the name
	perNet   *auth.Throttle // per subnet of the address
	// hashing holds a slot per password check in flight: bcrypt costs ~50 ms of a core, and a
	// flood of sign-ins waits for a slot instead of taking every core.
	hashing chan struct{}
	limits  *limiters
	tokens  *tokenCache
	// live are this process's live connections, re-authorized on a doorbell (live.go).
	live liveSet
	// conns counts them against the caps (ratelimit.go).
	conns conns
	// inbox computes the pending approvals once per change for every inbox socket.
	inbox *inboxFeed
	// streams renders each conversation's streaming answer once for all its page sockets.
	streams streamSet
	// readyDetails is Deps.ReadyDetails.
	readyDetails func() map[string]any
	// tokenLookups collapses concurrent store lookups of one uncached token.
	tokenLookups singleflight.Group
	echo         *echo.Echo

	// stopping is closed by Shutdown: long-lived handlers (event streams, sockets) return when
	// it is, so the HTTP server's graceful shutdown does not wait on them.
	stopping     chan struct{}
	stoppingOnce sync.Once
}

// Deps are the collaborators New wires.
type Deps struct {
	Store  store.Store
	Agent  *agent.Manager
	Clock  clock.Clock
	Logger *slog.Logger
	// ReadyDetails, when set, adds "details" to /readyz (the MCP servers' state). What it
	// reports does not decide readiness: a tool source that is down fails its own calls.
	ReadyDetails func() map[string]any
}

// New builds the server and its route table.
func New(cfg Config, d Deps) *Server {
	cfg = cfg.withDefaults()
	if d.Clock == nil {
		d.Clock = clock.Real{}
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	s := &Server{
		cfg:          cfg,
		store:        d.Store,
		agent:        d.Agent,
		readyDetails: d.ReadyDetails,
		clock:        d.Clock,
		log:          d.Logger,
		throttle:     auth.NewProgressive(d.Clock, cfg.LoginFailures, cfg.LoginWindow, time.Second, cfg.LoginMaxDelay),
		perIP:        auth.NewThrottle(d.Clock, cfg.LoginFailuresPerIP, cfg.LoginWindow),
		perNet:       auth.NewThrottle(d.Clock, cfg.LoginFailuresPerNet, cfg.LoginWindow),
		hashing:      make(chan struct{}, max(2, runtime.NumCPU())),
		limits:       newLimiters(d.Clock, cfg),
		tokens:       newTokenCache(d.Clock, tokenCacheTTL, tokenCacheMax),
		stopping:     make(chan struct{}),
	}
	s.inbox = newInboxFeed(s, inboxFeedGap)
	s.echo = s.routes()
	return s
}

// Handler is the app's http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Shutdown tells long-lived handlers to finish (event streams end, sockets close going-away)
// and stops the inbox feed, waiting for it. Call it before http.Server.Shutdown (and before
// closing the agent); calling it twice is harmless.
func (s *Server) Shutdown() {
	s.stoppingOnce.Do(func() { close(s.stopping) })
	s.inbox.close()
}

// render writes a templ component with status. It renders into a buffer first so a failing
// component becomes a clean 500 instead of half a page.
func (s *Server) render(c echo.Context, status int, comp templ.Component) error {
	var buf bytes.Buffer
	if err := comp.Render(c.Request().Context(), &buf); err != nil {
		return err
	}
	return c.HTMLBlob(status, buf.Bytes())
}

// renderError shows an error to a person.
func (s *Server) renderError(c echo.Context, status int, e *fault.Error) error {
	return s.render(c, status, views.ErrorPage(s.layoutData(c, http.StatusText(status)), status, e.Message))
}

// layoutData is what views.Layout needs for the current request.
func (s *Server) layoutData(c echo.Context, title string) views.LayoutData {
	d := views.LayoutData{
		Title:       title,
		Script:      staticURL("js/hooks.js"),
		Stylesheets: static.Stylesheets(),
		Icon:        staticURL("img/favicon.svg"),
		Demo:        s.cfg.DemoModel,
	}
	if u := currentUser(c); u != nil {
		d.User = &views.LayoutUser{Name: u.Name, Role: string(u.Role)}
		d.CSRF = s.csrfToken(c)
		if d.User.IsReviewer() {
			d.Pending = s.pendingCount(c)
		}
	} else {
		open, err := s.signupOpen(c)
		if err != nil {
			// The page still renders; the header just does not offer sign-up.
			s.log.DebugContext(c.Request().Context(), "sign-up setting for the layout", "err", err)
		}
		d.SignupOpen = open
	}
	return d
}

// pendingCount is how many approvals wait in the viewer's inbox (agent.PendingApprovals), for
// the count on the Inbox link and in the tab title; 0 when they cannot be read (the page still
// renders, and the live count corrects it).
func (s *Server) pendingCount(c echo.Context) int {
	list, err := s.agent.PendingApprovals(c.Request().Context(), principal(c))
	if err != nil {
		s.log.DebugContext(c.Request().Context(), "pending count for the layout", "err", err)
		return 0
	}
	return len(list)
}

// staticURL is the content-hashed URL of an embedded asset.
func staticURL(name string) string { return static.URL(name) }

// now reads the injected clock.
func (s *Server) now() time.Time { return s.clock.Now() }
