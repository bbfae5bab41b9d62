package web

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/views/viewstest"
)

// TestSignup: sign-up is closed on an empty store and by default; the first admin comes from the
// one-time setup link (a wrong or used token is a 404); an admin opens sign-up, after which
// accounts are members; closing it again refuses the form and the POST.
func TestSignup(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	nobody := e.anon()
	if res := nobody.do("GET", "/signup", "", nil); res.StatusCode != 403 || !strings.Contains(readBody(res), `data-parley="signup-closed"`) {
		t.Fatalf("sign-up on an empty store: %d", res.StatusCode)
	}
	if res := nobody.postForm("/signup", url.Values{"username": {"mallory"}, "password": {"correct horse"}}, nobody.pageCSRF("/login")); res.StatusCode != 403 {
		t.Fatalf("the first visitor signed up: %d", res.StatusCode)
	}
	token := e.setupToken()
	first := e.anon()
	if res := first.do("GET", "/setup?token=wrong", "", nil); res.StatusCode != 404 {
		t.Fatalf("setup with a wrong token: %d", res.StatusCode)
	}
	res := first.postForm("/setup", url.Values{"token": {token}, "username": {"ada"}, "password": {"correct horse"}}, first.pageCSRF("/setup?token="+url.QueryEscape(token)))
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("setup: %d %s", res.StatusCode, readBody(res))
	}
	if res := e.anon().do("GET", "/setup?token="+url.QueryEscape(token), "", nil); res.StatusCode != 404 {
		t.Fatalf("the setup link after use: %d", res.StatusCode)
	}
	// The admin opens sign-up.
	first.csrf = first.pageCSRF("/admin/users")
	if res := first.postForm("/admin/signup", url.Values{"open": {"true"}}, first.csrf); res.StatusCode != 303 {
		t.Fatalf("open sign-up: %d", res.StatusCode)
	}
	second := e.anon()
	for _, tc := range []struct {
		name, user, pass string
		status           int
		msg              string
	}{
		{"bad name", "a b", "correct horse", 422, "A name has"},
		{"short password", "bob", "short", 422, "8 to 72"},
		{"taken: the same answer as a fresh name", "ada", "correct horse", 303, ""},
		{"ok", "bob", "correct horse", 303, ""},
	} {
		res := second.postForm("/signup", url.Values{"username": {tc.user}, "password": {tc.pass}}, second.pageCSRF("/signup"))
		body := readBody(res)
		if res.StatusCode != tc.status || !strings.Contains(body, tc.msg) {
			t.Fatalf("%s: %d %q", tc.name, res.StatusCode, body)
		}
	}
	ada, _ := e.st.UserByName(t.Context(), "ada")
	bob, _ := e.st.UserByName(t.Context(), "bob")
	if ada.Role != store.RoleAdmin || bob.Role != store.RoleMember {
		t.Fatalf("roles: ada %s, bob %s", ada.Role, bob.Role)
	}
	if string(ada.PasswordHash) == "correct horse" || !strings.HasPrefix(string(ada.PasswordHash), "$2") {
		t.Fatal("the password is not stored as a bcrypt hash")
	}
	// The first browser is signed in as the admin; it closes sign-up.
	first.csrf = first.pageCSRF("/admin/users")
	if res := first.postForm("/admin/signup", url.Values{"open": {"false"}}, first.csrf); res.StatusCode != 303 {
		t.Fatalf("close sign-up: %d", res.StatusCode)
	}
	third := e.anon()
	res = third.do("GET", "/signup", "", nil)
	if body := readBody(res); res.StatusCode != 403 || !strings.Contains(body, `data-parley="signup-closed"`) {
		t.Fatalf("closed sign-up form: %d", res.StatusCode)
	}
	csrf := third.pageCSRF("/login")
	res = third.postForm("/signup", url.Values{"username": {"eve"}, "password": {"correct horse"}}, csrf)
	if res.StatusCode != 403 {
		t.Fatalf("sign-up while closed: %d", res.StatusCode)
	}
	if _, err := e.st.UserByName(t.Context(), "eve"); err == nil {
		t.Fatal("an account was created while sign-up was closed")
	}
	// The admin sets bob's role.
	if res := first.postForm("/admin/users/"+bob.ID+"/role", url.Values{"role": {"reviewer"}}, first.csrf); res.StatusCode != 303 {
		t.Fatalf("set role: %d", res.StatusCode)
	}
	if res := first.postForm("/admin/users/"+ada.ID+"/role", url.Values{"role": {"member"}}, first.csrf); res.StatusCode != 403 {
		t.Fatalf("an admin demoted themself: %d", res.StatusCode)
	}
	if res := first.postForm("/admin/users/"+bob.ID+"/role", url.Values{"role": {"root"}}, first.csrf); res.StatusCode != 422 {
		t.Fatalf("unknown role: %d", res.StatusCode)
	}
	bob, _ = e.st.UserByName(t.Context(), "bob")
	if bob.Role != store.RoleReviewer {
		t.Fatalf("bob is %s", bob.Role)
	}
}

// TestLoginThrottle: past the free failures an account's next tries wait (1s, 2s, 4s … capped),
// even with the right password and from another address; nobody can lock it for longer than the
// cap; a success clears its count.
func TestLoginThrottle(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{LoginFailures: 5, LoginWindow: 15 * time.Minute, LoginMaxDelay: 8 * time.Second})
	u := e.user("ada", store.RoleMember)
	b := e.anon()
	try := func(pw string) *http.Response {
		return b.postForm("/login", url.Values{"username": {u.Name}, "password": {pw}}, b.pageCSRF("/login"))
	}
	for i := 0; i < 5; i++ {
		if res := try("wrong"); res.StatusCode != 401 || !strings.Contains(readBody(res), "Wrong name or password") {
			t.Fatalf("failure %d: %d", i, res.StatusCode)
		}
	}
	res := try("password-ada")
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("throttled: %d Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	readBody(res)
	// The wait doubles with each further failure, up to the cap.
	for _, want := range []string{"2", "4", "8", "8"} {
		e.clk.Advance(time.Minute)
		readBody(try("wrong"))
		res := try("wrong")
		if res.StatusCode != 429 || res.Header.Get("Retry-After") != want {
			t.Fatalf("after another failure: %d Retry-After %q, want %s", res.StatusCode, res.Header.Get("Retry-After"), want)
		}
		readBody(res)
	}
	// Another name from the same address is not slowed by Ada's account.
	other := e.user("bob", store.RoleMember)
	if res := b.postForm("/login", url.Values{"username": {other.Name}, "password": {"password-bob"}}, b.pageCSRF("/login")); res.StatusCode != 303 {
		t.Fatalf("other name: %d", res.StatusCode)
	}
	b = e.anon()
	e.clk.Advance(8 * time.Second)
	if res := try("password-ada"); res.StatusCode != 303 {
		t.Fatalf("after the wait: %d", res.StatusCode)
	}
}

// TestLoginSpraying: thirty names from one address are slowed by the address's limit, whatever
// the names; an X-Forwarded-For the server does not trust changes nothing.
func TestLoginSpraying(t *testing.T) {
	// Parallel: its own server and store; its time is bcrypt comparisons against the
	// production-cost dummy hash (unknown names), which overlap the tests that wait.
	t.Parallel()
	e := newTestEnv(t, openSQLite, Config{LoginFailuresPerIP: 10, LoginWindow: 15 * time.Minute})
	e.user("ada", store.RoleMember)
	b := e.anon()
	codes := map[int]int{}
	for i := range 30 {
		res := b.do("POST", "/login", "application/x-www-form-urlencoded",
			strings.NewReader(url.Values{"username": {fmt.Sprintf("user%d", i)}, "password": {"Winter2026!"}, "_csrf": {b.pageCSRF("/login")}}.Encode()),
			"X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i))
		codes[res.StatusCode]++
		readBody(res)
	}
	if codes[401] != 10 || codes[429] != 20 {
		t.Fatalf("answers %v: want 10 failures, then the address waits", codes)
	}
	// The right password of another account from that address waits too.
	res := b.postForm("/login", url.Values{"username": {"ada"}, "password": {"password-ada"}}, b.pageCSRF("/login"))
	if res.StatusCode != 429 {
		t.Fatalf("a right password from a spraying address: %d", res.StatusCode)
	}
}

// TestTrustedProxy: behind a trusted proxy the client is the one X-Forwarded-For names, so two
// clients of one proxy are limited apart.
func TestTrustedProxy(t *testing.T) {
	// Parallel: its own server and store; its time is bcrypt comparisons against the
	// production-cost dummy hash (unknown names), which overlap the tests that wait.
	t.Parallel()
	e := newTestEnv(t, openSQLite, Config{LoginFailuresPerIP: 2, TrustedProxies: []string{"127.0.0.0/8"}})
	b := e.anon()
	post := func(client string) int {
		res := b.do("POST", "/login", "application/x-www-form-urlencoded",
			strings.NewReader(url.Values{"username": {"nobody"}, "password": {"x"}, "_csrf": {b.pageCSRF("/login")}}.Encode()),
			"X-Forwarded-For", client)
		readBody(res)
		return res.StatusCode
	}
	post("198.51.100.1")
	post("198.51.100.1")
	if c := post("198.51.100.1"); c != 429 {
		t.Fatalf("the first client past its limit: %d", c)
	}
	if c := post("198.51.100.99"); c == 429 {
		t.Fatal("another client of the same proxy was limited by the first")
	}
}

// TestSessionLifecycle: in production the session cookie is named __Host-parley_session and so
// is Secure, for Path=/ and without a Domain (or a browser would drop it); it is HttpOnly and
// SameSite=Lax, its value is not what the store holds, sign-out ends it, and an open redirect
// through ?next is refused.
func TestSessionLifecycle(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{Production: true})
	u := e.user("ada", store.RoleMember)
	b := e.anon()
	res := b.postForm("/login", url.Values{"username": {u.Name}, "password": {"password-ada"}, "next": {"//evil.example/x"}}, b.pageCSRF("/login"))
	if res.StatusCode != 303 || res.Header.Get("Location") != "/" {
		t.Fatalf("redirect to %q (%d)", res.Header.Get("Location"), res.StatusCode)
	}
	var sess *http.Cookie
	for _, ck := range res.Cookies() {
		if strings.Contains(ck.Name, "parley_session") {
			if sess != nil {
				t.Fatalf("two session cookies: %+v and %+v", sess, ck)
			}
			sess = ck
		}
	}
	// The __Host- prefix binds the cookie to this host: the browser keeps it only when it is
	// Secure, for Path=/, with no Domain.
	raw := ""
	for _, h := range res.Header.Values("Set-Cookie") {
		if strings.Contains(h, "parley_session=") {
			raw = h
		}
	}
	if sess == nil || sess.Name != "__Host-parley_session" || !sess.Secure || sess.Path != "/" || sess.Domain != "" ||
		strings.Contains(strings.ToLower(raw), "domain=") {
		t.Fatalf("session cookie %+v (Set-Cookie %q): want __Host-parley_session, Secure, Path=/, no Domain", sess, res.Header.Values("Set-Cookie"))
	}
	if !sess.HttpOnly || sess.SameSite != http.SameSiteLaxMode {
		t.Fatalf("session cookie %+v", sess)
	}
	if _, err := e.st.SessionByHash(t.Context(), []byte(sess.Value)); err == nil {
		t.Fatal("the store holds the cookie's token itself")
	}
	// The jar does not send Secure cookies to http://; send it by hand.
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", e.ts.URL+"/tokens", nil)
		req.AddCookie(&http.Cookie{Name: e.srv.sessionCookie(), Value: sess.Value})
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res = get()
	body := readBody(res)
	if res.StatusCode != 200 {
		t.Fatalf("tokens page: %d", res.StatusCode)
	}
	csrf := csrfInput.FindStringSubmatch(body)[1]
	req, _ := http.NewRequest("POST", e.ts.URL+"/logout", strings.NewReader(url.Values{"_csrf": {csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: e.srv.sessionCookie(), Value: sess.Value})
	if res, err := http.DefaultTransport.RoundTrip(req); err != nil || res.StatusCode != 303 {
		t.Fatalf("logout: %v %d", err, res.StatusCode)
	}
	if res := get(); res.StatusCode != 303 || !strings.HasPrefix(res.Header.Get("Location"), "/login") {
		t.Fatalf("after logout: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
}

var tokenValue = regexp.MustCompile(`data-parley="token-value">(pt_[A-Za-z0-9_-]+)<`)

// TestTokens: a token is shown once on creation, works as a Bearer on the API, and stops
// working when revoked; another user cannot revoke it.
func TestTokens(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	u := e.user("ada", store.RoleMember)
	b := e.browser(u)
	// Post-redirect-get: the token shows once on the page the POST redirects to; reloading
	// that page neither shows it again nor makes another.
	res := b.postForm("/tokens", url.Values{"name": {"ci"}}, b.csrf)
	if res.StatusCode != 303 || res.Header.Get("Location") != "/tokens" || strings.Contains(res.Header.Get("Location"), "pt_") {
		t.Fatalf("create: %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	readBody(res)
	body := readBody(b.do("GET", "/tokens", "", nil))
	m := tokenValue.FindStringSubmatch(body)
	if m == nil || !strings.Contains(body, `data-parley="copy"`) {
		t.Fatalf("the created token is not shown with a copy button: %s", body)
	}
	secret := m[1]
	if page := readBody(b.do("GET", "/tokens", "", nil)); strings.Contains(page, secret) || !strings.Contains(page, `data-parley="token-last-used">never<`) {
		t.Fatal("the token is shown again, or its last use is not 'never'")
	}
	script := e.anon()
	script.bearer = secret
	if res := script.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
		t.Fatalf("token use: %d", res.StatusCode)
	}
	list, _ := e.st.ListAPITokens(t.Context(), u.ID)
	if len(list) != 1 || string(list[0].Hash) == secret || list[0].LastUsedAt == nil {
		t.Fatalf("stored tokens %+v: one, hashed, its use recorded", list)
	}
	if page := readBody(b.do("GET", "/tokens", "", nil)); strings.Contains(page, `data-parley="token-last-used">never<`) {
		t.Fatal("the page does not show the token's last use")
	}
	// Someone else cannot revoke it.
	mallory := e.browser(e.user("mallory", store.RoleAdmin))
	if res := mallory.postForm("/tokens/"+list[0].ID+"/revoke", url.Values{}, mallory.csrf); res.StatusCode != 404 {
		t.Fatalf("foreign revoke: %d", res.StatusCode)
	}
	if res := b.postForm("/tokens/"+list[0].ID+"/revoke", url.Values{}, b.csrf); res.StatusCode != 303 {
		t.Fatalf("revoke: %d", res.StatusCode)
	}
	res = script.api("GET", "/api/v1/conversations", "")
	if eb := decodeEnvelope(t, res); res.StatusCode != 401 || eb.Error.Kind != "not_authenticated" {
		t.Fatalf("revoked token: %d %+v", res.StatusCode, eb)
	}
}

// TestRateLimits: a user past their API budget or message budget gets 429 with Retry-After,
// other users are unaffected, and the budget refills on the clock. Only the messages within
// the budget reach the agent.
func TestRateLimits(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIPerMinute: 60, APIBurst: 3, MessagesPerMinute: 6, MessageBurst: 2})
		u := e.user("ada", store.RoleMember)
		c := e.script(u)
		for i := 0; i < 3; i++ {
			if res := c.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
				t.Fatalf("request %d: %d", i, res.StatusCode)
			} else {
				readBody(res)
			}
		}
		res := c.api("GET", "/api/v1/conversations", "")
		if eb := decodeEnvelope(t, res); res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" || eb.Error.Kind != "rate_limited" {
			t.Fatalf("over the API budget: %d %q %+v", res.StatusCode, res.Header.Get("Retry-After"), eb)
		}
		if res := e.script(e.user("bob", store.RoleMember)).api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
			t.Fatalf("another user was limited: %d", res.StatusCode)
		} else {
			readBody(res)
		}
		e.clk.Advance(time.Minute)
		conv := e.conversation(u)
		e.model.Push(llmtest.Reply("One."), llmtest.Reply("Two."), llmtest.Reply("Three."))
		msg := func() *http.Response {
			return c.api("POST", "/api/v1/conversations/"+conv.ID+"/messages", `{"text":"hi"}`)
		}
		for i := 0; i < 2; i++ {
			if res := msg(); res.StatusCode != 202 {
				t.Fatalf("message %d: %d %s", i, res.StatusCode, readBody(res))
			} else {
				readBody(res)
			}
			e.awaitStatus(conv.ID, store.StatusIdle) // the turn ends before the next message
		}
		res = msg()
		if res.StatusCode != 429 || res.Header.Get("Retry-After") != "10" {
			t.Fatalf("over the message budget: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), readBody(res))
		}
		readBody(res)
		e.clk.Advance(10 * time.Second)
		if res := msg(); res.StatusCode != 202 {
			t.Fatalf("after refilling: %d", res.StatusCode)
		} else {
			readBody(res)
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
		if got := e.userMessages(conv.ID); len(got) != 3 {
			t.Fatalf("%d messages reached the agent, want 3: %v", len(got), got)
		}
	})
}

// TestSecurityHeadersAndStatic: every response carries the CSP and friends; assets are served
// under their content hash with a year of caching, an old hash is served uncached.
func TestSecurityHeadersAndStatic(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	res := e.anon().do("GET", "/login", "", nil)
	body := readBody(res)
	h := res.Header
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") ||
		!strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP %q", csp)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" {
		t.Fatalf("headers %v", h)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " onclick=") {
		t.Fatal("the login page has inline script")
	}
	for name := range staticIndexForTest() {
		u := staticURL(name)
		res := e.anon().do("GET", u, "", nil)
		readBody(res)
		if res.StatusCode != 200 || !strings.Contains(res.Header.Get("Cache-Control"), "immutable") {
			t.Fatalf("%s: %d %q", u, res.StatusCode, res.Header.Get("Cache-Control"))
		}
		old := "/static/000000000000/" + name
		res = e.anon().do("GET", old, "", nil)
		readBody(res)
		if res.StatusCode != 200 || res.Header.Get("Cache-Control") != "no-cache" {
			t.Fatalf("%s: %d %q", old, res.StatusCode, res.Header.Get("Cache-Control"))
		}
	}
	if res := e.anon().do("GET", "/static/abc/../static.go", "", nil); res.StatusCode != 404 {
		t.Fatalf("source served: %d", res.StatusCode)
	}
	if res := e.anon().do("GET", "/static/abc/static.go", "", nil); res.StatusCode != 404 {
		t.Fatalf("source served: %d", res.StatusCode)
	}
}

// TestConcurrentFirstSignups: of several setups racing on an empty app with the link, exactly one
// makes the admin; the others are told nothing (404).
func TestConcurrentFirstSignups(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	token := e.setupToken()
	const n = 6
	browsers := make([]*client, n)
	tokens := make([]string, n)
	for i := range browsers {
		browsers[i] = e.anon()
		tokens[i] = browsers[i].pageCSRF("/setup?token=" + url.QueryEscape(token))
	}
	codes := make(chan int, n)
	for i := range browsers {
		go func() {
			req, _ := http.NewRequest("POST", e.ts.URL+"/setup", strings.NewReader(url.Values{
				"token": {token}, "username": {fmt.Sprintf("user%d", i)}, "password": {"correct horse"}, "_csrf": {tokens[i]}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			res, err := browsers[i].hc.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	got := map[int]int{}
	for range n {
		got[<-codes]++
	}
	users, err := e.st.ListUsers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got[http.StatusSeeOther] != 1 || got[http.StatusNotFound] != n-1 || len(users) != 1 || users[0].Role != store.RoleAdmin {
		t.Fatalf("answers %v, users %+v", got, users)
	}
}

// TestSignupLinkFollowsTheSetting: a stranger's pages offer "Sign up" only while an admin keeps
// sign-up open (issue 27, item 10): closed by default, shown once opened, gone once closed.
func TestSignupLinkFollowsTheSetting(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	e.user("ada", store.RoleAdmin)
	links := func() int {
		t.Helper()
		res := e.anon().do("GET", "/login", "", nil)
		doc := viewstest.MustParse(readBody(res))
		return len(doc.All(`a[href="/signup"]`))
	}
	if n := links(); n != 0 {
		t.Fatalf("sign-up closed: the sign-in page has %d links to /signup, want none", n)
	}
	if err := e.st.SetSetting(t.Context(), signupKey, signupOpenValue); err != nil {
		t.Fatal(err)
	}
	if n := links(); n != 2 {
		t.Fatalf("sign-up open: the sign-in page has %d links to /signup, want 2 (header and form)", n)
	}
	if err := e.st.SetSetting(t.Context(), signupKey, "closed"); err != nil {
		t.Fatal(err)
	}
	if n := links(); n != 0 {
		t.Fatalf("sign-up closed again: %d links to /signup, want none", n)
	}
}
