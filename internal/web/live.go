package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/sync/singleflight"

	"parley/internal/agent"
	"parley/internal/auth"
	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
)

// Live connections (page sockets, the inbox socket, event streams) outlive the request that
// authenticated them, so they are re-authorized while they last: every LiveRecheck, and at once
// when this process signs someone out, revokes a token or changes a role. A re-check reads the
// credential from the store, so a sign-out, a revocation or a demotion made by another process
// on the same database is seen within LiveRecheck. Connections opened with one credential (a
// program following many conversations with one token, a person's tabs) share its reads: one
// read serves every check of that credential for LiveRecheck/5 (recheckShare), and each
// connection checks every LiveRecheck − LiveRecheck/5, so none learns later than LiveRecheck.
// A change made on this process drops the shared reads before it rings the connections.

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

// recheckShare is how long one read of a credential serves the checks of every connection
// opened with it.
func (s *Server) recheckShare() time.Duration { return s.cfg.LiveRecheck / 5 }

// recheckKey names a grant's credential among the shared reads.
func (g grant) recheckKey() string {
	if g.session != nil {
		return "s" + string(g.session)
	}
	return "t" + string(g.token)
}

// reauthorizeShared is reauthorize through the reads that the connections opened with the same
// credential share (see the top of this file).
func (s *Server) reauthorizeShared(ctx context.Context, g grant, via string) (agent.Principal, error) {
	if g.session == nil && g.token == nil {
		return agent.Principal{}, errSignedOut
	}
	key, l, now := g.recheckKey(), &s.live, s.now()
	l.mu.Lock()
	r, ok := l.reads[key]
	gen := l.gen
	l.mu.Unlock()
	if !ok || now.Sub(r.at) >= s.recheckShare() || now.Before(r.at) {
		v, err, _ := l.loads.Do(fmt.Sprintf("%d/%s", gen, key), func() (any, error) {
			at := s.now()
			// Not the first caller's context: its end must not fail the others waiting.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			by, err := s.reauthorize(rctx, g, "")
			read := sharedRead{at: at, userID: by.UserID, role: by.Role, err: err}
			if err != nil && !ended(err) {
				return read, nil // a failure to read is not shared: each check tries again
			}
			l.mu.Lock()
			if l.gen == gen { // no ring since the read began
				if l.reads == nil {
					l.reads = map[string]sharedRead{}
				}
				if len(l.reads) >= maxSharedReads {
					for k, old := range l.reads {
						if at.Sub(old.at) >= s.recheckShare() {
							delete(l.reads, k)
						}
					}
					if len(l.reads) >= maxSharedReads {
						clear(l.reads)
					}
				}
				l.reads[key] = read
			}
			l.mu.Unlock()
			return read, nil
		})
		if err != nil {
			return agent.Principal{}, err
		}
		r = v.(sharedRead)
	}
	if r.err != nil {
		return agent.Principal{}, r.err
	}
	return agent.Principal{UserID: r.userID, Role: r.role, Via: via}, nil
}

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
	if errors.Is(err, store.ErrNotFound) || (err == nil && u.Disabled) {
		return agent.Principal{}, errSignedOut
	}
	if err != nil {
		return agent.Principal{}, fmt.Errorf("re-read user: %w", err)
	}
	return agent.Principal{UserID: u.ID, Role: u.Role, Via: via}, nil
}

// liveSet is this process's live connections, each with a doorbell that asks it to re-check
// now (a sign-out, a revocation, a role change here), and the credential reads they share. The
// mutex guards only the set and the reads.
type liveSet struct {
	mu    sync.Mutex
	bells map[chan struct{}]struct{}
	reads map[string]sharedRead // by credential (recheckKey)
	// gen counts ringAll calls: a read that began before a ring is not shared after it.
	gen uint64
	// loads makes concurrent checks of one credential wait for one read.
	loads singleflight.Group
}

// sharedRead is one re-read of a credential: the user it stood for, or the error that ends the
// connections opened with it.
type sharedRead struct {
	at     time.Time
	userID string
	role   store.Role
	err    error
}

// maxSharedReads bounds the shared reads kept: past it, the stale ones go, and if all are
// fresh, all of them (the next checks read again).
const maxSharedReads = 10000

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

// ringAll asks every live connection of this process to re-check its credential now, from a
// fresh read.
func (l *liveSet) ringAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.reads)
	l.gen++
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
	s       *Server
	g       grant
	via     string
	convID  string // "" for the inbox
	ownerID string // the conversation's owner
	by      agent.Principal
	bell    chan struct{}
	leave   func()
}

// newLiveGuard starts guarding the request's connection to convID, owned by ownerID ("" and ""
// for the inbox).
func (s *Server) newLiveGuard(c echo.Context, convID, ownerID string) *liveGuard {
	bell, leave := s.live.join()
	via, _ := c.Get(keyVia).(string)
	return &liveGuard{s: s, g: grantOf(c), via: via, convID: convID, ownerID: ownerID, by: principal(c), bell: bell, leave: leave}
}

// borrowed reports whether the connection follows a conversation on someone else's right to it:
// a decider reads it only while a call of it awaits them (agent.MaySee), so the policy is asked
// again at every check, and at each change of its calls (mayStillFollow).
func (lg *liveGuard) borrowed() bool {
	return lg.convID != "" && lg.by.UserID != lg.ownerID
}

// check re-authorizes: the principal as it stands now, or an error that ends the connection
// (errSignedOut, or not_found when the refreshed principal may no longer see the conversation).
func (lg *liveGuard) check(ctx context.Context) (agent.Principal, error) {
	by, err := lg.s.reauthorizeShared(ctx, lg.g, lg.via)
	if err != nil {
		return agent.Principal{}, err
	}
	if lg.convID == "" && !agent.MayFollowAll(by) {
		return agent.Principal{}, errNoInbox // demoted to member: the inbox is no longer theirs
	}
	if lg.convID != "" && (by != lg.by || lg.borrowed()) {
		// The role changed, or the right to read is someone else's conversation's to give: ask
		// the policy again (an owner stays the owner; a reviewer may have lost the right to read,
		// or decided the last call that awaited them).
		if err := lg.follows(ctx, by); err != nil {
			return agent.Principal{}, err
		}
	}
	lg.by = by
	return by, nil
}

// follows asks the agent whether by may follow the conversation now.
func (lg *liveGuard) follows(ctx context.Context, by agent.Principal) error {
	sub, err := lg.s.agent.Subscribe(ctx, lg.convID, by)
	if err != nil {
		return err
	}
	sub.Close()
	return nil
}

// mayStillFollow asks the policy again, before an event of the conversation's calls is passed
// on, when the connection follows it on a borrowed right: the decision that ended the decider's
// right (and anything after it) is not theirs to read. An error that does not end the right (a
// failed read) keeps the connection; the next check tries again.
func (lg *liveGuard) mayStillFollow(ctx context.Context, ev agent.Event) error {
	if !lg.borrowed() || (ev.Type != agent.EventToolCall && len(ev.Entries) == 0) {
		return nil
	}
	if err := lg.follows(ctx, lg.by); ended(err) {
		return err
	}
	return nil
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

// timer is the guard's re-check timer, on the server's clock: LiveRecheck less the time a
// shared read may already be old.
func (lg *liveGuard) timer() clock.Timer { return lg.s.clock.NewTimer(lg.every()) }

// every is how often the guard re-checks.
func (lg *liveGuard) every() time.Duration { return lg.s.cfg.LiveRecheck - lg.s.recheckShare() }

// liveEnd is why runLive ends a connection, which its sink tells the client.
type liveEnd int

const (
	liveSignedOut liveEnd = iota // a re-check found the credential or the right gone
	liveShutdown                 // the server is stopping
)

// liveSink is one live connection as runLive drives it: a conversation's page socket, the
// inbox socket or an event stream. runLive calls its methods on its own goroutine only, and a
// method returning false ends the connection.
type liveSink[T any] interface {
	// updates is what the connection follows, read again each round (a resubscription
	// replaces it); update brings the client up to date with u (ok false: updates closed).
	updates() <-chan T
	update(ctx context.Context, u T, ok bool) bool
	// keepalive fires when a heartbeat is due; heartbeat sends one (a WebSocket ping, an SSE
	// comment) and sets the next.
	keepalive() <-chan time.Time
	heartbeat() bool
	// due fires when the sink's own wait ends (a page socket's render window; nil while none
	// is armed); fire acts on it.
	due() <-chan time.Time
	fire(ctx context.Context) bool
	// reauthorized takes the principal a re-check found, which may differ from the one before
	// (a role changed): what the client is shown follows it.
	reauthorized(ctx context.Context, by agent.Principal) bool
	// ending tells the client why runLive ends the connection.
	ending(why liveEnd)
}

// runLive is the one loop of every live connection: it waits and dispatches — updates,
// heartbeats, the sink's own wait, and the guard's re-checks (every LiveRecheck, and at once
// when the bell rings) — until ctx ends, the server stops or the sink ends the connection. The
// work is in the sink's methods, so an idle connection's goroutine uses little of its stack
// (the runtime then shrinks it back after a render grew it: socket.serve).
func runLive[T any](ctx context.Context, guard *liveGuard, log *slog.Logger, sink liveSink[T]) {
	recheck := guard.timer()
	defer recheck.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-guard.s.stopping:
			sink.ending(liveShutdown)
			return
		case <-sink.keepalive():
			if !sink.heartbeat() {
				return
			}
		case <-recheck.C():
			if !reauthorize(ctx, guard, log, sink) {
				return
			}
			recheck.Reset(guard.every())
		case <-guard.bell:
			if !reauthorize(ctx, guard, log, sink) {
				return
			}
		case <-sink.due():
			if !sink.fire(ctx) {
				return
			}
		case u, ok := <-sink.updates():
			if !sink.update(ctx, u, ok) {
				return
			}
		}
	}
}

// reauthorize re-checks a live connection's credential and right (liveGuard.check): the sink
// gets the principal as it stands, or is ended when the credential or the right is gone. A
// failure to read is logged and the connection stays: the next check tries again.
func reauthorize[T any](ctx context.Context, guard *liveGuard, log *slog.Logger, sink liveSink[T]) bool {
	by, err := guard.check(ctx)
	switch {
	case err == nil:
		return sink.reauthorized(ctx, by)
	case ended(err):
		sink.ending(liveSignedOut)
		return false
	}
	if ctx.Err() == nil {
		log.Warn("live connection: re-check the credential", "err", err)
	}
	return true
}
