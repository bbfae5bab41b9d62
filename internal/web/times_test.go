package web

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views"
	"parley/views/viewstest"
)

// TestPagesShowTimesOneWay: the conversation, the conversations list, the inbox, the audit
// trail, the tokens page, the remembered approvals (the viewer's and the admins'), the users
// page and the invitations page show every time as views.When does (issue 27, item 10): a
// <time data-parley="time"> with the instant in UTC in datetime and the exact time in its
// title; no other time format appears anywhere else in their text.
func TestPagesShowTimesOneWay(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	ann, rita, ada := e.user("ann", store.RoleMember), e.user("rita", store.RoleReviewer), e.user("ada", store.RoleAdmin)
	b := e.browser(ann)
	// A remembered approval, a token with an expiry and a use, and an invitation.
	other := e.conversation(ann)
	e.pending(other, ann, llmtest.Call("n1", "note", `{"text":"a"}`))
	e.model.Push(llmtest.Reply("Noted."))
	if res := b.postForm(resolveURLFor(other.ID, "n1"), url.Values{"decision": {views.RememberDecision},
		views.RememberScopeField: {"conversation"}, views.RememberForField: {"86400"}}, b.csrf); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve and remember: %d %s", res.StatusCode, readBody(res))
	}
	e.awaitStatus(other.ID, store.StatusIdle)
	script := e.anon()
	script.bearer = pageToken(t, b, url.Values{"name": {"hook"}, "expires_days": {"7"}})
	if res := script.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
		t.Fatalf("token use: %d", res.StatusCode)
	}
	admin := e.browser(ada)
	invitation(t, admin, url.Values{"role": {"member"}, "expires_days": {"7"}})

	conv := e.conversation(ann)
	e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}),
		llmtest.Call("mine", "send_email", emailArgs("bob@example.com")))
	e.model.Push(llmtest.Reply("Done."))
	if res := b.postForm("/conversations/"+conv.ID+"/calls/mine/resolve", url.Values{"decision": {"deny"}, "reason": {"not now"}}, b.csrf); res.StatusCode >= 400 {
		t.Fatalf("deny: %d %s", res.StatusCode, readBody(res))
	}
	e.awaitCalls(conv.ID, store.CallDenied, "mine")

	loose := regexp.MustCompile(`\b\d{1,2}:\d{2}\b|\b\d{4}-\d{2}-\d{2}\b|\bUTC\b|\b[AP]M\b`)
	for _, pg := range []struct {
		who  *client
		path string
		want []string // where times must be
	}{
		{b, "/conversations/" + conv.ID, []string{`[data-parley="message"] time`}},
		{b, "/conversations", []string{`li time`}},
		{e.browser(rita), "/inbox", []string{`[data-parley="inbox-age"] time`}},
		{admin, "/admin/audit", []string{`[data-parley="audit-row"] time`}},
		{b, "/tokens", []string{`[data-parley="token"] td time`, `[data-parley="token-expires"] time`, `[data-parley="token-last-used"] time`}},
		{b, "/grants", []string{`[data-parley="grant-row"] td time`, `[data-parley="grant-expires"] time`}},
		{admin, "/admin/grants", []string{`[data-parley="grant-row"] td time`, `[data-parley="grant-expires"] time`}},
		{admin, "/admin/users", []string{`[data-parley="admin-users"] td time`}},
		{admin, "/admin/invitations", []string{`[data-parley="invitation"] td time`}},
	} {
		res := pg.who.do("GET", pg.path, "", nil)
		body := readBody(res)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", pg.path, res.StatusCode)
		}
		doc := viewstest.MustParse(body)
		times := doc.All("time")
		for _, want := range pg.want {
			if len(doc.All(want)) == 0 || strings.Contains(body, "@When") {
				t.Errorf("%s shows no time at %s", pg.path, want)
			}
		}
		for _, tm := range times {
			dt, _ := viewstest.Attr(tm, "datetime")
			title, _ := viewstest.Attr(tm, "title")
			kind, _ := viewstest.Attr(tm, "data-parley")
			if _, err := time.Parse("2006-01-02T15:04:05Z", dt); err != nil || kind != "time" || !strings.HasSuffix(title, " UTC") {
				t.Errorf("%s: a time not made by views.When: datetime %q, data-parley %q, title %q", pg.path, dt, kind, title)
			}
		}
		root, _ := doc.One("body")
		if m := loose.FindString(textOutsideTimes(root)); m != "" {
			t.Errorf("%s shows a time outside views.When: %q", pg.path, m)
		}
	}
}

// textOutsideTimes is the text of n leaving out <time> elements (whose text is When's).
func textOutsideTimes(n *html.Node) string {
	var sb strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && (n.Data == "time" || n.Data == "script") {
			return
		}
		if n.Type == html.TextNode {
			sb.WriteString(n.Data)
			sb.WriteByte(' ')
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return sb.String()
}
