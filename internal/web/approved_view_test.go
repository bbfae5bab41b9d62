package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views/viewstest"
)

// TestWhatWasApprovedAfterAnEdit (issue 27, item 2): once an approver edited a call's arguments,
// the record people trust says what ran. For the owner's edit and for a reviewer's, the owner's
// page shows under "What was approved" the final value (never the dry run of the model's
// arguments), the change old → new, and the admin's audit trail shows the same change on the
// approve_edited record (which keeps the change itself, bounded, as the trail must stand on its own).
func TestWhatWasApprovedAfterAnEdit(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		ada := e.user("ada", store.RoleAdmin)
		conv := e.conversation(ann)
		resolve := func(call string) string { return "/conversations/" + conv.ID + "/calls/" + call + "/resolve" }

		// The owner edits the subject of an e-mail before approving it.
		e.pending(conv, ann, llmtest.Call("mail", "send_email",
			map[string]any{"to": "bob@example.com", "subject": "Lunch", "body": "See you."}))
		e.model.Push(llmtest.Calls(llmtest.Call("pub", "publish", map[string]any{"text": "draft"})))
		b := e.browser(ann)
		res := b.postForm(resolve("mail"), url.Values{"decision": {"approve"},
			"args": {`{"to": "bob@example.com", "subject": "Lunch Friday at noon?", "body": "See you."}`}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the owner's edit = %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)

		// A reviewer edits the text of a publication.
		e.awaitCalls(conv.ID, store.CallAwaiting, "pub")
		r := e.browser(rita)
		res = r.postForm(resolve("pub"), url.Values{"decision": {"approve"}, "args": {`{"text": "final text"}`}, "return": {"/inbox"}}, r.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("the reviewer's edit = %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)
		v := e.awaitCalls(conv.ID, store.CallResolved, "mail", "pub")
		for id, want := range map[string]string{"mail": "approve_edited", "pub": "approve_edited"} {
			if c, _ := v.Call(id); c.Decision != want {
				t.Fatalf("%s decided %q, want %q", id, c.Decision, want)
			}
		}

		// The owner's page (the requester's view of the reviewer's edit too).
		doc := viewstest.MustParse(readBody(b.do("GET", "/conversations/"+conv.ID, "", nil)))
		for _, tc := range []struct{ call, field, was, now string }{
			{"mail", "subject", "Lunch", "Lunch Friday at noon?"},
			{"pub", "text", "draft", "final text"},
		} {
			card := `[data-tool-call-id="` + tc.call + `"]`
			plan, n := doc.One(card + ` [data-parley="plan"]`)
			if n != 1 {
				t.Fatalf("%s: %d plans on the card, want 1", tc.call, n)
			}
			if h, _ := doc.One(card + ` [data-parley="plan"] p[class="plan-heading"]`); h == nil || viewstest.Text(h) != "What was approved" {
				t.Errorf("%s: the plan's heading is not \"What was approved\"", tc.call)
			}
			if _, edited := viewstest.Attr(plan, "data-edited"); !edited {
				t.Errorf("%s: the plan is not marked as the edited arguments", tc.call)
			}
			approvedText := viewstest.Text(plan)
			if !strings.Contains(approvedText, tc.now) {
				t.Errorf("%s: \"What was approved\" = %q, want the final %q", tc.call, approvedText, tc.now)
			}
			if rows := ddTexts(viewstest.In(plan, "dd")); !slices.Contains(rows, tc.now) || slices.Contains(rows, tc.was) {
				t.Errorf("%s: \"What was approved\" rows = %q, want %q and never the stale %q", tc.call, rows, tc.now, tc.was)
			}
			if strings.Contains(approvedText, `"`+tc.was+`"`) {
				t.Errorf("%s: \"What was approved\" = %q names the stale %q", tc.call, approvedText, tc.was)
			}
			assertChange(t, doc, card+` [data-parley="arg-changes"] li[data-field="`+tc.field+`"]`, `"`+tc.was+`"`, `"`+tc.now+`"`)
		}

		// The admin's audit trail: each approve_edited record says what changed.
		ab := e.browser(ada)
		audit := viewstest.MustParse(readBody(ab.do("GET", "/admin/audit?conversation="+url.QueryEscape(conv.ID), "", nil)))
		rows := audit.All(`tr[data-parley="audit-row"][data-action="approve_edited"]`)
		if len(rows) != 2 {
			t.Fatalf("%d approve_edited rows on the audit page, want 2", len(rows))
		}
		assertChange(t, audit, `tr[data-action="approve_edited"] [data-parley="audit-changes"] li[data-field="subject"]`, `"Lunch"`, `"Lunch Friday at noon?"`)
		assertChange(t, audit, `tr[data-action="approve_edited"] [data-parley="audit-changes"] li[data-field="text"]`, `"draft"`, `"final text"`)
	})
}

// assertChange checks the one change at sel: was struck out, now inserted.
func assertChange(t *testing.T, doc *viewstest.Doc, sel, was, now string) {
	t.Helper()
	li, n := doc.One(sel)
	if n != 1 {
		t.Errorf("%s: %d changes, want 1", sel, n)
		return
	}
	del, ins := viewstest.In(li, "del"), viewstest.In(li, "ins")
	if len(del) != 1 || viewstest.Text(del[0]) != was || len(ins) != 1 || viewstest.Text(ins[0]) != now {
		t.Errorf("%s: the change reads %q, want %q → %q", sel, viewstest.Text(li), was, now)
	}
}

func ddTexts(ns []*html.Node) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = viewstest.Text(n)
	}
	return out
}
