package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/views"
)

// maxMessageRunes bounds one message's text.
const maxMessageRunes = 32_000

// conversationJSON is a conversation in the list.
type conversationJSON struct {
	ID        string     `json:"id"`
	Title     string     `json:"title"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	Match     *matchJSON `json:"match,omitempty"`
}

// matchJSON is the message a search matched: its seq, an excerpt in plain text and where the
// matched words are in it ([start, end) byte offsets).
type matchJSON struct {
	Seq        int64    `json:"seq"`
	Snippet    string   `json:"snippet"`
	Highlights [][2]int `json:"highlights"`
}

func matchOf(m *agent.SearchMatch) *matchJSON {
	if m == nil {
		return nil
	}
	out := &matchJSON{Seq: m.Seq, Highlights: [][2]int{}}
	var b strings.Builder
	for _, p := range views.SnippetParts(m.Snippet) {
		if p.Match {
			out.Highlights = append(out.Highlights, [2]int{b.Len(), b.Len() + len(p.Text)})
		}
		b.WriteString(p.Text)
	}
	out.Snippet = b.String()
	return out
}

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
// q, when it is given: then a message match carries "match"; docs/api.md, "Search").
func (s *Server) apiListConversations(c echo.Context) error {
	list, err := s.agent.Search(c.Request().Context(), principal(c), c.QueryParam("q"))
	if err != nil {
		return err
	}
	out := make([]conversationJSON, len(list))
	for i, cv := range list {
		out[i] = conversationJSON{ID: cv.ID, Title: cv.Title, Status: cv.Status, CreatedAt: cv.CreatedAt, UpdatedAt: cv.UpdatedAt, Match: matchOf(cv.Match)}
	}
	return c.JSON(http.StatusOK, conversationListJSON{Conversations: out})
}

// viewJSON is the API's shape of one conversation.
type viewJSON struct {
	ID        string                       `json:"id"`
	Title     string                       `json:"title"`
	Status    string                       `json:"status"`
	LastSeq   int64                        `json:"last_seq"`
	Messages  []messageJSON                `json:"messages"`
	ToolCalls []toolCallJSON               `json:"tool_calls"`
	Pending   map[string]agent.PendingView `json:"pending"`
	// Queued are the owner's messages that wait for the running turn to end.
	Queued []messageJSON `json:"queued,omitempty"`
}

type messageJSON struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type toolCallJSON struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Executor tools.Executor  `json:"executor"`
	Approval tools.Approval  `json:"approval"`
	Status   string          `json:"status"`
	Args     json.RawMessage `json:"args"`
	Result   json.RawMessage `json:"result"`
}

// apiGetConversation: GET /api/v1/conversations/{id}.
func (s *Server) apiGetConversation(c echo.Context) error {
	v, err := s.agent.View(c.Request().Context(), c.Param("id"), principal(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toViewJSON(v))
}

func toViewJSON(v agent.View) viewJSON {
	out := viewJSON{
		ID: v.ID, Title: v.Title, Status: v.Status, LastSeq: v.LastSeq,
		Messages: make([]messageJSON, len(v.Messages)), ToolCalls: make([]toolCallJSON, len(v.Calls)),
		Pending: v.Pending,
	}
	for i, m := range v.Messages {
		out.Messages[i] = messageJSON{Role: m.Role, Content: m.Content}
	}
	out.Queued = make([]messageJSON, len(v.Queued))
	for i, m := range v.Queued {
		out.Queued[i] = messageJSON{Role: m.Role, Content: m.Content}
	}
	for i, cl := range v.Calls {
		out.ToolCalls[i] = toolCallJSON{ID: cl.ID, Name: cl.Name, Executor: cl.Executor, Approval: cl.Approval,
			Status: cl.Status, Args: rawOrNull(cl.Args), Result: rawOrNull(cl.Result)}
	}
	if out.Pending == nil {
		out.Pending = map[string]agent.PendingView{}
	}
	return out
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
	var r agent.Resolution
	if err := decodeJSON(c, &r, false); err != nil {
		return err
	}
	if err := checkRememberScope(c, r); err != nil {
		return err
	}
	if _, err := s.agent.Resolve(c.Request().Context(), c.Param("id"), c.Param("call"), r, principal(c)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, okJSON{OK: true})
}

// approvalJSON is one pending approval in the listing.
type approvalJSON struct {
	ConversationID string          `json:"conversation_id"`
	Title          string          `json:"title"`
	OwnerID        string          `json:"owner_id"`
	ToolCallID     string          `json:"tool_call_id"`
	Tool           string          `json:"tool"`
	Approvers      string          `json:"approvers"`
	Args           json.RawMessage `json:"args"`
	Prompt         json.RawMessage `json:"prompt"`
	ExpiresAt      *time.Time      `json:"expires_at,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
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
		out = append(out, approvalJSON{ConversationID: p.ConversationID, Title: p.Title, OwnerID: p.OwnerID, ToolCallID: p.Call.ID,
			Tool: p.Call.Name, Approvers: string(p.Call.Approvers), Args: rawOrNull(p.Call.Args),
			Prompt: rawOrNull(p.Prompt), ExpiresAt: p.Call.ExpiresAt, CreatedAt: p.CreatedAt})
	}
	return c.JSON(http.StatusOK, approvalListJSON{Approvals: out})
}

// rawOrNull is raw, or JSON null when there is none, so the field is always present.
func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
