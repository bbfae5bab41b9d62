package web

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views/viewstest"
)

// TestPagesShowTimesOneWay: the conversation, the conversations list, the inbox and the audit
// trail show every time as views.When does (issue 27, item 10): a <time data-parley="time">
// with the instant in UTC in datetime and the exact time in its title; no other time format
// appears anywhere else in their text.
func TestPagesShowTimesOneWay(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	ann, rita, ada := e.user("ann", store.RoleMember), e.user("rita", store.RoleReviewer), e.user("ada", store.RoleAdmin)
	conv := e.conversation(ann)
	e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}),
		llmtest.Call("mine", "send_email", emailArgs("bob@example.com")))
	b := e.browser(ann)
	e.model.Push(llmtest.Reply("Done."))
	if res := b.postForm("/conversations/"+conv.ID+"/calls/mine/resolve", url.Values{"decision": {"deny"}, "reason": {"not now"}}, b.csrf); res.StatusCode >= 400 {
		t.Fatalf("deny: %d %s", res.StatusCode, readBody(res))
	}
	e.awaitCalls(conv.ID, store.CallDenied, "mine")

	loose := regexp.MustCompile(`\b\d{1,2}:\d{2}\b|\b\d{4}-\d{2}-\d{2}\b|\bUTC\b|\b[AP]M\b`)
	for _, pg := range []struct {
		who  *client
		path string
		want string // where a time must be
	}{
		{b, "/conversations/" + conv.ID, `[data-parley="message"] time`},
		{b, "/conversations", `li time`},
		{e.browser(rita), "/inbox", `[data-parley="inbox-age"] time`},
		{e.browser(ada), "/admin/audit", `[data-parley="audit-row"] time`},
	} {
		res := pg.who.do("GET", pg.path, "", nil)
		body := readBody(res)
		if res.StatusCode != 200 {
			t.Fatalf("%s: %d", pg.path, res.StatusCode)
		}
		doc := viewstest.MustParse(body)
		times := doc.All("time")
		if len(doc.All(pg.want)) == 0 || strings.Contains(body, "@When") {
			t.Errorf("%s shows no time at %s", pg.path, pg.want)
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
