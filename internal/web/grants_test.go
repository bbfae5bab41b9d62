package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestGrantsAPI: approve "and remember" through the resolve API, the next call of the tool
// runs at once and says which grant allowed it, GET /api/v1/grants lists it, DELETE revokes
// it (someone else's is 404), and the call after suspends again. Bad input is 4xx in the
// envelope.
func TestGrantsAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		other := e.user("other", store.RoleMember)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("n1", "note", `{"text":"a"}`))
		c := e.script(owner)
		resolve := "/api/v1/conversations/" + conv.ID + "/calls/n1/resolve"
		for _, bad := range []struct {
			body   string
			status int
			kind   fault.Kind
		}{
			{`{"decision":"approve","remember":{"scope":"team","for_secs":600}}`, 422, fault.KindInvalidArgs},
			{`{"decision":"approve","remember":{"scope":"user","for_secs":5}}`, 422, fault.KindInvalidArgs},
			{`{"decision":"deny","remember":{"scope":"user","for_secs":600}}`, 422, fault.KindInvalidArgs},
			{`{"decision":"approve","remember":{"scope":"user","for_secs":"long"}}`, 400, fault.KindBadRequest},
			{`{"decision":"approve","remember":{"scope":"user","for_secs":600,"tools":["*"]}}`, 400, fault.KindBadRequest},
		} {
			res := c.api("POST", resolve, bad.body)
			if res.StatusCode != bad.status {
				t.Fatalf("%s: status %d, want %d: %s", bad.body, res.StatusCode, bad.status, readBody(res))
			}
			if eb := decodeEnvelope(t, res); eb.Error.Kind != bad.kind {
				t.Fatalf("%s: kind %s, want %s", bad.body, eb.Error.Kind, bad.kind)
			}
		}
		// A resolve-scoped token may resolve but not remember: a grant needs a full token.
		rt := e.anon()
		rt.bearer = pageToken(t, e.browser(owner), url.Values{"name": {"resolver"}, "scope": {"resolve"}, "expires_days": {"7"}})
		res := rt.api("POST", resolve, `{"decision":"approve","remember":{"scope":"user","for_secs":3600}}`)
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("approve and remember with a resolve token: %d %s", res.StatusCode, readBody(res))
		}
		if eb := decodeEnvelope(t, res); eb.Error.Kind != fault.KindPermissionDenied || !strings.Contains(eb.Error.Message, "full-scope") {
			t.Fatalf("approve and remember with a resolve token: %+v", eb.Error)
		}
		if d := e.decision(conv.ID, "n1"); d != nil {
			t.Fatalf("a refused approve-and-remember was recorded: %v", d)
		}
		if res := c.api("POST", resolve, `{"decision":"approve","remember":{"scope":"user","for_secs":3600}}`); res.StatusCode != 200 {
			t.Fatalf("approve and remember: %d %s", res.StatusCode, readBody(res))
		}
		e.awaitStatus(conv.ID, store.StatusIdle)

		res = c.api("GET", "/api/v1/grants", "")
		body := readBody(res)
		var grants struct {
			Grants []struct {
				ID string `json:"id"`
			} `json:"grants"`
		}
		if err := json.Unmarshal([]byte(body), &grants); err != nil || res.StatusCode != 200 || len(grants.Grants) != 1 ||
			!strings.Contains(body, `"tool":"note"`) || !strings.Contains(body, `"scope":"user"`) || !strings.Contains(body, `"expires_at"`) {
			t.Fatalf("GET grants: %d %s", res.StatusCode, body)
		}
		id := grants.Grants[0].ID

		// A later call of the tool, in another conversation of the owner: the user grant covers it.
		conv2 := e.conversation(owner)
		e.say(conv2, owner, "again", llmtest.Calls(llmtest.Call("n2", "note", `{"text":"b"}`)))
		e.awaitCalls(conv2.ID, store.CallResolved, "n2")
		if got := e.call(conv2.ID, "n2"); got.Grant != id {
			t.Fatalf("the remembered call names grant %q, want %q", got.Grant, id)
		}
		if res := e.script(other).api("GET", "/api/v1/grants", ""); !strings.Contains(readBody(res), `"grants":[]`) {
			t.Fatal("another user sees the owner's grants")
		}
		if res := e.script(other).api("DELETE", "/api/v1/grants/"+id, ""); res.StatusCode != 404 {
			t.Fatalf("someone else revokes: %d", res.StatusCode)
		}
		if res := c.api("DELETE", "/api/v1/grants/"+id, ""); res.StatusCode != 200 {
			t.Fatalf("revoke: %d %s", res.StatusCode, readBody(res))
		}
		if res := c.api("DELETE", "/api/v1/grants/"+id, ""); res.StatusCode != 404 {
			t.Fatalf("revoke twice: %d", res.StatusCode)
		}
		e.pending(conv2, owner, llmtest.Call("n3", "note", `{"text":"c"}`))
	})
}

// TestAuditAPI: admins read the hash chain in pages; anyone else is refused; a bad cursor is a
// 422, never a 500.
func TestAuditAPI(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		admin := e.user("admin", store.RoleAdmin)
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("n1", "note", `{}`))
		if res := e.script(owner).api("POST", "/api/v1/conversations/"+conv.ID+"/calls/n1/resolve", `{"decision":"deny","reason":"no"}`); res.StatusCode != 200 {
			t.Fatalf("deny: %d", res.StatusCode)
		}
		if res := e.script(owner).api("GET", "/api/v1/audit", ""); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a member reads the audit trail: %d", res.StatusCode)
		}
		if res := e.script(admin).api("GET", "/api/v1/audit?after=-1", ""); res.StatusCode != 422 {
			t.Fatalf("a bad cursor: %d", res.StatusCode)
		}
		res := e.script(admin).api("GET", "/api/v1/audit?after=0", "")
		var page struct {
			Records []struct {
				Seq      int64  `json:"seq"`
				Action   string `json:"action"`
				Reason   string `json:"reason"`
				Hash     string `json:"hash"`
				PrevHash string `json:"prev_hash"`
			} `json:"records"`
			Next int64 `json:"next"`
		}
		if err := json.NewDecoder(res.Body).Decode(&page); err != nil || len(page.Records) != 1 || page.Records[0].Action != "deny" ||
			page.Records[0].Reason != "no" || page.Records[0].Hash == "" || page.Next != page.Records[0].Seq {
			t.Fatalf("audit page %+v, %v", page, err)
		}
		res = e.script(admin).api("GET", "/api/v1/audit?after=1", "")
		if body := readBody(res); !strings.Contains(body, `"records":[]`) {
			t.Fatalf("after the last record: %s", body)
		}
	})
}
