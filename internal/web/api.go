package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
)

// maxMessageRunes bounds one message's text.
const maxMessageRunes = 32_000

// conversationJSON is a conversation in the list.
type conversationJSON struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// apiCreateConversation: POST /api/v1/conversations {"title"} → 201 {"id"}.
func (s *Server) apiCreateConversation(c echo.Context) error {
	var body struct {
		Title string `json:"title"`
	}
	if err := decodeJSON(c, &body, true); err != nil {
		return err
	}
	body.Title = strings.TrimSpace(body.Title)
	if utf8.RuneCountInString(body.Title) > 200 {
		return invalidField("title", "a title has at most 200 characters")
	}
	if !storableText(body.Title) {
		return invalidField("title", "a title cannot hold a NUL character")
	}
	now := s.now()
	conv, err := s.store.CreateConversation(c.Request().Context(), store.Conversation{
		OwnerID: currentUser(c).ID, Title: body.Title, Status: store.StatusIdle, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		return fmt.Errorf("create conversation: %w", err)
	}
	return c.JSON(http.StatusCreated, map[string]string{"id": conv.ID})
}

// apiListConversations: GET /api/v1/conversations → the caller's conversations, newest first.
func (s *Server) apiListConversations(c echo.Context) error {
	list, err := s.store.ListConversations(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return fmt.Errorf("list conversations: %w", err)
	}
	out := make([]conversationJSON, len(list))
	for i, cv := range list {
		out[i] = conversationJSON{ID: cv.ID, Title: cv.Title, Status: cv.Status, CreatedAt: cv.CreatedAt, UpdatedAt: cv.UpdatedAt}
	}
	return c.JSON(http.StatusOK, map[string]any{"conversations": out})
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
	id := c.Param("id")
	if _, err := s.conversationFor(c, id); err != nil {
		return err
	}
	v, err := s.conv.View(c.Request().Context(), id)
	if err != nil {
		return fmt.Errorf("view conversation %s: %w", id, err)
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
	for i, cl := range v.Calls {
		out.ToolCalls[i] = toolCallJSON{ID: cl.ID, Name: cl.Name, Executor: cl.Executor, Approval: cl.Approval,
			Status: cl.Status, Args: rawOrNull(cl.Args), Result: rawOrNull(cl.Result)}
	}
	if out.Pending == nil {
		out.Pending = map[string]agent.PendingView{}
	}
	return out
}

// apiSendMessage: POST /api/v1/conversations/{id}/messages {"text"} → 202.
//
// Only the owner may send; anyone else gets 404. With the agent's Manager that rule runs in the
// conversation's actor (no store read here).
func (s *Server) apiSendMessage(c echo.Context) error {
	id := c.Param("id")
	cc, checked := s.conv.(checkedConversations)
	if !checked {
		if _, err := s.conversationFor(c, id); err != nil {
			return err
		}
	}
	var body struct {
		Text *string `json:"text"`
	}
	if err := decodeJSON(c, &body, false); err != nil {
		return err
	}
	if body.Text == nil || strings.TrimSpace(*body.Text) == "" {
		return invalidField("text", "text is required")
	}
	if utf8.RuneCountInString(*body.Text) > maxMessageRunes {
		return invalidField("text", fmt.Sprintf("a message has at most %d characters", maxMessageRunes))
	}
	if err := s.allowMessage(c); err != nil {
		return err
	}
	var err error
	if checked {
		err = cc.SendChecked(c.Request().Context(), id, principal(c), *body.Text, ownerRule(currentUser(c)))
	} else {
		err = s.conv.Send(c.Request().Context(), id, principal(c), *body.Text)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, map[string]bool{"ok": true})
}

// apiResolve: POST /api/v1/conversations/{id}/calls/{call}/resolve. The owner may resolve any
// of their calls; a reviewer may also decide approvals of reviewer-gated tools in anyone's
// conversation. Everyone else learns nothing (404). The body must be the resolution of the
// kind the call awaits (422 otherwise); the agent decides the rest (stale, permission, schema).
//
// These rules (resolveRule) run inside the conversation's actor against the call as it knows
// it, in the same trip as the resolve itself, so the request reads nothing from the store.
func (s *Server) apiResolve(c echo.Context) error {
	ctx := c.Request().Context()
	id, callID := c.Param("id"), c.Param("call")
	var r agent.Resolution
	if err := decodeJSON(c, &r, false); err != nil {
		return err
	}
	kind, terr := resolutionKind(r)
	if terr != nil {
		return terr
	}
	rule := resolveRule(currentUser(c), kind)
	if cc, ok := s.conv.(checkedConversations); ok {
		if err := cc.ResolveChecked(ctx, id, callID, r, principal(c), rule); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]bool{"ok": true})
	}
	f, err := s.storeFacts(ctx, id, callID)
	if err != nil {
		return err
	}
	if err := rule(f); err != nil {
		return err
	}
	if err := s.conv.Resolve(ctx, id, callID, r, principal(c)); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]bool{"ok": true})
}

// checkedConversations is the agent's Manager as the JSON API prefers it: the handler's rules
// run inside the conversation's actor (agent.Check), with no store read of their own. A
// Conversations without it (the handler tests' fake) gets the rules checked against the store
// first (storeFacts), with the same outcome.
type checkedConversations interface {
	SendChecked(ctx context.Context, convID string, by agent.Principal, text string, check agent.Check) error
	ResolveChecked(ctx context.Context, convID, toolCallID string, r agent.Resolution, by agent.Principal, check agent.Check) error
}

// resolveRule is the JSON API's rule for u resolving a call with a resolution of kind. Order
// matters: nothing about the call is said to someone who may not see it.
func resolveRule(u *store.User, kind tools.PendingKind) agent.Check {
	return func(f agent.Facts) error {
		owner := u != nil && f.OwnerID == u.ID
		reviewable := f.Found && isReviewer(u) && f.Approval == tools.RequiresApproval && f.Approvers == tools.ByReviewer
		if !owner && !reviewable {
			return errConversation
		}
		if !f.Found {
			return tools.NewError(tools.KindNotFound, "no such tool call", nil)
		}
		if !owner && kind != tools.PendingApproval {
			// A reviewer decides the gate; what runs after it (a question, a browser tool) is the
			// owner's alone.
			return errConversation
		}
		if f.Status == store.CallAwaiting && f.PendingKind != "" && f.PendingKind != kind {
			return tools.NewError(tools.KindInvalidArgs,
				fmt.Sprintf("this call awaits %s, not %s: %s", kindWords(f.PendingKind), kindWords(kind), resolutionHint),
				map[string]any{"pending_kind": string(f.PendingKind), "sent_kind": string(kind)})
		}
		return nil
	}
}

// ownerRule admits the conversation's owner only; anyone else gets the 404 of a missing
// conversation.
func ownerRule(u *store.User) agent.Check {
	return func(f agent.Facts) error {
		if u == nil || f.OwnerID != u.ID {
			return errConversation
		}
		return nil
	}
}

// storeFacts reads from the store what an agent.Check decides from, for a Conversations that
// cannot run checks in the actor.
func (s *Server) storeFacts(ctx context.Context, id, callID string) (agent.Facts, error) {
	conv, err := s.store.GetConversation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return agent.Facts{}, errConversation
	}
	if err != nil {
		return agent.Facts{}, fmt.Errorf("load conversation %s: %w", id, err)
	}
	f := agent.Facts{OwnerID: conv.OwnerID}
	if callID == "" {
		return f, nil
	}
	call, err := s.store.GetToolCall(ctx, id, callID)
	if errors.Is(err, store.ErrNotFound) {
		return f, nil
	}
	if err != nil {
		return agent.Facts{}, fmt.Errorf("load tool call %s/%s: %w", id, callID, err)
	}
	f.Found, f.Approval, f.Approvers = true, tools.Approval(call.Approval), tools.Approvers(call.Approvers)
	f.Status, f.PendingKind = call.Status, tools.PendingKind(call.PendingKind)
	return f, nil
}

const resolutionHint = `an approval takes {"decision":"approve"|"deny"}, a question {"action":"accept"|"decline"|"cancel"}, a browser tool {"result":{…}} or {"error":{"message":"…"}}`

func kindWords(k tools.PendingKind) string {
	switch k {
	case tools.PendingApproval:
		return "an approval decision"
	case tools.PendingElicitation:
		return "an answer to a question"
	case tools.PendingClientExec:
		return "a browser tool's result"
	}
	return string(k)
}

// resolutionKind checks a resolution's shape and says which pending kind it answers.
func resolutionKind(r agent.Resolution) (tools.PendingKind, *tools.Error) {
	var kinds []tools.PendingKind
	if r.Decision != "" || present(r.Args) || r.Reason != "" {
		kinds = append(kinds, tools.PendingApproval)
	}
	if r.Action != "" || present(r.Content) {
		kinds = append(kinds, tools.PendingElicitation)
	}
	if present(r.Result) || r.Error != nil {
		kinds = append(kinds, tools.PendingClientExec)
	}
	if len(kinds) != 1 {
		return "", tools.NewError(tools.KindInvalidArgs, "a resolution is exactly one of: "+resolutionHint, nil)
	}
	switch kinds[0] {
	case tools.PendingApproval:
		if !storableText(r.Reason) {
			return "", invalidField("reason", "a reason cannot hold a NUL character")
		}
		switch r.Decision {
		case "approve":
		case "deny":
			if present(r.Args) {
				return "", invalidField("args", "edited arguments go with approve, not deny")
			}
		default:
			return "", invalidField("decision", `decision must be "approve" or "deny"`)
		}
	case tools.PendingElicitation:
		switch r.Action {
		case "accept":
		case "decline", "cancel":
			if present(r.Content) {
				return "", invalidField("content", "content goes with accept only")
			}
		default:
			return "", invalidField("action", `action must be "accept", "decline" or "cancel"`)
		}
	case tools.PendingClientExec:
		if present(r.Result) && r.Error != nil {
			return "", tools.NewError(tools.KindInvalidArgs, "send a result or an error, not both", nil)
		}
	}
	return kinds[0], nil
}

// present reports whether a raw JSON field was given (JSON null counts as absent).
func present(raw []byte) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// invalidField is a 422 about one field, in the shape ValidateArgs uses.
func invalidField(field, msg string) *tools.Error {
	return tools.NewError(tools.KindInvalidArgs, msg, map[string]any{
		"problems": []map[string]any{{"path": "/" + field, "message": msg}},
	})
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

// apiApprovals: GET /api/v1/approvals → the pending approvals the caller may decide, newest
// first: approvals in their own conversations that the owner decides and, for reviewers and
// admins, every pending approval of a reviewer-gated tool.
func (s *Server) apiApprovals(c echo.Context) error {
	list, err := s.pendingApprovals(c)
	if err != nil {
		return err
	}
	out := make([]approvalJSON, len(list))
	for i, p := range list {
		out[i] = approvalJSON{ConversationID: p.ConversationID, Title: p.Title, OwnerID: p.OwnerID, ToolCallID: p.ToolCallID,
			Tool: p.Name, Approvers: p.Approvers, Args: rawOrNull(p.Args), Prompt: rawOrNull(p.Prompt), ExpiresAt: p.ExpiresAt, CreatedAt: p.CreatedAt}
	}
	return c.JSON(http.StatusOK, map[string]any{"approvals": out})
}

// pendingApprovals is what apiApprovals lists (the inbox may use it too).
func (s *Server) pendingApprovals(c echo.Context) ([]store.PendingCall, error) {
	ctx := c.Request().Context()
	u := currentUser(c)
	own, err := s.store.ListPending(ctx, store.PendingFilter{Kind: string(tools.PendingApproval), OwnerID: u.ID})
	if err != nil {
		return nil, fmt.Errorf("list own pending approvals: %w", err)
	}
	seen := map[[2]string]bool{}
	var out []store.PendingCall
	for _, p := range own {
		if p.Approvers == string(tools.ByReviewer) && !isReviewer(u) {
			continue // the owner alone cannot approve it
		}
		seen[[2]string{p.ConversationID, p.ToolCallID}] = true
		out = append(out, p)
	}
	if isReviewer(u) {
		rev, err := s.store.ListPending(ctx, store.PendingFilter{Kind: string(tools.PendingApproval), Approvers: string(tools.ByReviewer)})
		if err != nil {
			return nil, fmt.Errorf("list reviewer approvals: %w", err)
		}
		for _, p := range rev {
			if !seen[[2]string{p.ConversationID, p.ToolCallID}] {
				out = append(out, p)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// rawOrNull is raw, or JSON null when there is none, so the field is always present.
func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
