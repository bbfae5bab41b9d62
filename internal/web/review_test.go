package web

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/tools"
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
	e := newTestEnv(t, Config{})
	b := e.browser(e.user("ada", store.RoleMember))
	res := b.do("GET", "/login?next="+url.QueryEscape("/\t/evil.example/x"), "", nil)
	readBody(res)
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/" {
		t.Fatalf("signed-in /login?next=/<tab>/evil = %d %q, want 303 to /", res.StatusCode, loc)
	}
}

// TestReviewerInvalidDecisionDoesNotShowTheConversation: a reviewer may decide a
// reviewer-gated call in someone else's conversation, but an invalid decision posted without
// return=/inbox must not answer with that whole conversation (its messages are the owner's).
func TestReviewerInvalidDecisionDoesNotShowTheConversation(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	rita := e.user("rita", store.RoleReviewer)
	conv := e.conversation(ann)
	e.pendingCall(conv, "gate", "approval", "reviewer")
	v := approvalView(conv, "gate", tools.ByReviewer)
	v.Messages = []agent.Message{{Role: "user", Content: "ann's private note"}}
	e.setView(v)
	r := e.browser(rita)
	path := "/conversations/" + conv.ID + "/calls/gate/resolve"
	for _, fetch := range []bool{false, true} {
		vals := url.Values{"decision": {"approve"}, "args": {"{nope"}, "_csrf": {r.csrf}}
		var hdr []string
		if fetch {
			hdr = []string{"X-Parley-Fetch", "1", "Accept", "application/json"}
		}
		res := r.do("POST", path, "application/x-www-form-urlencoded", strings.NewReader(vals.Encode()), hdr...)
		body := readBody(res)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("fetch=%v: status %d, want 422: %s", fetch, res.StatusCode, body)
		}
		if strings.Contains(body, "private note") || strings.Contains(body, `data-parley="composer"`) {
			t.Fatalf("fetch=%v: a reviewer was shown the owner's conversation: %s", fetch, body)
		}
	}
	// A valid decision without return=/inbox goes back to the inbox, not to a page they cannot see.
	res := r.postForm(path, url.Values{"decision": {"approve"}}, r.csrf)
	readBody(res)
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/inbox" {
		t.Fatalf("reviewer decision = %d %q, want 303 to /inbox", res.StatusCode, loc)
	}
}

// TestMalformedPathIDsAreNotFound: PostgreSQL refuses text with a NUL byte or invalid UTF-8,
// so a path id like %00 or %ff reached the store as an error (500). Such an id names nothing:
// 404, on every route that takes one.
func TestMalformedPathIDsAreNotFound(t *testing.T) {
	e := newPGTestEnv(t)
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
}

// TestNULInTextFieldsIsNotA500: the same PostgreSQL refusal through form and JSON fields that
// are stored as text (a sign-in name, a conversation title, a token name) answers 4xx.
func TestNULInTextFieldsIsNotA500(t *testing.T) {
	e := newPGTestEnv(t)
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
}

// newPGTestEnv is newTestEnv on PostgreSQL, whose text columns refuse what SQLite stores.
func newPGTestEnv(t *testing.T) *testEnv {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.NewURL(t)
	if err := pgstore.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := pgstore.Open(ctx, dsn, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	clk := clock.NewFake(time.Now().UTC().Truncate(time.Second))
	fc := newFakeConversations()
	srv := New(Config{PasswordCost: bcrypt.MinCost}, Deps{Store: st, Conversations: fc, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.Shutdown()
		ts.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return &testEnv{t: t, srv: srv, st: st, clk: clk, conv: fc, ts: ts, users: map[string]store.User{}}
}

// TestNULInReasonIsRefused: a decision's reason goes to the audit table's text column, which
// PostgreSQL refuses with a NUL byte (the agent's commit would fail with a 500): the API and the
// card refuse it with 422 before it reaches the agent.
func TestNULInReasonIsRefused(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	e.pendingCall(conv, "mine", "approval", "owner")
	e.setView(approvalView(conv, "mine", tools.ByOwner))
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
	if n := e.resolvedCount(); n != 0 {
		t.Errorf("%d resolutions reached the agent", n)
	}
}
