package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestDeciderReadsOnlyWhileACallAwaitsThem: a reviewer reads the conversation of a call that
// awaits their decision (the API, the page, its event stream, its socket); once they decided it,
// the API and the page answer 404 as they do for any other member, the stream ends with
// signed_out and the socket closes before the owner's later messages reach them. Their own
// decision is still answered (200, back to the inbox), and a late one is 409 stale.
func TestDeciderReadsOnlyWhileACallAwaitsThem(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000, PageBurst: 1000})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		other := e.user("other", store.RoleMember)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("p1", "publish", map[string]any{"text": "hello"}))
		api := "/api/v1/conversations/" + conv.ID
		rs := e.script(rita)
		if res := rs.api("GET", api, ""); res.StatusCode != http.StatusOK {
			t.Fatalf("the reviewer reads while the call awaits them: %d %s", res.StatusCode, readBody(res))
		}
		events, stop := openStream(t, rs, api+"/events", "")
		defer stop()
		rb := e.browser(rita)
		conn, _, err := rb.dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)

		e.model.Push(llmtest.Reply("published"))
		if res := rs.api("POST", api+"/calls/p1/resolve", `{"decision":"approve"}`); res.StatusCode != http.StatusOK {
			t.Fatalf("the reviewer approves: %d %s", res.StatusCode, readBody(res))
		}
		nextNamed(t, events, "signed_out", func(ev sseEvent) {
			if ev.name == "entry" && strings.Contains(ev.data, "tool_result") {
				t.Errorf("the stream passed on the call's result: %s", ev.data)
			}
		})
		if st := readClosed(t, conn); st != websocket.StatusPolicyViolation {
			t.Fatalf("the reviewer's socket closed with %v, want policy violation", st)
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
		e.say(conv, ann, "a private note", llmtest.Reply("noted"))
		e.awaitStatus(conv.ID, store.StatusIdle)

		want := readBody(e.script(other).api("GET", api, ""))
		res := rs.api("GET", api, "")
		if got := readBody(res); res.StatusCode != http.StatusNotFound || got != want || strings.Contains(got, "private") {
			t.Fatalf("the reviewer reads after the decision: %d %s; a member gets %s", res.StatusCode, got, want)
		}
		if res := rb.do("GET", "/conversations/"+conv.ID, "", nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("the reviewer opens the page after the decision: %d", res.StatusCode)
		}
		if res := rs.api("POST", api+"/calls/p1/resolve", `{"decision":"deny"}`); res.StatusCode != http.StatusConflict {
			t.Fatalf("the reviewer's late resolve: %d %s", res.StatusCode, readBody(res))
		}
		if res := e.script(other).api("POST", api+"/calls/p1/resolve", `{"decision":"deny"}`); res.StatusCode != http.StatusNotFound {
			t.Fatalf("a member's resolve: %d", res.StatusCode)
		}
		if res := rb.postForm(resolveURLFor(conv.ID, "p1"), url.Values{"decision": {"deny"}, "return": {"/inbox"}}, rb.csrf); res.StatusCode != http.StatusSeeOther ||
			!strings.HasPrefix(res.Header.Get("Location"), "/inbox") {
			t.Fatalf("the reviewer's late decision from the inbox: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
	})
}
