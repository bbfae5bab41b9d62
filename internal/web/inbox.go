package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/views"
)

// inboxPage: GET /inbox → the pending approvals this user may decide, newest first, across
// conversations (agent.PendingApprovals); reviewers and admins only (a member gets a 403 page
// saying their calls wait on their conversations' pages). Decisions post to the conversation's resolve route with
// return=/inbox, so they go through the same Resolve; /inbox/ws keeps the list live.
func (s *Server) inboxPage(c echo.Context) error {
	d, err := s.inboxData(c)
	if err != nil {
		return err
	}
	if n := noticeFor(c.QueryParam("notice")); n != "" {
		d.Form = &views.FormState{Notice: n}
	}
	return s.renderPage(c, http.StatusOK, "Inbox", views.InboxBody(d))
}

// inboxData loads the inbox of the current user: the approvals that wait for their decision
// (agent.PendingApprovals), with the names of the people who asked.
func (s *Server) inboxData(c echo.Context) (views.InboxPage, error) {
	return s.inboxDataFor(c, principal(c))
}

// inboxDataFor is inboxData for by (the inbox socket's principal as last re-checked).
func (s *Server) inboxDataFor(c echo.Context, by agent.Principal) (views.InboxPage, error) {
	u := currentUser(c)
	list, err := s.agent.PendingApprovals(c.Request().Context(), by)
	if err != nil {
		return views.InboxPage{}, err
	}
	names := map[string]string{}
	entries := make([]views.InboxEntry, 0, len(list))
	for _, p := range list {
		name, ok := names[p.OwnerID]
		if !ok {
			owner, err := s.store.UserByID(c.Request().Context(), p.OwnerID)
			if err != nil {
				return views.InboxPage{}, fmt.Errorf("load requester %s: %w", p.OwnerID, err)
			}
			name = owner.Name
			names[p.OwnerID] = name
		}
		entries = append(entries, views.InboxEntry{
			ConversationID: p.ConversationID, ConversationTitle: p.Title, Requester: name, OwnerID: p.OwnerID,
			Call: p.Call, At: p.CreatedAt,
		})
	}
	d := views.InboxPage{CSRF: s.csrfToken(c), Viewer: views.Viewer{Principal: by, Name: u.Name}, Entries: entries, Names: map[string]string{u.ID: u.Name}}
	s.addNames(c.Request().Context(), d.Names, inboxCalls(d))
	return d, nil
}

// inboxCalls are the calls an inbox shows.
func inboxCalls(d views.InboxPage) []agent.CallView {
	calls := make([]agent.CallView, len(d.Entries))
	for i, e := range d.Entries {
		calls[i] = e.Call
	}
	return calls
}

// inboxView is by's inbox as snap lists it: the approvals that wait for by (agent.InboxOf),
// with their requesters' names. base carries the page's CSRF token and the viewer's name.
func inboxView(base views.InboxPage, by agent.Principal, snap *inboxSnapshot) views.InboxPage {
	mine := agent.InboxOf(by, snap.list)
	entries := make([]views.InboxEntry, 0, len(mine))
	for _, p := range mine {
		entries = append(entries, views.InboxEntry{
			ConversationID: p.ConversationID, ConversationTitle: p.Title, Requester: snap.names[p.OwnerID], OwnerID: p.OwnerID,
			Call: p.Call, At: p.CreatedAt,
		})
	}
	base.Viewer.Principal = by
	base.Entries = entries
	base.Form = nil
	return base
}

// inboxSocket: GET /inbox/ws. The inbox feed (inbox_feed.go) computes the pending approvals
// once per change for every socket; this one filters each snapshot for its viewer, as last
// re-checked, and sends the list when it differs from what the page has (the list carries its
// count, data-count). ?count=1 is the count-only socket: a count frame when the number of
// waiting approvals changes, never the list. Members have no inbox:
// refused before the upgrade, and closed when a re-check finds the viewer demoted.
func (s *Server) inboxSocket(c echo.Context) error {
	d, err := s.inboxData(c) // before the upgrade: it may set the CSRF cookie; refuses members
	if err != nil {
		return err
	}
	u, by := currentUser(c), principal(c)
	release, err := s.openConn(by.UserID)
	if err != nil {
		return err
	}
	defer release()
	guard := s.newLiveGuard(c, "")
	defer guard.leave()
	conn, err := accept(c)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(c.Request().Context())
	defer cancel()
	k := newSocket(s, conn, s.log.With("socket", "inbox", "user", u.ID), cancel)
	// ?count=1 is the count-only socket every reviewer's page opens for the pending count on its
	// Inbox link and tab title: it sends count frames and never the list.
	countOnly := c.QueryParam("count") == "1"
	last, lastCount := "", -1
	render := func(ctx context.Context) bool {
		if countOnly {
			n := len(d.Entries)
			if n == lastCount {
				return true
			}
			lastCount = n
			return k.enqueue(frame{Type: "count", Count: &n})
		}
		var buf bytes.Buffer
		if err := views.InboxList(d).Render(ctx, &buf); err != nil {
			k.log.Error("socket: render inbox", "err", err)
			return false
		}
		if buf.String() == last {
			return true
		}
		last = buf.String()
		h := last
		return k.enqueue(frame{Type: "html", Op: "replace", Target: "inbox", HTML: &h})
	}
	pump := func(ctx context.Context) {
		feed, leave := s.inbox.join()
		defer leave()
		if !render(ctx) {
			return
		}
		var snap *inboxSnapshot // the latest the feed gave this socket
		recheck := guard.timer()
		defer recheck.Stop()
		// reauthorize re-checks the credential and the right to an inbox; a changed role
		// changes what the inbox lists (filtered again from the snapshot: no query).
		reauthorize := func() bool {
			now, err := guard.check(ctx)
			switch {
			case ended(err):
				k.finish(websocket.StatusPolicyViolation, "signed out or no longer allowed")
				return false
			case err != nil:
				if ctx.Err() == nil {
					k.log.Warn("socket: re-check the credential", "err", err)
				}
				return true
			case now == by:
				return true
			}
			by = now
			if snap == nil {
				return true // the feed's first snapshot is filtered for the new role
			}
			d = inboxView(d, by, snap)
			if !countOnly {
				s.addNames(ctx, d.Names, inboxCalls(d))
			}
			return render(ctx)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.stopping:
				k.finish(websocket.StatusGoingAway, "server shutting down")
				return
			case <-recheck.C():
				if !reauthorize() {
					return
				}
				recheck.Reset(s.cfg.LiveRecheck)
			case <-guard.bell:
				if !reauthorize() {
					return
				}
			case snap = <-feed.c:
				d = inboxView(d, by, snap)
				if !countOnly {
					s.addNames(ctx, d.Names, inboxCalls(d))
				}
				if !render(ctx) {
					return
				}
			}
		}
	}
	readLoop := func(ctx context.Context) error {
		// The inbox page sends nothing; reading keeps pings, pongs and the close handshake working.
		for {
			if _, _, err := conn.Read(ctx); err != nil {
				return err
			}
		}
	}
	k.serve(ctx, readLoop, pump)
	return nil
}
