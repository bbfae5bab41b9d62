package web

import (
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"parley/internal/fault"
)

// maxMessageRunes bounds one message's text.
const maxMessageRunes = 32_000

// apiCreateConversation: POST /api/v1/conversations {"title"} → 201 {"id"}.
func (s *Server) apiCreateConversation(c echo.Context) error {
	var body createConversationRequest
	if err := decodeJSON(c, &body, true); err != nil {
		return err
	}
	conv, err := s.agent.Create(c.Request().Context(), principal(c), body.Title)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, createdJSON{ID: conv.ID})
}

// apiListConversations: GET /api/v1/conversations[?q=…] → the caller's conversations, newest
// first (those whose title holds q, ignoring case, or one of whose messages holds every word of
// q, when it is given: then a message match carries "match"; docs/api.md, "Search"). A search
// spends the user's search budget.
func (s *Server) apiListConversations(c echo.Context) error {
	if err := s.allowSearch(c, c.QueryParam("q")); err != nil {
		return err
	}
	list, err := s.agent.Search(c.Request().Context(), principal(c), c.QueryParam("q"))
	if err != nil {
		return err
	}
	out := make([]conversationJSON, len(list))
	for i, cv := range list {
		out[i] = conversationOf(cv)
	}
	return c.JSON(http.StatusOK, conversationListJSON{Conversations: out})
}

// apiGetConversation: GET /api/v1/conversations/{id}.
func (s *Server) apiGetConversation(c echo.Context) error {
	v, err := s.agent.View(c.Request().Context(), c.Param("id"), principal(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toViewJSON(v))
}

// apiSendMessage: POST /api/v1/conversations/{id}/messages {"text"} → 202, with "queued": true
// when a running turn makes it wait (429 when too many wait). The agent decides who may send
// (its owner; anyone else who may not see the conversation gets 404).
func (s *Server) apiSendMessage(c echo.Context) error {
	var body sendMessageRequest
	if err := decodeJSON(c, &body, false); err != nil {
		return err
	}
	if body.Text == nil || strings.TrimSpace(*body.Text) == "" {
		return fault.InvalidField("text", "text is required")
	}
	if utf8.RuneCountInString(*body.Text) > maxMessageRunes {
		return fault.InvalidField("text", fmt.Sprintf("a message has at most %d characters", maxMessageRunes))
	}
	if err := s.allowMessage(c); err != nil {
		return err
	}
	got, err := s.agent.Post(c.Request().Context(), c.Param("id"), principal(c), *body.Text)
	if err != nil {
		return err
	}
	if got.Queued {
		return c.JSON(http.StatusAccepted, sentJSON{OK: true, Queued: true})
	}
	return c.JSON(http.StatusAccepted, sentJSON{OK: true})
}

// apiCancel: POST /api/v1/conversations/{id}/cancel → 200 {"ok": true}: the owner stops the
// running turn (agent.Cancel); 409 stale when nothing runs.
func (s *Server) apiCancel(c echo.Context) error {
	if err := s.agent.Cancel(c.Request().Context(), c.Param("id"), principal(c)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, okJSON{OK: true})
}

// apiResolve: POST /api/v1/conversations/{id}/calls/{call}/resolve. Everything about who may
// resolve what (404 for whoever may not see the conversation or the call, 422 for a resolution
// of the wrong kind, 403, 409 stale) is the agent's, in the same trip as the resolve itself.
func (s *Server) apiResolve(c echo.Context) error {
	var body resolveRequest
	if err := decodeJSON(c, &body, false); err != nil {
		return err
	}
	r := body.resolution()
	if err := checkRememberScope(c, r); err != nil {
		return err
	}
	if _, err := s.agent.Resolve(c.Request().Context(), c.Param("id"), c.Param("call"), r, principal(c)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, okJSON{OK: true})
}

// apiApprovals: GET /api/v1/approvals[?tool=&requester=&age=] → the pending approvals that wait
// for the caller's decision, newest first (agent.PendingApprovals), filtered as the inbox page
// is (inboxFilterOf, inboxQuery.matches: one rule): tool and requester are names matched whole,
// ignoring case; age a duration (approvals waiting at least that long). A malformed filter is
// 422 invalid_args, with the parameter's path.
func (s *Server) apiApprovals(c echo.Context) error {
	q, err := inboxFilterOf(c.QueryParams())
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	list, err := s.agent.PendingApprovals(ctx, principal(c))
	if err != nil {
		return err
	}
	var names map[string]string // owner id → name, read only when a requester filter needs them
	if q.Requester != "" {
		if names, err = s.inboxNames(ctx, list, nil, nil); err != nil {
			return err
		}
	}
	now := s.agent.Now()
	out := make([]approvalJSON, 0, len(list))
	for _, p := range list {
		if !q.matches(p, names[p.OwnerID], now) {
			continue
		}
		out = append(out, approvalOf(p))
	}
	return c.JSON(http.StatusOK, approvalListJSON{Approvals: out})
}
