package web

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/views"
)

// inboxPage: GET /inbox → the pending approvals this user may decide, newest first, across
// conversations (see pendingApprovals). Decisions post to the conversation's resolve route with
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

// inboxData loads the inbox of the current user.
func (s *Server) inboxData(c echo.Context) (views.InboxPage, error) {
	u := currentUser(c)
	list, err := s.pendingApprovals(c)
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
			Call: pendingCallView(p), At: p.CreatedAt,
		})
	}
	return views.InboxPage{CSRF: s.csrfToken(c), Viewer: views.Viewer{UserID: u.ID, Name: u.Name, Role: u.Role}, Entries: entries}, nil
}

// pendingCallView shapes an awaiting approval's index row as the card expects. The row's prompt
// is the agent's pending prompt of an approval: {"tool", "args", "plan"}.
func pendingCallView(p store.PendingCall) agent.CallView {
	cv := agent.CallView{
		Seq: p.Seq, ID: p.ToolCallID, Name: p.Name, Executor: tools.Executor(p.Executor), Approval: tools.Approval(p.Approval),
		Approvers: tools.Approvers(p.Approvers), Status: p.Status, PendingKind: tools.PendingKind(p.PendingKind), Args: p.Args,
		ExpiresAt: p.ExpiresAt,
	}
	var prompt struct {
		Plan *tools.Plan `json:"plan"`
	}
	if len(p.Prompt) > 0 && json.Unmarshal(p.Prompt, &prompt) == nil && prompt.Plan != nil {
		cv.Plan = prompt.Plan
	}
	return cv
}
