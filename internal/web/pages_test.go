package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"parley/internal/agent"
	"parley/internal/llm"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views"
	"parley/views/viewstest"
)

func TestConversationPagesOwnerOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{DemoModel: true})
		ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
		rev := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		tests := []struct {
			name string
			c    *client
			want int
		}{
			{"owner", e.browser(ann), http.StatusOK},
			{"other member", e.browser(bob), http.StatusNotFound},
			{"reviewer with nothing to decide", e.browser(rev), http.StatusNotFound},
			{"anonymous", e.anon(), http.StatusSeeOther},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				for _, path := range []string{"/conversations/" + conv.ID, "/conversations/" + conv.ID + "/ws"} {
					res := tc.c.do("GET", path, "", nil)
					body := readBody(res)
					want := tc.want
					if want == http.StatusOK && strings.HasSuffix(path, "/ws") {
						want = http.StatusUpgradeRequired // authorized, but a plain GET is no WebSocket handshake
					}
					if res.StatusCode != want {
						t.Fatalf("GET %s = %d, want %d", path, res.StatusCode, want)
					}
					if tc.want == http.StatusOK && !strings.Contains(path, "/ws") {
						doc := viewstest.MustParse(body)
						if _, n := doc.One(`form[data-parley="composer"] textarea[name="text"]`); n != 1 {
							t.Errorf("no composer")
						}
						if _, n := doc.One(`[data-parley="demo-banner"]`); n != 1 {
							t.Errorf("no demo banner")
						}
					}
				}
			})
		}
	})
}

// TestReviewerSeesConversationReadOnly: someone who may decide one of a conversation's calls
// while it awaits them (a reviewer, for a pending reviewer-gated call) reads the conversation,
// on the page and through the API, read-only: the reviewer-gated call's card offers its
// buttons, the owner-approved call's card offers none, and the question's inputs are the
// owner's alone. Once decided, nothing awaits the reviewer there: 404, as for a member with no
// call to decide, and a reviewer where every gated call is the owner's.
func TestReviewerSeesConversationReadOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv, owners := e.conversation(ann), e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}),
			llmtest.Call("mine", "send_email", emailArgs("bob@example.com")),
			llmtest.Call("ask", "ask_user", questionArgs("Who are you?", questionSchema)))
		e.pending(owners, ann, llmtest.Call("own", "send_email", emailArgs("bob@example.com")))
		r := e.browser(rita)
		page := "/conversations/" + conv.ID
		check := func(when string) {
			t.Helper()
			res := r.do("GET", page, "", nil)
			body := readBody(res)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("%s: the reviewer's page = %d", when, res.StatusCode)
			}
			doc := viewstest.MustParse(body)
			gateButtons := doc.All(`[data-tool-call-id="gate"] [data-parley="approval"] button[name="decision"]`)
			if len(gateButtons) != 2 {
				t.Errorf("%s: the reviewer-gated card offers %d buttons, want approve and deny", when, len(gateButtons))
			}
			if n := len(doc.All(`[data-tool-call-id="mine"] [data-parley="approval"] button`)); n != 0 {
				t.Errorf("%s: the owner-approved card offers the reviewer %d buttons", when, n)
			}
			if _, n := doc.One(`[data-tool-call-id="mine"] [data-parley="waiting-for"]`); n != 1 {
				t.Errorf("%s: the owner-approved card does not say who decides", when)
			}
			form, n := doc.One(`form[data-parley="elicitation"][data-tool-call-id="ask"]`)
			if n != 1 {
				t.Fatalf("%s: no question card", when)
			}
			controls := append(append(viewstest.In(form, "select"), viewstest.In(form, "textarea")...), viewstest.In(form, "button")...)
			for _, in := range viewstest.In(form, "input") {
				if typ, _ := viewstest.Attr(in, "type"); typ != "hidden" {
					controls = append(controls, in)
				}
			}
			if len(controls) != 0 {
				t.Errorf("%s: the question offers a non-owner %d controls", when, len(controls))
			}
			if _, n := viewstest.MustParse(body).One(`[data-tool-call-id="ask"] [data-parley="waiting-for"]`); n != 1 {
				t.Errorf("%s: the question does not say the owner answers", when)
			}
			res = e.script(rita).api("GET", "/api/v1"+page, "")
			var v viewJSON
			if err := json.Unmarshal([]byte(readBody(res)), &v); err != nil || res.StatusCode != http.StatusOK || v.ID != conv.ID || len(v.ToolCalls) != 3 {
				t.Fatalf("%s: the reviewer's API view = %d %v %+v", when, res.StatusCode, err, v)
			}
		}
		check("pending")
		if st, ans := r.fetchForm(page+"/calls/gate/resolve", url.Values{"decision": {"approve"}}); st != http.StatusOK || !ans.OK {
			t.Fatalf("the reviewer's decision = %d %+v", st, ans)
		}
		e.awaitCalls(conv.ID, store.CallResolved, "gate")
		if res := r.do("GET", page, "", nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("decided: the reviewer's page = %d, want 404", res.StatusCode)
		}
		if res := e.script(rita).api("GET", "/api/v1"+page, ""); res.StatusCode != http.StatusNotFound {
			t.Fatalf("decided: the reviewer's API view = %d, want 404", res.StatusCode)
		}

		for _, tc := range []struct {
			name string
			c    *client
			path string
		}{
			{"member with no call to decide", e.browser(bob), page},
			{"reviewer where the owner decides", r, "/conversations/" + owners.ID},
		} {
			for _, p := range []string{tc.path, "/api/v1" + tc.path} {
				res := tc.c.api("GET", p, "")
				if body := readBody(res); res.StatusCode != http.StatusNotFound || strings.Contains(body, "hello") {
					t.Errorf("%s: GET %s = %d, want 404", tc.name, p, res.StatusCode)
				}
			}
		}
	})
}

func TestConversationsListAndCreate(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		b := e.browser(ann)
		res := b.postForm("/conversations", url.Values{"title": {"Lunch plans"}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/conversations/") {
			t.Fatalf("create = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		res = b.postForm("/conversations", url.Values{"title": {"no token"}}, "")
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("create without CSRF = %d, want 403", res.StatusCode)
		}
		doc := viewstest.MustParse(readBody(b.do("GET", "/conversations", "", nil)))
		links := doc.All(`[data-parley="conversation-link"] a`)
		if len(links) != 1 || viewstest.Text(links[0]) != "Lunch plans" {
			t.Fatalf("list = %d links", len(links))
		}
		if list, err := e.m.List(context.Background(), as(ann)); err != nil || len(list) != 1 || list[0].Title != "Lunch plans" {
			t.Fatalf("the agent's list: %v %+v", err, list)
		}
	})
}

func TestPostMessage(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
		conv := e.conversation(ann)
		b := e.browser(ann)
		path := "/conversations/" + conv.ID + "/messages"

		// The model holds its answer, so the turn is still open for the busy case below.
		release := make(chan struct{})
		e.model.Push(llmtest.Step{Deltas: []string{"Hi ", "Ann."}, Release: release})
		res := b.postForm(path, url.Values{"text": {"hello"}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/conversations/"+conv.ID {
			t.Fatalf("post = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		entries, err := e.st.Log(context.Background(), conv.ID, 0)
		if err != nil || len(entries) == 0 || entries[0].Type != store.EntryUserMessage || entries[0].Actor != ann.ID ||
			!strings.Contains(string(entries[0].Data), `"hello"`) {
			t.Fatalf("the message in the log: %v %+v", err, entries)
		}
		res = b.postForm(path, url.Values{"text": {"  "}}, b.csrf)
		if loc := res.Header.Get("Location"); !strings.Contains(loc, "notice=empty") {
			t.Errorf("empty message redirect = %q", loc)
		}
		// Over fetch, a message to a busy conversation is queued, and the answer says so.
		e.awaitStatus(conv.ID, store.StatusGenerating)
		status, ans := b.fetchForm(path, url.Values{"text": {"again"}})
		if status != http.StatusOK || !ans.OK || ans.Notice != notices["queued"] {
			t.Errorf("queued answer = %d %+v", status, ans)
		}
		close(release)
		e.awaitStatus(conv.ID, store.StatusIdle)
		bb := e.browser(bob)
		if res := bb.postForm(path, url.Values{"text": {"hi"}}, bb.csrf); res.StatusCode != http.StatusNotFound {
			t.Errorf("another user's post = %d, want 404", res.StatusCode)
		}
		if got := strings.Join(e.userMessages(conv.ID), "|"); got != "hello|again" {
			t.Errorf("messages = %q, want the owner's two (the queued one ran after the first)", got)
		}
	})
}

func TestResolveApprovalFromCard(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("call_1", "send_email", emailArgs("bob@example.com")))
		b := e.browser(ann)
		path := func(call string) string { return "/conversations/" + conv.ID + "/calls/" + call + "/resolve" }
		next := func(id, to string) { e.model.Push(llmtest.Calls(llmtest.Call(id, "send_email", emailArgs(to)))) }

		// Approve without touching the arguments (shown pretty-printed): a plain approval.
		next("call_2", "bob@example.com")
		res := b.postForm(path("call_1"), url.Values{"decision": {"approve"},
			"args": {"{\n  \"body\": \"See you at noon.\",\n  \"subject\": \"lunch\",\n  \"to\": \"bob@example.com\"\n}"}, "reason": {""}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/conversations/"+conv.ID+"#call-call_1" {
			t.Fatalf("approve = %d %s %s", res.StatusCode, res.Header.Get("Location"), readBody(res))
		}
		c1 := e.call(conv.ID, "call_1")
		if d := e.decision(conv.ID, "call_1"); c1.Decision != "approve" || c1.DecidedBy != ann.ID || d["via"] != "session" || d["args"] != nil {
			t.Errorf("call_1 = %+v, decision %v", c1, d)
		}
		// Edited arguments are an edit; the call runs with them.
		e.awaitCalls(conv.ID, store.CallAwaiting, "call_2")
		next("call_3", "bob@example.com")
		b.postForm(path("call_2"), url.Values{"decision": {"approve"}, "args": {`{"to": "carol@example.com", "subject": "lunch", "body": "See you at noon."}`}}, b.csrf)
		if c2 := e.call(conv.ID, "call_2"); c2.Decision != "approve_edited" || string(c2.Args) != `{"body":"See you at noon.","subject":"lunch","to":"carol@example.com"}` {
			t.Errorf("edited call_2 = %+v %s", c2, c2.Args)
		}
		// Deny with a reason.
		e.awaitCalls(conv.ID, store.CallAwaiting, "call_3")
		next("call_4", "bob@example.com")
		b.postForm(path("call_3"), url.Values{"decision": {"deny"}, "reason": {"not today"}}, b.csrf)
		if c3 := e.call(conv.ID, "call_3"); c3.Decision != "deny" || c3.Reason != "not today" || c3.Status != store.CallDenied {
			t.Errorf("deny = %+v", c3)
		}
		// Arguments that are not JSON never reach the agent; the error sits beside the field.
		before := e.awaitCalls(conv.ID, store.CallAwaiting, "call_4").LastSeq
		res = b.postForm(path("call_4"), url.Values{"decision": {"approve"}, "args": {`{"to": `}}, b.csrf)
		body := readBody(res)
		if res.StatusCode != http.StatusUnprocessableEntity || e.view(conv.ID).LastSeq != before {
			t.Fatalf("bad JSON = %d", res.StatusCode)
		}
		doc := viewstest.MustParse(body)
		if _, c := doc.One(`[data-parley="approval"] [data-parley="field-error"][data-field="args"]`); c != 1 {
			t.Errorf("no args error beside the field")
		}
		// The agent's schema problems are shown beside the arguments too.
		res = b.postForm(path("call_4"), url.Values{"decision": {"approve"}, "args": {`{"to":"x"}`}}, b.csrf)
		doc = viewstest.MustParse(readBody(res))
		if res.StatusCode != http.StatusUnprocessableEntity || e.view(conv.ID).LastSeq != before {
			t.Fatalf("arguments the schema refuses = %d", res.StatusCode)
		}
		if el, c := doc.One(`[data-parley="field-error"][data-field="args"]`); c != 1 || !strings.Contains(viewstest.Text(el), "/to: ") {
			t.Errorf("schema problem not beside the field: %v", el)
		}
		if ta, _ := doc.One(`[data-tool-call-id="call_4"] textarea[name="args"]`); ta == nil || viewstest.Text(ta) != `{"to":"x"}` {
			t.Errorf("edited args not kept")
		}
		// Stale: the page says it was already decided.
		res = b.postForm(path("call_1"), url.Values{"decision": {"approve"}}, b.csrf)
		loc := res.Header.Get("Location")
		if res.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "notice=stale") {
			t.Fatalf("stale = %d %s", res.StatusCode, loc)
		}
		doc = viewstest.MustParse(readBody(b.do("GET", strings.Split(loc, "#")[0], "", nil)))
		if n, c := doc.One(`[data-parley="tool-call"][data-tool-call-id="call_1"] [data-parley="notice"]`); c != 1 || !strings.Contains(viewstest.Text(n), "already decided") {
			t.Errorf("stale notice not in the card")
		}
		// Over fetch the stale answer is 409 with the card to put in place.
		status, ans := b.fetchForm(path("call_1"), url.Values{"decision": {"approve"}})
		if status != http.StatusConflict || ans.HTML == nil || ans.Target != "call-call_1" || !strings.Contains(*ans.HTML, "already decided") {
			t.Errorf("fetch stale = %d %+v", status, ans)
		}
		// What ran: the first two messages, the second as edited.
		e.awaitCalls(conv.ID, store.CallResolved, "call_1", "call_2")
		out, err := e.st.ListOutbox(context.Background(), conv.ID)
		if err != nil || len(out) != 2 || out[0].To != "bob@example.com" || out[1].To != "carol@example.com" {
			t.Errorf("outbox %v %+v", err, out)
		}
	})
}

func TestResolveQuestionFromCard(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("q1", "ask_user", questionArgs("Who are you?", questionSchema)))
		b := e.browser(ann)
		path := func(call string) string { return "/conversations/" + conv.ID + "/calls/" + call + "/resolve" }

		e.model.Push(llmtest.Calls(llmtest.Call("q2", "ask_user", questionArgs("And again?", questionSchema))))
		res := b.postForm(path("q1"), url.Values{"action": {"accept"}, "f.name": {"Ann"}, "f.age": {"41"}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("accept = %d %s", res.StatusCode, readBody(res))
		}
		if q1 := e.call(conv.ID, "q1"); q1.Decision != "accept" || q1.Status != store.CallResolved ||
			!strings.Contains(string(q1.Result), `"content":{"age":41,"name":"Ann"}`) {
			t.Errorf("answer = %+v %s", q1, q1.Result)
		}
		// A word in a number field is caught before the agent.
		before := e.awaitCalls(conv.ID, store.CallAwaiting, "q2").LastSeq
		res = b.postForm(path("q2"), url.Values{"action": {"accept"}, "f.name": {"Ann"}, "f.age": {"old"}}, b.csrf)
		doc := viewstest.MustParse(readBody(res))
		if res.StatusCode != http.StatusUnprocessableEntity || e.view(conv.ID).LastSeq != before {
			t.Fatalf("bad number = %d", res.StatusCode)
		}
		if _, c := doc.One(`form[data-parley="elicitation"] [data-field="age"] [data-parley="field-error"]`); c != 1 {
			t.Errorf("no error beside age")
		}
		// The agent's schema errors land beside their fields.
		res = b.postForm(path("q2"), url.Values{"action": {"accept"}, "f.age": {"3"}}, b.csrf)
		doc = viewstest.MustParse(readBody(res))
		if res.StatusCode != http.StatusUnprocessableEntity || e.view(conv.ID).LastSeq != before {
			t.Fatalf("missing name = %d", res.StatusCode)
		}
		if _, c := doc.One(`[data-field="name"] [data-parley="field-error"]`); c != 1 {
			t.Errorf("missing name not shown beside the field")
		}
		if in, _ := doc.One(`input[name="f.age"]`); in == nil {
			t.Error("no age input")
		} else if v, _ := viewstest.Attr(in, "value"); v != "3" {
			t.Errorf("age not kept: %q", v)
		}
		// The conversation shows the answer in words, the JSON folded (issue 27, item 10).
		doc = viewstest.MustParse(readBody(b.do("GET", "/conversations/"+conv.ID, "", nil)))
		if intro, n := doc.One(`[data-tool-call-id="q1"] [data-parley="answer"] [data-parley="decision"]`); n != 1 || viewstest.Text(intro) != "You answered:" {
			t.Errorf("the answered question does not say \"You answered:\"")
		}
		if rows := doc.All(`[data-tool-call-id="q1"] [data-parley="answer-rows"] dd`); len(rows) != 2 || viewstest.Text(rows[0]) != "Ann" || viewstest.Text(rows[1]) != "41" {
			t.Errorf("the answer's values: %d rows", len(rows))
		}
		if dt := doc.All(`[data-tool-call-id="q1"] [data-parley="answer-rows"] dt`); len(dt) == 0 || viewstest.Text(dt[0]) != "Name" {
			t.Errorf("the answer's first field is not shown by its title")
		}
		if n := len(doc.All(`[data-tool-call-id="q1"] details[data-parley="json"] pre`)); n != 1 {
			t.Errorf("the answer's JSON: %d toggles", n)
		}
		e.model.Push(llmtest.Reply("Fine."))
		b.postForm(path("q2"), url.Values{"action": {"decline"}}, b.csrf)
		if q2 := e.call(conv.ID, "q2"); q2.Decision != "decline" || q2.Status != store.CallErrored || !strings.Contains(string(q2.Result), "declined") {
			t.Errorf("decline = %+v %s", q2, q2.Result)
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
	})
}

// clashSchema names its properties after the question form's own fields (and with characters a
// form name must carry as they are), so an answer can be told from the form only by its name.
const clashSchema = `{"type":"object","properties":{
 "action":{"type":"string"}, "_csrf":{"type":"string"}, "return":{"type":"string"},
 "decision":{"type":"string","enum":["approve","deny"]}, "name":{"type":"string"},
 "first name":{"type":"string"}, "a.b":{"type":"string"}, "x[0]":{"type":"string"},
 "café":{"type":"string"}, "f.action":{"type":"string"}, "age":{"type":"integer"}}}`

// submitQuestion is what a browser posts when button value of the question form in page is
// pressed with the fields filled as answers says (keyed by property): the form's controls in
// document order, the hidden ones, then the fields, then the pressed button.
func submitQuestion(t *testing.T, page string, answers map[string]string, button string) string {
	t.Helper()
	form, n := viewstest.MustParse(page).One(`form[data-parley="elicitation"]`)
	if n != 1 {
		t.Fatalf("question forms = %d", n)
	}
	var body []string
	add := func(name, value string) { body = append(body, url.QueryEscape(name)+"="+url.QueryEscape(value)) }
	for _, in := range viewstest.In(form, `input[type="hidden"]`) {
		name, _ := viewstest.Attr(in, "name")
		value, _ := viewstest.Attr(in, "value")
		add(name, value)
	}
	for _, field := range viewstest.In(form, `div[data-field]`) {
		prop, _ := viewstest.Attr(field, "data-field")
		controls := append(viewstest.In(field, "input"), viewstest.In(field, "select")...)
		if len(controls) != 1 {
			t.Fatalf("field %q has %d controls", prop, len(controls))
		}
		if v, ok := answers[prop]; ok {
			name, _ := viewstest.Attr(controls[0], "name")
			add(name, v)
		}
	}
	pressed := 0
	for _, b := range viewstest.In(form, `button[value="`+button+`"]`) {
		name, _ := viewstest.Attr(b, "name")
		add(name, button)
		pressed++
	}
	if pressed != 1 {
		t.Fatalf("buttons %q = %d", button, pressed)
	}
	return strings.Join(body, "&")
}

func TestResolveQuestionWhosePropertiesShareTheFormsNames(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("q1", "ask_user", questionArgs("Tell me everything.", clashSchema)))
		b := e.browser(ann)
		pagePath := "/conversations/" + conv.ID
		path := func(call string) string { return pagePath + "/calls/" + call + "/resolve" }
		answers := map[string]string{"action": "delete everything", "_csrf": "not a token", "return": "/inbox",
			"decision": "deny", "name": "Ann", "first name": "Ann Lee", "a.b": "dotted", "x[0]": "bracketed",
			"café": "crème brûlée", "f.action": "prefixed", "age": "41"}
		post := func(call, body string) *http.Response {
			return b.do("POST", path(call), "application/x-www-form-urlencoded", strings.NewReader(body))
		}

		e.model.Push(llmtest.Calls(llmtest.Call("q2", "ask_user", questionArgs("Once more.", clashSchema))))
		res := post("q1", submitQuestion(t, readBody(b.do("GET", pagePath, "", nil)), answers, "accept"))
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != pagePath+"#call-q1" {
			t.Fatalf("accept = %d %q %s", res.StatusCode, res.Header.Get("Location"), readBody(res))
		}
		q1 := e.call(conv.ID, "q1")
		var env struct {
			Result struct {
				Action  string
				Content map[string]any
			}
		}
		if err := json.Unmarshal(q1.Result, &env); err != nil || q1.Decision != "accept" || env.Result.Action != "accept" {
			t.Fatalf("answer = %+v %s (%v)", q1, q1.Result, err)
		}
		want := map[string]any{"age": 41.0}
		for k, v := range answers {
			if k != "age" {
				want[k] = v
			}
		}
		if !reflect.DeepEqual(env.Result.Content, want) {
			t.Errorf("content = %v\nwant      %v", env.Result.Content, want)
		}

		// A rejected answer comes back with every value in its own field.
		before := e.awaitCalls(conv.ID, store.CallAwaiting, "q2").LastSeq
		answers["age"] = "old"
		res = post("q2", submitQuestion(t, readBody(b.do("GET", pagePath, "", nil)), answers, "accept"))
		body := readBody(res)
		if res.StatusCode != http.StatusUnprocessableEntity || e.view(conv.ID).LastSeq != before {
			t.Fatalf("bad age = %d, log %d → %d", res.StatusCode, before, e.view(conv.ID).LastSeq)
		}
		form, _ := viewstest.MustParse(body).One(`form[data-parley="elicitation"]`)
		if form == nil {
			t.Fatal("no question form in the re-render")
		}
		for _, field := range viewstest.In(form, `div[data-field]`) {
			prop, _ := viewstest.Attr(field, "data-field")
			if in := viewstest.In(field, "input"); len(in) == 1 {
				if v, _ := viewstest.Attr(in[0], "value"); v != answers[prop] {
					t.Errorf("re-rendered %q = %q, want %q", prop, v, answers[prop])
				}
			}
		}

		// The form's own buttons still decide what happens, whatever the fields hold.
		e.model.Push(llmtest.Reply("Fine."))
		post("q2", submitQuestion(t, body, answers, "decline"))
		if q2 := e.call(conv.ID, "q2"); q2.Decision != "decline" || q2.Status != store.CallErrored {
			t.Errorf("decline = %+v %s", q2, q2.Result)
		}
		if d := e.decision(conv.ID, "q2"); d != nil {
			t.Errorf("a question's answer logged as an approval decision: %v", d)
		}
	})
}

func TestResolveAuthorization(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv, owners := e.conversation(ann), e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}),
			llmtest.Call("mine", "send_email", emailArgs("bob@example.com")))
		e.pending(owners, ann, llmtest.Call("only-mine", "send_email", emailArgs("bob@example.com")))
		tests := []struct {
			name, conv, call string
			c                *client
			want             int
			loc              string
		}{
			// She may see this conversation (its gate is hers to decide), not decide its owner's call.
			{"reviewer cannot decide an owner-approved call beside a gate", conv.ID, "mine", e.browser(rita), http.StatusForbidden, ""},
			{"reviewer decides a reviewer-gated call from the inbox", conv.ID, "gate", e.browser(rita), http.StatusSeeOther, "/inbox"},
			// Decided, nothing of the conversation awaits her: she reads nothing of it.
			{"reviewer learns nothing of the owner's call once hers is decided", conv.ID, "mine", e.browser(rita), http.StatusNotFound, ""},
			{"reviewer cannot touch an owner-approved call of another", owners.ID, "only-mine", e.browser(rita), http.StatusNotFound, ""},
			{"another member learns nothing", conv.ID, "gate", e.browser(bob), http.StatusNotFound, ""},
			{"unknown call of the owner", conv.ID, "nope", e.browser(ann), http.StatusNotFound, ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				res := tc.c.postForm("/conversations/"+tc.conv+"/calls/"+tc.call+"/resolve", url.Values{"decision": {"approve"}, "return": {"/inbox"}}, tc.c.csrf)
				readBody(res)
				if res.StatusCode != tc.want || (tc.loc != "" && res.Header.Get("Location") != tc.loc) {
					t.Errorf("= %d %s, want %d %s", res.StatusCode, res.Header.Get("Location"), tc.want, tc.loc)
				}
			})
		}
		if d := e.decision(conv.ID, "gate"); d == nil || d["by"] != rita.ID || d["role"] != string(store.RoleReviewer) || d["via"] != "session" {
			t.Errorf("the gate's decision = %v", d)
		}
		if got := e.auditOf(conv.ID, "mine"); len(got) != 0 || e.call(conv.ID, "mine").Status != store.CallAwaiting {
			t.Errorf("the owner's call was decided: %v", got)
		}
		res := e.browser(ann).postForm("/conversations/"+conv.ID+"/calls/mine/resolve", url.Values{"decision": {"approve"}}, "")
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("missing CSRF = %d, want 403", res.StatusCode)
		}
	})
}

func TestInboxPage(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("g1", "publish", map[string]any{"text": "one"}),
			llmtest.Call("g2", "publish", map[string]any{"text": "two"}),
			llmtest.Call("own", "send_email", emailArgs("bob@example.com")))
		doc := viewstest.MustParse(readBody(e.browser(rita).do("GET", "/inbox", "", nil)))
		inbox, n := doc.One(`[data-parley="inbox"]`)
		if n != 1 {
			t.Fatal("no inbox")
		}
		cards := viewstest.In(inbox, `[data-parley="approval"]`)
		if len(cards) != 2 {
			t.Fatalf("reviewer sees %d approvals, want the 2 reviewer-gated ones", len(cards))
		}
		if txt := viewstest.Text(inbox); !strings.Contains(txt, "ann") || !strings.Contains(txt, "t") {
			t.Errorf("entry lacks requester or title: %q", txt)
		}
		// A member owner has no inbox (403, saying where their calls wait): the call they may
		// decide waits on their conversation's page, with its buttons.
		ab := e.browser(ann)
		res := ab.do("GET", "/inbox", "", nil)
		body := readBody(res)
		if res.StatusCode != http.StatusForbidden || !strings.Contains(body, "reviewers and admins") {
			t.Fatalf("a member's inbox = %d %.300s, want 403 saying who has one", res.StatusCode, body)
		}
		doc = viewstest.MustParse(readBody(ab.do("GET", "/conversations/"+conv.ID, "", nil)))
		// Approve, deny, and (an owner-approved call of their own) approve and remember.
		for _, v := range []string{"approve", "deny", "remember"} {
			if n := len(doc.All(`[data-tool-call-id="own"] [data-parley="approval"] button[name="decision"][value="` + v + `"]`)); n != 1 {
				t.Fatalf("the member's own approval on their page has %d %q buttons, want 1", n, v)
			}
		}
		if n := len(doc.All(`[data-tool-call-id="own"] [data-parley="approval"] button[name="decision"]`)); n != 3 {
			t.Fatalf("the member's own approval on their page has %d decision buttons, want approve, deny and remember", n)
		}
		// A decision that lost the race comes back to the inbox saying so.
		doc = viewstest.MustParse(readBody(e.browser(rita).do("GET", "/inbox?notice=stale", "", nil)))
		if n, c := doc.One(`[data-parley="inbox-page"] [data-parley="notice"]`); c != 1 || !strings.Contains(viewstest.Text(n), "already decided") {
			t.Errorf("stale notice missing from the inbox")
		}
		// And a real lost race does: the second decision of g1 is stale.
		r := e.browser(rita)
		for i, want := range []string{"/inbox", "/inbox?notice=stale"} {
			res := r.postForm("/conversations/"+conv.ID+"/calls/g1/resolve", url.Values{"decision": {"approve"}, "return": {"/inbox"}}, r.csrf)
			readBody(res)
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != want {
				t.Errorf("decision %d = %d %q, want %q", i+1, res.StatusCode, res.Header.Get("Location"), want)
			}
		}
	})
}

func TestInvalidDecisionComesBackWithErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}),
			llmtest.Call("mine", "send_email", emailArgs("bob@example.com")))
		r := e.browser(rita)
		path := "/conversations/" + conv.ID + "/calls/gate/resolve"
		bad := func() url.Values { return url.Values{"decision": {"approve"}, "args": {"{nope"}, "return": {"/inbox"}} }
		// From the inbox, without JavaScript: the inbox again, the error beside the field.
		res := r.postForm(path, bad(), r.csrf)
		doc := viewstest.MustParse(readBody(res))
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("inbox invalid = %d", res.StatusCode)
		}
		if _, n := doc.One(`[data-parley="inbox"] [data-parley="approval"][data-tool-call-id="gate"] [data-parley="field-error"][data-field="args"]`); n != 1 {
			t.Errorf("inbox card lacks the args error")
		}
		// From the inbox over fetch: the entry with its error, to put in place.
		status, ans := r.fetchForm(path, bad())
		if status != http.StatusUnprocessableEntity || ans.OK || ans.Target != views.InboxDOMID(conv.ID, "gate") || ans.HTML == nil || !strings.Contains(*ans.HTML, `data-field="args"`) {
			t.Errorf("inbox fetch invalid = %d %+v", status, ans)
		}
		// Arguments the tool's schema refuses come back the same way, with the agent's problems.
		status, ans = r.fetchForm(path, url.Values{"decision": {"approve"}, "args": {`{"text":42}`}, "return": {"/inbox"}})
		if status != http.StatusUnprocessableEntity || ans.HTML == nil || !strings.Contains(*ans.HTML, "/text: ") {
			t.Errorf("inbox fetch refused by the schema = %d %+v", status, ans)
		}
		// From the conversation page over fetch (the owner's own view of an owner-approved call).
		a := e.browser(ann)
		status, ans = a.fetchForm("/conversations/"+conv.ID+"/calls/mine/resolve", url.Values{"decision": {"approve"}, "args": {"[1,"}})
		if status != http.StatusUnprocessableEntity || ans.HTML == nil || !strings.Contains(*ans.HTML, "not valid JSON") {
			t.Errorf("page fetch invalid = %d %+v", status, ans)
		}
		if got := e.audit(conv.ID); len(got) != 0 {
			t.Fatalf("invalid decisions reached the agent: %+v", got)
		}
		// A success over fetch from the inbox removes the entry.
		status, ans = r.fetchForm(path, url.Values{"decision": {"approve"}, "return": {"/inbox"}})
		if status != http.StatusOK || !ans.OK || ans.HTML == nil || *ans.HTML != "" || ans.Target != views.InboxDOMID(conv.ID, "gate") {
			t.Errorf("inbox fetch ok = %d %+v", status, ans)
		}
		if got := e.auditOf(conv.ID, "gate"); strings.Join(got, ",") != "approve by rita" {
			t.Errorf("audit of the gate = %v", got)
		}
	})
}

// TestSameJSONComparesValues: the card sends the arguments field as shown; the agent approves
// them as they were when they mean the same JSON (whatever the spacing, key order, escapes or
// number spelling) and as an edit when they do not.
func TestSameJSONComparesValues(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		tests := []struct {
			id, edited, orig string
			same             bool
		}{
			{"escapes", "{\n  \"to\": \"a<b>&c\"\n}", `{"to":"a\u003cb\u003e\u0026c"}`, true},
			{"order", `{"b":1,"a":[1,2]}`, `{"a":[1,2],"b":1.0}`, true},
			{"empty", `{}`, ``, true},
			{"changed", `{"to":"x"}`, `{"to":"y"}`, false},
		}
		var calls []llm.ToolCall
		for _, tc := range tests {
			calls = append(calls, llmtest.Call(tc.id, "note", json.RawMessage(tc.orig)))
		}
		e.pending(conv, ann, calls...)
		// Once every note is decided the model makes one more, then ends the turn.
		e.model.Push(llmtest.Calls(llmtest.Call("broken", "note", `{"to":"y"}`)), llmtest.Reply("Noted."))
		b := e.browser(ann)
		for _, tc := range tests {
			res := b.postForm("/conversations/"+conv.ID+"/calls/"+tc.id+"/resolve", url.Values{"decision": {"approve"}, "args": {tc.edited}}, b.csrf)
			readBody(res)
			want := "approve"
			if !tc.same {
				want = "approve_edited"
			}
			if c := e.call(conv.ID, tc.id); res.StatusCode != http.StatusSeeOther || c.Decision != want {
				t.Errorf("%s: %q against %q = %d %q, want %q", tc.id, tc.edited, tc.orig, res.StatusCode, c.Decision, want)
			}
		}
		// Arguments that are not JSON are never the same: the card says so.
		e.awaitCalls(conv.ID, store.CallAwaiting, "broken")
		res := b.postForm("/conversations/"+conv.ID+"/calls/broken/resolve", url.Values{"decision": {"approve"}, "args": {`{"to":`}}, b.csrf)
		if body := readBody(res); res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "not valid JSON") {
			t.Errorf("broken arguments = %d", res.StatusCode)
		}
		if _, err := e.m.Resolve(context.Background(), conv.ID, "broken", agent.Resolution{Decision: "deny"}, as(ann)); err != nil {
			t.Fatal(err)
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
	})
}

// TestComposerWarnsThatAMessageClosesTheQuestion: while a question waits for its owner, the
// status line beside the composer says that sending a message closes it unanswered (issue 27,
// item 10); a reader, who has no composer, is not told, and once answered the note is gone.
func TestComposerWarnsThatAMessageClosesTheQuestion(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	ann, rita := e.user("ann", store.RoleMember), e.user("rita", store.RoleReviewer)
	conv := e.conversation(ann)
	e.pending(conv, ann, llmtest.Call("q1", "ask_user", questionArgs("Who are you?", questionSchema)))
	b := e.browser(ann)
	page := "/conversations/" + conv.ID
	warnings := func(c *client) int {
		t.Helper()
		doc := viewstest.MustParse(readBody(c.do("GET", page, "", nil)))
		return len(doc.All(`[data-parley="dock"] [data-parley="status"] [data-parley="composer-warning"]`))
	}
	if n := warnings(b); n != 1 {
		t.Fatalf("an open question: %d warnings beside the composer, want 1", n)
	}
	if n := warnings(e.browser(rita)); n != 0 {
		t.Errorf("a reader without a composer is warned %d times", n)
	}
	e.model.Push(llmtest.Reply("Hello Ann."))
	if res := b.postForm(page+"/calls/q1/resolve", url.Values{"action": {"accept"}, "f.name": {"Ann"}}, b.csrf); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("answer = %d", res.StatusCode)
	}
	e.awaitStatus(conv.ID, store.StatusIdle)
	if n := warnings(b); n != 0 {
		t.Errorf("the question was answered: %d warnings remain", n)
	}
}
