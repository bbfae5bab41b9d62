package views

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"golang.org/x/net/html"

	"parley/internal/agent"
	"parley/internal/tools"
	"parley/views/viewstest"
)

func render(t *testing.T, c templ.Component) (string, *viewstest.Doc) {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("render: %v", err)
	}
	return buf.String(), viewstest.MustParse(buf.String())
}

// assertInert fails when the HTML could run script or load something from elsewhere: script,
// iframe, object, embed, style or base elements, event-handler attributes, javascript: or data:
// URLs, and images that are not the app's own.
func assertInert(t *testing.T, doc *viewstest.Doc) {
	t.Helper()
	doc.Walk(func(n *html.Node) {
		switch n.Data {
		case "script", "iframe", "object", "embed", "style", "base", "link", "meta", "svg", "math", "form-action":
			t.Errorf("dangerous element <%s> rendered", n.Data)
		}
		for _, a := range n.Attr {
			k := strings.ToLower(a.Key)
			v := strings.ToLower(strings.TrimSpace(a.Val))
			if strings.HasPrefix(k, "on") {
				t.Errorf("event handler attribute %s=%q on <%s>", a.Key, a.Val, n.Data)
			}
			if k == "style" || k == "srcdoc" || k == "formaction" {
				t.Errorf("attribute %s on <%s>", a.Key, n.Data)
			}
			if (k == "href" || k == "src" || k == "action" || k == "xlink:href") &&
				(strings.HasPrefix(v, "javascript:") || strings.HasPrefix(v, "data:") || strings.HasPrefix(v, "vbscript:")) {
				t.Errorf("dangerous URL %s=%q on <%s>", a.Key, a.Val, n.Data)
			}
			if n.Data == "img" && k == "src" && !localImage.MatchString(a.Val) {
				t.Errorf("foreign image %q", a.Val)
			}
		}
	})
}

func owner() Viewer {
	return Viewer{Principal: agent.Principal{UserID: "u1", Role: agent.RoleMember, Via: "session"}, Name: "ann"}
}
func reviewer() Viewer {
	return Viewer{Principal: agent.Principal{UserID: "r1", Role: agent.RoleReviewer, Via: "session"}, Name: "rev"}
}

func page(v Viewer) Page {
	return Page{ConversationID: "c1", CSRF: "tok", Viewer: v, OwnerID: "u1"}
}

func TestMessagesEscapeUserTextAndSanitizeAssistantMarkdown(t *testing.T) {
	v := agent.View{ID: "c1", Title: "t", Status: "idle", Messages: []agent.Message{
		{Seq: 1, Role: "user", Content: `<script>alert("u")</script> <b onclick="x()">hi</b>`},
		{Seq: 2, Role: "assistant", Content: "**bold** and `code`\n\n- a\n- b"},
	}}
	out, doc := render(t, ConversationBody(ConversationPage{Page: page(owner()), View: v}))
	assertInert(t, doc)
	msgs := doc.All(`[data-parley="message"]`)
	if len(msgs) != 2 {
		t.Fatalf("messages = %d, want 2", len(msgs))
	}
	if r, _ := viewstest.Attr(msgs[0], "data-role"); r != "user" {
		t.Errorf("first message role = %q", r)
	}
	if got := viewstest.Text(msgs[0]); !strings.Contains(got, `<script>alert("u")</script>`) {
		t.Errorf("user text not shown literally: %q", got)
	}
	if len(viewstest.In(msgs[1], "strong")) != 1 || len(viewstest.In(msgs[1], "li")) != 2 || len(viewstest.In(msgs[1], "code")) != 1 {
		t.Errorf("assistant Markdown not rendered: %s", out)
	}
}

func TestXSSCorpusThroughModelOutputRendersInert(t *testing.T) {
	corpus := []struct {
		name, md string
		keep     string // text that must survive, shown inert
	}{
		{"script tag", `<script>alert(1)</script>hello`, "<script>alert(1)</script>hello"},
		{"script in paragraph", "para <script>alert(1)</script> end", "end"},
		{"img onerror", `<img src=x onerror=alert(1)>`, "<img src=x onerror=alert(1)>"},
		{"event handler on div", `<div onmouseover="alert(1)">hover</div>`, ""},
		{"javascript link", `[click](javascript:alert(1))`, "click"},
		{"javascript link entity", `[click](jav&#x09;ascript:alert(1))`, "click"},
		{"javascript autolink html", `<a href="javascript:alert(1)">x</a>`, ""},
		{"data link", `[d](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)`, "d"},
		{"foreign image", `![tracker](https://evil.example/p.png)`, "tracker"},
		{"protocol-relative image", `![x](//evil.example/p.png)`, "x"},
		{"backslash image", `![x](/\evil.example/p.png)`, "x"},
		{"reference image", "![r][1]\n\n[1]: http://evil.example/r.png", "r"},
		{"iframe", `<iframe src="https://evil.example"></iframe>`, ""},
		{"style tag", `<style>body{display:none}</style>ok`, "ok"},
		{"svg onload", `<svg onload=alert(1)><circle/></svg>`, ""},
		{"html in code span stays text", "`<script>alert(1)</script>`", "<script>alert(1)</script>"},
		{"fenced code", "```html\n<script>alert(1)</script>\n```", "<script>alert(1)</script>"},
		{"form injection", `<form action="https://evil.example"><input name=x></form>`, ""},
		{"link with title quote", `[a](https://ok.example "t\" onmouseover=\"alert(1)")`, "a"},
	}
	for _, tc := range corpus {
		t.Run(tc.name, func(t *testing.T) {
			v := agent.View{ID: "c1", Messages: []agent.Message{{Seq: 1, Role: "assistant", Content: tc.md}}}
			_, doc := render(t, ConversationBody(ConversationPage{Page: page(owner()), View: v}))
			assertInert(t, doc)
			msg, n := doc.One(`[data-parley="message"][data-role="assistant"]`)
			if n != 1 {
				t.Fatalf("assistant messages = %d", n)
			}
			if len(viewstest.In(msg, "form")) > 0 || len(viewstest.In(msg, "input[name]")) > 0 {
				t.Errorf("form elements rendered from model output")
			}
			if tc.keep != "" && !strings.Contains(viewstest.Text(msg), tc.keep) {
				t.Errorf("text %q lost: %q", tc.keep, viewstest.Text(msg))
			}
		})
	}
}

func TestLocalImagesAreKept(t *testing.T) {
	got := RenderMarkdown("![logo](/static/logo.png)")
	if !strings.Contains(got, `<img src="/static/logo.png"`) {
		t.Errorf("local image dropped: %s", got)
	}
}

func TestXSSCorpusThroughToolOutputRendersInert(t *testing.T) {
	evil := `<script>alert(1)</script><img src=x onerror=alert(2)>`
	args, _ := json.Marshal(map[string]any{"to": evil, "html": `<a href="javascript:alert(3)">x</a>`})
	result, _ := json.Marshal(map[string]any{"ok": true, "result": map[string]any{"body": evil}})
	errEnv, _ := json.Marshal(map[string]any{"ok": false, "error": map[string]any{"kind": evil, "message": evil}})
	search, _ := json.Marshal([]any{map[string]any{"url": "javascript:alert(1)", "title": evil}, map[string]any{"url": "https://ok.example/a", "title": evil}})
	calls := []agent.CallView{
		{Seq: 1, ID: `x"><script>alert(1)</script>`, Name: evil, Executor: tools.Server, Status: "resolved", Args: args, Result: result, Decision: evil, DecidedBy: evil, Reason: evil},
		{Seq: 2, ID: "e1", Name: evil, Executor: tools.Server, Status: "errored", Args: args, Result: errEnv},
		{Seq: 3, ID: "a1", Name: evil, Executor: tools.Server, Approval: tools.RequiresApproval, Status: "awaiting", PendingKind: tools.PendingApproval, Args: args,
			Plan: &tools.Plan{Summary: evil, Details: map[string]any{evil: evil}}},
		{Seq: 4, ID: "q1", Name: "ask_user", Executor: tools.Human, Status: "awaiting", PendingKind: tools.PendingElicitation,
			Prompt: &tools.Prompt{Message: evil, Schema: json.RawMessage(`{"type":"object","title":"<script>t</script>","properties":{"n":{"type":"string","title":"<img src=x onerror=alert(1)>","description":"<script>d</script>","enum":["<script>e</script>"]}}}`)}},
		{Seq: 5, ID: "p1", Name: "web_search", Executor: tools.Provider, Status: "resolved", Args: json.RawMessage(`{"query":"<script>q</script>"}`), Result: search},
		{Seq: 6, ID: "r1", Name: evil, Executor: tools.Server, Status: "running", Progress: []string{evil}},
	}
	out, doc := render(t, ConversationBody(ConversationPage{Page: page(owner()), View: agent.View{ID: "c1", Calls: calls, LastError: evil, Streaming: evil}}))
	assertInert(t, doc)
	if n := len(doc.All(`[data-parley="tool-call"]`)); n != len(calls) {
		t.Errorf("tool-call cards = %d, want %d", n, len(calls))
	}
	if !strings.Contains(out, "&lt;script&gt;") {
		t.Errorf("tool output not shown escaped")
	}
	links := doc.All(`[data-parley="searched-web"] a`)
	if len(links) != 1 {
		t.Fatalf("search links = %d, want only the https one", len(links))
	}
	if h, _ := viewstest.Attr(links[0], "href"); h != "https://ok.example/a" {
		t.Errorf("search link href = %q", h)
	}
}

func TestToolCallCardStates(t *testing.T) {
	next := time.Date(2026, 11, 22, 10, 0, 5, 0, time.UTC)
	tests := []struct {
		name  string
		call  agent.CallView
		viewr Viewer
		want  []string // selectors that must match inside the card
		none  []string // selectors that must not
	}{
		{"running with progress", agent.CallView{ID: "c", Name: "count_down", Executor: tools.Server, Status: "running", Progress: []string{"3", "2"}},
			owner(), []string{`[data-parley="progress"] li`}, []string{`[data-parley="approval"]`, `[data-parley="result"]`}},
		{"retrying", agent.CallView{ID: "c", Name: "flaky", Executor: tools.Server, Status: "running", Attempts: 2, NextAttempt: &next},
			owner(), []string{`[data-parley="attempts"]`, `[data-parley="retry"]`}, nil},
		{"result", agent.CallView{ID: "c", Name: "get_current_time", Executor: tools.Server, Status: "resolved", Result: json.RawMessage(`{"ok":true,"result":{"time":"now"}}`)},
			owner(), []string{`[data-parley="result"]`}, []string{`[data-parley="error"]`}},
		{"error", agent.CallView{ID: "c", Name: "failing", Executor: tools.Server, Status: "errored", Result: json.RawMessage(`{"ok":false,"error":{"kind":"command_failed","message":"boom"}}`)},
			owner(), []string{`[data-parley="error"][data-kind="command_failed"]`}, []string{`[data-parley="result"]`}},
		{"denied with reason", agent.CallView{ID: "c", Name: "send_email", Executor: tools.Server, Status: "denied", Decision: "deny", DecidedBy: "ann", Reason: "not now",
			Result: json.RawMessage(`{"ok":false,"error":{"kind":"denied","message":"denied: not now"}}`)},
			owner(), []string{`[data-parley="decision"]`, `[data-parley="reason"]`, `[data-parley="error"][data-kind="denied"]`}, []string{`[data-parley="approval"]`}},
		{"approval for owner", agent.CallView{ID: "c", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Status: "awaiting",
			PendingKind: tools.PendingApproval, Args: json.RawMessage(`{"to":"bob@example.com"}`), Plan: &tools.Plan{Summary: "Would send an email to bob@example.com", Details: map[string]any{"subject": "lunch"}}},
			owner(), []string{`[data-parley="approval"] [data-parley="plan"]`, `[data-parley="approval"] button[name="decision"][value="approve"]`,
				`[data-parley="approval"] button[name="decision"][value="deny"]`, `[data-parley="approval"] [name="reason"]`, `[data-parley="approval"] textarea[name="args"]`,
				`[data-parley="approval"] form[method="post"][action="/conversations/c1/calls/c/resolve"] input[name="_csrf"][value="tok"]`}, nil},
		{"reviewer-gated seen by its owner", agent.CallView{ID: "c", Name: "wire", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer, Status: "awaiting",
			PendingKind: tools.PendingApproval, Plan: &tools.Plan{Summary: "s"}},
			owner(), []string{`[data-parley="approval"] [data-parley="waiting-for"]`}, []string{`button[name="decision"]`}},
		{"reviewer-gated seen by a reviewer", agent.CallView{ID: "c", Name: "wire", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer, Status: "awaiting",
			PendingKind: tools.PendingApproval, Plan: &tools.Plan{Summary: "s"}},
			reviewer(), []string{`button[name="decision"][value="approve"]`}, []string{`[data-parley="waiting-for"]`}},
		{"owner-approved seen by a reviewer: no buttons (the owner's call)", agent.CallView{ID: "c", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Status: "awaiting",
			PendingKind: tools.PendingApproval, Plan: &tools.Plan{Summary: "s"}},
			reviewer(), []string{`[data-parley="approval"] [data-parley="waiting-for"]`}, []string{`button[name="decision"]`}},
		{"reviewer-gated of an admin's own conversation: no self-approval", agent.CallView{ID: "c", Name: "wire", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer, Status: "awaiting",
			PendingKind: tools.PendingApproval, Plan: &tools.Plan{Summary: "s"}},
			Viewer{Principal: agent.Principal{UserID: "u1", Role: agent.RoleAdmin, Via: "session"}, Name: "ann"}, []string{`[data-parley="approval"] [data-parley="waiting-for"]`}, []string{`button[name="decision"]`}},
		{"owner-approved of someone else, seen by an admin: the override is offered", agent.CallView{ID: "c", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Status: "awaiting",
			PendingKind: tools.PendingApproval, Plan: &tools.Plan{Summary: "s"}},
			Viewer{Principal: agent.Principal{UserID: "a9", Role: agent.RoleAdmin, Via: "session"}, Name: "root"}, []string{`button[name="decision"][value="approve"]`}, nil},
		{"client exec asks its owner first", agent.CallView{ID: "c", Name: "geolocation", Executor: tools.Client, Status: "awaiting", PendingKind: tools.PendingClientExec, AskFirst: true},
			owner(), []string{`[data-parley="client-consent"][data-tool-call-id="c"] button[data-parley="client-allow"]`, `[data-parley="client-consent"] button[data-parley="client-deny"]`}, []string{`form`, `[data-parley="client-exec"]`}},
		{"client exec asking, seen by a reader: no buttons", agent.CallView{ID: "c", Name: "geolocation", Executor: tools.Client, Status: "awaiting", PendingKind: tools.PendingClientExec, AskFirst: true},
			reviewer(), []string{`[data-parley="client-exec"]`}, []string{`[data-parley="client-consent"]`}},
		{"client exec", agent.CallView{ID: "c", Name: "geolocation", Executor: tools.Client, Status: "awaiting", PendingKind: tools.PendingClientExec},
			owner(), []string{`[data-parley="client-exec"]`}, []string{`form`}},
		{"provider", agent.CallView{ID: "c", Name: "web_search", Executor: tools.Provider, Status: "resolved", Args: json.RawMessage(`{"query":"go 1.26"}`),
			Result: json.RawMessage(`{"content":[{"type":"web_search_result","url":"https://go.dev/doc","title":"Go docs"}]}`)},
			owner(), []string{`[data-parley="searched-web"] a[href="https://go.dev/doc"]`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, doc := render(t, ToolCallCard(page(tc.viewr), tc.call))
			assertInert(t, doc)
			// A browser call says, to a page without JavaScript, that it needs it.
			clientWaits := tc.call.Status == "awaiting" && tc.call.PendingKind == tools.PendingClientExec
			if got := strings.Contains(out, `data-parley="noscript-client"`); got != clientWaits {
				t.Errorf("needs-JavaScript notice %v, want %v", got, clientWaits)
			}
			card, n := doc.One(`[data-parley="tool-call"]`)
			if n != 1 {
				t.Fatalf("cards = %d", n)
			}
			if id, _ := viewstest.Attr(card, "data-tool-call-id"); id != tc.call.ID {
				t.Errorf("data-tool-call-id = %q", id)
			}
			if st, _ := viewstest.Attr(card, "data-status"); st != tc.call.Status {
				t.Errorf("data-status = %q, want %q", st, tc.call.Status)
			}
			for _, s := range tc.want {
				if len(doc.All(s)) == 0 {
					t.Errorf("missing %s in %s", s, out)
				}
			}
			for _, s := range tc.none {
				if len(doc.All(s)) != 0 {
					t.Errorf("unexpected %s", s)
				}
			}
		})
	}
}

func TestApprovalCardShowsErrorsBesideFields(t *testing.T) {
	c := agent.CallView{ID: "a", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Status: "awaiting", PendingKind: tools.PendingApproval,
		Args: json.RawMessage(`{"to":"bob@example.com"}`), Plan: &tools.Plan{Summary: "s"}}
	p := page(owner())
	p.Form = &FormState{ToolCallID: "a", Values: map[string]string{"args": `{"to": 5}`, "reason": "r"}, Errors: map[string]string{"args": "/to: expected string"}}
	_, doc := render(t, ToolCallCard(p, c))
	e, n := doc.One(`[data-parley="field-error"][data-field="args"]`)
	if n != 1 || !strings.Contains(viewstest.Text(e), "expected string") {
		t.Fatalf("args error not shown beside the field")
	}
	ta, _ := doc.One(`textarea[name="args"]`)
	if viewstest.Text(ta) != `{"to": 5}` {
		t.Errorf("submitted args not kept: %q", viewstest.Text(ta))
	}
	if in, _ := doc.One(`input[name="reason"]`); in == nil {
		t.Fatal("no reason input")
	} else if v, _ := viewstest.Attr(in, "value"); v != "r" {
		t.Errorf("reason not kept: %q", v)
	}
}

// TestApprovalCardAtAGlance: Approve and Deny come first; Edit, Deny's reason and "always
// allow" are closed disclosures (no JavaScript needed) until the server sends back an error
// that belongs in one of them; the reason and the Deny button belong to Deny's own form.
func TestApprovalCardAtAGlance(t *testing.T) {
	c := agent.CallView{ID: "a", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Status: "awaiting", PendingKind: tools.PendingApproval,
		Args: json.RawMessage(`{"to":"bob@example.com"}`), Plan: &tools.Plan{Summary: "s"}}
	_, doc := render(t, ToolCallCard(page(owner()), c))
	// The decide row holds Approve first, then the disclosures with Deny's first.
	if b := doc.All(`[data-parley="decide"] button`); len(b) == 0 || viewstest.Text(b[0]) != "Approve" {
		t.Fatalf("the card's first control is not Approve")
	}
	if d := doc.All(`[data-parley="decide"] details`); len(d) == 0 {
		t.Fatalf("the card has no disclosures")
	} else if v, _ := viewstest.Attr(d[0], "data-parley"); v != "deny" {
		t.Fatalf("the card's second control is %q, not Deny", v)
	}
	deny, n := doc.One(`form[data-parley="deny-form"]`)
	if n != 1 {
		t.Fatalf("deny forms = %d, want 1", n)
	}
	denyID, _ := viewstest.Attr(deny, "id")
	for _, sel := range []string{`details[data-parley="deny"] input[name="reason"]`, `details[data-parley="deny"] button[name="decision"][value="deny"]`} {
		el, n := doc.One(sel)
		if n != 1 {
			t.Fatalf("%s: %d, want 1", sel, n)
		}
		if f, _ := viewstest.Attr(el, "form"); f != denyID {
			t.Errorf("%s belongs to form %q, want Deny's %q", sel, f, denyID)
		}
	}
	for _, sel := range []string{`details[data-parley="deny"]`, `details[data-parley="edit"]`} {
		if d, n := doc.One(sel); n != 1 {
			t.Errorf("%s: %d, want 1", sel, n)
		} else if _, open := viewstest.Attr(d, "open"); open {
			t.Errorf("%s is open on a fresh card", sel)
		}
	}
	if _, n := doc.One(`details[data-parley="edit"] [name="args"]`); n != 1 {
		t.Errorf("the arguments are not inside Edit")
	}

	// One deadline: on the card in the conversation, in the entry's head in the inbox.
	at := time.Date(2026, 11, 27, 9, 20, 0, 0, time.UTC)
	dc := c
	dc.ExpiresAt = &at
	for _, inbox := range []bool{false, true} {
		p := page(owner())
		p.Inbox = inbox
		_, doc := render(t, ApprovalCard(p, dc))
		want := 1
		if inbox {
			want = 0
		}
		if got := len(doc.All(`[data-parley="deadline"]`)); got != want {
			t.Errorf("inbox %v: the card says its deadline %d times, want %d", inbox, got, want)
		}
	}

	// An error opens the disclosure it belongs to.
	for field, sel := range map[string]string{"args": `details[data-parley="edit"][open]`, "reason": `details[data-parley="deny"][open]`} {
		p := page(owner())
		p.Form = &FormState{ToolCallID: "a", Errors: map[string]string{field: "bad"}}
		_, doc := render(t, ToolCallCard(p, c))
		if _, n := doc.One(sel); n != 1 {
			t.Errorf("an error of %s does not open %s", field, sel)
		}
	}
}

const formSchema = `{"type":"object","title":"About you","description":"We need a few details.","properties":{
 "name":{"type":"string","title":"Your name","description":"As on your passport"},
 "email":{"type":"string","format":"email"},
 "site":{"type":"string","format":"uri"},
 "born":{"type":"string","format":"date"},
 "meet":{"type":"string","format":"date-time"},
 "size":{"type":"string","enum":["s","m","l"],"enumNames":["Small","Medium","Large"]},
 "age":{"type":"integer","minimum":0,"maximum":150},
 "score":{"type":"number"},
 "subscribe":{"type":"boolean","title":"Subscribe","default":true}},
 "required":["name","email"]}`

func TestElicitationFormFromSchema(t *testing.T) {
	c := agent.CallView{ID: "q", Name: "ask_user", Executor: tools.Human, Status: "awaiting", PendingKind: tools.PendingElicitation,
		Prompt: &tools.Prompt{Message: "Tell me about you", Schema: json.RawMessage(formSchema)}}
	out, doc := render(t, ToolCallCard(page(owner()), c))
	assertInert(t, doc)
	form, n := doc.One(`form[data-parley="elicitation"]`)
	if n != 1 {
		t.Fatalf("elicitation forms = %d", n)
	}
	if m, _ := viewstest.Attr(form, "method"); m != "post" {
		t.Errorf("method = %q", m)
	}
	inputs := []struct{ sel string }{
		{`input[name="f.name"][type="text"][required]`},
		{`input[name="f.email"][type="email"][required]`},
		{`input[name="f.site"][type="url"]`},
		{`input[name="f.born"][type="date"]`},
		{`input[name="f.meet"][type="datetime-local"]`},
		{`select[name="f.size"] option[value="m"]`},
		{`input[name="f.age"][type="number"][step="1"][min="0"][max="150"]`},
		{`input[name="f.score"][type="number"][step="any"]`},
		{`input[name="f.subscribe"][type="checkbox"][checked]`},
		{`button[name="action"][value="accept"]`},
		{`button[name="action"][value="decline"]`},
		{`button[name="action"][value="cancel"]`},
	}
	for _, in := range inputs {
		if len(viewstest.In(form, in.sel)) != 1 {
			t.Errorf("missing %s", in.sel)
		}
	}
	if len(viewstest.In(form, `input[name="f.site"][required]`)) != 0 {
		t.Errorf("optional field marked required")
	}
	if got := len(viewstest.In(form, `[data-parley="required"]`)); got != 2 {
		t.Errorf("required marks = %d, want 2", got)
	}
	text := viewstest.Text(form)
	for _, s := range []string{"Your name", "As on your passport", "email", "Tell me about you", "Medium", "About you", "We need a few details."} {
		if !strings.Contains(text, s) {
			t.Errorf("form text lacks %q", s)
		}
	}
	// Properties keep the schema's order.
	var names []string
	for _, f := range viewstest.In(form, `[data-field]`) {
		if v, _ := viewstest.Attr(f, "data-field"); v != "" && f.Data == "div" {
			names = append(names, v)
		}
	}
	if strings.Join(names, ",") != "name,email,site,born,meet,size,age,score,subscribe" {
		t.Errorf("field order = %v", names)
	}
	_ = out
}

func TestElicitationFormKeepsValuesAndShowsErrors(t *testing.T) {
	c := agent.CallView{ID: "q", Name: "ask_user", Executor: tools.Human, Status: "awaiting", PendingKind: tools.PendingElicitation,
		Prompt: &tools.Prompt{Schema: json.RawMessage(formSchema)}}
	p := page(owner())
	p.Form = &FormState{ToolCallID: "q", Values: map[string]string{"name": "Ann", "email": "nope", "size": "l"},
		Errors: map[string]string{"email": "not a valid email", "": "fix the form"}}
	_, doc := render(t, ToolCallCard(p, c))
	if e, n := doc.One(`[data-field="email"] [data-parley="field-error"]`); n != 1 || !strings.Contains(viewstest.Text(e), "not a valid email") {
		t.Errorf("email error not beside its field")
	}
	if _, n := doc.One(`[data-parley="form-error"]`); n != 1 {
		t.Errorf("form-level error not shown")
	}
	if in, _ := doc.One(`input[name="f.name"]`); in == nil {
		t.Error("no name input")
	} else if v, _ := viewstest.Attr(in, "value"); v != "Ann" {
		t.Errorf("name value = %q", v)
	}
	if _, n := doc.One(`select[name="f.size"] option[value="l"][selected]`); n != 1 {
		t.Errorf("selected enum not kept")
	}
	if _, n := doc.One(`input[name="f.subscribe"][checked]`); n != 0 {
		t.Errorf("an unchecked submitted box came back checked")
	}
	// Another viewer (a reviewer) sees the question but cannot answer it.
	_, doc = render(t, ToolCallCard(page(reviewer()), c))
	if len(doc.All(`button[name="action"]`)) != 0 || len(doc.All(`[data-parley="waiting-for"]`)) != 1 {
		t.Errorf("a non-owner was offered the question's buttons")
	}
}

func TestElicitationFieldsAreNamespaced(t *testing.T) {
	schema := `{"type":"object","properties":{"action":{"type":"string"},"_csrf":{"type":"string"},"return":{"type":"string"},
	 "decision":{"type":"string","enum":["approve","deny"]},"agree":{"type":"boolean"},"name":{"type":"string"},"a b.c[d]é":{"type":"string"}}}`
	c := agent.CallView{ID: "q", Name: "ask_user", Executor: tools.Human, Status: "awaiting", PendingKind: tools.PendingElicitation,
		Prompt: &tools.Prompt{Schema: json.RawMessage(schema)}}
	_, doc := render(t, ToolCallCard(page(owner()), c))
	form, n := doc.One(`form[data-parley="elicitation"]`)
	if n != 1 {
		t.Fatalf("elicitation forms = %d", n)
	}
	for _, field := range viewstest.In(form, `div[data-field]`) {
		prop, _ := viewstest.Attr(field, "data-field")
		controls := append(viewstest.In(field, "input"), viewstest.In(field, "select")...)
		if len(controls) != 1 {
			t.Errorf("field %q has %d controls", prop, len(controls))
			continue
		}
		if name, _ := viewstest.Attr(controls[0], "name"); name != "f."+prop {
			t.Errorf("field %q is named %q, want %q", prop, name, "f."+prop)
		}
	}
	// The form's own fields keep their names and are the only ones that carry them.
	names := map[string]int{}
	for _, el := range viewstest.In(form, "[name]") {
		name, _ := viewstest.Attr(el, "name")
		names[name]++
	}
	want := map[string]int{"_csrf": 1, "action": 3, "f.action": 1, "f._csrf": 1, "f.return": 1, "f.decision": 1,
		"f.agree": 1, "f.name": 1, "f.a b.c[d]é": 1}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("form names = %v\nwant         %v", names, want)
	}
	if len(viewstest.In(form, `button[name="action"][value="accept"]`)) != 1 {
		t.Errorf("no Submit button named action")
	}
}

func TestInboxListsEachApproval(t *testing.T) {
	mk := func(id, conv, title, who string) InboxEntry {
		return InboxEntry{Requester: who, PendingApproval: agent.PendingApproval{ConversationID: conv, Title: title, OwnerID: "u-" + who,
			Call: agent.CallView{ID: id, Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer,
				Status: "awaiting", PendingKind: tools.PendingApproval, Args: json.RawMessage(`{}`), Plan: &tools.Plan{Summary: "s"}}}}
	}
	d := InboxPage{CSRF: "tok", Viewer: reviewer(), Entries: []InboxEntry{mk("n2", "c2", "Newer", "bob"), mk("n1", "c1", "Older <b>", "ann")}}
	_, doc := render(t, InboxBody(d))
	assertInert(t, doc)
	inbox, n := doc.One(`[data-parley="inbox"]`)
	if n != 1 {
		t.Fatalf("inbox = %d", n)
	}
	cards := viewstest.In(inbox, `[data-parley="approval"]`)
	if len(cards) != 2 {
		t.Fatalf("approvals = %d", len(cards))
	}
	if id, _ := viewstest.Attr(cards[0], "data-tool-call-id"); id != "n2" {
		t.Errorf("first approval = %q, want the newest (the handler's order)", id)
	}
	entries := doc.All(`[data-parley="inbox-entry"]`)
	if txt := viewstest.Text(entries[1]); !strings.Contains(txt, "Older <b>") || !strings.Contains(txt, "ann") {
		t.Errorf("entry lacks title or requester: %q", txt)
	}
	// Both of the card's forms (approve, deny) post there and come back to the inbox.
	if _, n := doc.One(`[data-parley="inbox-entry"][data-tool-call-id="n1"] form[action="/conversations/c1/calls/n1/resolve"] input[name="return"][value="/inbox"]`); n != 2 {
		t.Errorf("inbox decision does not post to the conversation's resolve with return=/inbox (%d forms, want approve and deny)", n)
	}
	_, doc = render(t, InboxBody(InboxPage{Viewer: reviewer()}))
	if _, n := doc.One(`[data-parley="inbox"] [data-parley="inbox-empty"]`); n != 1 {
		t.Errorf("empty inbox not said")
	}
	if _, n := doc.One(`[data-parley="inbox-try"]`); n != 0 {
		t.Errorf("an inbox without the demo's deploy tool says how to try it")
	}
	_, doc = render(t, InboxBody(InboxPage{Viewer: reviewer(), ReviewedTools: []string{"deploy", "transfer_funds"}}))
	explain, _ := doc.One(`[data-parley="inbox-empty"] [data-parley="inbox-explain"]`)
	if txt := viewstest.Text(explain); !strings.Contains(txt, "need a reviewer") || !strings.Contains(txt, "deploy, transfer_funds") {
		t.Errorf("empty inbox does not say what arrives there: %q", txt)
	}
	try, _ := doc.One(`[data-parley="inbox-try"]`)
	if txt := viewstest.Text(try); !strings.Contains(txt, "deploy the website") {
		t.Errorf("empty inbox does not say how to try it: %q", txt)
	}
}

func TestConversationPageFrame(t *testing.T) {
	v := agent.View{ID: "c1", Title: "Lunch", Status: "generating", Streaming: "Hel", LastError: ""}
	p := page(owner())
	p.Demo = true
	_, doc := render(t, ConversationBody(ConversationPage{Page: p, View: v}))
	assertInert(t, doc)
	for _, s := range []string{
		`form[data-parley="composer"][method="post"][action="/conversations/c1/messages"] textarea[name="text"]`,
		`form[data-parley="composer"] input[name="_csrf"][value="tok"]`,
		`[data-parley="demo-banner"]`,
		`[data-parley="status"][data-status="generating"]`,
		`div[id="streaming"][data-parley="streaming"]`,
		`[data-parley="conversation"][data-ws="/conversations/c1/ws"]`,
	} {
		if _, n := doc.One(s); n != 1 {
			t.Errorf("%s matched %d times", s, n)
		}
	}
	if s, _ := doc.One(`[data-parley="message-streaming"] [class="message-body markdown"]`); viewstest.Text(s) != "Hel" {
		t.Errorf("streaming text = %q", viewstest.Text(s))
	}
	p.Demo = false
	_, doc = render(t, ConversationBody(ConversationPage{Page: p, View: v}))
	if len(doc.All(`[data-parley="demo-banner"]`)) != 0 {
		t.Errorf("demo banner shown for a real model")
	}
}

func TestConversationsList(t *testing.T) {
	d := ConversationsPage{CSRF: "tok", Conversations: []agent.Summary{{ID: "a", Title: "First", Status: "idle"}, {ID: "b", Status: "awaiting"}}}
	_, doc := render(t, ConversationsBody(d))
	assertInert(t, doc)
	if _, n := doc.One(`form[data-parley="new-conversation"][method="post"][action="/conversations"] input[name="_csrf"][value="tok"]`); n != 1 {
		t.Errorf("new-conversation form missing")
	}
	links := doc.All(`[data-parley="conversation-link"] a`)
	if len(links) != 2 {
		t.Fatalf("links = %d", len(links))
	}
	if h, _ := viewstest.Attr(links[1], "href"); h != "/conversations/b" || viewstest.Text(links[1]) != "New conversation" {
		t.Errorf("untitled link = %q %q", h, viewstest.Text(links[1]))
	}
}

func TestTimelineInterleavesByLogOrderAndRevTracksContent(t *testing.T) {
	v := agent.View{ID: "c1",
		Messages: []agent.Message{{Seq: 1, Role: "user", Content: "hi"}, {Seq: 4, Role: "assistant", Content: "done"}},
		Calls:    []agent.CallView{{Seq: 2, ID: "t1", Name: "get_current_time", Executor: tools.Server, Status: "running"}}}
	_, doc := render(t, ConversationBody(ConversationPage{Page: page(owner()), View: v}))
	items := doc.All(`[id="timeline"] [data-rev]`)
	var ids []string
	for _, it := range items {
		id, _ := viewstest.Attr(it, "id")
		ids = append(ids, id)
	}
	if strings.Join(ids, ",") != "msg-1,call-t1,msg-4" {
		t.Errorf("timeline order = %v", ids)
	}
	rev := func(c agent.CallView) string {
		_, d := render(t, TimelineItem(page(owner()), Item{Seq: c.Seq, Call: &c}))
		n, _ := d.One(`[data-rev]`)
		r, _ := viewstest.Attr(n, "data-rev")
		return r
	}
	a := v.Calls[0]
	b := a
	b.Status = "resolved"
	if first, again := rev(a), rev(a); first != again || first == rev(b) {
		t.Errorf("data-rev must be stable for equal content and change with it")
	}
}

func TestDecisionNamesWhoDecidedNeverTheirID(t *testing.T) {
	c := agent.CallView{ID: "c", Name: "send_email", Executor: tools.Server, Status: "resolved", Decision: "approve_edited", DecidedBy: "u9",
		Result: json.RawMessage(`{"ok":true,"result":{}}`)}
	tests := []struct {
		names map[string]string
		by    string
		want  string
	}{
		{map[string]string{"u9": "bob"}, "u9", "Edited and approved by bob"},
		{nil, "u9", "Edited and approved by another user"},
		{nil, "system", "Edited and approved"},
	}
	for _, tc := range tests {
		c.DecidedBy = tc.by
		p := page(owner())
		p.Names = tc.names
		_, doc := render(t, ToolCallCard(p, c))
		d, _ := doc.One(`[data-parley="decision"]`)
		if d == nil || viewstest.Text(d) != tc.want {
			t.Errorf("decision by %s = %v, want %q", tc.by, d, tc.want)
		}
	}
}

func TestMarkdownCacheEvictsLeastRecentlyUsed(t *testing.T) {
	c := newLRU(2, 1<<20)
	c.put("a", "A")
	c.put("b", "B")
	if v, ok := c.get("a"); !ok || v != "A" {
		t.Fatal("a missing")
	}
	c.put("c", "C") // evicts b, the least recently used
	if _, ok := c.get("b"); ok {
		t.Error("b survived eviction")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s evicted", k)
		}
	}
	if RenderMarkdown("**x** <script>") != renderMarkdown("**x** <script>") {
		t.Error("cached render differs from a fresh one")
	}
}

// The Markdown cache is bounded in bytes as well as entries: entries are evicted, least
// recently used first, until the sources and HTML kept fit, and one larger than a sixteenth of
// the bound is not kept at all.
func TestMarkdownCacheIsBoundedInBytes(t *testing.T) {
	c := newLRU(100, 1600) // entries of at most 100 bytes
	val := strings.Repeat("h", 91)
	for i := range 20 {
		c.put("k"+strconv.Itoa(100000000 + i)[1:], val) // 100 bytes each: 16 fit
	}
	if c.bytes > 1600 || c.order.Len() != 16 {
		t.Fatalf("%d entries, %d bytes kept; want 16 within 1600", c.order.Len(), c.bytes)
	}
	if _, ok := c.get("k00000003"); ok {
		t.Error("an old entry survived the byte bound")
	}
	if _, ok := c.get("k00000019"); !ok {
		t.Error("the newest entry was evicted")
	}
	c.put("big", strings.Repeat("h", 98)) // 101 bytes: over a sixteenth
	if _, ok := c.get("big"); ok {
		t.Error("an entry over a sixteenth of the bound was cached")
	}
	if c.order.Len() != 16 {
		t.Errorf("an uncached entry evicted others: %d left", c.order.Len())
	}
	if mdCache.maxBytes != 32<<20 {
		t.Errorf("the render cache keeps %d bytes, want 32 MiB", mdCache.maxBytes)
	}
	huge := strings.Repeat("word ", (32<<20)/16/5+1)
	if RenderMarkdown(huge) == "" {
		t.Fatal("nothing rendered")
	}
	if _, ok := mdCache.get(huge); ok {
		t.Error("a message over 2 MiB was cached")
	}
}

func TestQuestionKeepsTheOrderOfTheCallsArguments(t *testing.T) {
	// The prompt's schema arrives with sorted keys; the arguments keep the model's order.
	sorted := json.RawMessage(`{"type":"object","properties":{"age":{"type":"integer"},"name":{"type":"string"},"zip":{"type":"string"}}}`)
	args := json.RawMessage(`{"message":"hi","schema":{"type":"object","properties":{"name":{"type":"string"},"zip":{"type":"string"},"age":{"type":"integer"}}}}`)
	c := agent.CallView{ID: "q", Name: "ask_user", Executor: tools.Human, Status: "awaiting", PendingKind: tools.PendingElicitation,
		Args: args, Prompt: &tools.Prompt{Schema: sorted}}
	_, doc := render(t, ToolCallCard(page(owner()), c))
	var names []string
	for _, f := range doc.All(`div[data-field]`) {
		v, _ := viewstest.Attr(f, "data-field")
		names = append(names, v)
	}
	if strings.Join(names, ",") != "name,zip,age" {
		t.Errorf("field order = %v, want the arguments' order", names)
	}
	// Arguments without a schema (a tool with its own response schema) leave the schema's order.
	c.Args = json.RawMessage(`{"message":"hi"}`)
	_, doc = render(t, ToolCallCard(page(owner()), c))
	names = nil
	for _, f := range doc.All(`div[data-field]`) {
		v, _ := viewstest.Attr(f, "data-field")
		names = append(names, v)
	}
	if strings.Join(names, ",") != "age,name,zip" {
		t.Errorf("field order = %v, want the schema's", names)
	}
}

func TestPrettyJSONShowsHTMLCharactersAsThemselves(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"a":"\u003cb\u003e \u0026"}`, "{\n  \"a\": \"<b> &\"\n}"},
		{`{"a":"\\u003c"}`, "{\n  \"a\": \"\\\\u003c\"\n}"}, // a backslash, then the text u003c
		{`{"a":"\\\u003c"}`, "{\n  \"a\": \"\\\\<\"\n}"},    // a backslash, then <
		{`{"a":"\u00e9\"\n"}`, "{\n  \"a\": \"\\u00e9\\\"\\n\"\n}"},
		{`not json <x>`, `not json <x>`},
	}
	for _, tc := range tests {
		if got := prettyJSON(json.RawMessage(tc.in)); got != tc.want {
			t.Errorf("prettyJSON(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStatusLineSaysWhatTheTurnWaitsForAndOffersStop(t *testing.T) {
	approval := agent.CallView{ID: "a", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByOwner,
		Status: "awaiting", PendingKind: tools.PendingApproval}
	wire := agent.CallView{ID: "w", Name: "wire", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer,
		Status: "awaiting", PendingKind: tools.PendingApproval}
	awaiting := func(calls ...agent.CallView) agent.View {
		return agent.View{Status: agent.StatusAwaiting, Calls: calls} // each call awaits
	}
	tests := []struct {
		name  string
		who   Viewer
		v     agent.View
		words string
		stop  bool
	}{
		{"idle says nothing", owner(), agent.View{Status: agent.StatusIdle}, "", false},
		{"generating", owner(), agent.View{Status: agent.StatusGenerating}, "Working…", true},
		{"running tools", owner(), agent.View{Status: agent.StatusDispatching}, "Running tools…", true},
		{"the owner's approval", owner(), awaiting(approval), "Waiting for your answer.", true},
		{"a reviewer's approval, seen by the owner", owner(), awaiting(wire), "Waiting for a reviewer.", true},
		{"a reviewer's approval, seen by the reviewer", reviewer(), awaiting(wire), "Waiting for your answer.", false},
		{"the owner's approval, seen by a reviewer", reviewer(), awaiting(approval), "Waiting for the conversation's owner.", false},
	}
	for _, tc := range tests {
		p := page(tc.who)
		p.OwnerID = owner().UserID
		html, doc := render(t, StatusLine(p, tc.v))
		// Without JavaScript nothing follows the turn: the page says to reload while the
		// assistant works (and only then: a wait for a person needs no reload to answer it).
		working := tc.v.Status == agent.StatusGenerating || tc.v.Status == agent.StatusDispatching
		if got := strings.Contains(html, `<noscript><span class="noscript-notice" data-parley="noscript-reload">`); got != working {
			t.Errorf("%s: reload notice for pages without JavaScript %v, want %v", tc.name, got, working)
		}
		words, _ := doc.One(`[data-parley="status-text"]`)
		if words == nil || viewstest.Text(words) != tc.words {
			t.Errorf("%s: words %v, want %q", tc.name, words, tc.words)
		}
		if got := len(doc.All(`form[data-parley="stop"][method="post"] button`)) == 1; got != tc.stop {
			t.Errorf("%s: stop button %v, want %v", tc.name, got, tc.stop)
		}
	}
	v := agent.View{Status: agent.StatusGenerating, Queued: []agent.Message{{Seq: 9, Role: "user", Content: "<b>next</b>", Queued: true}}}
	html, doc := render(t, StatusLine(page(owner()), v))
	if q, _ := doc.One(`[data-parley="queued"] [data-role="user"][data-queued="true"]`); q == nil || !strings.Contains(html, "&lt;b&gt;next") {
		t.Errorf("the queued message is not shown, escaped: %s", html)
	}
}

func TestURLQuestionShowsTheLinkAsTextWithItsHost(t *testing.T) {
	link := `https://auth.example.test/authorize?x=1&next=<script>`
	c := agent.CallView{ID: "q", Name: "m__ask_url", Executor: tools.Server, Status: "awaiting", PendingKind: tools.PendingElicitation,
		Prompt: &tools.Prompt{Message: "Authorize the test app", Schema: json.RawMessage(`{"type":"object","properties":{}}`), URL: link}}
	_, doc := render(t, ToolCallCard(page(owner()), c))
	assertInert(t, doc)
	form, n := doc.One(`form[data-parley="elicitation"][data-mode="url"]`)
	if n != 1 {
		t.Fatalf("url question forms = %d", n)
	}
	if a, _ := viewstest.Attr(form, "action"); a != "/conversations/c1/calls/q/resolve" {
		t.Errorf("action = %q", a)
	}
	host, _ := doc.One(`[data-parley="url-host"]`)
	if got := viewstest.Text(host); got != "auth.example.test" {
		t.Errorf("host = %q", got)
	}
	text, _ := doc.One(`code[data-parley="url-text"]`)
	if got := viewstest.Text(text); got != link {
		t.Errorf("link text = %q", got)
	}
	open, n := doc.One(`a[data-parley="url-open"]`)
	if n != 1 {
		t.Fatalf("open links = %d", n)
	}
	for k, want := range map[string]string{"href": link, "target": "_blank", "rel": "noopener noreferrer"} {
		if v, _ := viewstest.Attr(open, k); v != want {
			t.Errorf("open link %s = %q, want %q", k, v, want)
		}
	}
	for _, sel := range []string{`button[name="action"][value="accept"]`, `button[name="action"][value="cancel"]`, `button[name="action"][value="decline"]`} {
		if len(viewstest.In(form, sel)) != 1 {
			t.Errorf("missing %s", sel)
		}
	}
	if got := strings.TrimSpace(viewstest.Text(viewstest.In(form, `button[value="accept"]`)[0])); got != "Done" {
		t.Errorf("accept button says %q", got)
	}
	if len(viewstest.In(form, `input[name^="f."]`)) != 0 {
		t.Errorf("a URL question has form fields")
	}
	// A reviewer looking on sees the link but may not open it from here or answer.
	_, doc = render(t, ToolCallCard(page(reviewer()), c))
	if _, n := doc.One(`a[data-parley="url-open"]`); n != 0 {
		t.Errorf("a reviewer got the Open link")
	}
	if _, n := doc.One(`[data-parley="waiting-for"]`); n != 1 {
		t.Errorf("a reviewer is not told it waits for the owner")
	}
	// A link that is not http(s) is never made live, even if a view model carried one.
	c.Prompt.URL = "javascript:alert(1)"
	_, doc = render(t, ToolCallCard(page(owner()), c))
	assertInert(t, doc)
}

// TestStreamingRendersMarkdownSafely: the streaming bubble is the logged message's bubble, its
// text rendered by the same rule (Markdown through the sanitizer), hostile HTML shown as text.
func TestStreamingRendersMarkdownSafely(t *testing.T) {
	src := "Some **bold** and <script>alert(1)</script> [x](javascript:alert(1))\n\n| a | b |\n|---|---|\n| 1 | 2 |"
	var b strings.Builder
	if err := Streaming(src).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{`data-parley="message-streaming"`, `class="message-body markdown"`, "<strong>bold</strong>", "&lt;script&gt;", "<table>"} {
		if !strings.Contains(got, want) {
			t.Errorf("streaming render lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"<script", "javascript:"} {
		if strings.Contains(got, bad) {
			t.Errorf("streaming render holds %q:\n%s", bad, got)
		}
	}
	if !strings.Contains(got, RenderMarkdown(src)) {
		t.Errorf("the streaming render differs from the logged message's")
	}
	b.Reset()
	if err := Streaming("").Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "<article") || !strings.Contains(b.String(), "streaming-empty") {
		t.Errorf("empty streaming area = %s", b.String())
	}
}

// TestSnippetParts: an excerpt splits at its markers; stray or unpaired markers never reach the
// text, and a highlight without its end runs to the end.
func TestSnippetParts(t *testing.T) {
	m, e := agent.SnippetMark, agent.SnippetEnd
	for _, tc := range []struct {
		in   string
		want []SnippetPart
	}{
		{"plain", []SnippetPart{{"plain", false}}},
		{"a " + m + "b" + e + " c", []SnippetPart{{"a ", false}, {"b", true}, {" c", false}}},
		{m + "x" + e + m + "y" + e, []SnippetPart{{"x", true}, {"y", true}}},
		{"stray" + e + " " + m + "open", []SnippetPart{{"stray ", false}, {"open", true}}},
		{m + e + "<b>", []SnippetPart{{"<b>", false}}},
	} {
		if got := SnippetParts(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("SnippetParts(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// TestURLHostIsShownAsTheAddressBarShowsIt: look-alike letters are shown in punycode.
func TestURLHostIsShownAsTheAddressBarShowsIt(t *testing.T) {
	for raw, want := range map[string]string{
		"https://аррle.com/login":        "xn--le-6kc8da.com",
		"https://Example.COM:8443/x":     "example.com:8443",
		"http://127.0.0.1:8080/callback": "127.0.0.1:8080",
	} {
		if got := urlHost(raw); got != want {
			t.Errorf("urlHost(%q) = %q, want %q", raw, got, want)
		}
	}
}
