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

// TestRenameDeleteSearchOverTheAPIAndThePage: PATCH and DELETE /api/v1/conversations/{id},
// ?q= on the list, and the page's rename, delete and search forms (plain POSTs and a GET).
func TestRenameDeleteSearchOverTheAPIAndThePage(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{SearchBurst: 1000})
		ann := e.user("ann", store.RoleMember)
		bob := e.user("bob", store.RoleMember)
		api := e.script(ann)

		// A conversation created without a title takes its first message's first line.
		res := api.api("POST", "/api/v1/conversations", `{}`)
		var created struct{ ID string }
		if err := json.Unmarshal([]byte(readBody(res)), &created); err != nil || res.StatusCode != http.StatusCreated {
			t.Fatalf("create = %d %v", res.StatusCode, err)
		}
		e.model.Push(llmtest.Reply("Sure."))
		if res := api.api("POST", "/api/v1/conversations/"+created.ID+"/messages", `{"text":"Budget <b>review</b> for Q3\nmore"}`); res.StatusCode != http.StatusAccepted {
			t.Fatalf("send = %d", res.StatusCode)
		}
		e.awaitStatus(created.ID, store.StatusIdle)
		if v := e.view(created.ID); v.Title != "Budget <b>review</b> for Q3" {
			t.Fatalf("title from the first message = %q", v.Title)
		}
		// The page escapes it.
		b := e.browser(ann)
		page := readBody(b.do("GET", "/conversations/"+created.ID, "", nil))
		if !strings.Contains(page, "Budget &lt;b&gt;review&lt;/b&gt; for Q3") || strings.Contains(page, "<b>review</b>") {
			t.Fatalf("the page does not escape the title")
		}

		// PATCH renames; only the owner; an empty title is 422.
		path := "/api/v1/conversations/" + created.ID
		res = api.api("PATCH", path, `{"title":"  Q3\tbudget "}`)
		if body := readBody(res); res.StatusCode != http.StatusOK || body != `{"id":"`+created.ID+`","ok":true,"title":"Q3 budget"}`+"\n" {
			t.Fatalf("rename = %d %s", res.StatusCode, body)
		}
		if res := e.script(bob).api("PATCH", path, `{"title":"bob's"}`); res.StatusCode != http.StatusNotFound {
			t.Fatalf("bob's rename = %d, want 404", res.StatusCode)
		}
		res = api.api("PATCH", path, `{"title":""}`)
		if res.StatusCode != http.StatusUnprocessableEntity || decodeEnvelope(t, res).Error.Kind != fault.KindInvalidArgs {
			t.Fatalf("an empty rename = %d", res.StatusCode)
		}
		if res := api.api("PATCH", path, `{}`); res.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("a rename without a title = %d", res.StatusCode)
		}

		// Search: the API's ?q= and the page's form.
		other := e.conversation(ann) // titled "t"
		var list struct {
			Conversations []conversationJSON `json:"conversations"`
		}
		if err := json.Unmarshal([]byte(readBody(api.api("GET", "/api/v1/conversations?q=BUDGET", ""))), &list); err != nil ||
			len(list.Conversations) != 1 || list.Conversations[0].ID != created.ID {
			t.Fatalf("search over the API = %+v, %v", list, err)
		}
		page = readBody(b.do("GET", "/conversations?q=budget", "", nil))
		if !strings.Contains(page, `data-conversation-id="`+created.ID+`"`) || strings.Contains(page, `data-conversation-id="`+other.ID+`"`) ||
			!strings.Contains(page, `value="budget"`) {
			t.Fatalf("the search page lists the wrong conversations")
		}
		if page := readBody(b.do("GET", "/conversations?q=nothing+like+it", "", nil)); !strings.Contains(page, `data-parley="search-empty"`) {
			t.Fatalf("an empty search result says nothing")
		}
		// Search by message text: the API names the message and where the words are in its
		// excerpt; the page shows the excerpt escaped, the words marked, linked to the message.
		if err := json.Unmarshal([]byte(readBody(api.api("GET", "/api/v1/conversations?q=sur", ""))), &list); err != nil ||
			len(list.Conversations) != 1 || list.Conversations[0].Match == nil {
			t.Fatalf("search by message over the API = %+v, %v", list, err)
		}
		if m := list.Conversations[0].Match; m.Seq != 2 || m.Snippet != "Sure." || len(m.Highlights) != 1 || m.Highlights[0] != [2]int{0, 4} {
			t.Fatalf("the match = %+v, want the answer (seq 2) with \"Sure\" marked", m)
		}
		page = readBody(b.do("GET", "/conversations?q=review", "", nil))
		if !strings.Contains(page, `<mark>review</mark>`) || strings.Contains(page, "<b>") ||
			!strings.Contains(page, `href="/conversations/`+created.ID+`#msg-1"`) {
			t.Fatalf("the search page's excerpt is not marked, escaped and linked:\n%s", page)
		}
		// Hostile searches: a clear 4xx in the envelope (the page: 400, saying why), never a 500.
		for _, q := range []string{"a%00b", strings.Repeat("x", 201), strings.Repeat("w+", 17), "%FF"} {
			res := api.api("GET", "/api/v1/conversations?q="+q, "")
			if res.StatusCode != http.StatusUnprocessableEntity || decodeEnvelope(t, res).Error.Kind != fault.KindInvalidArgs {
				t.Errorf("API search %.20q = %d, want 422 invalid_args", q, res.StatusCode)
			}
			res = b.do("GET", "/conversations?q="+q, "", nil)
			if body := readBody(res); res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "This search cannot be run") {
				t.Errorf("page search %.20q = %d", q, res.StatusCode)
			}
		}
		for _, q := range []string{"%22sure%22+OR+x", "sure+%26+!x%3A*", "NEAR(sure)", "*", "%27)%3B+DROP+TABLE+entries%3B+--"} {
			if res := api.api("GET", "/api/v1/conversations?q="+q, ""); res.StatusCode != http.StatusOK {
				t.Errorf("API search %q = %d, want 200", q, res.StatusCode)
			}
		}

		// The page's rename form.
		res = b.postForm("/conversations/"+created.ID+"/rename", url.Values{"title": {"Renamed on the page"}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/conversations/"+created.ID+"?notice=renamed" {
			t.Fatalf("rename form = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if v := e.view(created.ID); v.Title != "Renamed on the page" {
			t.Fatalf("title after the rename form = %q", v.Title)
		}
		res = b.postForm("/conversations/"+created.ID+"/rename", url.Values{"title": {" "}}, b.csrf)
		if loc := res.Header.Get("Location"); loc != "/conversations/"+created.ID+"?notice=badtitle" {
			t.Fatalf("an empty rename form redirects to %q", loc)
		}
		// The owner's page has the menu (views.Page.CanManage; views_test covers who else).
		if !strings.Contains(readBody(b.do("GET", "/conversations/"+created.ID, "", nil)), `data-parley="conversation-menu"`) {
			t.Fatalf("the owner's page has no rename/delete menu")
		}

		// Delete while a call awaits: refused (409 conflict, the page says to stop first).
		e.pending(other, ann, llmtest.Call("gate", "send_email", emailArgs("bob@example.com")))
		res = api.api("DELETE", "/api/v1/conversations/"+other.ID, "")
		if res.StatusCode != http.StatusConflict || decodeEnvelope(t, res).Error.Kind != fault.KindConflict {
			t.Fatalf("delete while awaiting = %d", res.StatusCode)
		}
		res = b.postForm("/conversations/"+other.ID+"/delete", url.Values{}, b.csrf)
		if loc := res.Header.Get("Location"); loc != "/conversations/"+other.ID+"?notice=busy" {
			t.Fatalf("the delete form while awaiting redirects to %q", loc)
		}
		// Bob may not delete ann's; then ann deletes both, one over the API and one on the page.
		if res := e.script(bob).api("DELETE", path, ""); res.StatusCode != http.StatusNotFound {
			t.Fatalf("bob's delete = %d, want 404", res.StatusCode)
		}
		if res := api.api("DELETE", path, ""); res.StatusCode != http.StatusOK || readBody(res) != `{"ok":true}`+"\n" {
			t.Fatalf("delete = %d", res.StatusCode)
		}
		if res := api.api("GET", path, ""); res.StatusCode != http.StatusNotFound {
			t.Fatalf("GET after delete = %d", res.StatusCode)
		}
		if res := api.api("POST", "/api/v1/conversations/"+other.ID+"/cancel", ""); res.StatusCode != http.StatusOK {
			t.Fatalf("stop = %d", res.StatusCode)
		}
		e.awaitStatus(other.ID, store.StatusIdle)
		res = b.postForm("/conversations/"+other.ID+"/delete", url.Values{}, b.csrf)
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/conversations?notice=deleted" {
			t.Fatalf("delete form = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if page := readBody(b.do("GET", "/conversations?notice=deleted", "", nil)); !strings.Contains(page, "The conversation was deleted.") || strings.Contains(page, other.ID) {
			t.Fatalf("the list after deleting still shows it, or says nothing")
		}
		// A delete form without the CSRF token is refused.
		if res := b.postForm("/conversations/"+other.ID+"/delete", url.Values{}, ""); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a delete without CSRF = %d", res.StatusCode)
		}
		actions := []string{}
		for _, a := range e.audit(created.ID) {
			actions = append(actions, a.Action)
		}
		if strings.Join(actions, ",") != "delete_conversation" {
			t.Fatalf("audit of the deleted conversation = %v", actions)
		}
	})
}

// TestResolveTokensMayNotRenameOrDelete: the scope rule covers the new routes.
func TestResolveTokensMayNotRenameOrDelete(t *testing.T) {
	for _, r := range []string{"PATCH /api/v1/conversations/:id", "DELETE /api/v1/conversations/:id"} {
		method, route, _ := strings.Cut(r, " ")
		if scopeAllows(store.ScopeResolve, method, route) {
			t.Errorf("a resolve token may %s", r)
		}
		if !scopeAllows(store.ScopeFull, method, route) {
			t.Errorf("a full token may not %s", r)
		}
	}
}

// TestFavicon: /favicon.ico leads to the icon (it used to redirect to the sign-in page), which is
// served as SVG, and every page links it.
func TestFavicon(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	anon := e.anon()
	res := anon.do("GET", "/favicon.ico", "", nil)
	loc := res.Header.Get("Location")
	readBody(res)
	if res.StatusCode != http.StatusMovedPermanently || !strings.HasPrefix(loc, "/static/") || !strings.HasSuffix(loc, "/img/favicon.svg") {
		t.Fatalf("favicon.ico = %d %q", res.StatusCode, loc)
	}
	res = anon.do("GET", loc, "", nil)
	body := readBody(res)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "image/svg+xml" || !strings.HasPrefix(body, "<svg") {
		t.Fatalf("the icon = %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	if page := readBody(anon.do("GET", "/login", "", nil)); !strings.Contains(page, `<link rel="icon" type="image/svg+xml" href="`+loc+`">`) {
		t.Fatalf("the sign-in page does not link the icon")
	}
}
