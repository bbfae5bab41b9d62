package views

import (
	"encoding/json"
	"strings"
	"testing"

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
