package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views/viewstest"
)

// TestApprovalArgumentFields: the approval card's arguments as fields built from the tool's
// schema (send_email: to, subject, body). Untouched fields approve the call as it was; an
// edited field approves it with the edit; a value the schema refuses comes back beside its
// field, with what was typed kept; nothing reaches the agent before that.
func TestApprovalArgumentFields(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("c1", "send_email", emailArgs("bob@example.com")))
		b := e.browser(ann)
		path := func(call string) string { return "/conversations/" + conv.ID + "/calls/" + call + "/resolve" }
		fields := func(to, subject, body string) url.Values {
			return url.Values{"decision": {"approve"}, "args_form": {"1"}, "arg.to": {to}, "arg.subject": {subject}, "arg.body": {body}}
		}

		// The page shows the fields, not JSON.
		doc := viewstest.MustParse(readBody(b.do("GET", "/conversations/"+conv.ID, "", nil)))
		if _, n := doc.One(`[data-tool-call-id="c1"] [data-parley="args-form"] input[name="arg.to"][value="bob@example.com"]`); n != 1 {
			t.Fatalf("the approval card has no field for to")
		}

		// Untouched: a plain approval.
		e.model.Push(llmtest.Calls(llmtest.Call("c2", "send_email", emailArgs("bob@example.com"))))
		res := b.postForm(path("c1"), fields("bob@example.com", "lunch", "See you at noon."), b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("approve = %d %s", res.StatusCode, readBody(res))
		}
		if c := e.call(conv.ID, "c1"); c.Decision != "approve" {
			t.Fatalf("untouched fields: decision %q, want approve", c.Decision)
		}

		// A value the schema refuses: 422, the problem beside the field, the typed value kept.
		before := e.awaitCalls(conv.ID, store.CallAwaiting, "c2").LastSeq
		res = b.postForm(path("c2"), fields("not an address", "lunch", "See you at noon."), b.csrf)
		body := readBody(res)
		if res.StatusCode != http.StatusUnprocessableEntity || e.view(conv.ID).LastSeq != before {
			t.Fatalf("refused edit = %d", res.StatusCode)
		}
		doc = viewstest.MustParse(body)
		if el, n := doc.One(`[data-tool-call-id="c2"] [data-parley="field-error"][data-field="arg.to"]`); n != 1 || viewstest.Text(el) == "" {
			t.Errorf("no error beside the to field")
		}
		if _, n := doc.One(`[data-tool-call-id="c2"] input[name="arg.to"][value="not an address"]`); n != 1 {
			t.Errorf("the typed value is not kept")
		}
		if strings.Contains(body, `name="args"`) {
			t.Errorf("the card switched to JSON")
		}

		// An edit: approved with it; the call runs with the new arguments.
		res = b.postForm(path("c2"), fields("carol@example.com", "lunch", "Noon?\r\nOr one."), b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("edit = %d %s", res.StatusCode, readBody(res))
		}
		c2 := e.call(conv.ID, "c2")
		if c2.Decision != "approve_edited" || string(c2.Args) != `{"body":"Noon?\nOr one.","subject":"lunch","to":"carol@example.com"}` {
			t.Fatalf("edited c2 = %s %s", c2.Decision, c2.Args)
		}
	})
}
