package web

import (
	"net/http"
	"net/url"
	"regexp"
	"testing"

	"parley/internal/agent"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestUnroutableIDsAreResolvable: a model whose call ids hold "/", "?" or "#" (which made the
// page's resolve URL unroutable, so the call could only expire) gets fresh ids for them; the
// calls are then resolved from the page's card and from the API like any other.
func TestUnroutableIDsAreResolvable(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.say(conv, ann, "two emails", llmtest.Calls(
			llmtest.Call("a/../b", "send_email", emailArgs("bob@example.com")),
			llmtest.Call("c?d#e", "send_email", emailArgs("carol@example.com"))))
		v := e.await(conv.ID, "two calls awaiting", func(v agent.View) bool { return len(v.Pending()) == 2 })
		safe := regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.:-]*$`)
		ids := []string{}
		for _, c := range v.Calls {
			if !safe.MatchString(c.ID) {
				t.Fatalf("call id %q would not route", c.ID)
			}
			ids = append(ids, c.ID)
		}
		// The page's card posts to the call's own URL, and the decision lands.
		b := e.browser(ann)
		page := readBody(b.do("GET", "/conversations/"+conv.ID, "", nil))
		action := "/conversations/" + conv.ID + "/calls/" + ids[0] + "/resolve"
		if !regexp.MustCompile(regexp.QuoteMeta(`action="` + action + `"`)).MatchString(page) {
			t.Fatalf("no form posts to %s", action)
		}
		if res := b.postForm(action, url.Values{"decision": {"approve"}}, b.csrf); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("approve from the page = %d %s", res.StatusCode, readBody(res))
		}
		// And the API resolves the other.
		s := e.script(ann)
		if res := s.api("POST", "/api/v1/conversations/"+conv.ID+"/calls/"+ids[1]+"/resolve", `{"decision":"deny","reason":"not now"}`); res.StatusCode != http.StatusOK {
			t.Fatalf("deny from the API = %d %s", res.StatusCode, readBody(res))
		}
		if c := e.call(conv.ID, ids[0]); c.Decision != "approve" {
			t.Errorf("the page's decision: %+v", c)
		}
		if c := e.call(conv.ID, ids[1]); c.Decision != "deny" {
			t.Errorf("the API's decision: %+v", c)
		}
	})
}
