package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/views"
)

// conversationsPage: GET /conversations[?q=…] → the user's conversations (those whose title or
// messages match q, when it is given: agent.Search, each message match with its excerpt) and the
// new-conversation form. A search the agent refuses (too long, control characters) is a 400 page
// saying why, with the search box to fix it; one the database stopped (too costly) a 422 page
// saying so. A search spends the user's search budget (429 beyond it).
func (s *Server) conversationsPage(c echo.Context) error {
	q := strings.TrimSpace(c.QueryParam("q"))
	status, notice := http.StatusOK, noticeFor(c.QueryParam("notice"))
	if err := s.allowSearch(c, q); err != nil {
		return err
	}
	list, err := s.agent.Search(c.Request().Context(), principal(c), q)
	var fe *fault.Error
	switch {
	case errors.As(err, &fe) && fe.Kind == fault.KindInvalidArgs:
		status, notice, list = http.StatusBadRequest, "This search cannot be run: "+fe.Message+".", nil
		q = tools.StorableText(q)
	case errors.As(err, &fe) && fe.Kind == fault.KindTimeout:
		status, notice, list = statusOf(fe.Kind), "This search was stopped: "+fe.Message+".", nil
	case err != nil:
		return err
	}
	return s.renderPage(c, status, "Conversations", views.ConversationsBody(views.ConversationsPage{
		CSRF: s.csrfToken(c), Conversations: list, Demo: s.cfg.DemoModel, Notice: notice, Query: q, Now: s.now(),
	}))
}

// createConversationPage: POST /conversations → a new conversation, then its page.
func (s *Server) createConversationPage(c echo.Context) error {
	conv, err := s.agent.Create(c.Request().Context(), principal(c), c.FormValue("title"))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, conversationPath(conv.ID))
}

func conversationPath(id string) string { return "/conversations/" + url.PathEscape(id) }

// conversationPage: GET /conversations/{id} → the conversation as the viewer may see it: its
// owner, or read-only someone who may decide one of its calls (a reviewer from the inbox); 404
// for everyone else (agent.MaySee). ?notice=stale&call=X says, in X's card, that X was already
// decided.
func (s *Server) conversationPage(c echo.Context) error {
	v, err := s.agent.View(c.Request().Context(), c.Param("id"), principal(c))
	if err != nil {
		return err
	}
	p := s.pageFor(c, v.ID, v.OwnerID, v.Calls)
	notice := noticeFor(c.QueryParam("notice"))
	if call := c.QueryParam("call"); call != "" && notice != "" {
		p.Form = &views.FormState{ToolCallID: call, Notice: notice}
	} else {
		p.Notice = notice
	}
	return s.renderConversation(c, http.StatusOK, p, v)
}

func (s *Server) renderConversation(c echo.Context, status int, p views.Page, v agent.View) error {
	title := v.Title
	if title == "" {
		title = "New conversation"
	}
	return s.renderPage(c, status, title, views.ConversationBody(views.ConversationPage{Page: p, View: v}))
}

// postMessagePage: POST /conversations/{id}/messages → the owner's message starts a turn.
func (s *Server) postMessagePage(c echo.Context) error {
	id := c.Param("id")
	text := c.FormValue("text")
	refuse := func(code string) error {
		if isFetch(c) {
			return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Notice: noticeFor(code)})
		}
		return c.Redirect(http.StatusSeeOther, conversationPath(id)+"?notice="+code)
	}
	switch {
	case strings.TrimSpace(text) == "":
		return refuse("empty")
	case utf8.RuneCountInString(text) > maxMessageRunes:
		return refuse("long")
	}
	if err := s.allowMessage(c); err != nil {
		return err
	}
	got, err := s.agent.Post(c.Request().Context(), id, principal(c), text)
	if err != nil {
		if fault.KindOf(err) == fault.KindRateLimited {
			return refuse("full")
		}
		return err
	}
	if isFetch(c) {
		ans := fetchAnswer{OK: true}
		if got.Queued {
			ans.Notice = noticeFor("queued")
		}
		return s.answerFetch(c, http.StatusOK, ans)
	}
	return c.Redirect(http.StatusSeeOther, conversationPath(id))
}

// cancelPage: POST /conversations/{id}/cancel → the Stop button: the owner stops the running
// turn (agent.Cancel). When nothing runs any more (it just ended) the page says so.
func (s *Server) cancelPage(c echo.Context) error {
	id := c.Param("id")
	err := s.agent.Cancel(c.Request().Context(), id, principal(c))
	switch fault.KindOf(err) {
	case "":
	case fault.KindStale:
		if isFetch(c) {
			return s.answerFetch(c, http.StatusConflict, fetchAnswer{Notice: noticeFor("nothing")})
		}
		return c.Redirect(http.StatusSeeOther, conversationPath(id)+"?notice=nothing")
	default:
		return err
	}
	if isFetch(c) {
		return s.answerFetch(c, http.StatusOK, fetchAnswer{OK: true})
	}
	return c.Redirect(http.StatusSeeOther, conversationPath(id))
}

// resolvePage: POST /conversations/{id}/calls/{call}/resolve → a decision or an answer from a
// card, into the agent's one Resolve, which decides who may (agent.MayDecide, MayAnswer), types
// the card's fields by the call's schemas and answers with the call as it then stands: load
// (the card's form, decoded once) → act (Resolve, once) → render. A stale call (decided
// elsewhere, expired) shows where it stands with a notice; an invalid answer comes back with its
// errors beside the fields.
func (s *Server) resolvePage(c echo.Context) error {
	card, err := cardOf(c)
	if err != nil {
		return err
	}
	id, callID := c.Param("id"), c.Param("call")
	if len(card.errs) > 0 { // the form itself is wrong (arguments that are not JSON …): nothing to resolve
		_, fromInbox := inboxReturnOf(c.FormValue("return"))
		return s.answerInvalid(c, id, callID, card.state(id, callID, "", card.errs), fromInbox)
	}
	got, err := s.agent.Resolve(c.Request().Context(), id, callID, card.res, principal(c))
	switch fault.KindOf(err) {
	case "":
		return s.answerResolved(c, got, s.fromInbox(c, got), "")
	case fault.KindStale:
		return s.answerResolved(c, got, s.fromInbox(c, got), "stale")
	case fault.KindInvalidArgs:
		if got.Call.ID == "" {
			return err // a malformed form, not an answer the call's schema refused
		}
		errs := cardErrors(err.(*fault.Error), got)
		return s.answerInvalid(c, id, callID, card.state(id, callID, got.Call.PendingKind, errs), s.fromInbox(c, got))
	}
	return err
}

// fromInbox reports whether a decision came from the inbox: the form says so, or the person
// deciding is not the conversation's owner (a reviewer's decision always answers as from the
// inbox: the conversation's page is read-only for them).
func (s *Server) fromInbox(c echo.Context, got agent.Resolved) bool {
	_, inbox := inboxReturnOf(c.FormValue("return"))
	return inbox || got.OwnerID != currentUser(c).ID
}

// decisionTarget is the element id of the card a decision's form was in: the inbox entry when
// the form returns to the inbox (the conversation and the call name it there), else the call's
// item on its conversation's page.
func decisionTarget(c echo.Context, convID, callID string) string {
	if _, inbox := inboxReturnOf(c.FormValue("return")); inbox {
		return views.InboxDOMID(convID, callID)
	}
	return views.CallDOMID(callID)
}

// findCall is the call callID of v, nil when v has none.
func findCall(v agent.View, callID string) *agent.CallView {
	for i := range v.Calls {
		if v.Calls[i].ID == callID {
			return &v.Calls[i]
		}
	}
	return nil
}

// answerResolved tells the card's page how things stand after a decision: the fresh card (or,
// in the inbox, its removal), with a notice when the call had already been decided. got is the
// call as Resolve answered it: nothing is read again.
func (s *Server) answerResolved(c echo.Context, got agent.Resolved, fromInbox bool, notice string) error {
	convID, callID := got.ConversationID, got.Call.ID
	if callID == "" {
		convID, callID = c.Param("id"), c.Param("call")
	}
	status := http.StatusOK
	if notice == "stale" {
		status = http.StatusConflict
	}
	if !isFetch(c) {
		if fromInbox {
			// Back to the inbox as the form left it: its filters, checked and rebuilt.
			back, _ := inboxReturnOf(c.FormValue("return"))
			var extra url.Values
			if notice != "" {
				extra = url.Values{"notice": {notice}}
			}
			return c.Redirect(http.StatusSeeOther, inboxTarget(back, extra))
		}
		target := conversationPath(convID)
		if notice != "" {
			target += "?notice=" + notice + "&call=" + url.QueryEscape(callID)
		}
		return c.Redirect(http.StatusSeeOther, target+"#"+views.CallDOMID(callID))
	}
	ans := fetchAnswer{OK: notice == "", Target: decisionTarget(c, convID, callID), Notice: noticeFor(notice)}
	empty := ""
	if fromInbox || got.Call.ID == "" {
		ans.HTML = &empty
		return s.answerFetch(c, status, ans)
	}
	p := s.pageFor(c, convID, got.OwnerID, []agent.CallView{got.Call})
	if notice != "" {
		p.Form = &views.FormState{ToolCallID: callID, Notice: noticeFor(notice)}
	}
	html, _, err := views.ItemHTML(c.Request().Context(), p, views.Item{Seq: got.Call.Seq, Call: &got.Call})
	if err != nil {
		return err
	}
	h := string(html)
	ans.HTML = &h
	return s.answerFetch(c, status, ans)
}

// answerInvalid re-renders the card with the submitted values and the errors beside the fields
// (422): as a fragment for fetch, else as the whole page it came from. A decision by someone
// who does not own the conversation (a reviewer's) answers as from the inbox, whatever its form
// says.
func (s *Server) answerInvalid(c echo.Context, convID, callID string, state *views.FormState, fromInbox bool) error {
	ctx := c.Request().Context()
	var v agent.View
	if !fromInbox {
		var err error
		if v, err = s.agent.View(ctx, convID, principal(c)); err != nil {
			return err
		}
		fromInbox = v.OwnerID != currentUser(c).ID
	}
	if fromInbox {
		// The inbox as the form left it: its filters, from the form's way back.
		back, _ := inboxReturnOf(c.FormValue("return"))
		q, err := checkInboxFilter(back)
		if err != nil {
			return err
		}
		d, err := s.inboxDataFor(c, principal(c), q)
		if err != nil {
			return err
		}
		d.Form = state
		if isFetch(c) {
			for _, e := range d.Entries {
				if e.Call.ID == callID && e.ConversationID == convID {
					html, _, err := views.InboxItemHTML(ctx, d, e)
					if err != nil {
						return err
					}
					h := string(html)
					return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Target: decisionTarget(c, convID, callID), HTML: &h})
				}
			}
			return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Notice: state.Errors["args"]})
		}
		return s.renderPage(c, http.StatusUnprocessableEntity, "Inbox", views.InboxBody(d))
	}
	p := s.pageFor(c, v.ID, v.OwnerID, v.Calls)
	p.Form = state
	if isFetch(c) {
		html, err := callItem(ctx, p, v, callID)
		if err != nil {
			return err
		}
		return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Target: views.CallDOMID(callID), HTML: &html})
	}
	return s.renderConversation(c, http.StatusUnprocessableEntity, p, v)
}

// rememberFromForm reads a card's "approve and remember": the pressed button
// (decision=views.RememberDecision) becomes an approve, with the grant's scope and life. It
// answers a field error when the life is not a number; the agent checks the rest (the scope,
// the bounds, whether the call may be remembered at all).
func rememberFromForm(values map[string]string) (*agent.Remember, string) {
	if values["decision"] != views.RememberDecision {
		return nil, ""
	}
	values["decision"] = "approve"
	secs, err := strconv.ParseInt(strings.TrimSpace(values[views.RememberForField]), 10, 64)
	if err != nil {
		return nil, "Choose how long to remember the approval."
	}
	return &agent.Remember{Scope: strings.TrimSpace(values[views.RememberScopeField]), ForSecs: secs,
		Args: strings.TrimSpace(values[views.RememberArgsField])}, ""
}

// rememberProblem reports whether the agent refused a decision's remember (its scope, life or
// arguments).
func rememberProblem(te *fault.Error) bool {
	for _, p := range te.Problems {
		if strings.HasPrefix(p.Path, "/remember") {
			return true
		}
	}
	return false
}

// sentenceOf capitalizes a message and ends it with a full stop.
func sentenceOf(s string) string {
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}
