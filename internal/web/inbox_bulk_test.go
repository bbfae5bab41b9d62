package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
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
		for _, want := range []string{"asked <time", "6 min ago</time>", "decide <time", `data-parley="inbox-context"`, "Read the conversation (read-only)"} {
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

// bulkSummary is a bulk decision's outcome as the inbox shows it: "ok" → the items decided,
// and each error kind → the items it refused; nil when the page shows none.
func bulkSummary(t *testing.T, body string) map[string]string {
	t.Helper()
	doc := viewstest.MustParse(body)
	sec, n := doc.One(`[data-parley="bulk-results"]`)
	if n == 0 {
		return nil
	}
	out := map[string]string{"ok": attrOf(sec, "data-ok")}
	for _, n := range viewstest.In(sec, `[data-parley="bulk-refused"]`) {
		out[attrOf(n, "data-kind")] = attrOf(n, "data-count")
	}
	return out
}

// TestInboxBulk: a bulk decision decides each selected approval through Resolve, authorized
// item by item, and answers for each — ok, stale for one already decided, permission_denied
// for a call the reviewer may not decide — on the page (post/redirect/get: back to the filtered
// inbox with the outcome in counts, which a reload shows again without deciding anything) and
// in the API; bad input is refused whole, before anything is decided; members have no bulk
// decisions.
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
			views.BulkItem(a.ID, "own"), views.BulkItem(a.ID, "g1"), views.BulkItem(a.ID, "g2"), views.BulkItem(b.ID, "b1"), views.BulkItem(a.ID, "g1")}}
		res := rb.postForm("/inbox/bulk?tool=publish", form, rb.csrf)
		readBody(res)
		loc := res.Header.Get("Location")
		if res.StatusCode != http.StatusSeeOther || loc != "/inbox?tool=publish&bulk=approve&bulk_ok=3&bulk_permission_denied=1&bulk_stale=1" {
			t.Fatalf("bulk approve = %d to %q, want 303 to the filtered inbox with the counts", res.StatusCode, loc)
		}
		// g1 is listed twice: ok the first time, stale the second (rita decided what awaited her
		// in a by then, so she reads nothing of it; a call that was hers to decide is still stale).
		// own comes first, while she may read a: permission_denied, not not_found.
		want := map[string]string{"ok": "3", "stale": "1", "permission_denied": "1"}
		audited := len(e.audit(a.ID)) + len(e.audit(b.ID))
		for i := range 2 { // the redirect's page, then a reload of it
			res := rb.do("GET", loc, "", nil)
			body := readBody(res)
			if got := bulkSummary(t, body); res.StatusCode != http.StatusOK || !reflect.DeepEqual(got, want) {
				t.Fatalf("load %d of the outcome = %d %v, want %v", i+1, res.StatusCode, got, want)
			}
			if !strings.Contains(body, "Approved 3 of 5 selected") || !strings.Contains(body, "1 not yours to decide") {
				t.Errorf("the bulk outcome does not sum up: %.2000s", body)
			}
			if got := strings.Join(inboxCallIDs(t, body), ","); got != "" {
				t.Errorf("the filtered inbox after the decision lists %q, want none (own is a note)", got)
			}
		}
		if n := len(e.audit(a.ID)) + len(e.audit(b.ID)); n != audited {
			t.Errorf("reloading the outcome audited %d more records", n-audited)
		}
		// A hand-edited outcome shows nothing rather than something made up.
		for _, q := range []string{"?bulk=approve&bulk_ok=many", "?bulk=maybe&bulk_ok=1", "?bulk=approve&bulk_ok=101", "?bulk=approve&bulk_ok=0", "?bulk=deny&bulk_ok=-1"} {
			res := rb.do("GET", "/inbox"+q, "", nil)
			if got := bulkSummary(t, readBody(res)); res.StatusCode != http.StatusOK || got != nil {
				t.Errorf("/inbox%s = %d, shows %v", q, res.StatusCode, got)
			}
		}
		// A malformed filter is refused before anything is decided.
		res = rb.postForm("/inbox/bulk?age=soon", url.Values{"decision": {"approve"}, "item": {views.BulkItem(a.ID, "own")}}, rb.csrf)
		if readBody(res); res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("a bulk decision with a malformed filter = %d", res.StatusCode)
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

		// The API: deny with one reason; each item answered. Bob's turn takes its reply first:
		// the model's replies are one queue, and a turn still going would take the next one.
		e.awaitStatus(b.ID, store.StatusIdle)
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

// TestInboxDecisionKeepsFilters: a single decision from a filtered inbox, without JavaScript,
// lands back on the same filtered inbox — after a decision, a lost race (notice=stale), an
// invalid decision (422, the inbox re-rendered with its filters) and a claim. The way back is
// rebuilt from the filters alone: another site, another page, an extra parameter or a malformed
// filter never reach the Location.
func TestInboxDecisionKeepsFilters(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		a := e.conversation(ann)
		e.pending(a, ann, llmtest.Call("g1", "publish", map[string]any{"text": "one"}), llmtest.Call("gate", "publish", map[string]any{"text": "two"}))
		e.aclk.Advance(6 * time.Minute)
		rb := e.browser(rita)
		const filtered = "/inbox?age=5m&requester=ann&tool=publish"

		// The card's forms (approve, deny) carry the way back with the filters.
		body := readBody(rb.do("GET", "/inbox?tool=publish&requester=ann&age=5m", "", nil))
		doc := viewstest.MustParse(body)
		rets := doc.All(`[data-parley="inbox-entry"] form[data-parley-form="resolve"] input[name="return"]`)
		if len(rets) != 4 {
			t.Fatalf("%d decision forms carry a way back, want 4 (2 cards × approve, deny); lists %v", len(rets), inboxCallIDs(t, body))
		}
		for _, r := range rets {
			if v := attrOf(r, "value"); v != filtered {
				t.Fatalf("a decision form returns to %q, want %q", v, filtered)
			}
		}

		// An invalid decision: the inbox again, still filtered.
		path := "/conversations/" + a.ID + "/calls/g1/resolve"
		res := rb.postForm(path, url.Values{"decision": {"approve"}, "args": {"{nope"}, "return": {filtered}}, rb.csrf)
		body = readBody(res)
		if res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("an invalid decision = %d", res.StatusCode)
		}
		doc = viewstest.MustParse(body)
		if page, _ := doc.One(`[data-parley="inbox-page"]`); attrOf(page, "data-ws") != "/inbox/ws?age=5m&requester=ann&tool=publish" {
			t.Errorf("the re-rendered inbox follows %q, want the filtered list", attrOf(page, "data-ws"))
		}
		if in, _ := doc.One(`[data-parley="filter-tool"]`); attrOf(in, "value") != "publish" {
			t.Errorf("the re-rendered inbox's tool filter = %q", attrOf(in, "value"))
		}

		// A decision, then the same decision again (stale): back to the filtered inbox.
		e.model.Push(llmtest.Reply("Published."))
		for i, want := range []string{filtered, filtered + "&notice=stale"} {
			res := rb.postForm(path, url.Values{"decision": {"approve"}, "return": {filtered}}, rb.csrf)
			readBody(res)
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != want {
				t.Fatalf("decision %d = %d to %q, want %q", i+1, res.StatusCode, res.Header.Get("Location"), want)
			}
		}
		// A claim goes back the same way.
		if res := claimForm(rb, a.ID, "claim", filtered); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != filtered {
			t.Fatalf("a claim = %d to %q", res.StatusCode, res.Header.Get("Location"))
		}

		// Ways back that are not the inbox's, or not only its filters.
		for _, tc := range []struct{ ret, want string }{
			{"https://evil.example/inbox?tool=publish", "/inbox"},
			{"//evil.example/inbox?tool=publish", "/inbox"},
			{"/inbox/../admin/users", "/inbox"},
			{"/inbox\\@evil.example", "/inbox"},
			{"/inbox?tool=publish&next=https://evil.example", "/inbox?tool=publish"},
			{"/inbox?tool=publish&age=soon", "/inbox"},
			{"/inbox?requester=" + url.QueryEscape("a\r\nLocation: https://evil.example"), "/inbox"},
			{"/inbox?requester=" + url.QueryEscape("<ann>&x"), "/inbox?requester=%3Cann%3E%26x"},
		} {
			res := claimForm(rb, a.ID, "claim", tc.ret)
			readBody(res)
			if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != tc.want {
				t.Errorf("return %q = %d to %q, want %q", tc.ret, res.StatusCode, res.Header.Get("Location"), tc.want)
			}
		}
		e.model.Push(llmtest.Reply("Published."))
		res = rb.postForm("/conversations/"+a.ID+"/calls/gate/resolve", url.Values{"decision": {"deny"}, "return": {"//evil.example/inbox?tool=publish"}}, rb.csrf)
		readBody(res)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/inbox" {
			t.Fatalf("a decision returning elsewhere = %d to %q, want /inbox", res.StatusCode, res.Header.Get("Location"))
		}
	})
}
