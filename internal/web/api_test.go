package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
)

// TestAPIBadInput: malformed requests are 4xx errors in the envelope that say what is wrong,
// never 500s, and nothing reaches the agent.
func TestAPIBadInput(t *testing.T) {
	e := newTestEnv(t, Config{MaxBodyBytes: 4096, APIBurst: 1000, MessageBurst: 1000})
	owner := e.user("owner", store.RoleMember)
	conv := e.conversation(owner)
	e.pendingCall(conv, "gate", "approval", "owner")
	e.pendingCall(conv, "ask", "elicitation", "owner")
	c := e.script(owner)
	msgs := "/api/v1/conversations/" + conv.ID + "/messages"
	resolve := func(call string) string { return "/api/v1/conversations/" + conv.ID + "/calls/" + call + "/resolve" }
	big := `{"text":"` + strings.Repeat("x", 5000) + `"}`
	cases := []struct {
		name, path, body, ct string
		status               int
		kind                 tools.Kind
		msg                  string
	}{
		{"malformed JSON", msgs, `{"text": "hi"`, "", 400, tools.KindBadRequest, "malformed JSON"},
		{"not an object", msgs, `["hi"]`, "", 400, tools.KindBadRequest, "JSON object"},
		{"wrong type", msgs, `{"text": 5}`, "", 400, tools.KindBadRequest, `field "text" must be a string`},
		{"unknown field", msgs, `{"text":"hi","urgent":true}`, "", 400, tools.KindBadRequest, `unknown field "urgent"`},
		{"two objects", msgs, `{"text":"hi"}{"text":"again"}`, "", 400, tools.KindBadRequest, "exactly one"},
		{"empty body", msgs, ``, "", 400, tools.KindBadRequest, "JSON object"},
		{"missing text", msgs, `{}`, "", 422, tools.KindInvalidArgs, "text is required"},
		{"oversized", msgs, big, "", 413, tools.KindTooLarge, "larger than 4096"},
		{"form instead of JSON", msgs, `text=hi`, "application/x-www-form-urlencoded", 415, tools.KindUnsupportedMedia, "application/json"},
		{"approval answered like a question", resolve("gate"), `{"action":"accept","content":{}}`, "", 422, tools.KindInvalidArgs, "awaits an approval decision"},
		{"question answered like an approval", resolve("ask"), `{"decision":"approve"}`, "", 422, tools.KindInvalidArgs, "awaits an answer to a question"},
		{"mixed resolution", resolve("gate"), `{"decision":"approve","action":"accept"}`, "", 422, tools.KindInvalidArgs, "exactly one of"},
		{"empty resolution", resolve("gate"), `{}`, "", 422, tools.KindInvalidArgs, "exactly one of"},
		{"unknown decision", resolve("gate"), `{"decision":"maybe"}`, "", 422, tools.KindInvalidArgs, `"approve" or "deny"`},
		{"deny with edited args", resolve("gate"), `{"decision":"deny","args":{"to":"x"}}`, "", 422, tools.KindInvalidArgs, "edited arguments"},
		{"unknown action", resolve("ask"), `{"action":"shrug"}`, "", 422, tools.KindInvalidArgs, "action must be"},
		{"result and error", resolve("gate"), `{"result":{},"error":{"message":"x"}}`, "", 422, tools.KindInvalidArgs, "not both"},
		{"unknown resolve field", resolve("gate"), `{"decision":"approve","why":"because"}`, "", 400, tools.KindBadRequest, `unknown field "why"`},
		{"unknown call", resolve("nope"), `{"decision":"approve"}`, "", 404, tools.KindNotFound, "no such tool call"},
		{"bad Last-Event-ID", "/api/v1/conversations/" + conv.ID + "/events", "", "", 400, tools.KindBadRequest, "Last-Event-ID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			var hdr []string
			if strings.HasSuffix(tc.path, "/events") {
				method, hdr = "GET", []string{"Last-Event-ID", "yesterday"}
			}
			ct := tc.ct
			if ct == "" && method == "POST" {
				ct = "application/json"
			}
			res := c.do(method, tc.path, ct, strings.NewReader(tc.body), hdr...)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, readBody(res))
			}
			eb := decodeEnvelope(t, res)
			if eb.Error.Kind != tc.kind || !strings.Contains(eb.Error.Message, tc.msg) {
				t.Fatalf("error %+v, want kind %s with %q", eb.Error, tc.kind, tc.msg)
			}
		})
	}
	if len(e.conv.sent) != 0 || len(e.conv.resolved) != 0 {
		t.Fatalf("bad requests reached the agent: %+v %+v", e.conv.sent, e.conv.resolved)
	}
}

// TestResolveStatuses: the agent's answers map to the statuses API.md fixes, in one place.
func TestResolveStatuses(t *testing.T) {
	e := newTestEnv(t, Config{APIBurst: 1000})
	owner := e.user("owner", store.RoleMember)
	conv := e.conversation(owner)
	e.pendingCall(conv, "gate", "approval", "owner")
	c := e.script(owner)
	path := "/api/v1/conversations/" + conv.ID + "/calls/gate/resolve"
	problems := map[string]any{"problems": []map[string]any{{"path": "/to", "message": "must be an email"}}}
	cases := []struct {
		name   string
		err    error
		status int
		kind   tools.Kind
	}{
		{"ok", nil, 200, ""},
		{"stale", tools.NewError(tools.KindStale, "already decided", nil), 409, tools.KindStale},
		{"permission", tools.NewError(tools.KindPermissionDenied, "a reviewer decides this", nil), 403, tools.KindPermissionDenied},
		{"not found", tools.NewError(tools.KindNotFound, "no such call", nil), 404, tools.KindNotFound},
		{"invalid args", tools.NewError(tools.KindInvalidArgs, "the arguments do not match", problems), 422, tools.KindInvalidArgs},
		{"conflict", tools.NewError(tools.KindConflict, "raced", nil), 409, tools.KindConflict},
		{"internal", errors.New("disk on fire at /var/secret"), 500, tools.KindInternal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.conv.mu.Lock()
			e.conv.resolveErr = tc.err
			e.conv.mu.Unlock()
			res := c.api("POST", path, `{"decision":"approve","args":{"to":"b@example.test"}}`)
			if res.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tc.status, readBody(res))
			}
			if tc.err == nil {
				if body := readBody(res); strings.TrimSpace(body) != `{"ok":true}` {
					t.Fatalf("body %s", body)
				}
				return
			}
			eb := decodeEnvelope(t, res)
			if eb.Error.Kind != tc.kind {
				t.Fatalf("kind %s, want %s", eb.Error.Kind, tc.kind)
			}
			switch tc.kind {
			case tools.KindInvalidArgs:
				if _, ok := eb.Error.Details["problems"]; !ok {
					t.Fatalf("schema problems not in details: %+v", eb.Error)
				}
			case tools.KindInternal:
				if strings.Contains(eb.Error.Message, "secret") || eb.Error.Details["ref"] == nil {
					t.Fatalf("internal error leaked or has no reference: %+v", eb.Error)
				}
			}
		})
	}
	if len(e.conv.resolved) != 1 || string(e.conv.resolved[0].r.Args) != `{"to":"b@example.test"}` || e.conv.resolved[0].r.Decision != "approve" {
		t.Fatalf("the resolution reached the agent as %+v", e.conv.resolved)
	}
}

// TestConversationJSON: create, list and get have the API's shapes.
func TestConversationJSON(t *testing.T) {
	e := newTestEnv(t, Config{})
	owner := e.user("owner", store.RoleMember)
	c := e.script(owner)
	res := c.api("POST", "/api/v1/conversations", `{"title":"Trip"}`)
	var created struct{ ID string }
	if res.StatusCode != 201 || json.Unmarshal([]byte(readBody(res)), &created) != nil || created.ID == "" {
		t.Fatalf("create: %d", res.StatusCode)
	}
	res = c.api("POST", "/api/v1/conversations", "")
	if res.StatusCode != 201 {
		t.Fatalf("create without a body: %d %s", res.StatusCode, readBody(res))
	}
	res = c.api("GET", "/api/v1/conversations", "")
	var list struct{ Conversations []conversationJSON }
	if err := json.Unmarshal([]byte(readBody(res)), &list); err != nil || len(list.Conversations) != 2 {
		t.Fatalf("list: %v %+v", err, list)
	}
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	e.conv.views[created.ID] = agent.View{ID: created.ID, Status: store.StatusAwaiting,
		Messages: []agent.Message{{Seq: 1, Role: "user", Content: "email Bob"}},
		Calls: []agent.CallView{{ID: "c1", Name: "send_email", Executor: tools.Server, Approval: tools.RequiresApproval,
			Status: store.CallAwaiting, Args: json.RawMessage(`{"to":"bob@example.test"}`)}},
		Pending: map[string]agent.PendingView{"c1": {Executor: tools.Server, Kind: tools.PendingApproval, Prompt: map[string]any{"summary": "send"}, ExpiresAt: &exp}},
	}
	res = c.api("GET", "/api/v1/conversations/"+created.ID, "")
	var got map[string]any
	if err := json.Unmarshal([]byte(readBody(res)), &got); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"id":%q,"last_seq":0,"messages":[{"content":"email Bob","role":"user"}],"pending":{"c1":{"executor":"server","expires_at":"2030-01-01T00:00:00Z","kind":"approval","prompt":{"summary":"send"}}},"status":"awaiting","title":"","tool_calls":[{"approval":"requires_approval","args":{"to":"bob@example.test"},"executor":"server","id":"c1","name":"send_email","result":null,"status":"awaiting"}]}`, created.ID)
	if b, _ := json.Marshal(got); string(b) != want {
		t.Fatalf("conversation JSON\n got %s\nwant %s", b, want)
	}
}

// TestApprovalsListing: a member sees the approvals they may decide; a reviewer also sees every
// reviewer-gated approval.
func TestApprovalsListing(t *testing.T) {
	e := newTestEnv(t, Config{})
	alice := e.user("alice", store.RoleMember)
	bob := e.user("bob", store.RoleMember)
	rev := e.user("rev", store.RoleReviewer)
	ca, cb, cr := e.conversation(alice), e.conversation(bob), e.conversation(rev)
	e.pendingCall(ca, "a-own", "approval", "owner")
	e.pendingCall(ca, "a-rev", "approval", "reviewer")
	e.pendingCall(ca, "a-ask", "elicitation", "owner")
	e.pendingCall(cb, "b-own", "approval", "owner")
	e.pendingCall(cr, "r-own", "approval", "owner")
	ids := func(c *client) string {
		var out struct{ Approvals []approvalJSON }
		res := c.api("GET", "/api/v1/approvals", "")
		if err := json.Unmarshal([]byte(readBody(res)), &out); err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, a := range out.Approvals {
			s = append(s, a.ToolCallID)
		}
		return strings.Join(s, ",")
	}
	for _, tc := range []struct {
		who  store.User
		want string
	}{{alice, "a-own"}, {bob, "b-own"}, {rev, "r-own,a-rev"}} {
		if got := ids(e.script(tc.who)); got != tc.want {
			t.Errorf("%s sees %q, want %q", tc.who.Name, got, tc.want)
		}
	}
}
