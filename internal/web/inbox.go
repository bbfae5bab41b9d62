package web

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/views"
)

// inboxPage: GET /inbox → the pending approvals this user may decide, newest first, across
// conversations (agent.PendingApprovals). Decisions post to the conversation's resolve route with
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
	return views.InboxPage{CSRF: s.csrfToken(c), Viewer: views.Viewer{Principal: by, Name: u.Name}, Entries: entries}, nil
}
