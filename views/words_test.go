package views

import (
	"encoding/json"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"parley/internal/agent"
	"parley/internal/tools"
	"parley/views/viewstest"
)

const emailSchema = `{"type":"object","properties":{"to":{"type":"string","format":"email","title":"To"},"subject":{"type":"string"},"body":{"type":"string"},"urgent":{"type":"boolean"},"copies":{"type":"integer"}},"required":["to","subject","body"]}`

func TestResultInWords(t *testing.T) {
	cases := []struct {
		name, raw string
		rows      []kv
		text      string
		ok        bool
	}{
		{"object of scalars, in its own order", `{"time":"Tuesday, 09:00","time_zone":"UTC","ok":true,"n":3}`,
			[]kv{{"Time", "Tuesday, 09:00"}, {"Time zone", "UTC"}, {"Ok", "yes"}, {"N", "3"}}, "", true},
		{"a list of scalars on one row", `{"tags":["a","b",1,null]}`, []kv{{"Tags", "a, b, 1, —"}}, "", true},
		{"text", `"sent to bob"`, nil, "sent to bob", true},
		{"a number", `42`, nil, "42", true},
		{"nested: JSON says it better", `{"a":{"b":1}}`, nil, "", false},
		{"a list of objects", `[{"a":1}]`, nil, "", false},
		{"empty object", `{}`, nil, "", false},
	}
	for _, c := range cases {
		w, ok := wordsFor(json.RawMessage(c.raw))
		if ok != c.ok || w.Text != c.text || (c.rows != nil && !equalRows(w.Rows, c.rows)) {
			t.Errorf("%s: wordsFor(%s) = %+v, %v", c.name, c.raw, w, ok)
		}
	}
	// Bounded: long values are cut, rows past the cap are counted.
	long := map[string]any{"v": strings.Repeat("x", 5000)}
	for i := range 40 {
		long["k"+strings.Repeat("z", i)] = i
	}
	raw, _ := json.Marshal(long)
	w, ok := wordsFor(raw)
	if !ok || len(w.Rows) != maxRows || w.More != 41-maxRows {
		t.Fatalf("a big result: %d rows, %d more, %v", len(w.Rows), w.More, ok)
	}
	for _, r := range w.Rows {
		if len([]rune(r.V)) > maxValueText {
			t.Errorf("row %s is %d characters", r.K, len([]rune(r.V)))
		}
	}
}

func equalRows(a, b []kv) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestPlanRowsFollowTheSchema(t *testing.T) {
	p := &tools.Plan{Summary: "s", Details: map[string]any{"body": "b", "to": "t", "subject": "s", "arguments": "x", "effect": "e", "after": 1}}
	rows := planRows(p, json.RawMessage(emailSchema))
	var keys []string
	for _, r := range rows {
		keys = append(keys, r.K)
	}
	if got := strings.Join(keys, ","); got != "To,Subject,Body,After,Effect" {
		t.Fatalf("plan rows in the order %s, want the schema's then the rest by name", got)
	}
}

func TestApprovalCardArgumentFields(t *testing.T) {
	call := agent.CallView{ID: "a1", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByOwner,
		Status: "awaiting", PendingKind: tools.PendingApproval, Schema: json.RawMessage(emailSchema),
		Args: json.RawMessage(`{"to":"bob@example.com","subject":"<b>lunch</b>","body":"See you\nat noon"}`),
		Plan: &tools.Plan{Summary: "Send an email", Details: map[string]any{"body": "b", "to": "t"}}}
	_, doc := render(t, ToolCallCard(page(owner()), call))
	assertInert(t, doc)
	if len(doc.All(`textarea[name="args"]`)) != 0 {
		t.Errorf("a flat schema still offers JSON")
	}
	if _, n := doc.One(`[data-parley="args-form"] input[type="email"][name="arg.to"][value="bob@example.com"]`); n != 1 {
		t.Errorf("no email field for to")
	}
	if el, n := doc.One(`[data-parley="args-form"] input[name="arg.subject"]`); n != 1 {
		t.Errorf("no subject field")
	} else if v, _ := viewstest.Attr(el, "value"); v != "<b>lunch</b>" {
		t.Errorf("subject value %q", v)
	}
	if el, n := doc.One(`[data-parley="args-form"] textarea[name="arg.body"]`); n != 1 || viewstest.Text(el) != "See you at noon" {
		t.Errorf("a multi-line body is not a text area with its text")
	}
	if _, n := doc.One(`[data-parley="args-form"] input[type="checkbox"][name="arg.urgent"]`); n != 1 {
		t.Errorf("no checkbox for a boolean")
	}
	if _, n := doc.One(`input[type="hidden"][name="args_form"][value="1"]`); n != 1 {
		t.Errorf("no args_form marker")
	}
	var labels []string
	for _, dt := range doc.All(`[data-parley="plan"] dt`) {
		labels = append(labels, viewstest.Text(dt))
	}
	if strings.Join(labels, ",") != "To,Body" {
		t.Errorf("plan labels %v, want the schema's order", labels)
	}
	if badge, _ := doc.One(`[data-parley="call-status"]`); badge == nil || viewstest.Text(badge) != "needs approval" {
		t.Errorf("the header's badge does not say what the card waits for")
	}
	if hdr, _ := doc.One(`header[class="tool-call-head"]`); hdr == nil || viewstest.Text(hdr) != "send_email needs approval" {
		t.Errorf("the card's header says more than the tool and what it waits for: %q", viewstest.Text(hdr))
	}

	// A schema with a nested property: the arguments stay JSON.
	nested := call
	nested.Schema = json.RawMessage(`{"type":"object","properties":{"to":{"type":"array","items":{"type":"string"}}}}`)
	_, doc = render(t, ToolCallCard(page(owner()), nested))
	if len(doc.All(`textarea[name="args"]`)) != 1 || len(doc.All(`[data-parley="args-form"]`)) != 0 {
		t.Errorf("a nested schema does not fall back to JSON")
	}

	// After it ran: the plan stays ("What was approved"), the result is in words, its JSON folded.
	done := call
	done.Status, done.PendingKind, done.Decision, done.DecidedBy = "resolved", "", "approve", "u1"
	done.Result = json.RawMessage(`{"ok":true,"result":{"status":"queued","message_id":"<m1@x>"}}`)
	_, doc = render(t, ToolCallCard(page(owner()), done))
	assertInert(t, doc)
	if el, n := doc.One(`[data-parley="plan"] p[class="plan-heading"]`); n != 1 || viewstest.Text(el) != "What was approved" {
		t.Errorf("the approved plan is gone after the call ran")
	}
	var rows []string
	for _, dd := range doc.All(`[data-parley="result-rows"] dd`) {
		rows = append(rows, viewstest.Text(dd))
	}
	if strings.Join(rows, "|") != "queued|<m1@x>" {
		t.Errorf("result rows %v", rows)
	}
	if el, n := doc.One(`[data-parley="result"] details[class="tool-json"]`); n != 1 || el == nil {
		t.Errorf("the result's JSON is not folded beneath")
	}
	if el, _ := doc.One(`[data-parley="call-status"]`); el == nil || viewstest.Text(el) != "done" {
		t.Errorf("finished badge %v", el)
	}
}

// TestAnswerAndHTTPResultInWords: a question's answer reads "You answered:" (or the answerer's
// name to anyone else) with each field's title and the value given, an enum by its label; an
// HTTP tool's result reads "200 OK" with its body folded; in both the JSON is only behind a
// toggle (issue 27, item 10).
func TestAnswerAndHTTPResultInWords(t *testing.T) {
	schema := `{"type":"object","properties":{"name":{"type":"string","title":"Your name"},"size":{"type":"string","title":"Size","enum":["s","l"],"enumNames":["Small","Large"]},"age":{"type":"integer"}}}`
	q := agent.CallView{ID: "q", Name: "ask_user", Executor: tools.Human, Status: "resolved", PendingKind: tools.PendingElicitation,
		Decision: "accept", DecidedBy: "u1", Prompt: &tools.Prompt{Message: "Who?", Schema: json.RawMessage(schema)},
		Result: json.RawMessage(`{"ok":true,"result":{"action":"accept","content":{"age":41,"name":"Ann","size":"l"}}}`)}
	for _, tc := range []struct {
		viewer Viewer
		says   string
	}{{owner(), "You answered:"}, {reviewer(), "ann answered:"}} {
		p := page(tc.viewer)
		p.Names = map[string]string{"u1": "ann"}
		_, doc := render(t, ToolCallCard(p, q))
		assertInert(t, doc)
		if d, n := doc.One(`[data-parley="answer"] [data-parley="decision"]`); n != 1 || viewstest.Text(d) != tc.says {
			t.Errorf("%s sees the answer introduced as %q, want %q", tc.viewer.Name, textOf(d), tc.says)
		}
		if n := len(doc.All(`[data-parley="decision"]`)); n != 1 {
			t.Errorf("%d decision lines, want one", n)
		}
		want := []kv{{"Your name", "Ann"}, {"Size", "Large"}, {"age", "41"}}
		if got := dlRows(doc, `[data-parley="answer-rows"]`); !equalRows(got, want) {
			t.Errorf("answer rows = %v, want %v", got, want)
		}
		assertJSONFolded(t, doc, `[data-parley="answer"]`)
	}

	for _, tc := range []struct{ name, result string }{
		{"a tools-file action", `{"http_response":{"status":200,"headers":{"content-type":"application/json"},"trailers":{},"body":{"id":7,"state":"open"},"body_truncated":false}}`},
		{"the bare response", `{"status":200,"headers":{},"body":"{\"id\":7,\"state\":\"open\"}","body_truncated":false}`},
	} {
		c := agent.CallView{ID: "h", Name: "create_issue", Executor: tools.Server, Status: "resolved",
			Result: json.RawMessage(`{"ok":true,"result":` + tc.result + `}`)}
		_, doc := render(t, ToolCallCard(page(owner()), c))
		if s, n := doc.One(`[data-parley="result"][data-kind="http"] [data-parley="http-status"]`); n != 1 || viewstest.Text(s) != "200 OK" {
			t.Errorf("%s: status line %q, want 200 OK", tc.name, textOf(s))
		}
		body, n := doc.One(`details[data-parley="http-body"]`)
		if n != 1 {
			t.Fatalf("%s: no folded body", tc.name)
		}
		if _, open := viewstest.Attr(body, "open"); open || !strings.Contains(viewstest.Text(body), `"state": "open"`) {
			t.Errorf("%s: the body is open or not pretty-printed: %q", tc.name, viewstest.Text(body))
		}
		assertJSONFolded(t, doc, `[data-parley="result"]`)
	}
	// A "status" that is not an HTTP response keeps the ordinary rows.
	c := agent.CallView{ID: "d", Name: "deploy", Executor: tools.Server, Status: "resolved",
		Result: json.RawMessage(`{"ok":true,"result":{"service":"web","status":"deployed"}}`)}
	if _, doc := render(t, ToolCallCard(page(owner()), c)); len(doc.All(`[data-parley="result-rows"]`)) != 1 || len(doc.All(`[data-kind="http"]`)) != 0 {
		t.Error("a deploy result read as an HTTP response")
	}
}

// assertJSONFolded fails unless the only JSON inside sel is in a closed <details>.
func assertJSONFolded(t *testing.T, doc *viewstest.Doc, sel string) {
	t.Helper()
	toggle, n := doc.One(sel + ` details[data-parley="json"]`)
	if n != 1 {
		t.Fatalf("no JSON toggle in %s", sel)
	}
	if _, open := viewstest.Attr(toggle, "open"); open {
		t.Errorf("the JSON toggle in %s is open", sel)
	}
	for _, pre := range doc.All(sel + ` pre`) {
		if strings.Contains(viewstest.Text(pre), `"ok"`) || strings.Contains(viewstest.Text(pre), `"action"`) {
			if !inside(pre, toggle) {
				t.Errorf("JSON outside the toggle: %q", viewstest.Text(pre))
			}
		}
	}
}

func inside(n, ancestor *html.Node) bool {
	for ; n != nil; n = n.Parent {
		if n == ancestor {
			return true
		}
	}
	return false
}

func textOf(n *html.Node) string {
	if n == nil {
		return "<none>"
	}
	return viewstest.Text(n)
}

// dlRows reads the <dt>/<dd> pairs of the first <dl> matching sel.
func dlRows(doc *viewstest.Doc, sel string) []kv {
	dl, n := doc.One(sel)
	if n == 0 {
		return nil
	}
	var out []kv
	for c := dl.FirstChild; c != nil; c = c.NextSibling {
		switch c.Data {
		case "dt":
			out = append(out, kv{K: strings.TrimSpace(viewstest.Text(c))})
		case "dd":
			if len(out) > 0 {
				out[len(out)-1].V = strings.TrimSpace(viewstest.Text(c))
			}
		}
	}
	return out
}
