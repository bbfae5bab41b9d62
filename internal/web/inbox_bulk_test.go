package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views"
	"parley/views/viewstest"
)

// inboxCallIDs are the tool_call_ids an inbox page lists, in order.
func inboxCallIDs(t *testing.T, body string) []string {
	t.Helper()
	var ids []string
	for _, n := range viewstest.MustParse(body).All(`[data-parley="inbox-entry"]`) {
		ids = append(ids, attrOf(n, "data-tool-call-id"))
	}
	return ids
}

// TestInboxFilters: ?tool=, ?requester= and ?age= narrow the list (the pending count stays the
// whole inbox's), survive in the page's socket URL and forms, and the live list keeps them; each
// entry shows its age and the time left against its deadline; a malformed age is 422.
func TestInboxFilters(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		bob := e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		a, b := e.conversation(ann), e.conversation(bob)
		e.pending(a, ann, llmtest.Call("a1", "publish", map[string]any{"text": "one"}))
		e.aclk.Advance(6 * time.Minute)
		e.pending(b, bob, llmtest.Call("b1", "publish", map[string]any{"text": "two"}))
		rb := e.browser(rita)
		for _, tc := range []struct {
			query string
			want  string
		}{
			{"", "b1,a1"},
			{"?tool=publish", "b1,a1"},
			{"?tool=note", ""},
			{"?requester=BOB", "b1"},
			{"?requester=ann&tool=publish", "a1"},
			{"?age=5m", "a1"},
			{"?age=1h", ""},
		} {
			res := rb.do("GET", "/inbox"+tc.query, "", nil)
			body := readBody(res)
			if got := strings.Join(inboxCallIDs(t, body), ","); res.StatusCode != 200 || got != tc.want {
				t.Fatalf("/inbox%s lists %q (%d), want %q", tc.query, got, res.StatusCode, tc.want)
			}
			doc := viewstest.MustParse(body)
			if list, _ := doc.One(`[data-parley="inbox"]`); attrOf(list, "data-total") != "2" {
				t.Errorf("/inbox%s: data-total %q, want 2 (the whole inbox)", tc.query, attrOf(list, "data-total"))
			}
			if page, _ := doc.One(`[data-parley="inbox-page"]`); tc.query != "" && !strings.HasPrefix(attrOf(page, "data-ws"), "/inbox/ws?") {
				t.Errorf("/inbox%s: the socket %q does not carry the filters", tc.query, attrOf(page, "data-ws"))
			}
		}
		body := readBody(rb.do("GET", "/inbox", "", nil))
		for _, want := range []string{"waiting 6 min", "left to decide", `data-parley="inbox-context"`, "Read the conversation (read-only)"} {
			if !strings.Contains(body, want) {
				t.Errorf("the inbox does not show %q", want)
			}
		}
		res := rb.do("GET", "/inbox?age=soon", "", nil)
		if body := readBody(res); res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "age") {
			t.Fatalf("a malformed age = %d %.200s", res.StatusCode, body)
		}

		// The live list keeps the filter: a new approval of ann's does not show in bob's view.
		conn, _, err := rb.dial(t, "/inbox/ws?requester=bob", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)
		e.model.Push(llmtest.Reply("Published."))
		if res := rb.postForm("/conversations/"+a.ID+"/calls/a1/resolve", url.Values{"decision": {"approve"}, "return": {"/inbox"}}, rb.csrf); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("approve a1 = %d", res.StatusCode)
		}
		e.awaitStatus(a.ID, store.StatusIdle)
		awaitInbox(t, e, conn, "a total of 1", func(h string) bool { return strings.Contains(h, `data-total="1"`) })
		e.pending(a, ann, llmtest.Call("a2", "publish", map[string]any{"text": "three"}))
		html := awaitInbox(t, e, conn, "the total of 2 again", func(h string) bool { return strings.Contains(h, `data-total="2"`) })
		if !strings.Contains(html, `data-tool-call-id="b1"`) || strings.Contains(html, `data-tool-call-id="a2"`) {
			t.Fatalf("the filtered live list: %s", html)
		}
	})
}

// bulkResults are a bulk decision's results as the page lists them: tool_call_id → "ok" or the
// error's kind.
func bulkResults(t *testing.T, body string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range viewstest.MustParse(body).All(`[data-parley="bulk-result"]`) {
		v := attrOf(n, "data-kind")
		if attrOf(n, "data-ok") == "true" {
			v = "ok"
		}
		out[attrOf(n, "data-tool-call-id")] = v
	}
	return out
}

// TestInboxBulk: a bulk decision decides each selected approval through Resolve, authorized
// item by item, and answers for each — ok, stale for one already decided, permission_denied
// for a call the reviewer may not decide — on the page and in the API; bad input is refused
// whole, before anything is decided; members have no bulk decisions.
func TestInboxBulk(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000})
		ann := e.user("ann", store.RoleMember)
		bob := e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		a, b := e.conversation(ann), e.conversation(bob)
		e.pending(a, ann, llmtest.Call("g1", "publish", map[string]any{"text": "one"}),
			llmtest.Call("g2", "publish", map[string]any{"text": "two"}), llmtest.Call("own", "note", `{"text":"mine"}`))
		e.pending(b, bob, llmtest.Call("b1", "publish", map[string]any{"text": "three"}))
		rb := e.browser(rita)
		e.model.Push(llmtest.Reply("Published.")) // bob's turn continues after b1
		form := url.Values{"decision": {"approve"}, "reason": {"looks fine"}, "item": {
			views.BulkItem(a.ID, "g1"), views.BulkItem(a.ID, "g2"), views.BulkItem(b.ID, "b1"), views.BulkItem(a.ID, "own"), views.BulkItem(a.ID, "g1")}}
		res := rb.postForm("/inbox/bulk?tool=publish", form, rb.csrf)
		body := readBody(res)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("bulk approve = %d %.300s", res.StatusCode, body)
		}
		got := bulkResults(t, body)
		want := map[string]string{"g1": "stale", "g2": "ok", "b1": "ok", "own": "permission_denied"}
		// g1 is listed twice: ok the first time, stale the second; the page lists both.
		if len(viewstest.MustParse(body).All(`[data-parley="bulk-result"]`)) != 5 || got["g1"] != want["g1"] || got["g2"] != want["g2"] || got["b1"] != want["b1"] || got["own"] != want["own"] {
			t.Fatalf("bulk results %v, want %v (and g1 ok then stale)", got, want)
		}
		if !strings.Contains(body, "Approved 3 of 5 selected") {
			t.Errorf("the bulk heading does not sum up: %.2000s", body)
		}
		for _, id := range []string{"g1", "g2", "b1"} {
			conv := a.ID
			if id == "b1" {
				conv = b.ID
			}
			if d := e.decision(conv, id); d == nil || d["by"] != rita.ID || d["decision"] != "approve" {
				t.Fatalf("the decision of %s: %v", id, d)
			}
		}
		if d := e.decision(a.ID, "own"); d != nil {
			t.Fatalf("a call rita may not decide was decided: %v", d)
		}

		// The API: deny with one reason; each item answered.
		c := e.conversation(ann)
		e.pending(c, ann, llmtest.Call("c1", "publish", map[string]any{"text": "four"}), llmtest.Call("c2", "publish", map[string]any{"text": "five"}))
		e.model.Push(llmtest.Reply("Understood."))
		api := e.script(rita)
		res = api.api("POST", "/api/v1/approvals/resolve", fmt.Sprintf(`{"decision":"deny","reason":"not today","items":[
			{"conversation_id":%q,"tool_call_id":"c1"},{"conversation_id":%q,"tool_call_id":"c2"},{"conversation_id":%q,"tool_call_id":"nope"}]}`, c.ID, c.ID, c.ID))
		var out struct {
			Results []struct {
				ToolCallID string `json:"tool_call_id"`
				OK         bool   `json:"ok"`
				Error      *struct {
					Kind fault.Kind `json:"kind"`
				} `json:"error"`
			} `json:"results"`
		}
		if err := json.NewDecoder(res.Body).Decode(&out); err != nil || res.StatusCode != 200 || len(out.Results) != 3 {
			t.Fatalf("bulk deny = %d %v %+v", res.StatusCode, err, out)
		}
		if !out.Results[0].OK || !out.Results[1].OK || out.Results[2].OK || out.Results[2].Error == nil || out.Results[2].Error.Kind != fault.KindNotFound {
			t.Fatalf("bulk deny results %+v (%+v)", out.Results, out.Results[2].Error)
		}
		if d := e.decision(c.ID, "c2"); d == nil || d["decision"] != "deny" || d["reason"] != "not today" {
			t.Fatalf("the denial of c2: %v", d)
		}

		// Refused whole, before anything is decided.
		for _, bad := range []struct {
			body string
			kind fault.Kind
		}{
			{`{"decision":"maybe","items":[{"conversation_id":"x","tool_call_id":"y"}]}`, fault.KindInvalidArgs},
			{`{"decision":"approve","items":[]}`, fault.KindInvalidArgs},
			{`{"decision":"approve","items":[{"conversation_id":"","tool_call_id":"y"}]}`, fault.KindInvalidArgs},
			{`{"decision":"approve","items":[` + strings.Repeat(`{"conversation_id":"x","tool_call_id":"y"},`, 100) + `{"conversation_id":"x","tool_call_id":"y"}]}`, fault.KindInvalidArgs},
			{`{"decision":"approve","items":[],"remember":{"scope":"user","for_secs":600}}`, fault.KindBadRequest},
			{`{"decision":"deny","reason":"a\u0000b","items":[{"conversation_id":"x","tool_call_id":"y"}]}`, fault.KindInvalidArgs},
		} {
			res := api.api("POST", "/api/v1/approvals/resolve", bad.body)
			if eb := decodeEnvelope(t, res); eb.Error.Kind != bad.kind {
				t.Fatalf("%.80s: %d %+v, want %s", bad.body, res.StatusCode, eb.Error, bad.kind)
			}
		}
		if res := e.script(ann).api("POST", "/api/v1/approvals/resolve", `{"decision":"approve","items":[{"conversation_id":"x","tool_call_id":"y"}]}`); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a member's bulk decision = %d", res.StatusCode)
		}
		mb := e.browser(ann)
		if res := mb.postForm("/inbox/bulk", url.Values{"decision": {"approve"}, "item": {views.BulkItem(a.ID, "own")}}, mb.csrf); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a member's bulk page = %d", res.StatusCode)
		}
		if d := e.decision(a.ID, "own"); d != nil {
			t.Fatalf("a member's bulk decision decided: %v", d)
		}
	})
}

// attrOf is n's attribute name ("" when it has none).
func attrOf(n *html.Node, name string) string {
	v, _ := viewstest.Attr(n, name)
	return v
}
