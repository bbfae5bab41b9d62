package web

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/views/viewstest"
)

// TestSignupDoesNotRevealNames: with sign-up open, a taken name and a free one get the same
// answer — status, redirect, cookies set, and the page it leads to — and do the same work, so
// the time they take tells nothing either: in both the password is hashed at the configured
// bcrypt cost and the account's insert is tried, once (seen through the store, not a clock;
// how long the work takes is the benchmarks' business). Only the free one makes an account,
// and the taken one leaves the existing account's password alone.
func TestSignupDoesNotRevealNames(t *testing.T) {
	var inserts insertRecorder
	record := func(t testing.TB, clk clock.Clock) store.Store { return inserts.wrap(openSQLite(t, clk)) }
	e := newTestEnv(t, record, Config{PasswordCost: 8})
	ada := e.user("ada", store.RoleAdmin)
	if err := e.st.SetSetting(context.Background(), signupKey, signupOpenValue); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status   int
		location string
		cookies  []string
		page     string
	}
	signup := func(name string) answer {
		c := e.anon()
		csrf := c.pageCSRF("/signup")
		inserts.take()
		res := c.postForm("/signup", url.Values{"username": {name}, "password": {"correct horse"}}, csrf)
		readBody(res)
		// The work done for the request, whether or not the name was free.
		tried := inserts.take()
		if len(tried) != 1 || tried[0].Name != name {
			t.Fatalf("sign-up as %q tried %d inserts %+v, want one of %q", name, len(tried), tried, name)
		}
		if cost, err := bcrypt.Cost(tried[0].PasswordHash); err != nil || cost != 8 || bcrypt.CompareHashAndPassword(tried[0].PasswordHash, []byte("correct horse")) != nil {
			t.Fatalf("sign-up as %q inserted a password hash of cost %d (%v), want the password's bcrypt hash at cost 8", name, cost, err)
		}
		var cookies []string
		for _, ck := range res.Cookies() {
			cookies = append(cookies, ck.Name)
		}
		sort.Strings(cookies)
		page := readBody(c.do("GET", res.Header.Get("Location"), "", nil))
		page = regexp.MustCompile(`name="_csrf" value="[^"]+"`).ReplaceAllString(page, "")
		return answer{res.StatusCode, res.Header.Get("Location"), cookies, page}
	}
	a, b := signup("ada"), signup("newa")
	if a.status != b.status || a.location != b.location || !slices.Equal(a.cookies, b.cookies) || a.page != b.page {
		t.Fatalf("a taken name is told apart:\ntaken %d %s %v\nfresh %d %s %v", a.status, a.location, a.cookies, b.status, b.location, b.cookies)
	}
	if a.status != http.StatusSeeOther || !strings.Contains(a.page, "If that name was free") || slices.Contains(a.cookies, e.srv.sessionCookie()) {
		t.Fatalf("sign-up answer %+v: want 303 to the sign-in page with the notice and no session", a)
	}
	if u, err := e.st.UserByName(context.Background(), "newa"); err != nil || u.Role != store.RoleMember {
		t.Fatalf("the free name's account: %v %+v", err, u)
	}
	if u, _ := e.st.UserByName(context.Background(), "ada"); string(u.PasswordHash) != string(ada.PasswordHash) || u.Role != store.RoleAdmin {
		t.Fatal("a sign-up for a taken name changed the existing account")
	}
	// The new member signs in with the password they chose.
	c := e.anon()
	res := c.postForm("/login", url.Values{"username": {"newa"}, "password": {"correct horse"}}, c.pageCSRF("/login"))
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the new member signs in: %d", res.StatusCode)
	}
}

// insertRecorder records the users a store was asked to create, taken or not.
type insertRecorder struct {
	mu    sync.Mutex
	users []store.User
}

func (r *insertRecorder) wrap(st store.Store) store.Store { return recordingStore{st, r} }

// take returns the inserts recorded since the last take.
func (r *insertRecorder) take() []store.User {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.users
	r.users = nil
	return out
}

type recordingStore struct {
	store.Store
	r *insertRecorder
}

func (s recordingStore) CreateUser(ctx context.Context, u store.User) (store.User, error) {
	s.r.mu.Lock()
	s.r.users = append(s.r.users, u)
	s.r.mu.Unlock()
	return s.Store.CreateUser(ctx, u)
}

var invitationLink = regexp.MustCompile(`data-parley="invitation-link">https?://[^/]+(/invite\?token=pi_[A-Za-z0-9_-]+)<`)

// invitation creates an invitation through the admin page and returns its link's path.
func invitation(t *testing.T, admin *client, form url.Values) string {
	t.Helper()
	res := admin.postForm("/admin/invitations", form, admin.csrf)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("create an invitation %v: %d %s", form, res.StatusCode, readBody(res))
	}
	readBody(res)
	page := readBody(admin.do("GET", "/admin/invitations", "", nil))
	m := invitationLink.FindStringSubmatch(page)
	if m == nil || !strings.Contains(page, `data-parley="copy"`) {
		t.Fatalf("the new invitation is not shown with a copy button: %.2000s", page)
	}
	if again := readBody(admin.do("GET", "/admin/invitations", "", nil)); strings.Contains(again, m[1]) {
		t.Fatal("the invitation link is shown twice")
	}
	return m[1]
}

// TestInvitations: an admin invites while sign-up is closed; the link makes one account with
// its role and signs it in; a used, revoked or expired link is refused with a page that says
// so; the admin page lists each invitation's state; only admins may invite; bad input is 422.
func TestInvitations(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		root := e.user("root", store.RoleAdmin)
		admin := e.browser(root)
		link := invitation(t, admin, url.Values{"role": {"reviewer"}, "expires_days": {"7"}})

		// The invitee: the form names the role; a taken name is refused and the link stays good.
		guest := e.anon()
		res := guest.do("GET", link, "", nil)
		body := readBody(res)
		if res.StatusCode != 200 || !strings.Contains(body, `data-parley="invite-role">reviewer<`) {
			t.Fatalf("the invitation form: %d %.300s", res.StatusCode, body)
		}
		csrf := guest.pageCSRF(link)
		token := strings.TrimPrefix(link, "/invite?token=")
		post := func(c *client, csrf, name string) *http.Response {
			return c.postForm("/invite", url.Values{"token": {token}, "username": {name}, "password": {"correct horse"}}, csrf)
		}
		if res := post(guest, csrf, "root"); res.StatusCode != http.StatusConflict {
			t.Fatalf("an invitation with a taken name: %d", res.StatusCode)
		}
		if res := guest.postForm("/invite", url.Values{"token": {token}, "username": {"a b"}, "password": {"correct horse"}}, csrf); res.StatusCode != 422 {
			t.Fatalf("an invitation with a bad name: %d", res.StatusCode)
		}
		res = post(guest, csrf, "rhea")
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("use the invitation: %d %s", res.StatusCode, readBody(res))
		}
		rhea, err := e.st.UserByName(context.Background(), "rhea")
		if err != nil || rhea.Role != store.RoleReviewer {
			t.Fatalf("the invited account: %v %+v", err, rhea)
		}
		if res := guest.do("GET", "/inbox", "", nil); res.StatusCode != 200 {
			t.Fatalf("the invitee is signed in as a reviewer: inbox %d", res.StatusCode)
		}
		// Only admins invite.
		guest.csrf = guest.pageCSRF("/tokens")
		for _, c := range []*client{guest, e.browser(e.user("mo", store.RoleMember))} {
			if res := c.postForm("/admin/invitations", url.Values{"role": {"member"}}, c.csrf); res.StatusCode != http.StatusForbidden {
				t.Errorf("a non-admin invites: %d", res.StatusCode)
			}
		}

		// Used: refused, clearly, and it makes nothing more.
		other := e.anon()
		res = other.do("GET", link, "", nil)
		if body := readBody(res); res.StatusCode != http.StatusGone || !strings.Contains(body, "already been used") {
			t.Fatalf("a used link: %d %.300s", res.StatusCode, body)
		}
		if res := post(other, other.pageCSRF("/login"), "second"); res.StatusCode != http.StatusGone {
			t.Fatalf("posting a used link: %d", res.StatusCode)
		}

		// Revoked and expired links are refused too; an unknown one is a 404.
		revoked := invitation(t, admin, url.Values{"role": {"member"}})
		invs, err := e.st.ListInvitations(context.Background())
		if err != nil || len(invs) != 2 || invs[0].UsedAt != nil || invs[1].UsedAt == nil {
			t.Fatalf("invitations %v %+v, want the new one first, then the used one", err, invs)
		}
		if res := admin.postForm("/admin/invitations/"+invs[0].ID+"/revoke", url.Values{}, admin.csrf); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("revoke: %d", res.StatusCode)
		}
		if res := admin.postForm("/admin/invitations/"+invs[1].ID+"/revoke", url.Values{}, admin.csrf); res.StatusCode != http.StatusNotFound {
			t.Fatalf("revoking a used invitation: %d", res.StatusCode)
		}
		if body := readBody(e.anon().do("GET", revoked, "", nil)); !strings.Contains(body, "revoked") {
			t.Fatalf("a revoked link: %.300s", body)
		}
		expiring := invitation(t, admin, url.Values{"role": {"member"}, "expires_days": {"1"}})
		e.clk.Advance(24*time.Hour + time.Second)
		if res := e.anon().do("GET", expiring, "", nil); res.StatusCode != http.StatusGone || !strings.Contains(readBody(res), "expired") {
			t.Fatalf("an expired link: %d", res.StatusCode)
		}
		if res := e.anon().do("GET", "/invite?token=pi_nope", "", nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("an unknown link: %d", res.StatusCode)
		}

		// The admin page lists each state.
		admin = e.browser(root) // a day later: signed in again
		doc := viewstest.MustParse(readBody(admin.do("GET", "/admin/invitations", "", nil)))
		var states []string
		for _, n := range doc.All(`[data-parley="invitation"] [data-parley="invitation-state"]`) {
			states = append(states, viewstest.Text(n))
		}
		if strings.Join(states, ",") != "expired,revoked,used by rhea" {
			t.Errorf("invitation states %v", states)
		}

		// Bad input is a clear 422.
		for _, form := range []url.Values{{"role": {"admin"}}, {"role": {"root"}}, {"expires_days": {"0"}}, {"expires_days": {"x"}}, {"expires_days": {"31"}}} {
			if res := admin.postForm("/admin/invitations", form, admin.csrf); res.StatusCode != http.StatusUnprocessableEntity {
				t.Errorf("invitation form %v: %d", form, res.StatusCode)
			}
		}
	})
}

// TestInvitationRaceMakesOneAccount: two people posting one link at once: one account.
func TestInvitationRaceMakesOneAccount(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		admin := e.browser(e.user("root", store.RoleAdmin))
		link := invitation(t, admin, url.Values{"role": {"member"}})
		token := strings.TrimPrefix(link, "/invite?token=")
		codes := make(chan int, 6)
		for i := range 6 {
			c := e.anon()
			csrf := c.pageCSRF("/login")
			go func() {
				res := c.postForm("/invite", url.Values{"token": {token}, "username": {"racer" + string(rune('a'+i))}, "password": {"correct horse"}}, csrf)
				res.Body.Close()
				codes <- res.StatusCode
			}()
		}
		ok := 0
		for range 6 {
			if <-codes == http.StatusSeeOther {
				ok++
			}
		}
		users, err := e.st.ListUsers(context.Background())
		if ok != 1 || err != nil || len(users) != 2 {
			t.Fatalf("%d redemptions succeeded, %d users (%v): want one account", ok, len(users), err)
		}
	})
}
