package web

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/views"
)

// The inbox's actions beside a single decision (which posts to the conversation's resolve
// route): claims and bulk decisions, on the page and in the API.

// maxBulk bounds the items of one bulk decision.
const maxBulk = 100

// bulkItem is one call of a bulk decision.
type bulkItem struct {
	ConversationID string `json:"conversation_id"`
	ToolCallID     string `json:"tool_call_id"`
}

// bulkResultJSON is one item's outcome in the API: ok, or the error it got (the envelope's
// error object).
type bulkResultJSON struct {
	ConversationID string     `json:"conversation_id"`
	ToolCallID     string     `json:"tool_call_id"`
	OK             bool       `json:"ok"`
	Error          *errorJSON `json:"error,omitempty"`
}

// bulkResolve decides each item in turn through the one Resolve, as by, each authorized by the
// agent's policy on its own: an item that fails (stale, permission_denied, not_found …) does not
// stop the others, and each outcome is reported. Items are decided in order; a repeated item
// answers stale the second time, as a second click would.
func (s *Server) bulkResolve(ctx context.Context, items []bulkItem, r agent.Resolution, by agent.Principal) []views.BulkResult {
	out := make([]views.BulkResult, len(items))
	for i, it := range items {
		res := views.BulkResult{ConversationID: it.ConversationID, ToolCallID: it.ToolCallID}
		got, err := s.agent.Resolve(ctx, it.ConversationID, it.ToolCallID, r, by)
		if err == nil {
			res.OK, res.Tool = true, got.Call.Name
		} else {
			te, internal := classify(err)
			if internal && (te == nil || te.Details["ref"] == nil) {
				te = fault.Internal(s.log.With("tool_call_id", it.ToolCallID), "bulk decision", err)
			}
			res.Kind, res.Message = string(te.Kind), te.Message
		}
		out[i] = res
	}
	return out
}

// bulkResolution checks a bulk decision's decision and reason.
func bulkResolution(decision, reason string, n int) (agent.Resolution, error) {
	if decision != "approve" && decision != "deny" {
		return agent.Resolution{}, fault.InvalidAt("a bulk decision needs a decision", "/decision", `must be "approve" or "deny"`)
	}
	if n == 0 {
		return agent.Resolution{}, fault.InvalidAt("select at least one approval", "/items", "must hold at least one item")
	}
	if n > maxBulk {
		return agent.Resolution{}, fault.InvalidAt("too many approvals at once", "/items", "must hold at most 100 items")
	}
	if len(reason) > 2000 {
		return agent.Resolution{}, fault.InvalidAt("the reason is too long", "/reason", "must be at most 2000 bytes")
	}
	// The resolution's own check (a NUL in the reason …), once, before any item is decided.
	res := agent.Resolution{Decision: decision, Reason: strings.TrimSpace(reason)}
	if _, err := res.Kind(); err != nil {
		return agent.Resolution{}, err
	}
	return res, nil
}

// inboxBulkPage: POST /inbox/bulk[?filters] (decision, reason, item…) → each checked approval
// decided through Resolve, then the inbox (with the same filters) and what happened to each
// item: nothing done or refused is hidden.
func (s *Server) inboxBulkPage(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return fault.New(fault.KindBadRequest, "the form could not be read", nil)
	}
	var items []bulkItem
	for _, v := range form["item"] {
		conv, call, ok := strings.Cut(v, " ")
		if !ok || conv == "" || call == "" {
			return fault.InvalidAt("a selected approval is malformed", "/items", "must be a conversation and a call")
		}
		items = append(items, bulkItem{ConversationID: conv, ToolCallID: call})
	}
	d, err := s.inboxData(c) // refuses members before anything is decided
	if err != nil {
		return err
	}
	res, err := bulkResolution(form.Get("decision"), form.Get("reason"), len(items))
	if err != nil {
		return err
	}
	results := s.bulkResolve(c.Request().Context(), items, res, principal(c))
	if d, err = s.inboxData(c); err != nil { // the inbox as the decisions left it
		return err
	}
	d.Bulk, d.BulkDecision = results, res.Decision
	for i := range d.Bulk {
		if d.Bulk[i].Tool == "" {
			d.Bulk[i].Tool = d.Bulk[i].ToolCallID
		}
	}
	return s.renderPage(c, http.StatusOK, "Inbox", views.InboxBody(d))
}

// apiBulkResolve: POST /api/v1/approvals/resolve {"decision", "reason", "items": [{"conversation_id",
// "tool_call_id"}]} → 200 {"results": [{"conversation_id", "tool_call_id", "ok": true} | {…,
// "ok": false, "error": {"kind", "message", "details"}}]}, one per item in order. Each item goes
// through Resolve, authorized on its own.
func (s *Server) apiBulkResolve(c echo.Context) error {
	var body struct {
		Decision string     `json:"decision"`
		Reason   string     `json:"reason"`
		Items    []bulkItem `json:"items"`
	}
	if err := decodeJSON(c, &body, false); err != nil {
		return err
	}
	if !agent.MayFollowAll(principal(c)) {
		return errNoInboxBulk
	}
	res, err := bulkResolution(body.Decision, body.Reason, len(body.Items))
	if err != nil {
		return err
	}
	for i, it := range body.Items {
		if it.ConversationID == "" || it.ToolCallID == "" {
			return fault.InvalidAt("an item names no call", "/items/"+strconv.Itoa(i), "needs conversation_id and tool_call_id")
		}
	}
	results := s.bulkResolve(c.Request().Context(), body.Items, res, principal(c))
	out := make([]bulkResultJSON, len(results))
	for i, r := range results {
		out[i] = bulkResultJSON{ConversationID: r.ConversationID, ToolCallID: r.ToolCallID, OK: r.OK}
		if !r.OK {
			out[i].Error = &errorJSON{Kind: fault.Kind(r.Kind), Message: r.Message, Details: map[string]any{}}
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"results": out})
}

// errNoInboxBulk refuses a bulk decision to a member: bulk decisions are the inbox's.
var errNoInboxBulk = fault.New(fault.KindPermissionDenied, "bulk decisions are for reviewers and admins: decide your own calls on their conversation's page", nil)

// inboxClaimPage: POST /inbox/claim (conversation_id, tool_call_id, action=claim|release,
// return) → the claim taken or released (agent.Claim, Unclaim), then back to the inbox with its
// filters. A call someone else claimed meanwhile says so (notice=claimed).
func (s *Server) inboxClaimPage(c echo.Context) error {
	conv, call := c.FormValue("conversation_id"), c.FormValue("tool_call_id")
	if conv == "" || call == "" {
		return fault.New(fault.KindBadRequest, "the form names no call", nil)
	}
	ctx, by := c.Request().Context(), principal(c)
	var err error
	switch c.FormValue("action") {
	case "claim":
		_, err = s.agent.Claim(ctx, conv, call, by)
	case "release":
		err = s.agent.Unclaim(ctx, conv, call, by)
	default:
		return fault.New(fault.KindBadRequest, `the form's action must be "claim" or "release"`, nil)
	}
	back := inboxReturn(c.FormValue("return"))
	switch {
	case fault.KindOf(err) == fault.KindConflict:
		return c.Redirect(http.StatusSeeOther, withQuery(back, "notice", "claimed"))
	case fault.KindOf(err) == fault.KindNotFound:
		return c.Redirect(http.StatusSeeOther, withQuery(back, "notice", "stale"))
	case err != nil:
		return err
	}
	return c.Redirect(http.StatusSeeOther, back)
}

// apiClaim: POST /api/v1/conversations/{id}/calls/{call}/claim → 200 {"claimed_by", "expires_at"};
// 409 conflict (details: claimed_by, expires_at) when someone else holds it. DELETE releases
// the caller's claim → 200 {"ok": true}.
func (s *Server) apiClaim(c echo.Context) error {
	ctx, by := c.Request().Context(), principal(c)
	if c.Request().Method == http.MethodDelete {
		if err := s.agent.Unclaim(ctx, c.Param("id"), c.Param("call"), by); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]bool{"ok": true})
	}
	got, err := s.agent.Claim(ctx, c.Param("id"), c.Param("call"), by)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"claimed_by": got.UserID, "expires_at": got.ExpiresAt})
}

// inboxReturn is where an inbox form goes back to: ret when it is the inbox (with its query),
// else the inbox. Never another site or page.
func inboxReturn(ret string) string {
	if ret == "/inbox" || (strings.HasPrefix(ret, "/inbox?") && !strings.ContainsAny(ret, "\\\r\n")) {
		return ret
	}
	return "/inbox"
}

// withQuery adds k=v to the path target, which may hold a query already.
func withQuery(target, k, v string) string {
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	return target + sep + k + "=" + v
}
