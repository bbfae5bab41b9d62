package web

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
)

// Live connections (page sockets, the inbox socket, event streams) outlive the request that
// authenticated them, so they are re-authorized while they last: every LiveRecheck, and at once
// when this process signs someone out, revokes a token or changes a role. A re-check reads the
// credential from the store (never a cache), so a sign-out, a revocation or a demotion made by
// another process on the same database is seen within LiveRecheck.

// grant is the credential a live connection was opened with.
type grant struct {
	session []byte // the session token's hash, for a signed-in browser
	token   []byte // the API token's hash, for a program
}

// grantOf is the credential of the request.
func grantOf(c echo.Context) grant {
	if sess, ok := c.Get(keySession).(*store.Session); ok {
		return grant{session: sess.TokenHash}
	}
	if tok := bearerToken(c.Request()); tok != "" {
		return grant{token: auth.Hash(tok)}
	}
	return grant{}
}

// errSignedOut ends a live connection whose credential no longer holds.
var errSignedOut = fault.New(fault.KindNotAuthenticated, "the session ended or the token was revoked", nil)

// reauthorize reads the grant's credential and user again and returns the principal it now
// stands for: errSignedOut when the session ended (signed out, expired) or the token was
// revoked or expired, or the user is gone.
func (s *Server) reauthorize(ctx context.Context, g grant, via string) (agent.Principal, error) {
	var userID string
	switch {
	case g.session != nil:
		sess, err := s.store.SessionByHash(ctx, g.session)
		if errors.Is(err, store.ErrNotFound) || (err == nil && !s.now().Before(sess.ExpiresAt)) {
			return agent.Principal{}, errSignedOut
		}
		if err != nil {
			return agent.Principal{}, fmt.Errorf("re-read session: %w", err)
		}
		userID = sess.UserID
	case g.token != nil:
		t, err := s.store.APITokenByHash(ctx, g.token)
		if errors.Is(err, store.ErrNotFound) || (err == nil && tokenExpired(t, s.now())) {
			s.tokens.forget(string(g.token))
			return agent.Principal{}, errSignedOut
		}
		if err != nil {
			return agent.Principal{}, fmt.Errorf("re-read token: %w", err)
		}
		userID = t.UserID
	default:
		return agent.Principal{}, errSignedOut
	}
	u, err := s.store.UserByID(ctx, userID)
	if errors.Is(err, store.ErrNotFound) {
		return agent.Principal{}, errSignedOut
	}
	if err != nil {
		return agent.Principal{}, fmt.Errorf("re-read user: %w", err)
	}
	return agent.Principal{UserID: u.ID, Role: u.Role, Via: via}, nil
}

// liveSet is this process's live connections, each with a doorbell that asks it to re-check
// now (a sign-out, a revocation, a role change here). The mutex guards only the set.
type liveSet struct {
	mu    sync.Mutex
	bells map[chan struct{}]struct{}
}

// join adds a connection; its bell rings (coalescing, never blocking) on ringAll. leave removes it.
func (l *liveSet) join() (bell chan struct{}, leave func()) {
	bell = make(chan struct{}, 1)
	l.mu.Lock()
	if l.bells == nil {
		l.bells = map[chan struct{}]struct{}{}
	}
	l.bells[bell] = struct{}{}
	l.mu.Unlock()
	return bell, func() {
		l.mu.Lock()
		delete(l.bells, bell)
		l.mu.Unlock()
	}
}

// ringAll asks every live connection of this process to re-check its credential now.
func (l *liveSet) ringAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for b := range l.bells {
		select {
		case b <- struct{}{}:
		default:
		}
	}
}

// liveGuard keeps one live connection authorized: check re-reads its credential and, for a
// conversation, whether the refreshed principal may still follow it.
type liveGuard struct {
	s      *Server
	g      grant
	via    string
	convID string // "" for the inbox
	by     agent.Principal
	bell   chan struct{}
	leave  func()
}

// newLiveGuard starts guarding the request's connection to convID ("" for the inbox).
func (s *Server) newLiveGuard(c echo.Context, convID string) *liveGuard {
	bell, leave := s.live.join()
	via, _ := c.Get(keyVia).(string)
	return &liveGuard{s: s, g: grantOf(c), via: via, convID: convID, by: principal(c), bell: bell, leave: leave}
}

// check re-authorizes: the principal as it stands now, or an error that ends the connection
// (errSignedOut, or not_found when the refreshed principal may no longer see the conversation).
func (lg *liveGuard) check(ctx context.Context) (agent.Principal, error) {
	by, err := lg.s.reauthorize(ctx, lg.g, lg.via)
	if err != nil {
		return agent.Principal{}, err
	}
	if lg.convID == "" && !agent.MayFollowAll(by) {
		return agent.Principal{}, errNoInbox // demoted to member: the inbox is no longer theirs
	}
	if lg.convID != "" && by != lg.by {
		// The role changed: ask the policy again (an owner stays the owner; a reviewer may have
		// lost the right to read).
		sub, err := lg.s.agent.Subscribe(ctx, lg.convID, by)
		if err != nil {
			return agent.Principal{}, err
		}
		sub.Close()
	}
	lg.by = by
	return by, nil
}

// errNoInbox ends an inbox socket whose viewer no longer has an inbox.
var errNoInbox = fault.New(fault.KindPermissionDenied, "the inbox is for reviewers and admins", nil)

// ended reports whether err from check ends the connection (the credential or the right is
// gone) rather than being a passing failure to read (the connection then stays, and the next
// check tries again).
func ended(err error) bool {
	k := fault.KindOf(err)
	return k == fault.KindNotAuthenticated || k == fault.KindNotFound || k == fault.KindPermissionDenied
}

// timer is the guard's re-check timer, on the server's clock.
func (lg *liveGuard) timer() clock.Timer { return lg.s.clock.NewTimer(lg.s.cfg.LiveRecheck) }
