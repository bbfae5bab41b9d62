package web

import (
	"net/http"
	"strings"
	"testing"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestAuthorization runs every route as each kind of caller, against the real agent. A
// conversation is its owner's: anyone else gets 404 unless a call of it is theirs to decide (a
// reviewer's for a reviewer-gated call; an admin's, as an audited override, for an
// owner-approved call in someone else's conversation), and then they read it and decide that
// call but send nothing (403); nobody approves their own reviewer-gated call (403); anonymous
// callers get 401 (API) or a redirect (pages); a cookie-authenticated request without the CSRF
// token is refused. A resolve path's call is named after the caller ("own-{who}"), so each
// caller that may decide has a call of their own to decide.
func TestAuthorization(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		other := e.user("other", store.RoleMember)
		reviewer := e.user("reviewer", store.RoleReviewer)
		admin := e.user("admin", store.RoleAdmin)
		spare := e.user("spare", store.RoleMember) // the admin disables them and sets their password
		email, text := emailArgs("bob@example.test"), map[string]any{"text": "hello"}
		// conv: owner-approved calls; conv2: reviewer-gated ones; conv3: questions; conv4: idle.
		// A spare call in each keeps its turn waiting whatever is decided.
		conv, conv2, conv3, conv4 := e.conversation(owner), e.conversation(owner), e.conversation(owner), e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("own-owner-cookie", "send_email", email), llmtest.Call("own-owner-token", "send_email", email),
			llmtest.Call("own-admin-cookie", "send_email", email), llmtest.Call("own-spare", "send_email", email))
		e.pending(conv2, owner, llmtest.Call("rev-reviewer", "publish", text), llmtest.Call("rev-admin-cookie", "publish", text),
			llmtest.Call("rev-owner-cookie", "publish", text), llmtest.Call("rev-owner-token", "publish", text),
			llmtest.Call("rev-pending", "publish", text))
		question := questionArgs("Who?", questionSchema)
		e.pending(conv3, owner, llmtest.Call("ask-owner-cookie", "ask_user", question), llmtest.Call("ask-owner-token", "ask_user", question),
			llmtest.Call("ask-spare", "ask_user", question))
		e.model.Push(llmtest.Reply("Hi."), llmtest.Reply("Hi again.")) // the owner's two messages to conv4

		callers := map[string]*client{
			"owner-cookie":  e.browser(owner),
			"owner-token":   e.script(owner),
			"other":         e.script(other),
			"reviewer":      e.script(reviewer),
			"admin-cookie":  e.browser(admin),
			"anonymous":     e.anon(),
			"owner-no-csrf": e.browser(owner),
		}
		callers["owner-no-csrf"].csrf = ""
		callers["wrong-csrf"] = e.browser(owner)
		callers["wrong-csrf"].csrf = callers["admin-cookie"].csrf // a real token, of another session

		base := "/api/v1/conversations/"
		routes := []struct {
			name, method, path, body string
			want                     map[string]int
		}{
			{"get conversation", "GET", base + conv.ID, "", map[string]int{
				"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 200, "anonymous": 401, "owner-no-csrf": 200, "wrong-csrf": 200}},
			{"get a conversation with a reviewer-gated call", "GET", base + conv2.ID, "", map[string]int{
				"owner-token": 200, "other": 404, "reviewer": 200, "admin-cookie": 200}},
			{"get a conversation with questions only", "GET", base + conv3.ID, "", map[string]int{
				"owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 404}},
			{"list conversations", "GET", "/api/v1/conversations", "", map[string]int{
				"owner-cookie": 200, "owner-token": 200, "other": 200, "reviewer": 200, "admin-cookie": 200, "anonymous": 401, "owner-no-csrf": 200, "wrong-csrf": 200}},
			{"create conversation", "POST", "/api/v1/conversations", `{"title":"x"}`, map[string]int{
				"owner-cookie": 201, "owner-token": 201, "other": 201, "reviewer": 201, "admin-cookie": 201, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
			{"send message", "POST", base + conv4.ID + "/messages", `{"text":"hi"}`, map[string]int{
				"owner-cookie": 202, "owner-token": 202, "other": 404, "reviewer": 404, "admin-cookie": 404, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
			{"send message where a call is theirs to decide", "POST", base + conv.ID + "/messages", `{"text":"hi"}`, map[string]int{
				"other": 404, "reviewer": 404, "admin-cookie": 403}},
			// The owner's message there would move on (cancel the calls); their stop would too.
			{"stop someone's turn", "POST", base + conv.ID + "/cancel", "", map[string]int{
				"other": 404, "reviewer": 404, "admin-cookie": 403, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
			{"stop a turn where a reviewer-gated call waits", "POST", base + conv2.ID + "/cancel", "", map[string]int{
				"other": 404, "reviewer": 403}},
			{"send message where a reviewer-gated call waits", "POST", base + conv2.ID + "/messages", `{"text":"hi"}`, map[string]int{
				"other": 404, "reviewer": 403, "admin-cookie": 403}},
			{"resolve owner approval", "POST", base + conv.ID + "/calls/own-{who}/resolve", `{"decision":"approve"}`, map[string]int{
				"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 200, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
			{"resolve reviewer approval", "POST", base + conv2.ID + "/calls/rev-{who}/resolve", `{"decision":"deny","reason":"no"}`, map[string]int{
				"owner-cookie": 403, "owner-token": 403, "other": 404, "reviewer": 200, "admin-cookie": 200, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
			{"reviewer sends a browser result to a reviewer-gated call", "POST", base + conv2.ID + "/calls/rev-pending/resolve", `{"result":{"lat":1}}`, map[string]int{
				"other": 404, "reviewer": 422, "admin-cookie": 422}},
			{"answer someone's question", "POST", base + conv3.ID + "/calls/ask-{who}/resolve", `{"action":"decline"}`, map[string]int{
				"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 404}},
			{"events", "GET", base + conv.ID + "/events", "", map[string]int{
				"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 200, "anonymous": 401}},
			{"approvals", "GET", "/api/v1/approvals", "", map[string]int{
				"owner-cookie": 403, "owner-token": 403, "other": 403, "reviewer": 200, "anonymous": 401}},
			{"tokens page", "GET", "/tokens", "", map[string]int{
				"owner-cookie": 200, "owner-token": 401, "anonymous": 303}},
			{"admin page", "GET", "/admin/users", "", map[string]int{
				"owner-cookie": 403, "reviewer": 401, "admin-cookie": 200, "anonymous": 303}},
			{"set role", "POST", "/admin/users/" + other.ID + "/role", "role=reviewer", map[string]int{
				"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403, "wrong-csrf": 403}},
			{"create an account", "POST", "/admin/users", "name=newbie&role=member&password=newbie-password", map[string]int{
				"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403, "wrong-csrf": 403}},
			{"disable an account", "POST", "/admin/users/" + spare.ID + "/disabled", "disabled=true", map[string]int{
				"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403, "wrong-csrf": 403}},
			{"set another's password", "POST", "/admin/users/" + spare.ID + "/password", "password=a-new-password", map[string]int{
				"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403, "wrong-csrf": 403}},
			{"close sign-up", "POST", "/admin/signup", "open=true", map[string]int{
				"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403}},
			{"create token", "POST", "/tokens", "name=ci", map[string]int{
				"owner-cookie": 303, "owner-token": 401, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
			{"unknown API route", "GET", "/api/v1/nope", "", map[string]int{
				"owner-token": 404, "anonymous": 401}},
		}
		for _, rt := range routes {
			for who, want := range rt.want {
				t.Run(rt.name+"/"+who, func(t *testing.T) {
					c := callers[who]
					path := strings.ReplaceAll(rt.path, "{who}", who)
					var res *http.Response
					switch {
					case rt.method == "GET":
						res = c.api("GET", path, "")
					case strings.HasPrefix(rt.body, "{"):
						res = c.api(rt.method, path, rt.body)
					default:
						res = c.postForm(path, parseForm(rt.body), c.csrf)
					}
					var body string
					if res.Header.Get("Content-Type") == "text/event-stream" {
						res.Body.Close() // a stream never ends by itself
					} else {
						body = readBody(res)
					}
					if res.StatusCode != want {
						t.Fatalf("%s %s as %s: status %d, want %d: %s", rt.method, path, who, res.StatusCode, want, body)
					}
					if res.StatusCode == 404 && strings.HasPrefix(path, "/api/") && !strings.Contains(body, `"kind":"not_found"`) {
						t.Fatalf("404 without the not_found envelope: %s", body)
					}
					if res.StatusCode == http.StatusAccepted {
						e.awaitStatus(conv4.ID, store.StatusIdle) // the next message starts a turn of its own
					}
				})
			}
		}
		// The decisions reached the agent as their deciders: the reviewer's through a token, the
		// admin's owner-approved one as an audited override.
		if d := e.decision(conv2.ID, "rev-reviewer"); d["by"] != reviewer.ID || d["via"] != viaToken || d["role"] != string(store.RoleReviewer) || d["decision"] != "deny" {
			t.Fatalf("the reviewer's decision: %v", d)
		}
		want := map[string]string{
			"own-owner-cookie": "approve by owner", "own-owner-token": "approve by owner", "own-admin-cookie": "override_approve by admin",
			"own-spare": "", "rev-reviewer": "deny by reviewer", "rev-admin-cookie": "deny by admin", "rev-owner-cookie": "",
			"rev-owner-token": "", "rev-pending": "", "ask-owner-cookie": "decline by owner", "ask-owner-token": "decline by owner", "ask-spare": "",
		}
		for call, w := range want {
			c := conv.ID
			switch call[:3] {
			case "rev":
				c = conv2.ID
			case "ask":
				c = conv3.ID
			}
			if got := strings.Join(e.auditOf(c, call), ","); got != w {
				t.Errorf("audit of %s: %q, want %q", call, got, w)
			}
		}
		if got := strings.Join(e.userMessages(conv4.ID), "|"); got != "hi|hi" {
			t.Errorf("messages sent: %q", got)
		}
		if d := e.decision(conv.ID, "own-owner-cookie"); d["via"] != viaSession {
			t.Errorf("the owner's page decision: %v", d)
		}
	})
}
