package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views"
	"parley/views/viewstest"
)

// inboxEntryOf is the inbox entry n is in ("" when none): its conversation id.
func inboxEntryOf(n *html.Node) string {
	for ; n != nil; n = n.Parent {
		if attrOf(n, "data-parley") == "inbox-entry" {
			return attrOf(n, "data-conversation-id")
		}
	}
	return ""
}

// checkInboxIDs fails unless every element id of the inbox markup body is unique, and every
// reference to one (label for, aria-describedby) names an element of the same inbox entry.
func checkInboxIDs(t *testing.T, what, body string) {
	t.Helper()
	doc := viewstest.MustParse(body)
	byID := map[string]*html.Node{}
	doc.Walk(func(n *html.Node) {
		id, ok := viewstest.Attr(n, "id")
		if !ok {
			return
		}
		if _, dup := byID[id]; dup {
			t.Errorf("%s: the id %q repeats", what, id)
		}
		byID[id] = n
	})
	doc.Walk(func(n *html.Node) {
		for _, key := range []string{"for", "aria-describedby"} {
			ref, ok := viewstest.Attr(n, key)
			if !ok || inboxEntryOf(n) == "" {
				continue
			}
			to, found := byID[ref]
			if !found {
				t.Errorf("%s: %s=%q names no element", what, key, ref)
				continue
			}
			if inboxEntryOf(to) != inboxEntryOf(n) {
				t.Errorf("%s: %s=%q in %s's entry names an element of %s's", what, key, ref, inboxEntryOf(n), inboxEntryOf(to))
			}
		}
	})
}

// TestInboxIDsArePerConversationAndCall: call ids are unique only within a conversation, so two
// conversations' pending calls may share one ("gate" here, as the demo model's demo_1_0 do).
// Every element id of the inbox — page, live list and a decision's answers — is unique per
// conversation and call: the entries, the labels' fields, an invalid decision's errors (which
// show on that conversation's card alone), and the fetch answer's target.
func TestInboxIDsArePerConversationAndCall(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		bob := e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		a, b := e.conversation(ann), e.conversation(bob)
		e.pending(a, ann, llmtest.Call("gate", "publish", map[string]any{"text": "ann's"}))
		e.pending(b, bob, llmtest.Call("gate", "publish", map[string]any{"text": "bob's"}))
		rb := e.browser(rita)

		body := readBody(rb.do("GET", "/inbox", "", nil))
		if got := inboxCallIDs(t, body); strings.Join(got, ",") != "gate,gate" {
			t.Fatalf("the inbox lists %v, want both gates", got)
		}
		checkInboxIDs(t, "the inbox page", body)
		doc := viewstest.MustParse(body)
		for _, conv := range []string{a.ID, b.ID} {
			found := 0
			doc.Walk(func(n *html.Node) {
				if attrOf(n, "id") == views.InboxDOMID(conv, "gate") && len(viewstest.In(n, `[data-parley="inbox-entry"][data-conversation-id="`+conv+`"]`)) == 1 {
					found++
				}
			})
			if found != 1 {
				t.Errorf("no item %s holds the entry of %s", views.InboxDOMID(conv, "gate"), conv)
			}
		}

		// The live list is the same markup.
		conn, _, err := rb.dial(t, "/inbox/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		if f := readFrame(t, conn); f.HTML == nil {
			t.Fatalf("the inbox socket's first frame: %+v", f)
		} else {
			checkInboxIDs(t, "the live list", *f.HTML)
		}

		// An invalid decision of bob's gate, without JavaScript: the inbox again, the error on
		// bob's card alone, its aria-describedby in that card.
		path := "/conversations/" + b.ID + "/calls/gate/resolve"
		res := rb.postForm(path, url.Values{"decision": {"approve"}, "args": {"{nope"}, "return": {"/inbox"}}, rb.csrf)
		body = readBody(res)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("an invalid decision = %d", res.StatusCode)
		}
		checkInboxIDs(t, "the inbox with an error", body)
		errs := viewstest.MustParse(body).All(`[data-parley="field-error"][data-field="args"]`)
		if len(errs) != 1 || inboxEntryOf(errs[0]) != b.ID {
			t.Fatalf("the args error shows on %d cards (want bob's alone)", len(errs))
		}

		// Over fetch: the answer targets bob's entry, not ann's.
		status, ans := rb.fetchForm(path, url.Values{"decision": {"approve"}, "args": {"{nope"}, "return": {"/inbox"}})
		if status != http.StatusUnprocessableEntity || ans.Target != views.InboxDOMID(b.ID, "gate") || ans.HTML == nil {
			t.Fatalf("an invalid decision over fetch = %d %+v", status, ans)
		}
		checkInboxIDs(t, "the invalid entry", *ans.HTML)
		e.model.Push(llmtest.Reply("Published."))
		status, ans = rb.fetchForm(path, url.Values{"decision": {"approve"}, "return": {"/inbox"}})
		if status != http.StatusOK || !ans.OK || ans.Target != views.InboxDOMID(b.ID, "gate") {
			t.Fatalf("a decision over fetch = %d %+v, want the target %s", status, ans, views.InboxDOMID(b.ID, "gate"))
		}
		if d := e.decision(a.ID, "gate"); d != nil {
			t.Fatalf("ann's gate was decided: %v", d)
		}
		if d := e.decision(b.ID, "gate"); d == nil || d["by"] != rita.ID {
			t.Fatalf("bob's gate: %v", d)
		}
	})
}
