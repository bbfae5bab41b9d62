package web

import (
	"context"
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
		if res := c.api("POST", resolve, `{"decision":"approve","remember":{"scope":"user","for_secs":3600,"args":"anything"}}`); res.StatusCode != 422 {
			t.Fatalf("approve and remember for unknown arguments: %d %s", res.StatusCode, readBody(res))
		}
		if res := c.api("POST", resolve, `{"decision":"approve","remember":{"scope":"user","for_secs":3600,"args":"any"}}`); res.StatusCode != 200 {
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
			!strings.Contains(body, `"tool":"note"`) || !strings.Contains(body, `"scope":"user"`) || !strings.Contains(body, `"expires_at"`) ||
			!strings.Contains(body, `"args":"any"`) || !strings.Contains(body, `"user_id":"`+owner.ID+`"`) {
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

// TestAdminsManageEveryonesGrants: GET /api/v1/admin/grants and /admin/grants list every
// person's grants to an admin (with whose they are, and which arguments they cover) and to
// nobody else; an admin revokes anyone's grant through DELETE /api/v1/grants/{id} or the page
// (CSRF-checked), audited as grant_revoke by the admin; a reviewer cannot (404).
func TestAdminsManageEveryonesGrants(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000, PageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		boss := e.user("boss", store.RoleAdmin)
		conv := e.conversation(owner)
		seen := map[string]bool{}
		remember := func(call, args string) string {
			t.Helper()
			e.pending(conv, owner, llmtest.Call(call, "note", args))
			if res := e.script(owner).api("POST", resolveURLForAPI(conv.ID, call), `{"decision":"approve","remember":{"scope":"conversation","for_secs":3600}}`); res.StatusCode != 200 {
				t.Fatalf("approve and remember: %d %s", res.StatusCode, readBody(res))
			}
			e.awaitStatus(conv.ID, store.StatusIdle)
			gs, err := e.m.Grants(context.Background(), as(owner))
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range gs {
				if !seen[g.ID] {
					seen[g.ID] = true
					return g.ID
				}
			}
			t.Fatalf("no new grant among %+v", gs)
			return ""
		}
		first := remember("n1", `{"text":"a"}`)
		second := remember("n2", `{"text":"b"}`)

		for _, u := range []store.User{owner, rita} {
			if res := e.script(u).api("GET", "/api/v1/admin/grants", ""); res.StatusCode != http.StatusForbidden {
				t.Fatalf("%s lists everyone's grants: %d %s", u.Name, res.StatusCode, readBody(res))
			}
			if res := e.browser(u).do("GET", "/admin/grants", "", nil); res.StatusCode != http.StatusForbidden {
				t.Fatalf("%s opens everyone's grants: %d", u.Name, res.StatusCode)
			}
		}
		res := e.script(boss).api("GET", "/api/v1/admin/grants", "")
		var list struct {
			Grants []struct {
				ID     string `json:"id"`
				UserID string `json:"user_id"`
				Args   string `json:"args"`
			} `json:"grants"`
		}
		if err := json.NewDecoder(res.Body).Decode(&list); err != nil || res.StatusCode != 200 || len(list.Grants) != 2 ||
			!seen[list.Grants[0].ID] || !seen[list.Grants[1].ID] || list.Grants[0].UserID != owner.ID || list.Grants[0].Args != "exact" {
			t.Fatalf("the admin's list: %d %+v %v", res.StatusCode, list, err)
		}

		if res := e.script(rita).api("DELETE", "/api/v1/grants/"+first, ""); res.StatusCode != http.StatusNotFound {
			t.Fatalf("a reviewer revokes someone's grant: %d", res.StatusCode)
		}
		if res := e.script(boss).api("DELETE", "/api/v1/grants/"+first, ""); res.StatusCode != 200 {
			t.Fatalf("the admin revokes: %d %s", res.StatusCode, readBody(res))
		}

		ab := e.browser(boss)
		body := readBody(ab.do("GET", "/admin/grants", "", nil))
		if !strings.Contains(body, `data-parley="admin-grants"`) || !strings.Contains(body, `data-grant-id="`+second+`"`) ||
			strings.Contains(body, `data-grant-id="`+first+`"`) || !strings.Contains(body, `data-user-id="`+owner.ID+`">owner<`) ||
			!strings.Contains(body, "these exact arguments") || !strings.Contains(body, `action="/admin/grants/`+second+`/revoke"`) ||
			!strings.Contains(body, `data-parley="nav-admin-grants"`) {
			t.Fatalf("the admins' grants page:\n%s", body)
		}
		if res := ab.postForm("/admin/grants/"+second+"/revoke", url.Values{}, ""); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a revoke without the CSRF token: %d", res.StatusCode)
		}
		if rb := e.browser(rita); rb.postForm("/admin/grants/"+second+"/revoke", url.Values{}, rb.csrf).StatusCode != http.StatusForbidden {
			t.Fatal("a reviewer posts the admins' revoke")
		}
		res = ab.postForm("/admin/grants/"+second+"/revoke", url.Values{}, ab.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/admin/grants" {
			t.Fatalf("the admin revokes from the page: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if gs, _ := e.m.Grants(context.Background(), as(owner)); len(gs) != 0 {
			t.Fatalf("the owner's grants after the admin revoked both: %+v", gs)
		}
		recs, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "grant_revoke"})
		if err != nil || len(recs) != 2 || recs[0].ActorID != boss.ID || recs[1].ActorID != boss.ID ||
			!strings.Contains(string(recs[0].Detail), `"user_id":"`+owner.ID+`"`) {
			t.Fatalf("revocation audit %+v %v", recs, err)
		}
	})
}
