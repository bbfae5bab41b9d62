package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"parley/internal/store"
)

// TestAdminAccounts: on the users page an admin creates an account (bad input answered with
// what to fix), disables one (its session, token and sign-in are refused at once; enabling it
// gives its token back), cannot disable themselves, and sets another account's password (the
// old one stops working, the new one signs in). Every control of the page is labelled.
func TestAdminAccounts(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ada := e.user("ada", store.RoleAdmin)
		bob := e.user("bob", store.RoleMember)
		a := e.browser(ada)

		page := readBody(a.do("GET", "/admin/users", "", nil))
		for _, id := range []string{"new-user-name", "new-user-role", "new-user-password", "role-" + ada.ID, "role-" + bob.ID, "password-" + bob.ID} {
			if !strings.Contains(page, `<label for="`+id+`"`) || !strings.Contains(page, `id="`+id+`"`) {
				t.Errorf("control %s has no label", id)
			}
		}

		create := func(name, role, password string) (int, string) {
			t.Helper()
			res := a.postForm("/admin/users", url.Values{"name": {name}, "role": {role}, "password": {password}}, a.csrf)
			return res.StatusCode, readBody(res)
		}
		for _, tc := range []struct {
			name, role, password string
			status               int
			says                 string
		}{
			{"no spaces allowed", "member", "long-enough", http.StatusUnprocessableEntity, badName},
			{"cleo", "member", "short", http.StatusUnprocessableEntity, badPassword},
			{"cleo", "root", "long-enough", http.StatusUnprocessableEntity, "Choose a role"},
			{"bob", "member", "long-enough", http.StatusConflict, "is taken"},
		} {
			status, body := create(tc.name, tc.role, tc.password)
			if status != tc.status || !strings.Contains(body, tc.says) {
				t.Errorf("create %q/%q: %d, want %d saying %q: %.300s", tc.name, tc.role, status, tc.status, tc.says, body)
			}
		}
		if status, body := create("cleo", "reviewer", "cleo-password"); status != http.StatusSeeOther {
			t.Fatalf("create cleo: %d %.300s", status, body)
		}
		if u, err := e.st.UserByName(t.Context(), "cleo"); err != nil || u.Role != store.RoleReviewer {
			t.Fatalf("cleo: %+v %v", u, err)
		}
		signIn := func(name, password string) int {
			t.Helper()
			c := e.anon()
			res := c.postForm("/login", url.Values{"username": {name}, "password": {password}}, c.pageCSRF("/login"))
			readBody(res)
			return res.StatusCode
		}
		if s := signIn("cleo", "cleo-password"); s != http.StatusSeeOther {
			t.Fatalf("cleo signs in: %d", s)
		}

		b, bTok := e.browser(bob), e.script(bob)
		setDisabled := func(u store.User, v string) int {
			t.Helper()
			res := a.postForm("/admin/users/"+u.ID+"/disabled", url.Values{"disabled": {v}}, a.csrf)
			readBody(res)
			return res.StatusCode
		}
		if s := setDisabled(ada, "true"); s != http.StatusForbidden {
			t.Fatalf("an admin disables themselves: %d", s)
		}
		if s := setDisabled(bob, "maybe"); s != http.StatusUnprocessableEntity {
			t.Errorf("disabled=maybe: %d", s)
		}
		if s := setDisabled(bob, "true"); s != http.StatusSeeOther {
			t.Fatalf("disable bob: %d", s)
		}
		if res := b.do("GET", "/conversations", "", nil); res.StatusCode != http.StatusSeeOther || !strings.HasPrefix(res.Header.Get("Location"), "/login") {
			t.Errorf("a disabled user's session still works: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if res := bTok.api("GET", "/api/v1/conversations", ""); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("a disabled user's token still works: %d %s", res.StatusCode, readBody(res))
		}
		if s := signIn("bob", "password-bob"); s != http.StatusForbidden {
			t.Errorf("a disabled user signs in: %d", s)
		}
		if page := readBody(a.do("GET", "/admin/users", "", nil)); !strings.Contains(page, `data-user-id="`+bob.ID+`" data-disabled`) {
			t.Error("the users page does not show bob disabled")
		}
		if s := setDisabled(bob, "false"); s != http.StatusSeeOther {
			t.Fatalf("enable bob: %d", s)
		}
		if res := bTok.api("GET", "/api/v1/conversations", ""); res.StatusCode != http.StatusOK {
			t.Errorf("an enabled user's token is refused: %d %s", res.StatusCode, readBody(res))
		}

		reset := func(u store.User, password string) (int, string) {
			t.Helper()
			res := a.postForm("/admin/users/"+u.ID+"/password", url.Values{"password": {password}}, a.csrf)
			return res.StatusCode, readBody(res)
		}
		if s, body := reset(bob, "short"); s != http.StatusUnprocessableEntity || !strings.Contains(body, badPassword) {
			t.Errorf("a short reset: %d %.300s", s, body)
		}
		if s, _ := reset(ada, "ada-new-password"); s != http.StatusForbidden {
			t.Errorf("an admin resets their own password here: %d", s)
		}
		if s, _ := reset(store.User{ID: "nope"}, "long-enough"); s != http.StatusNotFound {
			t.Errorf("reset of a missing user: %d", s)
		}
		b = e.browser(bob)
		if s, body := reset(bob, "bob-new-password"); s != http.StatusSeeOther {
			t.Fatalf("reset bob: %d %.300s", s, body)
		}
		if res := b.do("GET", "/conversations", "", nil); res.StatusCode != http.StatusSeeOther {
			t.Errorf("bob's session survives the reset: %d", res.StatusCode)
		}
		if s := signIn("bob", "password-bob"); s != http.StatusUnauthorized {
			t.Errorf("the old password after a reset: %d", s)
		}
		if s := signIn("bob", "bob-new-password"); s != http.StatusSeeOther {
			t.Errorf("the new password after a reset: %d", s)
		}
	})
}
