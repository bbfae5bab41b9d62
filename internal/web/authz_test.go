package web

import (
	"net/http"
	"strings"
	"testing"

	"parley/internal/store"
)

// TestAuthorization runs every route as each kind of caller. A conversation is its owner's:
// anyone else gets 404; reviewers decide reviewer-gated approvals anywhere; anonymous callers
// get 401 (API) or a redirect (pages); a cookie-authenticated request without the CSRF token is
// refused.
func TestAuthorization(t *testing.T) {
	e := newTestEnv(t, Config{APIBurst: 1000, MessageBurst: 1000})
	owner := e.user("owner", store.RoleMember)
	other := e.user("other", store.RoleMember)
	reviewer := e.user("reviewer", store.RoleReviewer)
	admin := e.user("admin", store.RoleAdmin)
	conv := e.conversation(owner)
	e.pendingCall(conv, "own-call", "approval", "owner")
	conv2 := e.conversation(owner)
	e.pendingCall(conv2, "rev-call", "approval", "reviewer")
	conv3 := e.conversation(owner)
	e.pendingCall(conv3, "ask-call", "elicitation", "owner")

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
			"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 404, "anonymous": 401, "owner-no-csrf": 200, "wrong-csrf": 200}},
		{"list conversations", "GET", "/api/v1/conversations", "", map[string]int{
			"owner-cookie": 200, "owner-token": 200, "other": 200, "reviewer": 200, "admin-cookie": 200, "anonymous": 401, "owner-no-csrf": 200, "wrong-csrf": 200}},
		{"create conversation", "POST", "/api/v1/conversations", `{"title":"x"}`, map[string]int{
			"owner-cookie": 201, "owner-token": 201, "other": 201, "reviewer": 201, "admin-cookie": 201, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
		{"send message", "POST", base + conv.ID + "/messages", `{"text":"hi"}`, map[string]int{
			"owner-cookie": 202, "owner-token": 202, "other": 404, "reviewer": 404, "admin-cookie": 404, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
		{"resolve owner approval", "POST", base + conv.ID + "/calls/own-call/resolve", `{"decision":"approve"}`, map[string]int{
			"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 404, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
		{"resolve reviewer approval", "POST", base + conv2.ID + "/calls/rev-call/resolve", `{"decision":"deny","reason":"no"}`, map[string]int{
			"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 200, "admin-cookie": 200, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
		{"reviewer sends a browser result to a reviewer-gated call", "POST", base + conv2.ID + "/calls/rev-call/resolve", `{"result":{"lat":1}}`, map[string]int{
			"other": 404, "reviewer": 404, "admin-cookie": 404}},
		{"answer someone's question", "POST", base + conv3.ID + "/calls/ask-call/resolve", `{"action":"decline"}`, map[string]int{
			"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 404}},
		{"events", "GET", base + conv.ID + "/events", "", map[string]int{
			"owner-cookie": 200, "owner-token": 200, "other": 404, "reviewer": 404, "admin-cookie": 404, "anonymous": 401}},
		{"approvals", "GET", "/api/v1/approvals", "", map[string]int{
			"owner-cookie": 200, "owner-token": 200, "other": 200, "reviewer": 200, "anonymous": 401}},
		{"tokens page", "GET", "/tokens", "", map[string]int{
			"owner-cookie": 200, "owner-token": 401, "anonymous": 303}},
		{"admin page", "GET", "/admin/users", "", map[string]int{
			"owner-cookie": 403, "reviewer": 401, "admin-cookie": 200, "anonymous": 303}},
		{"set role", "POST", "/admin/users/" + other.ID + "/role", "role=reviewer", map[string]int{
			"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403, "wrong-csrf": 403}},
		{"close sign-up", "POST", "/admin/signup", "open=true", map[string]int{
			"owner-cookie": 403, "reviewer": 401, "admin-cookie": 303, "anonymous": 403}},
		{"create token", "POST", "/tokens", "name=ci", map[string]int{
			"owner-cookie": 201, "owner-token": 401, "anonymous": 403, "owner-no-csrf": 403, "wrong-csrf": 403}},
		{"unknown API route", "GET", "/api/v1/nope", "", map[string]int{
			"owner-token": 404, "anonymous": 401}},
	}
	for _, rt := range routes {
		for who, want := range rt.want {
			t.Run(rt.name+"/"+who, func(t *testing.T) {
				c := callers[who]
				var res *http.Response
				switch {
				case rt.method == "GET":
					res = c.api("GET", rt.path, "")
				case strings.HasPrefix(rt.body, "{"):
					res = c.api(rt.method, rt.path, rt.body)
				default:
					res = c.postForm(rt.path, parseForm(rt.body), c.csrf)
				}
				var body string
				if res.Header.Get("Content-Type") == "text/event-stream" {
					res.Body.Close() // a stream never ends by itself
				} else {
					body = readBody(res)
				}
				if res.StatusCode != want {
					t.Fatalf("%s %s as %s: status %d, want %d: %s", rt.method, rt.path, who, res.StatusCode, want, body)
				}
				if res.StatusCode == 404 && strings.HasPrefix(rt.path, "/api/") && !strings.Contains(body, `"kind":"not_found"`) {
					t.Fatalf("404 without the not_found envelope: %s", body)
				}
			})
		}
	}
	// The reviewer's decision reached the agent as the reviewer, through a token.
	found := false
	for _, r := range e.conv.resolved {
		if r.call == "rev-call" && r.by.UserID == reviewer.ID && r.by.Via == viaToken {
			found = true
		}
	}
	if !found {
		t.Fatalf("the reviewer's resolve did not reach the agent: %+v", e.conv.resolved)
	}
}
