package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/views"
)

// pageRoutes registers the pages (conversations, the conversation page and its socket, the
// inbox). It runs last in the route table, after authentication and CSRF middleware are in place.
//
// Every page handler has the same shape: load → check → act → render or redirect. Without
// JavaScript every form is a plain POST answered with a redirect (or the page re-rendered with
// its errors); hooks.js sends the same forms over fetch with X-Parley-Fetch and gets JSON.
func (s *Server) pageRoutes(e *echo.Echo) {
	g := e.Group("", s.requireUser, noStore)
	g.GET("/conversations", s.conversationsPage)
	g.POST("/conversations", s.createConversationPage)
	g.GET("/conversations/:id", s.conversationPage)
	g.POST("/conversations/:id/messages", s.postMessagePage)
	g.POST("/conversations/:id/calls/:call/resolve", s.resolvePage)
	g.GET("/conversations/:id/ws", s.conversationSocket)
	g.GET("/inbox", s.inboxPage)
	g.GET("/inbox/ws", s.inboxSocket)
}

// conversationsPage: GET /conversations → the user's conversations and the new-conversation form.
func (s *Server) conversationsPage(c echo.Context) error {
	list, err := s.store.ListConversations(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return fmt.Errorf("list conversations: %w", err)
	}
	return s.renderPage(c, http.StatusOK, "Conversations", views.ConversationsBody(views.ConversationsPage{
		CSRF: s.csrfToken(c), Conversations: list, Demo: s.cfg.DemoModel, Notice: noticeFor(c.QueryParam("notice")),
	}))
}

// createConversationPage: POST /conversations → a new conversation, then its page.
func (s *Server) createConversationPage(c echo.Context) error {
	title := strings.TrimSpace(c.FormValue("title"))
	if utf8.RuneCountInString(title) > 200 {
		return invalidField("title", "a title has at most 200 characters")
	}
	if !storableText(title) {
		return invalidField("title", "a title cannot hold a NUL character")
	}
	now := s.now()
	conv, err := s.store.CreateConversation(c.Request().Context(), store.Conversation{
		OwnerID: currentUser(c).ID, Title: title, Status: store.StatusIdle, CreatedAt: now, UpdatedAt: now,
	})
	if err != nil {
		return fmt.Errorf("create conversation: %w", err)
	}
	return c.Redirect(http.StatusSeeOther, conversationPath(conv.ID))
}

func conversationPath(id string) string { return "/conversations/" + url.PathEscape(id) }

// conversationPage: GET /conversations/{id} → the conversation, its owner only (404 otherwise).
// ?notice=stale&call=X says, in X's card, that X was already decided.
func (s *Server) conversationPage(c echo.Context) error {
	id := c.Param("id")
	if _, err := s.conversationFor(c, id); err != nil {
		return err
	}
	v, err := s.conv.View(c.Request().Context(), id)
	if err != nil {
		return err
	}
	p := s.pageFor(c, v)
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
	if _, err := s.conversationFor(c, id); err != nil {
		return err
	}
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
	if err := s.conv.Send(c.Request().Context(), id, principal(c), text); err != nil {
		var te *tools.Error
		if errors.As(err, &te) && te.Kind == tools.KindConflict {
			return refuse("busy")
		}
		return err
	}
	if isFetch(c) {
		return s.answerFetch(c, http.StatusOK, fetchAnswer{OK: true})
	}
	return c.Redirect(http.StatusSeeOther, conversationPath(id))
}

// resolvePage: POST /conversations/{id}/calls/{call}/resolve → a decision or an answer from a
// card, into the agent's one Resolve. The owner may resolve their calls; a reviewer may decide
// reviewer-gated approvals in anyone's conversation (the inbox); others get 404. A stale call
// (decided elsewhere, expired) shows where it stands with a notice; an invalid answer comes back
// with its errors beside the fields.
func (s *Server) resolvePage(c echo.Context) error {
	ctx := c.Request().Context()
	id, callID := c.Param("id"), c.Param("call")
	u := currentUser(c)
	conv, err := s.store.GetConversation(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return errConversation
	}
	if err != nil {
		return fmt.Errorf("load conversation %s: %w", id, err)
	}
	row, err := s.store.GetToolCall(ctx, id, callID)
	found := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("load tool call %s/%s: %w", id, callID, err)
	}
	if conv.OwnerID != u.ID && !(found && isReviewer(u) && row.Approval == string(tools.RequiresApproval) && row.Approvers == string(tools.ByReviewer)) {
		return errConversation
	}
	if !found {
		return tools.NewError(tools.KindNotFound, "no such tool call", nil)
	}
	// Someone who is not the owner is a reviewer deciding from the inbox, whatever the form says:
	// the conversation page (and its re-render with errors) is the owner's alone.
	fromInbox := c.FormValue("return") == "/inbox" || conv.OwnerID != u.ID
	v, err := s.conv.View(ctx, id)
	if err != nil {
		return err
	}
	var call *agent.CallView
	for i := range v.Calls {
		if v.Calls[i].ID == callID {
			call = &v.Calls[i]
		}
	}
	if call == nil {
		return tools.NewError(tools.KindNotFound, "no such tool call", nil)
	}

	form, err := c.FormParams()
	if err != nil {
		return tools.NewError(tools.KindBadRequest, "the form could not be read", nil)
	}
	// A question's answers are the prefixed fields, by property name; everything else is the
	// card's own (decision, args, reason, action), so no property name can pose as one of those.
	values, answers := map[string]string{}, map[string]string{}
	for k, vs := range form {
		if len(vs) == 0 || k == views.CSRFField {
			continue
		}
		if name, ok := strings.CutPrefix(k, views.AnswerFieldPrefix); ok {
			answers[name] = vs[0]
		} else {
			values[k] = vs[0]
		}
	}
	res, fieldErrs, schema := buildResolution(*call, values, answers)
	if res == nil && len(fieldErrs) == 0 {
		return tools.NewError(tools.KindBadRequest, "the form names neither a decision nor an action", nil)
	}
	if len(fieldErrs) == 0 {
		err = s.conv.Resolve(ctx, id, callID, *res, principal(c))
		var te *tools.Error
		switch {
		case err == nil:
		case errors.As(err, &te) && te.Kind == tools.KindStale:
			return s.answerResolved(c, id, callID, fromInbox, "stale")
		case errors.As(err, &te) && te.Kind == tools.KindInvalidArgs:
			fieldErrs = problemsToFields(te, call.PendingKind, schema)
		default:
			return err
		}
	}
	if len(fieldErrs) > 0 {
		shown := values
		if call.PendingKind == tools.PendingElicitation {
			shown = answers // a question's fields show their answers, by property name
		}
		state := &views.FormState{ToolCallID: callID, Values: shown, Errors: fieldErrs}
		return s.answerInvalid(c, v, *call, state, fromInbox)
	}
	return s.answerResolved(c, id, callID, fromInbox, "")
}

// buildResolution turns a card's form into the agent's Resolution: values are the card's own
// fields, answers a question's, by property name. Field errors are problems the server finds
// before asking the agent (edited arguments that are not JSON, a word in a number field); schema
// is the question's parsed form, for mapping the agent's schema errors to fields.
func buildResolution(call agent.CallView, values, answers map[string]string) (*agent.Resolution, map[string]string, *views.FormSchema) {
	if d, ok := values["decision"]; ok {
		r := &agent.Resolution{Decision: d, Reason: strings.TrimSpace(values["reason"])}
		if !storableText(r.Reason) {
			return nil, map[string]string{"reason": "A reason cannot hold a NUL character."}, nil
		}
		if d == "approve" {
			if edited, ok := values["args"]; ok && !sameJSON(edited, call.Args) {
				if !json.Valid([]byte(edited)) {
					return nil, map[string]string{"args": "The arguments are not valid JSON."}, nil
				}
				var compact bytes.Buffer
				_ = json.Compact(&compact, []byte(edited))
				r.Args = compact.Bytes()
			}
		}
		return r, nil, nil
	}
	action, ok := values["action"]
	if !ok {
		return nil, nil, nil
	}
	r := &agent.Resolution{Action: action}
	if action != "accept" || call.Prompt == nil {
		return r, nil, nil
	}
	fs, err := views.ParseFormSchema(call.Prompt.Schema)
	if err != nil {
		return nil, map[string]string{"": "This question's form cannot be read."}, nil
	}
	content, errs := fs.FormContent(answers)
	if len(errs) > 0 {
		return nil, errs, &fs
	}
	b, err := json.Marshal(content)
	if err != nil {
		return nil, map[string]string{"": "The answers could not be encoded."}, &fs
	}
	r.Content = b
	return r, nil, &fs
}

// sameJSON reports whether the edited text means the same JSON value as the original arguments
// (compared decoded: the field shows <, > and & where the stored JSON may have \u003c …).
func sameJSON(edited string, orig json.RawMessage) bool {
	if len(bytes.TrimSpace(orig)) == 0 {
		orig = json.RawMessage(`{}`)
	}
	var a, b any
	if json.Unmarshal([]byte(edited), &a) != nil || json.Unmarshal(orig, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// problemsToFields maps the agent's invalid_args problems onto the card's fields: every problem
// of edited arguments goes beside the arguments field; a question's go beside their inputs.
func problemsToFields(te *tools.Error, kind tools.PendingKind, schema *views.FormSchema) map[string]string {
	problems := detailProblems(te)
	if kind == tools.PendingElicitation && schema != nil {
		errs := schema.FieldErrors(problems)
		if len(errs) == 0 {
			errs[""] = te.Message
		}
		return errs
	}
	if len(problems) == 0 {
		return map[string]string{"args": te.Message}
	}
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		path, _ := p["path"].(string)
		msg, _ := p["message"].(string)
		if path == "" {
			path = "/"
		}
		msgs = append(msgs, path+": "+msg)
	}
	return map[string]string{"args": strings.Join(msgs, "; ")}
}

// detailProblems reads details.problems whatever concrete type the agent used for it.
func detailProblems(te *tools.Error) []map[string]any {
	raw, ok := te.Details["problems"]
	if !ok {
		return nil
	}
	if ps, ok := raw.([]map[string]any); ok {
		return ps
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var ps []map[string]any
	if json.Unmarshal(b, &ps) != nil {
		return nil
	}
	return ps
}

// answerResolved tells the card's page how things stand after a decision: the fresh card (or,
// in the inbox, its removal), with a notice when the call had already been decided.
func (s *Server) answerResolved(c echo.Context, convID, callID string, fromInbox bool, notice string) error {
	status := http.StatusOK
	if notice == "stale" {
		status = http.StatusConflict
	}
	if !isFetch(c) {
		if fromInbox {
			target := "/inbox"
			if notice != "" {
				target += "?notice=" + notice
			}
			return c.Redirect(http.StatusSeeOther, target)
		}
		target := conversationPath(convID)
		if notice != "" {
			target += "?notice=" + notice + "&call=" + url.QueryEscape(callID)
		}
		return c.Redirect(http.StatusSeeOther, target+"#"+views.CallDOMID(callID))
	}
	ans := fetchAnswer{OK: notice == "", Target: views.CallDOMID(callID), Notice: noticeFor(notice)}
	empty := ""
	if fromInbox {
		ans.HTML = &empty
		return s.answerFetch(c, status, ans)
	}
	v, err := s.conv.View(c.Request().Context(), convID)
	if err != nil {
		return err
	}
	p := s.pageFor(c, v)
	if notice != "" {
		p.Form = &views.FormState{ToolCallID: callID, Notice: noticeFor(notice)}
	}
	html, err := callItem(c.Request().Context(), p, v, callID)
	if err != nil {
		return err
	}
	ans.HTML = &html
	return s.answerFetch(c, status, ans)
}

// answerInvalid re-renders the card with the submitted values and the errors beside the fields
// (422): as a fragment for fetch, else as the whole page it came from.
func (s *Server) answerInvalid(c echo.Context, v agent.View, call agent.CallView, state *views.FormState, fromInbox bool) error {
	ctx := c.Request().Context()
	if fromInbox {
		d, err := s.inboxData(c)
		if err != nil {
			return err
		}
		d.Form = state
		if isFetch(c) {
			for _, e := range d.Entries {
				if e.Call.ID == call.ID && e.ConversationID == v.ID {
					html, _, err := views.InboxItemHTML(ctx, d, e)
					if err != nil {
						return err
					}
					h := string(html)
					return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Target: views.CallDOMID(call.ID), HTML: &h})
				}
			}
			return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Notice: state.Errors["args"]})
		}
		return s.renderPage(c, http.StatusUnprocessableEntity, "Inbox", views.InboxBody(d))
	}
	p := s.pageFor(c, v)
	p.Form = state
	if isFetch(c) {
		html, err := callItem(ctx, p, v, call.ID)
		if err != nil {
			return err
		}
		return s.answerFetch(c, http.StatusUnprocessableEntity, fetchAnswer{Target: views.CallDOMID(call.ID), HTML: &html})
	}
	return s.renderConversation(c, http.StatusUnprocessableEntity, p, v)
}
