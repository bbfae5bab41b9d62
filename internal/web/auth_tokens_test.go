package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views/viewstest"
)

// pageToken creates a token through the tokens page with the form's fields and returns the
// secret the page shows once.
func pageToken(t *testing.T, b *client, form url.Values) string {
	t.Helper()
	res := b.postForm("/tokens", form, b.csrf)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("create a token %v: %d %s", form, res.StatusCode, readBody(res))
	}
	readBody(res)
	m := tokenValue.FindStringSubmatch(readBody(b.do("GET", "/tokens", "", nil)))
	if m == nil {
		t.Fatal("the created token is not shown")
	}
	return m[1]
}

// TestResolveScopedToken: a resolve token may resolve calls and read what it needs to find them
// (its user's pending approvals, one conversation); anything else is 403 permission_denied
// saying so — JSON routes, event streams and sockets alike. The tokens page shows its scope,
// expiry and last use.
func TestResolveScopedToken(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "one"}))
		b := e.browser(rita)
		s := e.anon()
		s.bearer = pageToken(t, b, url.Values{"name": {"resolver"}, "scope": {"resolve"}, "expires_days": {"7"}})

		doc := viewstest.MustParse(readBody(b.do("GET", "/tokens", "", nil)))
		row, n := doc.One(`[data-parley="token"][data-scope="resolve"]`)
		if n != 1 {
			t.Fatal("the tokens page does not list the resolve token with its scope")
		}
		if exp := viewstest.In(row, `[data-parley="token-expires"] time`); len(exp) != 1 {
			t.Error("the token's expiry shows no time")
		} else if at, _ := viewstest.Attr(exp[0], "datetime"); !strings.HasPrefix(at, e.clk.Now().Add(7*24*time.Hour).UTC().Format("2006-01-02T15:04")) {
			t.Errorf("the token's expiry is %q, want in 7 days", at)
		}

		// Outside its scope: 403 permission_denied, with a message that says what it may do.
		base := "/api/v1/conversations/" + conv.ID
		for _, rt := range [][2]string{{"GET", "/api/v1/conversations"}, {"POST", "/api/v1/conversations"},
			{"POST", base + "/messages"}, {"GET", base + "/events"}, {"POST", base + "/cancel"}, {"GET", "/api/v1/grants"}, {"GET", "/api/v1/nope"}} {
			body := ""
			if rt[0] == "POST" {
				body = `{"text":"hi"}`
			}
			res := s.api(rt[0], rt[1], body)
			if res.StatusCode != http.StatusForbidden {
				t.Fatalf("%s %s with a resolve token = %d %s", rt[0], rt[1], res.StatusCode, readBody(res))
			}
			if eb := decodeEnvelope(t, res); eb.Error.Kind != fault.KindPermissionDenied || !strings.Contains(eb.Error.Message, "only resolve") {
				t.Errorf("%s %s: %+v", rt[0], rt[1], eb.Error)
			}
		}
		for _, path := range []string{"/conversations/" + conv.ID + "/ws", "/inbox/ws"} {
			if _, res, err := s.dial(t, path, ""); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
				t.Errorf("a socket %s with a resolve token: %v %v, want 403", path, err, res)
			}
		}

		// Within it: find the call, read its conversation, resolve it.
		if res := s.api("GET", "/api/v1/approvals", ""); res.StatusCode != 200 || !strings.Contains(readBody(res), `"gate"`) {
			t.Fatalf("approvals with a resolve token = %d", res.StatusCode)
		}
		if res := s.api("GET", base, ""); res.StatusCode != 200 {
			t.Fatalf("the conversation with a resolve token = %d", res.StatusCode)
		}
		e.model.Push(llmtest.Reply("Published."))
		if res := s.api("POST", base+"/calls/gate/resolve", `{"decision":"approve"}`); res.StatusCode != 200 {
			t.Fatalf("resolve with a resolve token = %d %s", res.StatusCode, readBody(res))
		}
		if d := e.decision(conv.ID, "gate"); d == nil || d["by"] != rita.ID {
			t.Fatalf("the decision %v, want rita's", d)
		}
		doc = viewstest.MustParse(readBody(b.do("GET", "/tokens", "", nil)))
		if used := viewstest.Text(doc.All(`[data-parley="token"][data-scope="resolve"] [data-parley="token-last-used"]`)[0]); used == "never" {
			t.Error("the tokens page does not show the resolve token's use")
		}
	})
}

// TestTokenExpiry: a token with an expiry works until then; after it the API answers 401
// not_authenticated saying it expired, and an event stream opened with it ends at its next
// re-check. The tokens page marks it expired. Bad scope or expiry values are refused with a
// clear 422, never a 500.
func TestTokenExpiry(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		b := e.browser(ann)
		s := e.anon()
		s.bearer = pageToken(t, b, url.Values{"name": {"short"}, "expires_days": {"1"}})
		if res := s.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
			t.Fatalf("a fresh token = %d", res.StatusCode)
		}
		events, stop := openStream(t, s, "/api/v1/conversations/"+conv.ID+"/events", "")
		defer stop()

		e.clk.Advance(24*time.Hour + time.Second)
		// The stream's re-check timer may be armed after the jump: move on until it fires.
		streamEndsWhileAdvancing(t, e, events)
		res := s.api("GET", "/api/v1/conversations", "")
		if eb := decodeEnvelope(t, res); res.StatusCode != 401 || eb.Error.Kind != fault.KindNotAuthenticated || !strings.Contains(eb.Error.Message, "expired") {
			t.Fatalf("an expired token = %d %+v", res.StatusCode, eb.Error)
		}
		b = e.browser(ann) // a day later the browser's session is over too
		doc := viewstest.MustParse(readBody(b.do("GET", "/tokens", "", nil)))
		if _, n := doc.One(`[data-parley="token"][data-expired]`); n != 1 {
			t.Error("the tokens page does not mark the token expired")
		}

		for _, form := range []url.Values{
			{"name": {"x"}, "scope": {"root"}},
			{"name": {"x"}, "expires_days": {"0"}},
			{"name": {"x"}, "expires_days": {"soon"}},
			{"name": {"x"}, "expires_days": {"99999999999999999999"}},
			{"name": {"x"}, "expires_days": {"-3"}},
		} {
			res := b.postForm("/tokens", form, b.csrf)
			if body := readBody(res); res.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("token form %v = %d %.200s, want 422", form, res.StatusCode, body)
			}
		}
	})
}

// streamEndsWhileAdvancing moves the web clock by LiveRecheck until the event stream says
// signed_out (failing after 5 s).
func streamEndsWhileAdvancing(t *testing.T, e *testEnv, events <-chan sseEvent) {
	t.Helper()
	for deadline, ended := time.Now().Add(5*time.Second), false; !ended; {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("the stream ended without signed_out")
			}
			ended = ev.name == "signed_out"
		case <-time.After(5 * time.Millisecond):
			e.clk.Advance(e.srv.cfg.LiveRecheck)
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream is still open after 5 s of re-checks")
		}
	}
}
