package web

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"parley/internal/agent"
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
		if !strings.Contains(body, `name="remember_args" value="exact" checked`) || !strings.Contains(body, "with these exact arguments") ||
			!strings.Contains(body, `name="remember_args" value="any"`) || strings.Contains(body, `name="remember_args" value="any" checked`) {
			t.Fatalf("the card does not offer these exact arguments by default, or any arguments:\n%s", body)
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
		if g.Tool != "note" || g.Scope != store.GrantConversation || g.ConversationID != conv.ID || !g.ExpiresAt.Equal(g.CreatedAt.Add(24*time.Hour)) ||
			g.Args != agent.GrantArgsExact {
			t.Fatalf("grant %+v, want note for this conversation for a day, for these exact arguments", g)
		}
		if got := e.call(conv.ID, "n1"); got.Status != store.CallResolved || got.Decision != "approve" {
			t.Fatalf("the remembered call: %s %s", got.Status, got.Decision)
		}

		e.say(conv, owner, "again", llmtest.Calls(llmtest.Call("n2", "note", `{ "text": "a" }`)))
		e.awaitCalls(conv.ID, store.CallResolved, "n2")
		body = readBody(b.do("GET", page, "", nil))
		if !strings.Contains(body, `data-grant-id="`+g.ID+`"`) || !strings.Contains(body, "Allowed by your remembered approval "+g.ID) {
			t.Fatalf("the call the grant allowed does not say so:\n%s", body)
		}
		// Other arguments ask again; remembered for any arguments (the note tool has no rules),
		// they do not.
		e.say(conv, owner, "other", llmtest.Calls(llmtest.Call("n3", "note", `{"text":"b"}`)))
		e.awaitCalls(conv.ID, store.CallAwaiting, "n3")
		res = b.postForm(resolveURLFor(conv.ID, "n3"), url.Values{"decision": {views.RememberDecision}, views.RememberScopeField: {"conversation"},
			views.RememberForField: {"3600"}, views.RememberArgsField: {agent.GrantArgsAny}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("approve and remember for any arguments: %d %s", res.StatusCode, readBody(res))
		}
		readBody(res)
		e.awaitStatus(conv.ID, store.StatusIdle)
		e.say(conv, owner, "more", llmtest.Calls(llmtest.Call("n4", "note", `{"text":"c"}`)))
		e.awaitCalls(conv.ID, store.CallResolved, "n4")
		body = readBody(b.do("GET", "/grants", "", nil))
		if !strings.Contains(body, `data-args="any"`) || !strings.Contains(body, "any arguments") ||
			!strings.Contains(body, `data-args="exact"`) || !strings.Contains(body, "these exact arguments") {
			t.Fatalf("the grants page does not say which arguments each grant covers:\n%s", body)
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

var auditSeqRe = regexp.MustCompile(`data-parley="audit-row" data-seq="(\d+)"`)

// auditSeqs are the chain places of the audit rows a page lists, in the page's order.
func auditSeqs(body string) []int {
	var out []int
	for _, m := range auditSeqRe.FindAllStringSubmatch(body, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

// TestGrantsAndAuditPages: /grants lists the viewer's own remembered approvals with a revoke
// form (CSRF-checked; someone else's is 404) and the revoke ends the grant; /admin/audit lists
// the trail newest first for admins only, with filters (action, actor by name, tool,
// conversation) and paging back through older records.
func TestGrantsAndAuditPages(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000, PageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		other := e.user("other", store.RoleMember)
		admin := e.user("boss", store.RoleAdmin)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("n1", "note", `{"text":"a"}`))
		if res := e.script(owner).api("POST", resolveURLForAPI(conv.ID, "n1"), `{"decision":"approve","remember":{"scope":"user","for_secs":3600}}`); res.StatusCode != 200 {
			t.Fatalf("approve and remember: %d %s", res.StatusCode, readBody(res))
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
		grants, err := e.m.Grants(context.Background(), as(owner))
		if err != nil || len(grants) != 1 {
			t.Fatalf("grants: %v %v", grants, err)
		}
		id := grants[0].ID

		b := e.browser(owner)
		body := readBody(b.do("GET", "/grants", "", nil))
		if !strings.Contains(body, `data-grant-id="`+id+`"`) || !strings.Contains(body, `action="/grants/`+id+`/revoke"`) ||
			!strings.Contains(body, "all your conversations") || !strings.Contains(body, `href="/grants"`) {
			t.Fatalf("the grants page does not list the grant with its revoke form:\n%s", body)
		}
		if body := readBody(b.do("GET", "/account", "", nil)); !strings.Contains(body, `data-parley="account-grants"`) {
			t.Error("the account page does not link to the remembered approvals")
		}
		ob := e.browser(other)
		if body := readBody(ob.do("GET", "/grants", "", nil)); strings.Contains(body, id) || !strings.Contains(body, `data-parley="no-grants"`) {
			t.Fatalf("another user sees the owner's grant")
		}
		if res := ob.postForm("/grants/"+id+"/revoke", url.Values{}, ob.csrf); res.StatusCode != http.StatusNotFound {
			t.Fatalf("someone else revokes: %d", res.StatusCode)
		}
		if res := b.postForm("/grants/"+id+"/revoke", url.Values{}, ""); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a revoke without the CSRF token: %d", res.StatusCode)
		}
		if g, _ := e.m.Grants(context.Background(), as(owner)); len(g) != 1 {
			t.Fatal("a refused revoke ended the grant")
		}
		res := b.postForm("/grants/"+id+"/revoke", url.Values{}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/grants" {
			t.Fatalf("revoke: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if g, _ := e.m.Grants(context.Background(), as(owner)); len(g) != 0 {
			t.Fatalf("the revoked grant is still active: %v", g)
		}
		if body := readBody(b.do("GET", "/grants", "", nil)); strings.Contains(body, `data-grant-id="`+id+`"`) {
			t.Fatal("the revoked grant is still listed")
		}
		if res := b.postForm("/grants/"+id+"/revoke", url.Values{}, b.csrf); res.StatusCode != http.StatusNotFound {
			t.Fatalf("revoke twice: %d", res.StatusCode)
		}

		// The audit trail: admins only.
		if res := b.do("GET", "/admin/audit", "", nil); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a member opens the audit trail: %d", res.StatusCode)
		}
		if res := e.anon().do("GET", "/admin/audit", "", nil); res.StatusCode != http.StatusSeeOther && res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("anonymous audit trail: %d", res.StatusCode)
		}
		ab := e.browser(admin)
		body = readBody(ab.do("GET", "/admin/audit", "", nil))
		seqs := auditSeqs(body)
		if len(seqs) < 3 || !sort.SliceIsSorted(seqs, func(i, j int) bool { return seqs[i] > seqs[j] }) {
			t.Fatalf("audit rows %v, want several, newest first:\n%s", seqs, body)
		}
		for _, action := range []string{"approve", "grant_create", "grant_revoke"} {
			if !strings.Contains(body, `data-action="`+action+`"`) {
				t.Errorf("the trail lacks a %s record", action)
			}
		}
		if !strings.Contains(body, `href="/admin/audit"`) || !strings.Contains(body, `data-parley="nav-audit"`) {
			t.Error("no link to the audit trail in the admin's nav")
		}
		body = readBody(ab.do("GET", "/admin/audit?action=grant_revoke", "", nil))
		if n := strings.Count(body, `data-parley="audit-row"`); n != 1 || !strings.Contains(body, `data-actor-id="`+owner.ID+`"`) {
			t.Fatalf("action filter: %d rows\n%s", n, body)
		}
		body = readBody(ab.do("GET", "/admin/audit?actor=owner&tool=note&conversation="+url.QueryEscape(conv.ID), "", nil))
		if n := strings.Count(body, `data-parley="audit-row"`); n < 2 || strings.Contains(body, `data-actor-id="`+admin.ID+`"`) ||
			strings.Count(body, `data-actor-id="`+owner.ID+`"`) != n {
			t.Fatalf("actor/tool/conversation filter: %d rows\n%s", n, body)
		}
		if body := readBody(ab.do("GET", "/admin/audit?actor=nobody", "", nil)); !strings.Contains(body, `data-parley="no-audit"`) {
			t.Fatal("an unknown actor lists records")
		}

		// Paging: 60 more records of one action; the first page shows 50, "Older" the rest.
		recs := make([]store.AuditRecord, 60)
		for i := range recs {
			recs[i] = store.AuditRecord{ActorID: admin.ID, Action: "test_page", Tool: "note", At: t0}
		}
		if err := e.st.AppendAudit(context.Background(), recs...); err != nil {
			t.Fatal(err)
		}
		body = readBody(ab.do("GET", "/admin/audit?action=test_page", "", nil))
		first := auditSeqs(body)
		m := regexp.MustCompile(`href="(/admin/audit\?[^"]*before=\d+[^"]*)" data-parley="audit-older"`).FindStringSubmatch(body)
		if len(first) != auditPageSize || m == nil {
			t.Fatalf("first page: %d rows, older link %v", len(first), m)
		}
		older := strings.ReplaceAll(m[1], "&amp;", "&")
		body = readBody(ab.do("GET", older, "", nil))
		second := auditSeqs(body)
		if len(second) != 10 || second[0] != first[len(first)-1]-1 || strings.Contains(body, `data-parley="audit-older"`) {
			t.Fatalf("second page %v after %v (link %s)", second, first[len(first)-1], older)
		}
		if res := ab.do("GET", "/admin/audit?before=-1", "", nil); res.StatusCode != http.StatusUnprocessableEntity && res.StatusCode != http.StatusBadRequest {
			t.Fatalf("a bad before: %d", res.StatusCode)
		}
	})
}

func resolveURLForAPI(convID, callID string) string { return "/api/v1" + resolveURLFor(convID, callID) }
