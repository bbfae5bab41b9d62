package web

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/views"
)

// inboxPage: GET /inbox[?tool=&requester=&age=] → the pending approvals this user may decide,
// newest first, across conversations (agent.PendingApprovals), filtered by the query
// (inboxFilterOf); reviewers and admins only (a member gets a 403 page saying their calls wait
// on their conversations' pages). Decisions post to the conversation's resolve route with
// return=/inbox and the filters, so they go through the same Resolve and come back to the same
// filtered inbox; bulk decisions to /inbox/bulk (which redirects back with its outcome in
// counts: bulkSummaryOf), claims to /inbox/claim; /inbox/ws keeps the list live with the same
// filters.
func (s *Server) inboxPage(c echo.Context) error {
	d, err := s.inboxData(c)
	if err != nil {
		return err
	}
	if n := noticeFor(c.QueryParam("notice")); n != "" {
		d.Form = &views.FormState{Notice: n}
	}
	d.Bulk = bulkSummaryOf(c.QueryParams())
	return s.renderPage(c, http.StatusOK, "Inbox", views.InboxBody(d))
}

// inboxData loads the inbox of the current user: the approvals that wait for their decision
// (agent.PendingApprovals), with the names of the people who asked, their claims, filtered by
// the request's query (a malformed filter is invalid_args).
func (s *Server) inboxData(c echo.Context) (views.InboxPage, error) {
	q, err := inboxFilterOf(c.QueryParams())
	if err != nil {
		return views.InboxPage{}, err
	}
	return s.inboxDataFor(c, principal(c), q)
}

// inboxDataFor is by's inbox filtered by q (the inbox socket's principal as last re-checked, or
// the filters a decision's form returns to).
func (s *Server) inboxDataFor(c echo.Context, by agent.Principal, q inboxQuery) (views.InboxPage, error) {
	ctx := c.Request().Context()
	u := currentUser(c)
	list, err := s.agent.PendingApprovals(ctx, by)
	if err != nil {
		return views.InboxPage{}, err
	}
	claims, err := s.agent.Claims(ctx, by)
	if err != nil {
		return views.InboxPage{}, err
	}
	names, err := s.inboxNames(ctx, list, claims, nil)
	if err != nil {
		return views.InboxPage{}, err
	}
	d := views.InboxPage{CSRF: s.csrfToken(c), Viewer: views.Viewer{Principal: by, Name: u.Name}, Names: map[string]string{u.ID: u.Name}, Filter: q.InboxFilter,
		ReviewedTools: s.agent.ReviewedTools()}
	fillInbox(&d, list, claims, names, s.agent.Now())
	s.addNames(ctx, d.Names, inboxCalls(d))
	return d, nil
}

// inboxNames returns the names of the approvals' owners and the claims' holders, taking those
// in known (an earlier snapshot's: names do not change) before reading the store.
func (s *Server) inboxNames(ctx context.Context, list []agent.PendingApproval, claims []agent.Claim, known map[string]string) (map[string]string, error) {
	names := make(map[string]string, len(known))
	need := make([]string, 0, len(list)+len(claims))
	for _, p := range list {
		need = append(need, p.OwnerID)
	}
	for _, cl := range claims {
		need = append(need, cl.UserID)
	}
	for _, id := range need {
		if _, ok := names[id]; ok {
			continue
		}
		if n, ok := known[id]; ok {
			names[id] = n
			continue
		}
		u, err := s.store.UserByID(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("load user %s: %w", id, err)
		}
		names[id] = u.Name
	}
	return names, nil
}

// Inbox filter bounds: an age beyond maxInboxAge filters out everything an approval timeout
// could leave waiting; a name longer than maxInboxName matches no tool or person.
const (
	maxInboxAge  = 366 * 24 * time.Hour
	maxInboxName = 200
)

// inboxQuery is the inbox's filters, checked: the one rule of what the inbox page, its socket,
// a decision's way back to it and GET /api/v1/approvals list.
type inboxQuery struct {
	views.InboxFilter
	age time.Duration // the least age; 0: any
}

// inboxFilterOf reads the inbox's filters from a query: tool and requester (names, matched
// whole, case-insensitively) and age (a duration such as 5m, 1h or 24h: approvals waiting at
// least that long). A malformed filter is invalid_args, with the parameter's path.
func inboxFilterOf(q url.Values) (inboxQuery, error) {
	return checkInboxFilter(views.InboxFilter{Tool: strings.TrimSpace(q.Get("tool")), Requester: strings.TrimSpace(q.Get("requester")),
		Age: strings.TrimSpace(q.Get("age"))})
}

// checkInboxFilter checks f (see inboxFilterOf).
func checkInboxFilter(f views.InboxFilter) (inboxQuery, error) {
	for _, n := range []struct{ key, v string }{{"tool", f.Tool}, {"requester", f.Requester}} {
		if len(n.v) > maxInboxName || !agent.Storable(n.v) || strings.ContainsFunc(n.v, unicode.IsControl) {
			return inboxQuery{}, fault.InvalidAt("the inbox's "+n.key+" filter is not a name", "/"+n.key, "must be at most 200 bytes of text, without control characters")
		}
	}
	q := inboxQuery{InboxFilter: f}
	if f.Age == "" {
		return q, nil
	}
	d, err := time.ParseDuration(f.Age)
	if err != nil || d <= 0 || d > maxInboxAge {
		return inboxQuery{}, fault.InvalidAt("the inbox's age filter is not a duration", "/age", "must be a positive duration such as 5m, 1h or 24h, at most a year")
	}
	q.age = d
	return q, nil
}

// matches reports whether p, asked for by requester (its owner's name), passes q at now.
func (q inboxQuery) matches(p agent.PendingApproval, requester string, now time.Time) bool {
	return (q.Tool == "" || strings.EqualFold(q.Tool, p.Call.Name)) &&
		(q.Requester == "" || strings.EqualFold(q.Requester, requester)) &&
		(q.age == 0 || now.Sub(p.Call.CreatedAt) >= q.age)
}

// inboxReturnOf reads where an inbox form goes back to (its return field): ok when ret is the
// inbox, with its filters when they are valid (else none). The way back is rebuilt from the
// filters alone (inboxTarget), never ret itself: no other site, page or parameter.
func inboxReturnOf(ret string) (views.InboxFilter, bool) {
	u, err := url.Parse(ret)
	if err != nil || u.Scheme != "" || u.Opaque != "" || u.User != nil || u.Host != "" || u.Path != "/inbox" || strings.ContainsAny(ret, "\\\r\n") {
		return views.InboxFilter{}, false
	}
	q, err := inboxFilterOf(u.Query())
	if err != nil {
		return views.InboxFilter{}, true
	}
	return q.InboxFilter, true
}

// inboxTarget is the inbox filtered by f, with the query parameters extra (names and values
// the server chose: a notice, a bulk decision's counts) after the filters.
func inboxTarget(f views.InboxFilter, extra url.Values) string {
	target := "/inbox" + f.Query()
	if len(extra) == 0 {
		return target
	}
	if strings.Contains(target, "?") {
		return target + "&" + extra.Encode()
	}
	return target + "?" + extra.Encode()
}

// fillInbox sets d's entries from mine (the approvals that wait for d's viewer, newest first):
// every one for the pending count and the filters' suggestions, those that pass d.Filter as
// the list, each with its requester's name and its claim (claims are of any approval: those of
// others are left out; they were live when listed, and the feed lists them again when the
// soonest lapses).
func fillInbox(d *views.InboxPage, mine []agent.PendingApproval, claims []agent.Claim, names map[string]string, now time.Time) {
	q, _ := checkInboxFilter(d.Filter) // checked when the page or socket read it
	claimOf := make(map[[2]string]agent.Claim, len(claims))
	for _, cl := range claims {
		claimOf[[2]string{cl.ConversationID, cl.ToolCallID}] = cl
	}
	tools, requesters := map[string]bool{}, map[string]bool{}
	d.Entries, d.Tools, d.Requesters = make([]views.InboxEntry, 0, len(mine)), nil, nil
	for _, p := range mine {
		name := names[p.OwnerID]
		if !tools[p.Call.Name] {
			tools[p.Call.Name] = true
			d.Tools = append(d.Tools, p.Call.Name)
		}
		if !requesters[name] {
			requesters[name] = true
			d.Requesters = append(d.Requesters, name)
		}
		if !q.matches(p, name, now) {
			continue
		}
		e := views.InboxEntry{PendingApproval: p, Requester: name}
		if cl, ok := claimOf[[2]string{p.ConversationID, p.Call.ID}]; ok {
			e.Claim = &views.InboxClaim{By: names[cl.UserID], Mine: cl.UserID == d.Viewer.Principal.UserID}
		}
		d.Entries = append(d.Entries, e)
	}
	slices.Sort(d.Tools)
	slices.Sort(d.Requesters)
	d.Total, d.Now = len(mine), now
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
// with their requesters' names and claims, filtered as base is. base carries the page's CSRF
// token, the viewer's name and the filters.
func inboxView(base views.InboxPage, by agent.Principal, snap *inboxSnapshot, now time.Time) views.InboxPage {
	base.Viewer.Principal = by
	fillInbox(&base, agent.InboxOf(by, snap.list), snap.claims, snap.names, now)
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
	guard := s.newLiveGuard(c, "", "")
	conn, err := accept(c)
	if err != nil {
		guard.leave()
		release()
		return nil
	}
	// The socket outlives this handler (socket.start): its context keeps the request's values,
	// not its end.
	ctx, cancel := context.WithCancel(context.WithoutCancel(c.Request().Context()))
	k := newSocket(s, conn, s.log.With("socket", "inbox", "user", u.ID), cancel)
	// ?count=1 is the count-only socket every reviewer's page opens for the pending count on its
	// Inbox link and tab title: it sends count frames and never the list.
	ic := &inboxConn{socket: k, guard: guard, countOnly: c.QueryParam("count") == "1", by: by, d: d, lastCount: -1}
	k.start(ctx, ic.readLoop, ic.pump, cancel, guard.leave, release)
	return nil
}

// inboxConn is the state of one inbox socket, owned by its pump.
type inboxConn struct {
	*socket
	guard     *liveGuard
	countOnly bool // ?count=1: count frames, never the list

	by        agent.Principal // the viewer, as last re-checked
	d         views.InboxPage // the inbox as last filtered for by
	feed      *inboxSub       // the socket's place in the inbox feed, joined by pump
	snap      *inboxSnapshot  // the latest the feed gave this socket; nil before the first
	last      string          // the list's HTML last sent
	lastCount int             // the count last sent; -1 before the first
}

var _ liveSink[*inboxSnapshot] = (*inboxConn)(nil)

// pump joins the inbox feed, sends the inbox as the page was rendered with, and keeps it
// current (runLive).
func (ic *inboxConn) pump(ctx context.Context) {
	feed, leave := ic.s.inbox.join()
	defer leave()
	ic.feed = feed
	if !ic.render(ctx) {
		return
	}
	runLive[*inboxSnapshot](ctx, ic.guard, ic.log, ic)
}

// updates is the feed's snapshots (the channel is never closed).
func (ic *inboxConn) updates() <-chan *inboxSnapshot { return ic.feed.c }

func (ic *inboxConn) update(ctx context.Context, snap *inboxSnapshot, _ bool) bool {
	ic.snap = snap
	return ic.show(ctx)
}

// reauthorized: a changed role changes what the inbox lists, filtered again from the latest
// snapshot (no query); before the first, the feed's first snapshot is filtered for it.
func (ic *inboxConn) reauthorized(ctx context.Context, by agent.Principal) bool {
	if by == ic.by {
		return true
	}
	ic.by = by
	if ic.snap == nil {
		return true
	}
	return ic.show(ctx)
}

// due: an inbox socket has no wait of its own.
func (ic *inboxConn) due() <-chan time.Time { return nil }

func (ic *inboxConn) fire(context.Context) bool { return true }

// show filters the latest snapshot for the viewer and sends what changed.
func (ic *inboxConn) show(ctx context.Context) bool {
	ic.d = inboxView(ic.d, ic.by, ic.snap, ic.s.agent.Now())
	if !ic.countOnly {
		ic.s.addNames(ctx, ic.d.Names, inboxCalls(ic.d))
	}
	return ic.render(ctx)
}

// render sends the page the count (count-only) or the list, when it differs from what the page
// has (the list carries its count, data-count).
func (ic *inboxConn) render(ctx context.Context) bool {
	d := ic.d
	if ic.countOnly {
		n := d.Total
		if n == ic.lastCount {
			return true
		}
		grew := n > ic.lastCount && ic.lastCount >= 0
		ic.lastCount = n
		f := frame{Type: "count", Count: &n}
		if grew && len(d.Entries) > 0 {
			// What a browser notification of the new approval may say: the tool and who asked.
			f.Tool, f.Requester = d.Entries[0].Call.Name, d.Entries[0].Requester
		}
		return ic.enqueue(f)
	}
	var buf bytes.Buffer
	if err := views.InboxList(d).Render(ctx, &buf); err != nil {
		ic.log.Error("socket: render inbox", "err", err)
		return false
	}
	if buf.String() == ic.last {
		return true
	}
	ic.last = buf.String()
	h := ic.last
	return ic.enqueue(frame{Type: "html", Op: "replace", Target: "inbox", HTML: &h})
}

// readLoop keeps the socket reading: the inbox page sends nothing, but reading keeps pings,
// pongs and the close handshake working.
func (ic *inboxConn) readLoop(ctx context.Context) error {
	for {
		if _, _, err := ic.read(ctx); err != nil {
			return err
		}
	}
}
