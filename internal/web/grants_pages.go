package web

import (
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/views"
)

// The governance pages: the viewer's remembered approvals (GET /grants, POST
// /grants/{id}/revoke) and the admins' audit trail (GET /admin/audit). Who may do what is the
// agent's (Manager.Grants, RevokeGrant, Audit), as for the API.

// grantsPage: GET /grants → the viewer's active grants, newest first, each with a revoke form.
func (s *Server) grantsPage(c echo.Context) error {
	list, err := s.agent.Grants(c.Request().Context(), principal(c))
	if err != nil {
		return err
	}
	rows := make([]views.GrantRow, len(list))
	for i, g := range list {
		rows[i] = grantRow(g)
	}
	return s.render(c, http.StatusOK, views.GrantsPage(s.layoutData(c, "Remembered approvals"), s.now(), rows, noticeFor(c.QueryParam("notice"))))
}

// grantRow is a grant as the grants pages show it.
func grantRow(g agent.Grant) views.GrantRow {
	return views.GrantRow{ID: g.ID, Tool: g.Tool, Scope: g.Scope, ConversationID: g.ConversationID, Args: g.Args, ArgsHash: g.ArgsHash,
		Created: g.CreatedAt, Expires: g.ExpiresAt}
}

// revokeGrantPage: POST /grants/{id}/revoke → the grant ends now (audited by the agent); back
// to the list. Someone else's grant, or one already ended, is a 404.
func (s *Server) revokeGrantPage(c echo.Context) error {
	if err := s.agent.RevokeGrant(c.Request().Context(), principal(c), c.Param("grant")); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/grants")
}

// adminGrantsPage: GET /admin/grants (admins) → every person's active grants, newest first,
// each naming its person and with a revoke form. The agent authorizes (AllGrants).
func (s *Server) adminGrantsPage(c echo.Context) error {
	ctx := c.Request().Context()
	list, err := s.agent.AllGrants(ctx, principal(c))
	if err != nil {
		return err
	}
	names := map[string]string{}
	rows := make([]views.GrantRow, len(list))
	for i, g := range list {
		rows[i] = grantRow(g)
		name, ok := names[g.UserID]
		if !ok {
			name = g.UserID
			if u, err := s.store.UserByID(ctx, g.UserID); err == nil {
				name = u.Name
			}
			names[g.UserID] = name
		}
		rows[i].Owner, rows[i].OwnerID = name, g.UserID
	}
	return s.render(c, http.StatusOK, views.AdminGrantsPage(s.layoutData(c, "All remembered approvals"), s.now(), rows, noticeFor(c.QueryParam("notice"))))
}

// adminRevokeGrantPage: POST /admin/grants/{id}/revoke (admins) → anyone's grant ends now
// (audited as grant_revoke by the admin); back to the list.
func (s *Server) adminRevokeGrantPage(c echo.Context) error {
	if err := s.agent.RevokeGrant(c.Request().Context(), principal(c), c.Param("grant")); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/admin/grants")
}

// auditPageSize is how many records one page of the audit trail shows.
const auditPageSize = 50

// auditPage: GET /admin/audit?conversation=&actor=&action=&tool=&before= (admins) → the audit
// trail newest first, filtered, a page at a time: "before" is the chain place a page starts
// before. The actor filter takes a user's name or id.
func (s *Server) auditPage(c echo.Context) error {
	ctx := c.Request().Context()
	before, err := queryInt(c, "before")
	if err != nil {
		return err
	}
	f := views.AuditFilters{
		Conversation: strings.TrimSpace(c.QueryParam("conversation")), Actor: strings.TrimSpace(c.QueryParam("actor")),
		Action: strings.TrimSpace(c.QueryParam("action")), Tool: strings.TrimSpace(c.QueryParam("tool")),
	}
	filter := store.AuditFilter{ConversationID: f.Conversation, ActorID: f.Actor, Action: f.Action, Tool: f.Tool,
		BeforeSeq: before, Limit: auditPageSize + 1}
	if f.Actor != "" {
		if u, err := s.store.UserByName(ctx, f.Actor); err == nil {
			filter.ActorID = u.ID
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	recs, err := s.agent.Audit(ctx, principal(c), filter)
	if err != nil {
		return err
	}
	page := views.AuditPage{Filters: f, Before: before, Now: s.now()}
	if len(recs) > auditPageSize {
		recs = recs[:auditPageSize]
		page.Next = recs[len(recs)-1].Seq
	}
	names := map[string]string{}
	for _, r := range recs {
		actor := r.ActorID
		if n, ok := names[actor]; ok {
			actor = n
		} else if actor != "" && actor != "system" {
			if u, err := s.store.UserByID(ctx, actor); err == nil {
				names[actor] = u.Name
				actor = u.Name
			} else {
				names[actor] = actor
			}
		}
		detail := ""
		if len(r.Detail) > 0 {
			detail = string(r.Detail)
		}
		page.Rows = append(page.Rows, views.AuditRow{Seq: r.Seq, At: r.At, Actor: actor, ActorID: r.ActorID,
			Action: r.Action, Tool: r.Tool, ConversationID: r.ConversationID, ToolCallID: r.ToolCallID, Reason: r.Reason, Detail: detail,
			Changes: agent.AuditChanges(r)})
	}
	return s.render(c, http.StatusOK, views.AuditTrailPage(s.layoutData(c, "Audit trail"), page))
}
