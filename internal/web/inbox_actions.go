package web

import (
	"context"
	"net/http"
	"net/url"
	"slices"
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

// bulkResult is what happened to one item of a bulk decision.
type bulkResult struct {
	ConversationID string
	ToolCallID     string
	OK             bool
	Kind           string // the error's kind when not OK: stale, permission_denied, not_found …
	Message        string
}

// bulkResolve decides each item in turn through the one Resolve, as by, each authorized by the
// agent's policy on its own: an item that fails (stale, permission_denied, not_found …) does not
// stop the others, and each outcome is reported. Items are decided in order; a repeated item
// answers stale the second time, as a second click would.
func (s *Server) bulkResolve(ctx context.Context, items []bulkItem, r agent.Resolution, by agent.Principal) []bulkResult {
	out := make([]bulkResult, len(items))
	for i, it := range items {
		res := bulkResult{ConversationID: it.ConversationID, ToolCallID: it.ToolCallID}
		_, err := s.agent.Resolve(ctx, it.ConversationID, it.ToolCallID, r, by)
		if err == nil {
			res.OK = true
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
	// The resolution's own check (the reason's length, a NUL in it …), once, before any item
	// is decided.
	res := agent.Resolution{Decision: decision, Reason: strings.TrimSpace(reason)}
	if _, err := res.Kind(); err != nil {
		return agent.Resolution{}, err
	}
	return res, nil
}

// inboxBulkPage: POST /inbox/bulk[?filters] (decision, reason, item…) → each checked approval
// decided through Resolve, then 303 to the inbox with the same filters and the outcome in
// counts (bulkSummaryQuery): post/redirect/get, so reloading the result decides nothing again.
// Nothing done or refused is hidden: the inbox says how many were decided and how many each
// kind of error refused, and the refused ones that still wait are listed.
func (s *Server) inboxBulkPage(c echo.Context) error {
	form, err := c.FormParams()
	if err != nil {
		return fault.New(fault.KindBadRequest, "the form could not be read", nil)
	}
	if !agent.MayFollowAll(principal(c)) { // members are refused before anything is decided
		return errNoInboxBulk
	}
	q, err := inboxFilterOf(c.QueryParams())
	if err != nil {
		return err
	}
	var items []bulkItem
	for _, v := range form["item"] {
		conv, call, ok := strings.Cut(v, " ")
		if !ok || conv == "" || call == "" {
			return fault.InvalidAt("a selected approval is malformed", "/items", "must be a conversation and a call")
		}
		items = append(items, bulkItem{ConversationID: conv, ToolCallID: call})
	}
	res, err := bulkResolution(form.Get("decision"), form.Get("reason"), len(items))
	if err != nil {
		return err
	}
	results := s.bulkResolve(c.Request().Context(), items, res, principal(c))
	return c.Redirect(http.StatusSeeOther, inboxTarget(q.InboxFilter, bulkSummaryQuery(res.Decision, results)))
}

// A bulk decision's outcome in the inbox's URL: bulk=approve|deny, bulk_ok=n (the items
// decided) and bulk_<kind>=n for each error kind that refused items (fault.Kinds). Counts and
// the server's own words only: no id, name or message.
const (
	bulkParam       = "bulk"
	bulkCountPrefix = "bulk_"
)

// bulkSummaryQuery is the outcome of a bulk decision of results as query parameters.
func bulkSummaryQuery(decision string, results []bulkResult) url.Values {
	q := url.Values{bulkParam: {decision}}
	counts := map[string]int{"ok": 0}
	for _, r := range results {
		switch {
		case r.OK:
			counts["ok"]++
		case slices.Contains(fault.Kinds, fault.Kind(r.Kind)):
			counts[r.Kind]++
		default:
			counts[string(fault.KindInternal)]++
		}
	}
	for k, n := range counts {
		q.Set(bulkCountPrefix+k, strconv.Itoa(n))
	}
	return q
}

// bulkSummaryOf reads a bulk decision's outcome from the inbox's query (bulkSummaryQuery); nil
// when there is none, or when it is malformed (a hand-edited URL): it only ever says what a
// decision did, so a bad one is left out rather than refused.
func bulkSummaryOf(q url.Values) *views.BulkSummary {
	decision := q.Get(bulkParam)
	if decision != "approve" && decision != "deny" {
		return nil
	}
	count := func(key string) (int, bool) {
		v := q.Get(bulkCountPrefix + key)
		if v == "" {
			return 0, true
		}
		n, err := strconv.Atoi(v)
		return n, err == nil && n >= 0 && n <= maxBulk
	}
	ok, valid := count("ok")
	b := &views.BulkSummary{Decision: decision, OK: ok}
	total := ok
	for _, k := range fault.Kinds {
		n, good := count(string(k))
		valid = valid && good
		if n > 0 {
			b.Refused = append(b.Refused, views.BulkCount{Kind: string(k), N: n})
			total += n
		}
	}
	if !valid || total == 0 || total > maxBulk {
		return nil
	}
	return b
}

// apiBulkResolve: POST /api/v1/approvals/resolve {"decision", "reason", "items": [{"conversation_id",
// "tool_call_id"}]} → 200 {"results": [{"conversation_id", "tool_call_id", "ok": true} | {…,
// "ok": false, "error": {"kind", "message", "details"}}]}, one per item in order. Each item goes
// through Resolve, authorized on its own.
func (s *Server) apiBulkResolve(c echo.Context) error {
	var body bulkResolveRequest
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
	return c.JSON(http.StatusOK, bulkResponseJSON{Results: out})
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
	back, _ := inboxReturnOf(c.FormValue("return"))
	switch {
	case fault.KindOf(err) == fault.KindConflict:
		return c.Redirect(http.StatusSeeOther, inboxTarget(back, url.Values{"notice": {"claimed"}}))
	case fault.KindOf(err) == fault.KindNotFound:
		return c.Redirect(http.StatusSeeOther, inboxTarget(back, url.Values{"notice": {"stale"}}))
	case err != nil:
		return err
	}
	return c.Redirect(http.StatusSeeOther, inboxTarget(back, nil))
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
		return c.JSON(http.StatusOK, okJSON{OK: true})
	}
	got, err := s.agent.Claim(ctx, c.Param("id"), c.Param("call"), by)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, claimJSON{ClaimedBy: got.UserID, ExpiresAt: got.ExpiresAt})
}
