package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views"
)

// TestRememberFromTheCard: the owner's approval card approves "and remember" through the page's
// resolve route; the agent makes the grant (scope and life as chosen), the next call of the tool
// runs without asking and its card names the grant. A life that is not a number comes back
// beside the field; a reviewer-gated card offers no remember and the agent refuses one anyway.
func TestRememberFromTheCard(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("n1", "note", `{"text":"a"}`))
		b := e.browser(owner)
		page := conversationPath(conv.ID)
		body := readBody(b.do("GET", page, "", nil))
		if !strings.Contains(body, `data-parley="remember"`) || !strings.Contains(body, `value="remember"`) {
			t.Fatalf("the owner's card has no approve-and-remember control:\n%s", body)
		}
		resolve := resolveURLFor(conv.ID, "n1")

		res := b.postForm(resolve, url.Values{"decision": {views.RememberDecision}, views.RememberScopeField: {"conversation"},
			views.RememberForField: {"soon"}}, b.csrf)
		if got := readBody(res); res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(got, `data-field="remember_for"`) {
			t.Fatalf("a life that is not a number: %d\n%s", res.StatusCode, got)
		}
		res = b.postForm(resolve, url.Values{"decision": {views.RememberDecision}, views.RememberScopeField: {"conversation"},
			views.RememberForField: {"5"}}, b.csrf)
		if got := readBody(res); res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(got, "A grant lasts from a minute to 90 days.") {
			t.Fatalf("a life the agent refuses: %d\n%s", res.StatusCode, got)
		}
		if got := e.call(conv.ID, "n1"); got.Status != store.CallAwaiting {
			t.Fatalf("a refused remember decided the call: %s", got.Status)
		}

		res = b.postForm(resolve, url.Values{"decision": {views.RememberDecision}, views.RememberScopeField: {"conversation"},
			views.RememberForField: {"86400"}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("approve and remember: %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)
		e.awaitStatus(conv.ID, store.StatusIdle)
		grants, err := e.m.Grants(context.Background(), as(owner))
		if err != nil || len(grants) != 1 {
			t.Fatalf("grants after approve and remember: %v %v", grants, err)
		}
		g := grants[0]
		if g.Tool != "note" || g.Scope != store.GrantConversation || g.ConversationID != conv.ID || !g.ExpiresAt.Equal(g.CreatedAt.Add(24*time.Hour)) {
			t.Fatalf("grant %+v, want note for this conversation for a day", g)
		}
		if got := e.call(conv.ID, "n1"); got.Status != store.CallResolved || got.Decision != "approve" {
			t.Fatalf("the remembered call: %s %s", got.Status, got.Decision)
		}

		e.say(conv, owner, "again", llmtest.Calls(llmtest.Call("n2", "note", `{"text":"b"}`)))
		e.awaitCalls(conv.ID, store.CallResolved, "n2")
		body = readBody(b.do("GET", page, "", nil))
		if !strings.Contains(body, `data-grant-id="`+g.ID+`"`) || !strings.Contains(body, "Allowed by your remembered approval "+g.ID) {
			t.Fatalf("the call the grant allowed does not say so:\n%s", body)
		}

		// A reviewer-gated call: no remember on rita's card, and the agent refuses one.
		conv2 := e.conversation(owner)
		e.pending(conv2, owner, llmtest.Call("p1", "publish", `{"text":"x"}`))
		rb := e.browser(rita)
		body = readBody(rb.do("GET", "/inbox", "", nil))
		if !strings.Contains(body, `data-tool-call-id="p1"`) || strings.Contains(body, `data-parley="remember"`) {
			t.Fatalf("the reviewer's inbox card offers remember (or lacks the call):\n%s", body)
		}
		res = rb.postForm(resolveURLFor(conv2.ID, "p1"), url.Values{"decision": {views.RememberDecision}, views.RememberScopeField: {"user"},
			views.RememberForField: {"3600"}, "return": {"/inbox"}}, rb.csrf)
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("a reviewer remembers a reviewer-gated approval: %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)
		if got := e.call(conv2.ID, "p1"); got.Status != store.CallAwaiting {
			t.Fatalf("the refused remember decided the call: %s", got.Status)
		}
	})
}

func resolveURLFor(convID, callID string) string {
	return "/conversations/" + url.PathEscape(convID) + "/calls/" + url.PathEscape(callID) + "/resolve"
}
