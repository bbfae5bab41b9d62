package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

const questionSchema = `{"type":"object","properties":{"name":{"type":"string","title":"Name"},"age":{"type":"integer"}},"required":["name"]}`

// TestAPIBadInput: malformed requests are 4xx errors in the envelope that say what is wrong,
// never 500s, and nothing changes in the conversation: its log, its calls and its audit trail
// are as they were.
func TestAPIBadInput(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{MaxBodyBytes: 4096, APIBurst: 1000, MessageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("gate", "send_email", emailArgs("a@example.test")),
			llmtest.Call("ask", "ask_user", questionArgs("Who are you?", questionSchema)))
		before := e.view(conv.ID)
		c := e.script(owner)
		msgs := "/api/v1/conversations/" + conv.ID + "/messages"
		resolve := func(call string) string { return "/api/v1/conversations/" + conv.ID + "/calls/" + call + "/resolve" }
		big := `{"text":"` + strings.Repeat("x", 5000) + `"}`
		cases := []struct {
			name, path, body, ct string
			status               int
			kind                 fault.Kind
			msg                  string
		}{
			{"malformed JSON", msgs, `{"text": "hi"`, "", 400, fault.KindBadRequest, "malformed JSON"},
			{"not an object", msgs, `["hi"]`, "", 400, fault.KindBadRequest, "JSON object"},
			{"wrong type", msgs, `{"text": 5}`, "", 400, fault.KindBadRequest, `field "text" must be a string`},
			{"unknown field", msgs, `{"text":"hi","urgent":true}`, "", 400, fault.KindBadRequest, `unknown field "urgent"`},
			{"two objects", msgs, `{"text":"hi"}{"text":"again"}`, "", 400, fault.KindBadRequest, "exactly one"},
			{"empty body", msgs, ``, "", 400, fault.KindBadRequest, "JSON object"},
			{"missing text", msgs, `{}`, "", 422, fault.KindInvalidArgs, "text is required"},
			{"oversized", msgs, big, "", 413, fault.KindTooLarge, "larger than 4096"},
			{"form instead of JSON", msgs, `text=hi`, "application/x-www-form-urlencoded", 415, fault.KindUnsupportedMedia, "application/json"},
			{"approval answered like a question", resolve("gate"), `{"action":"accept","content":{}}`, "", 422, fault.KindInvalidArgs, "awaits an approval decision"},
			{"question answered like an approval", resolve("ask"), `{"decision":"approve"}`, "", 422, fault.KindInvalidArgs, "awaits an answer to a question"},
			{"mixed resolution", resolve("gate"), `{"decision":"approve","action":"accept"}`, "", 422, fault.KindInvalidArgs, "exactly one of"},
			{"empty resolution", resolve("gate"), `{}`, "", 422, fault.KindInvalidArgs, "exactly one of"},
			{"unknown decision", resolve("gate"), `{"decision":"maybe"}`, "", 422, fault.KindInvalidArgs, `"approve" or "deny"`},
			{"deny with edited args", resolve("gate"), `{"decision":"deny","args":{"to":"x"}}`, "", 422, fault.KindInvalidArgs, "edited arguments"},
			{"deny with a reason too long", resolve("gate"), `{"decision":"deny","reason":"` + strings.Repeat("r", agent.MaxReasonBytes+1) + `"}`, "", 422, fault.KindInvalidArgs, "the reason is too long"},
			{"unknown action", resolve("ask"), `{"action":"shrug"}`, "", 422, fault.KindInvalidArgs, "action must be"},
			{"result and error", resolve("gate"), `{"result":{},"error":{"message":"x"}}`, "", 422, fault.KindInvalidArgs, "not both"},
			{"unknown resolve field", resolve("gate"), `{"decision":"approve","why":"because"}`, "", 400, fault.KindBadRequest, `unknown field "why"`},
			{"unknown call", resolve("nope"), `{"decision":"approve"}`, "", 404, fault.KindNotFound, "no such tool call"},
			{"bad Last-Event-ID", "/api/v1/conversations/" + conv.ID + "/events", "", "", 400, fault.KindBadRequest, "Last-Event-ID"},
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
				if tc.msg == "the reason is too long" && !strings.Contains(fmt.Sprint(eb.Error.Details["problems"]), "/reason") {
					t.Fatalf("the problem is not at /reason: %+v", eb.Error.Details)
				}
			})
		}
		after := e.view(conv.ID)
		if after.LastSeq != before.LastSeq || after.Status != store.StatusAwaiting || len(after.Pending()) != 2 ||
			len(e.audit(conv.ID)) != 0 || strings.Join(e.userMessages(conv.ID), "|") != "please" {
			t.Fatalf("bad requests changed the conversation: seq %d → %d, status %s, pending %v, audit %+v, messages %v",
				before.LastSeq, after.LastSeq, after.Status, after.Pending(), e.audit(conv.ID), e.userMessages(conv.ID))
		}
	})
}

// failingStore makes the agent's appends fail while fail is set, as a store that lost its disk.
type failingStore struct {
	store.Store
	fail atomic.Bool
}

func (s *failingStore) Append(ctx context.Context, conv string, after int64, b store.Batch) (int64, error) {
	if s.fail.Load() {
		return 0, errors.New("disk on fire at /var/secret")
	}
	return s.Store.Append(ctx, conv, after, b)
}

// TestResolveStatuses: the agent's answers map to the statuses docs/api.md documents, in one place. Each
// answer has its real cause: edited arguments the tool's schema refuses, a call decided twice, a
// reviewer-gated call its owner tries to approve, a call that does not exist, a message while a
// turn is open, a store that fails.
func TestResolveStatuses(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		var fs *failingStore
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000},
			withAgentStore(func(st store.Store) store.Store { fs = &failingStore{Store: st}; return fs }))
		owner := e.user("owner", store.RoleMember)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("gate", "send_email", emailArgs("a@example.test")),
			llmtest.Call("rev", "publish", map[string]any{"text": "hello"}),
			llmtest.Call("ask", "ask_user", questionArgs("Who are you?", questionSchema)))
		c := e.script(owner)
		path := func(call string) string { return "/api/v1/conversations/" + conv.ID + "/calls/" + call + "/resolve" }
		cases := []struct {
			name, path, body string
			status           int
			kind             fault.Kind
			before, after    func()
		}{
			{name: "invalid args", path: path("gate"), body: `{"decision":"approve","args":{"to":"not an email","subject":"lunch","body":"x"}}`,
				status: 422, kind: fault.KindInvalidArgs},
			{name: "ok", path: path("gate"), body: `{"decision":"approve","args":{"to":"b@example.test","subject":"lunch","body":"See you at noon."}}`,
				status: 200, after: func() { e.awaitCalls(conv.ID, store.CallResolved, "gate") }},
			{name: "stale", path: path("gate"), body: `{"decision":"approve"}`, status: 409, kind: fault.KindStale},
			{name: "permission", path: path("rev"), body: `{"decision":"approve"}`, status: 403, kind: fault.KindPermissionDenied},
			{name: "not found", path: path("nope"), body: `{"decision":"approve"}`, status: 404, kind: fault.KindNotFound},
			{name: "internal", path: path("ask"), body: `{"action":"decline"}`, status: 500, kind: fault.KindInternal,
				before: func() { fs.fail.Store(true) }, after: func() { fs.fail.Store(false) }},
		}
		for _, tc := range cases {
			if tc.before != nil {
				tc.before()
			}
			res := c.api("POST", tc.path, tc.body)
			if tc.after != nil {
				tc.after()
			}
			if res.StatusCode != tc.status {
				t.Fatalf("%s: status %d, want %d: %s", tc.name, res.StatusCode, tc.status, readBody(res))
			}
			if tc.status == 200 {
				if body := readBody(res); strings.TrimSpace(body) != `{"ok":true}` {
					t.Fatalf("%s: body %s", tc.name, body)
				}
				continue
			}
			eb := decodeEnvelope(t, res)
			if eb.Error.Kind != tc.kind {
				t.Fatalf("%s: kind %s, want %s", tc.name, eb.Error.Kind, tc.kind)
			}
			switch tc.kind {
			case fault.KindInvalidArgs:
				if _, ok := eb.Error.Details["problems"]; !ok {
					t.Fatalf("%s: schema problems not in details: %+v", tc.name, eb.Error)
				}
			case fault.KindInternal:
				ref, _ := eb.Error.Details["ref"].(string)
				if strings.Contains(eb.Error.Message, "secret") || ref == "" {
					t.Fatalf("%s: internal error leaked or has no reference: %+v", tc.name, eb.Error)
				}
				// The caller's reference is the one the agent logged the cause under (one hop), and
				// the server's log ties it to the request.
				if !regexp.MustCompile(ref+`.*disk on fire`).MatchString(e.alog.String()) || !strings.Contains(e.wlog.String(), ref) {
					t.Fatalf("%s: reference %s does not lead to the cause:\nweb: %s\nagent: %s", tc.name, ref, e.wlog, e.alog)
				}
			}
		}
		// The approval reached the agent once, with the edited arguments (as the tool parsed them).
		gate := e.awaitCalls(conv.ID, store.CallResolved, "gate")
		if g := findCall(gate, "gate"); g.Decision != "approve_edited" || g.DecidedBy != owner.ID ||
			string(g.Args) != `{"body":"See you at noon.","subject":"lunch","to":"b@example.test"}` {
			t.Fatalf("the resolution reached the agent as %+v %s", g, g.Args)
		}
		if got := e.auditOf(conv.ID, "gate"); strings.Join(got, ",") != "approve_edited by owner" {
			t.Fatalf("audit of gate: %v", got)
		}
		// The failed commit changed nothing: the question still waits, and can be answered.
		if c := e.call(conv.ID, "ask"); c.Status != store.CallAwaiting {
			t.Fatalf("the question after a failed commit: %+v", c)
		}
		if res := c.api("POST", path("ask"), `{"action":"decline"}`); res.StatusCode != 200 {
			t.Fatalf("declining once the store is back: %d %s", res.StatusCode, readBody(res))
		} else {
			readBody(res)
		}
	})
}

// TestConversationJSON: create, list and get have the API's shapes.
func TestConversationJSON(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
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
		readBody(res)
		res = c.api("GET", "/api/v1/conversations", "")
		var list struct{ Conversations []conversationJSON }
		if err := json.Unmarshal([]byte(readBody(res)), &list); err != nil || len(list.Conversations) != 2 {
			t.Fatalf("list: %v %+v", err, list)
		}
		e.pending(agent.Summary{ID: created.ID}, owner, llmtest.Call("c1", "send_email", emailArgs("bob@example.test")))
		res = c.api("GET", "/api/v1/conversations/"+created.ID, "")
		var got map[string]any
		if err := json.Unmarshal([]byte(readBody(res)), &got); err != nil {
			t.Fatal(err)
		}
		args := `{"body":"See you at noon.","subject":"lunch","to":"bob@example.test"}`
		want := fmt.Sprintf(`{"id":%q,"last_seq":3,"messages":[{"content":"please","role":"user"}],`+
			`"pending":{"c1":{"approvals_needed":1,"executor":"server","expires_at":"2026-03-01T09:10:00Z","kind":"approval",`+
			`"prompt":{"args":%s,"plan":{"details":%s,"summary":"Would send an email to bob@example.test with the subject \"lunch\""},"tool":"send_email"}}},`+
			`"status":"awaiting","title":"Trip",`+
			`"tool_calls":[{"approval":"requires_approval","args":%s,"executor":"server","id":"c1","name":"send_email","result":null,"status":"awaiting"}]}`,
			created.ID, args, args, args)
		if b, _ := json.Marshal(got); string(b) != want {
			t.Fatalf("conversation JSON\n got %s\nwant %s", b, want)
		}
	})
}

// TestApprovalsListing: GET /api/v1/approvals lists what waits for the caller's decision, for
// reviewers and admins (a member has no inbox: 403, their calls wait on their conversations'
// pages): their own owner-approved calls and the reviewer-gated calls of other people — never
// their own reviewer-gated call (someone else decides it), never a question, never another
// owner's owner-approved call (an admin may override one, but is not asked to).
func TestApprovalsListing(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		alice := e.user("alice", store.RoleMember)
		bob := e.user("bob", store.RoleMember)
		rev := e.user("rev", store.RoleReviewer)
		admin := e.user("admin", store.RoleAdmin)
		ca, cb, cr := e.conversation(alice), e.conversation(bob), e.conversation(rev)
		e.pending(ca, alice, llmtest.Call("a-own", "send_email", emailArgs("x@example.test")),
			llmtest.Call("a-rev", "publish", map[string]any{"text": "a"}),
			llmtest.Call("a-ask", "ask_user", questionArgs("Who?", questionSchema)))
		e.aclk.Advance(time.Second) // newest first: what follows is newer
		e.pending(cb, bob, llmtest.Call("b-own", "send_email", emailArgs("x@example.test")))
		e.aclk.Advance(time.Second)
		e.pending(cr, rev, llmtest.Call("r-own", "send_email", emailArgs("x@example.test")),
			llmtest.Call("r-rev", "publish", map[string]any{"text": "r"}))
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
		}{{rev, "r-own,a-rev"}, {admin, "r-rev,a-rev"}} {
			if got := ids(e.script(tc.who)); got != tc.want {
				t.Errorf("%s sees %q, want %q", tc.who.Name, got, tc.want)
			}
		}
		for _, u := range []store.User{alice, bob} {
			if res := e.script(u).api("GET", "/api/v1/approvals", ""); res.StatusCode != 403 {
				t.Errorf("%s (a member) lists approvals: %d, want 403", u.Name, res.StatusCode)
			}
		}
		// The listing carries what a card needs.
		var out struct{ Approvals []approvalJSON }
		if err := json.Unmarshal([]byte(readBody(e.script(rev).api("GET", "/api/v1/approvals", ""))), &out); err != nil || len(out.Approvals) != 2 {
			t.Fatalf("rev's approvals: %v %+v", err, out)
		}
		a := out.Approvals[0]
		if a.ConversationID != cr.ID || a.Title != "t" || a.OwnerID != rev.ID || a.Tool != "send_email" || a.Approvers != "owner" ||
			a.ExpiresAt == nil || !strings.Contains(string(a.Prompt), `"plan"`) || !strings.Contains(string(a.Args), "x@example.test") {
			t.Errorf("approval %+v (prompt %s)", a, a.Prompt)
		}
	})
}
