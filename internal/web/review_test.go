package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestSafeNextRefusesControlCharacters: a browser drops tabs and newlines from a URL before
// parsing it, so "/\t/evil.example" becomes the protocol-relative "//evil.example". safeNext
// must refuse any control character, not only CR and LF.
func TestSafeNextRefusesControlCharacters(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/conversations/abc?x=1", "/conversations/abc?x=1"},
		{"//evil.example/x", "/"},
		{"/\\evil.example", "/"},
		{"https://evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/\x00/evil.example", "/"},
		{"/\x7f/evil.example", "/"},
		{"/\r\n/evil.example", "/"},
	} {
		if got := safeNext(tc.in); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Through the route: a signed-in browser following a crafted sign-in link stays on the site.
	e := newTestEnv(t, openSQLite, Config{})
	b := e.browser(e.user("ada", store.RoleMember))
	res := b.do("GET", "/login?next="+url.QueryEscape("/\t/evil.example/x"), "", nil)
	readBody(res)
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/" {
		t.Fatalf("signed-in /login?next=/<tab>/evil = %d %q, want 303 to /", res.StatusCode, loc)
	}
}

// TestReviewerInvalidDecisionDoesNotShowTheConversation: a reviewer may decide a
// reviewer-gated call in someone else's conversation, but an invalid decision posted without
// return=/inbox must not answer with that whole conversation (its messages are the owner's):
// the re-render is the inbox's, whether the error is the server's (arguments that are not JSON)
// or the agent's (arguments the tool's schema refuses).
func TestReviewerInvalidDecisionDoesNotShowTheConversation(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "ann's private note"}))
		r := e.browser(rita)
		path := "/conversations/" + conv.ID + "/calls/gate/resolve"
		for _, args := range []string{"{nope", `{"text":42}`} {
			for _, fetch := range []bool{false, true} {
				vals := url.Values{"decision": {"approve"}, "args": {args}, "_csrf": {r.csrf}}
				var hdr []string
				if fetch {
					hdr = []string{"X-Parley-Fetch", "1", "Accept", "application/json"}
				}
				res := r.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(vals.Encode()), hdr...)
				body := readBody(res)
				if res.StatusCode != http.StatusUnprocessableEntity {
					t.Fatalf("args %s, fetch=%v: status %d, want 422: %s", args, fetch, res.StatusCode, body)
				}
				if strings.Contains(body, "please") || strings.Contains(body, `data-parley="composer"`) || strings.Contains(body, `data-parley="conversation"`) {
					t.Fatalf("args %s, fetch=%v: a reviewer was shown the owner's conversation: %s", args, fetch, body)
				}
			}
		}
		// A valid decision without return=/inbox goes back to the inbox, not to the owner's page.
		res := r.postForm(path, url.Values{"decision": {"approve"}}, r.csrf)
		readBody(res)
		if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/inbox" {
			t.Fatalf("reviewer decision = %d %q, want 303 to /inbox", res.StatusCode, loc)
		}
	})
}

// TestMalformedPathIDsAreNotFound: PostgreSQL refuses text with a NUL byte or invalid UTF-8,
// so a path id like %00 or %ff reached the store as an error (500). Such an id names nothing:
// 404, on every route that takes one, on either store.
func TestMalformedPathIDsAreNotFound(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000})
		u := e.user("ada", store.RoleMember)
		api := e.script(u)
		b := e.browser(u)
		for _, bad := range []string{"%00", "a%00b", "%ff", "%c3%28"} {
			for _, tc := range []struct {
				c            *client
				method, path string
				form         bool
			}{
				{api, "GET", "/api/v1/conversations/" + bad, false},
				{api, "GET", "/api/v1/conversations/" + bad + "/events", false},
				{api, "POST", "/api/v1/conversations/" + bad + "/messages", false},
				{api, "POST", "/api/v1/conversations/" + bad + "/calls/x/resolve", false},
				{b, "GET", "/conversations/" + bad, false},
				{b, "POST", "/conversations/" + bad + "/calls/x/resolve", true},
				{b, "POST", "/tokens/" + bad + "/revoke", true},
			} {
				var res *http.Response
				switch {
				case tc.form:
					res = tc.c.postForm(tc.path, url.Values{"decision": {"approve"}}, tc.c.csrf)
				case strings.HasSuffix(tc.path, "/resolve"):
					res = tc.c.api("POST", tc.path, `{"decision":"approve"}`)
				case tc.method == "POST":
					res = tc.c.api("POST", tc.path, `{"text":"hi"}`)
				default:
					res = tc.c.api("GET", tc.path, "")
				}
				body := readBody(res)
				if res.StatusCode != http.StatusNotFound {
					t.Errorf("%s %s = %d, want 404: %.200s", tc.method, tc.path, res.StatusCode, body)
				}
			}
		}
	})
}

// TestNULInTextFieldsIsNotA500: the same PostgreSQL refusal through form and JSON fields that
// are stored as text (a sign-in name, a conversation title, a token name) answers 4xx, on
// either store.
func TestNULInTextFieldsIsNotA500(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		u := e.user("ada", store.RoleMember)
		api := e.script(u)
		b := e.browser(u)
		anon := e.anon()
		checks := []struct {
			name string
			res  func() *http.Response
			want int
		}{
			{"sign-in name", func() *http.Response {
				return anon.postForm("/login", url.Values{"username": {"ada\x00"}, "password": {"password-ada"}}, anon.pageCSRF("/login"))
			}, http.StatusUnauthorized},
			{"API title", func() *http.Response { return api.api("POST", "/api/v1/conversations", `{"title":"a\u0000b"}`) }, http.StatusUnprocessableEntity},
			{"page title", func() *http.Response { return b.postForm("/conversations", url.Values{"title": {"a\x00b"}}, b.csrf) }, http.StatusUnprocessableEntity},
			{"token name", func() *http.Response { return b.postForm("/tokens", url.Values{"name": {"a\x00b"}}, b.csrf) }, http.StatusUnprocessableEntity},
		}
		for _, tc := range checks {
			res := tc.res()
			body := readBody(res)
			if res.StatusCode != tc.want {
				t.Errorf("%s: %d, want %d: %.200s", tc.name, res.StatusCode, tc.want, body)
			}
		}
		if list := e.userMessages(e.conversation(u).ID); len(list) != 0 {
			t.Fatal("a fresh conversation has messages")
		}
	})
}

// TestNULInReasonIsRefused: a decision's reason goes to the audit table's text column, which
// PostgreSQL refuses with a NUL byte (the agent's commit would fail with a 500): the API and the
// card refuse it with 422 and nothing is decided.
func TestNULInReasonIsRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("mine", "send_email", emailArgs("bob@example.com")))
		path := "/conversations/" + conv.ID + "/calls/mine/resolve"
		res := e.script(ann).api("POST", "/api/v1"+path, `{"decision":"deny","reason":"no\u0000"}`)
		if body := readBody(res); res.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("API: %d, want 422: %s", res.StatusCode, body)
		}
		b := e.browser(ann)
		res = b.postForm(path, url.Values{"decision": {"deny"}, "reason": {"no\x00"}}, b.csrf)
		if body := readBody(res); res.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("page: %d, want 422: %.300s", res.StatusCode, body)
		}
		if c := e.call(conv.ID, "mine"); c.Status != store.CallAwaiting || len(e.audit(conv.ID)) != 0 {
			t.Errorf("the call was decided: %+v", c)
		}
	})
}
