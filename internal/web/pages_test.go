package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/views/viewstest"
)

// approvalView is a conversation of owner with one gated call awaiting approval.
func approvalView(conv store.Conversation, callID string, approvers tools.Approvers) agent.View {
	return agent.View{ID: conv.ID, OwnerID: conv.OwnerID, Title: conv.Title, Status: store.StatusAwaiting,
		Calls: []agent.CallView{{Seq: 2, ID: callID, Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval,
			Approvers: approvers, Status: store.CallAwaiting, PendingKind: tools.PendingApproval,
			Args: json.RawMessage(`{"to":"bob@example.com","subject":"lunch"}`), Plan: &tools.Plan{Summary: "Would send an email"}}},
		Pending: map[string]agent.PendingView{callID: {Executor: tools.Server, Kind: tools.PendingApproval}}}
}

const questionSchema = `{"type":"object","properties":{"name":{"type":"string","title":"Name"},"age":{"type":"integer"}},"required":["name"]}`

func questionView(conv store.Conversation, callID string) agent.View {
	return agent.View{ID: conv.ID, OwnerID: conv.OwnerID, Status: store.StatusAwaiting,
		Calls: []agent.CallView{{Seq: 2, ID: callID, Name: "ask_user", Executor: tools.Human, Status: store.CallAwaiting,
			PendingKind: tools.PendingElicitation, Prompt: &tools.Prompt{Message: "Who are you?", Schema: json.RawMessage(questionSchema)}}},
		Pending: map[string]agent.PendingView{callID: {Executor: tools.Human, Kind: tools.PendingElicitation}}}
}

func (e *testEnv) setView(v agent.View) {
	e.conv.mu.Lock()
	defer e.conv.mu.Unlock()
	e.conv.views[v.ID] = v
}

func (e *testEnv) lastResolution(t *testing.T) resolution {
	t.Helper()
	e.conv.mu.Lock()
	defer e.conv.mu.Unlock()
	if len(e.conv.resolved) == 0 {
		t.Fatal("nothing was resolved")
	}
	return e.conv.resolved[len(e.conv.resolved)-1]
}

func (e *testEnv) resolvedCount() int {
	e.conv.mu.Lock()
	defer e.conv.mu.Unlock()
	return len(e.conv.resolved)
}

func (e *testEnv) setResolveErr(err error) {
	e.conv.mu.Lock()
	defer e.conv.mu.Unlock()
	e.conv.resolveErr = err
}

func TestConversationPagesOwnerOnly(t *testing.T) {
	e := newTestEnv(t, Config{DemoModel: true})
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
		{"reviewer", e.browser(rev), http.StatusNotFound},
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
}

func TestConversationsListAndCreate(t *testing.T) {
	e := newTestEnv(t, Config{})
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
}

func TestPostMessage(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
	conv := e.conversation(ann)
	b := e.browser(ann)
	path := "/conversations/" + conv.ID + "/messages"

	res := b.postForm(path, url.Values{"text": {"hello"}}, b.csrf)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/conversations/"+conv.ID {
		t.Fatalf("post = %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	if len(e.conv.sent) != 1 || e.conv.sent[0].text != "hello" || e.conv.sent[0].by.UserID != ann.ID || e.conv.sent[0].by.Via != "session" {
		t.Fatalf("sent = %+v", e.conv.sent)
	}
	res = b.postForm(path, url.Values{"text": {"  "}}, b.csrf)
	if loc := res.Header.Get("Location"); !strings.Contains(loc, "notice=empty") {
		t.Errorf("empty message redirect = %q", loc)
	}
	// Over fetch, a busy conversation answers JSON with the notice.
	e.conv.mu.Lock()
	e.conv.sendErr = tools.NewError(tools.KindConflict, "a turn is in progress", nil)
	e.conv.mu.Unlock()
	res = b.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(url.Values{"text": {"again"}, "_csrf": {b.csrf}}.Encode()),
		"X-Parley-Fetch", "1", "Accept", "application/json")
	var ans fetchAnswer
	if err := json.Unmarshal([]byte(readBody(res)), &ans); err != nil || ans.OK || ans.Notice != notices["busy"] {
		t.Errorf("busy answer = %d %+v %v", res.StatusCode, ans, err)
	}
	bb := e.browser(bob)
	if res := bb.postForm(path, url.Values{"text": {"hi"}}, bb.csrf); res.StatusCode != http.StatusNotFound {
		t.Errorf("another user's post = %d, want 404", res.StatusCode)
	}
}

func TestResolveApprovalFromCard(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	e.pendingCall(conv, "call_1", "approval", "owner")
	e.setView(approvalView(conv, "call_1", tools.ByOwner))
	b := e.browser(ann)
	path := "/conversations/" + conv.ID + "/calls/call_1/resolve"

	// Approve without touching the arguments: no edited args are sent.
	res := b.postForm(path, url.Values{"decision": {"approve"}, "args": {"{\n  \"to\": \"bob@example.com\",\n  \"subject\": \"lunch\"\n}"}, "reason": {""}}, b.csrf)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("approve = %d %s", res.StatusCode, readBody(res))
	}
	r := e.lastResolution(t)
	if r.r.Decision != "approve" || r.r.Args != nil || r.by.UserID != ann.ID || r.call != "call_1" {
		t.Errorf("resolution = %+v", r)
	}
	// Edited arguments go to the agent compacted.
	b.postForm(path, url.Values{"decision": {"approve"}, "args": {`{"to": "carol@example.com", "subject": "lunch"}`}}, b.csrf)
	if got := string(e.lastResolution(t).r.Args); got != `{"to":"carol@example.com","subject":"lunch"}` {
		t.Errorf("edited args = %s", got)
	}
	// Deny with a reason.
	b.postForm(path, url.Values{"decision": {"deny"}, "reason": {"not today"}}, b.csrf)
	if r := e.lastResolution(t).r; r.Decision != "deny" || r.Reason != "not today" {
		t.Errorf("deny = %+v", r)
	}
	// Arguments that are not JSON never reach the agent; the error sits beside the field.
	n := e.resolvedCount()
	res = b.postForm(path, url.Values{"decision": {"approve"}, "args": {`{"to": `}}, b.csrf)
	body := readBody(res)
	if res.StatusCode != http.StatusUnprocessableEntity || e.resolvedCount() != n {
		t.Fatalf("bad JSON = %d", res.StatusCode)
	}
	doc := viewstest.MustParse(body)
	if _, c := doc.One(`[data-parley="approval"] [data-parley="field-error"][data-field="args"]`); c != 1 {
		t.Errorf("no args error beside the field")
	}
	// The agent's schema problems are shown beside the arguments too.
	e.setResolveErr(tools.NewError(tools.KindInvalidArgs, "arguments do not match", map[string]any{
		"problems": []map[string]any{{"path": "/to", "message": "is not a valid email"}}}))
	res = b.postForm(path, url.Values{"decision": {"approve"}, "args": {`{"to":"x"}`}}, b.csrf)
	doc = viewstest.MustParse(readBody(res))
	if e, c := doc.One(`[data-parley="field-error"][data-field="args"]`); c != 1 || !strings.Contains(viewstest.Text(e), "/to: is not a valid email") {
		t.Errorf("schema problem not beside the field")
	}
	if ta, _ := doc.One(`textarea[name="args"]`); ta == nil || viewstest.Text(ta) != `{"to":"x"}` {
		t.Errorf("edited args not kept")
	}
	// Stale: the page says it was already decided.
	e.setResolveErr(tools.NewError(tools.KindStale, "already resolved", nil))
	res = b.postForm(path, url.Values{"decision": {"approve"}}, b.csrf)
	loc := res.Header.Get("Location")
	if res.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "notice=stale") {
		t.Fatalf("stale = %d %s", res.StatusCode, loc)
	}
	doc = viewstest.MustParse(readBody(b.do("GET", strings.Split(loc, "#")[0], "", nil)))
	if n, c := doc.One(`[data-parley="tool-call"][data-tool-call-id="call_1"] [data-parley="notice"]`); c != 1 || !strings.Contains(viewstest.Text(n), "already decided") {
		t.Errorf("stale notice not in the card")
	}
	// Over fetch the stale answer is 409 with the card to put in place.
	res = b.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(url.Values{"decision": {"approve"}, "_csrf": {b.csrf}}.Encode()),
		"X-Parley-Fetch", "1", "Accept", "application/json")
	var ans fetchAnswer
	if err := json.Unmarshal([]byte(readBody(res)), &ans); err != nil || res.StatusCode != http.StatusConflict || ans.HTML == nil ||
		ans.Target != "call-call_1" || !strings.Contains(*ans.HTML, "already decided") {
		t.Errorf("fetch stale = %d %+v %v", res.StatusCode, ans, err)
	}
}

func TestResolveQuestionFromCard(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	e.pendingCall(conv, "q1", "elicitation", "owner")
	e.setView(questionView(conv, "q1"))
	b := e.browser(ann)
	path := "/conversations/" + conv.ID + "/calls/q1/resolve"

	res := b.postForm(path, url.Values{"action": {"accept"}, "f.name": {"Ann"}, "f.age": {"41"}}, b.csrf)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("accept = %d %s", res.StatusCode, readBody(res))
	}
	if r := e.lastResolution(t).r; r.Action != "accept" || string(r.Content) != `{"age":41,"name":"Ann"}` {
		t.Errorf("answer = %+v %s", r, r.Content)
	}
	// A word in a number field is caught before the agent.
	n := e.resolvedCount()
	res = b.postForm(path, url.Values{"action": {"accept"}, "f.name": {"Ann"}, "f.age": {"old"}}, b.csrf)
	doc := viewstest.MustParse(readBody(res))
	if res.StatusCode != http.StatusUnprocessableEntity || e.resolvedCount() != n {
		t.Fatalf("bad number = %d", res.StatusCode)
	}
	if _, c := doc.One(`form[data-parley="elicitation"] [data-field="age"] [data-parley="field-error"]`); c != 1 {
		t.Errorf("no error beside age")
	}
	// The agent's schema errors land beside their fields.
	e.setResolveErr(tools.NewError(tools.KindInvalidArgs, "answers do not match", map[string]any{
		"problems": []map[string]any{{"path": "", "message": "missing properties: 'name'"}}}))
	res = b.postForm(path, url.Values{"action": {"accept"}, "f.age": {"3"}}, b.csrf)
	doc = viewstest.MustParse(readBody(res))
	if _, c := doc.One(`[data-field="name"] [data-parley="field-error"]`); c != 1 {
		t.Errorf("missing name not shown beside the field")
	}
	if in, _ := doc.One(`input[name="f.age"]`); in == nil {
		t.Error("no age input")
	} else if v, _ := viewstest.Attr(in, "value"); v != "3" {
		t.Errorf("age not kept: %q", v)
	}
	e.setResolveErr(nil)
	b.postForm(path, url.Values{"action": {"decline"}}, b.csrf)
	if r := e.lastResolution(t).r; r.Action != "decline" || r.Content != nil {
		t.Errorf("decline = %+v", r)
	}
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
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	e.pendingCall(conv, "q1", "elicitation", "owner")
	v := questionView(conv, "q1")
	v.Calls[0].Prompt.Schema = json.RawMessage(clashSchema)
	e.setView(v)
	b := e.browser(ann)
	pagePath, path := "/conversations/"+conv.ID, "/conversations/"+conv.ID+"/calls/q1/resolve"
	answers := map[string]string{"action": "delete everything", "_csrf": "not a token", "return": "/inbox",
		"decision": "deny", "name": "Ann", "first name": "Ann Lee", "a.b": "dotted", "x[0]": "bracketed",
		"café": "crème brûlée", "f.action": "prefixed", "age": "41"}
	post := func(body string) *http.Response {
		return b.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(body))
	}

	res := post(submitQuestion(t, readBody(b.do("GET", pagePath, "", nil)), answers, "accept"))
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != pagePath+"#call-q1" {
		t.Fatalf("accept = %d %q %s", res.StatusCode, res.Header.Get("Location"), readBody(res))
	}
	r := e.lastResolution(t).r
	var got map[string]any
	if err := json.Unmarshal(r.Content, &got); err != nil || r.Action != "accept" || r.Decision != "" {
		t.Fatalf("answer = %+v %s (%v)", r, r.Content, err)
	}
	want := map[string]any{"age": 41.0}
	for k, v := range answers {
		if k != "age" {
			want[k] = v
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("content = %v\nwant      %v", got, want)
	}

	// A rejected answer comes back with every value in its own field.
	n := e.resolvedCount()
	answers["age"] = "old"
	res = post(submitQuestion(t, readBody(b.do("GET", pagePath, "", nil)), answers, "accept"))
	body := readBody(res)
	if res.StatusCode != http.StatusUnprocessableEntity || e.resolvedCount() != n {
		t.Fatalf("bad age = %d, resolved %d times", res.StatusCode, e.resolvedCount()-n)
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
	post(submitQuestion(t, body, answers, "decline"))
	if r := e.lastResolution(t).r; r.Action != "decline" || r.Decision != "" || r.Content != nil {
		t.Errorf("decline = %+v %s", r, r.Content)
	}
}

func TestResolveAuthorization(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
	rita := e.user("rita", store.RoleReviewer)
	conv := e.conversation(ann)
	e.pendingCall(conv, "gate", "approval", "reviewer")
	e.pendingCall(conv, "mine", "approval", "owner")
	v := approvalView(conv, "gate", tools.ByReviewer)
	v.Calls = append(v.Calls, approvalView(conv, "mine", tools.ByOwner).Calls...)
	e.setView(v)
	tests := []struct {
		name, call string
		c          *client
		want       int
		loc        string
	}{
		{"reviewer decides a reviewer-gated call from the inbox", "gate", e.browser(rita), http.StatusSeeOther, "/inbox"},
		{"reviewer cannot touch an owner-gated call of another", "mine", e.browser(rita), http.StatusNotFound, ""},
		{"another member learns nothing", "gate", e.browser(bob), http.StatusNotFound, ""},
		{"unknown call of the owner", "nope", e.browser(ann), http.StatusNotFound, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := tc.c.postForm("/conversations/"+conv.ID+"/calls/"+tc.call+"/resolve", url.Values{"decision": {"approve"}, "return": {"/inbox"}}, tc.c.csrf)
			if res.StatusCode != tc.want || (tc.loc != "" && res.Header.Get("Location") != tc.loc) {
				t.Errorf("= %d %s, want %d %s", res.StatusCode, res.Header.Get("Location"), tc.want, tc.loc)
			}
		})
	}
	if r := e.lastResolution(t); r.call != "gate" || r.by.UserID != rita.ID || r.by.Role != store.RoleReviewer {
		t.Errorf("resolution = %+v", r)
	}
	res := e.browser(ann).postForm("/conversations/"+conv.ID+"/calls/gate/resolve", url.Values{"decision": {"approve"}}, "")
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("missing CSRF = %d, want 403", res.StatusCode)
	}
}

func TestInboxPage(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	rita := e.user("rita", store.RoleReviewer)
	conv := e.conversation(ann)
	e.pendingCall(conv, "g1", "approval", "reviewer")
	e.pendingCall(conv, "g2", "approval", "reviewer")
	e.pendingCall(conv, "own", "approval", "owner")
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
	// The owner's own inbox has the call they may decide, not the reviewer-gated ones.
	doc = viewstest.MustParse(readBody(e.browser(ann).do("GET", "/inbox", "", nil)))
	cards = doc.All(`[data-parley="inbox"] [data-parley="approval"]`)
	if len(cards) != 1 {
		t.Fatalf("owner sees %d approvals, want 1", len(cards))
	}
	if id, _ := viewstest.Attr(cards[0], "data-tool-call-id"); id != "own" {
		t.Errorf("owner's approval = %q", id)
	}
	// A decision that lost the race comes back to the inbox saying so.
	doc = viewstest.MustParse(readBody(e.browser(rita).do("GET", "/inbox?notice=stale", "", nil)))
	if n, c := doc.One(`[data-parley="inbox-page"] [data-parley="notice"]`); c != 1 || !strings.Contains(viewstest.Text(n), "already decided") {
		t.Errorf("stale notice missing from the inbox")
	}
}

func TestInvalidDecisionComesBackWithErrors(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	rita := e.user("rita", store.RoleReviewer)
	conv := e.conversation(ann)
	e.pendingCall(conv, "gate", "approval", "reviewer")
	e.setView(approvalView(conv, "gate", tools.ByReviewer))
	r := e.browser(rita)
	path := "/conversations/" + conv.ID + "/calls/gate/resolve"
	bad := url.Values{"decision": {"approve"}, "args": {"{nope"}, "return": {"/inbox"}}
	fetch := func(v url.Values) (int, fetchAnswer) {
		v.Set("_csrf", r.csrf)
		res := r.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(v.Encode()), "X-Parley-Fetch", "1", "Accept", "application/json")
		var ans fetchAnswer
		if err := json.Unmarshal([]byte(readBody(res)), &ans); err != nil {
			t.Fatalf("not a fetch answer: %v", err)
		}
		return res.StatusCode, ans
	}
	// From the inbox, without JavaScript: the inbox again, the error beside the field.
	res := r.postForm(path, bad, r.csrf)
	doc := viewstest.MustParse(readBody(res))
	if res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("inbox invalid = %d", res.StatusCode)
	}
	if _, n := doc.One(`[data-parley="inbox"] [data-parley="approval"][data-tool-call-id="gate"] [data-parley="field-error"][data-field="args"]`); n != 1 {
		t.Errorf("inbox card lacks the args error")
	}
	// From the inbox over fetch: the entry with its error, to put in place.
	status, ans := fetch(bad)
	if status != http.StatusUnprocessableEntity || ans.OK || ans.Target != "call-gate" || ans.HTML == nil || !strings.Contains(*ans.HTML, `data-field="args"`) {
		t.Errorf("inbox fetch invalid = %d %+v", status, ans)
	}
	// From the conversation page over fetch (the owner's own view of an owner-gated call).
	e.pendingCall(conv, "mine", "approval", "owner")
	v := approvalView(conv, "gate", tools.ByReviewer)
	v.Calls = append(v.Calls, approvalView(conv, "mine", tools.ByOwner).Calls...)
	e.setView(v)
	a := e.browser(ann)
	res = a.do("POST", "/conversations/"+conv.ID+"/calls/mine/resolve", "application/x-www-form-urlencoded",
		strings.NewReader(url.Values{"decision": {"approve"}, "args": {"[1,"}, "_csrf": {a.csrf}}.Encode()), "X-Parley-Fetch", "1", "Accept", "application/json")
	if err := json.Unmarshal([]byte(readBody(res)), &ans); err != nil || res.StatusCode != http.StatusUnprocessableEntity ||
		ans.HTML == nil || !strings.Contains(*ans.HTML, "not valid JSON") {
		t.Errorf("page fetch invalid = %d %+v %v", res.StatusCode, ans, err)
	}
	// A success over fetch from the inbox removes the entry.
	status, ans = fetch(url.Values{"decision": {"approve"}, "return": {"/inbox"}})
	if status != http.StatusOK || !ans.OK || ans.HTML == nil || *ans.HTML != "" || ans.Target != "call-gate" {
		t.Errorf("inbox fetch ok = %d %+v", status, ans)
	}
	if got := e.lastResolution(t); got.call != "gate" || got.by.UserID != rita.ID {
		t.Errorf("resolution = %+v", got)
	}
}

func TestSameJSONComparesValues(t *testing.T) {
	tests := []struct {
		edited, orig string
		same         bool
	}{
		{"{\n  \"to\": \"a<b>&c\"\n}", `{"to":"a\u003cb\u003e\u0026c"}`, true},
		{`{"b":1,"a":[1,2]}`, `{"a":[1,2],"b":1.0}`, true},
		{`{}`, ``, true},
		{`{"to":"x"}`, `{"to":"y"}`, false},
		{`{"to":`, `{"to":"y"}`, false},
	}
	for _, tc := range tests {
		if got := sameJSON(tc.edited, json.RawMessage(tc.orig)); got != tc.same {
			t.Errorf("sameJSON(%q, %q) = %v, want %v", tc.edited, tc.orig, got, tc.same)
		}
	}
}
