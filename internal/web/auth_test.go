package web

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"parley/internal/store"
)

// TestSignup: the first account is the admin, later ones members; an admin can close sign-up,
// after which the form says so and a POST is refused.
func TestSignup(t *testing.T) {
	e := newTestEnv(t, Config{})
	first := e.anon()
	res := first.postForm("/signup", url.Values{"username": {"ada"}, "password": {"correct horse"}}, first.pageCSRF("/signup"))
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("first sign-up: %d %s", res.StatusCode, readBody(res))
	}
	second := e.anon()
	for _, tc := range []struct {
		name, user, pass string
		status           int
		msg              string
	}{
		{"bad name", "a b", "correct horse", 422, "A name has"},
		{"short password", "bob", "short", 422, "8 to 72"},
		{"taken", "ada", "correct horse", 409, "taken"},
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
	token := third.pageCSRF("/login")
	res = third.postForm("/signup", url.Values{"username": {"eve"}, "password": {"correct horse"}}, token)
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

// TestLoginThrottle: after five failures for a name from one address, even the right password
// waits until the window has passed on the clock; a success clears the count.
func TestLoginThrottle(t *testing.T) {
	e := newTestEnv(t, Config{LoginFailures: 5, LoginWindow: 15 * time.Minute})
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
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != strconv.Itoa(15*60) {
		t.Fatalf("throttled: %d Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	readBody(res)
	// Another name from the same address is not locked.
	other := e.user("bob", store.RoleMember)
	if res := b.postForm("/login", url.Values{"username": {other.Name}, "password": {"password-bob"}}, b.pageCSRF("/login")); res.StatusCode != 303 {
		t.Fatalf("other name: %d", res.StatusCode)
	}
	b = e.anon()
	e.clk.Advance(15*time.Minute - time.Second)
	if res := try("password-ada"); res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" {
		t.Fatalf("one second before the end: %d %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	e.clk.Advance(time.Second)
	if res := try("password-ada"); res.StatusCode != 303 {
		t.Fatalf("after the window: %d", res.StatusCode)
	}
}

// TestSessionLifecycle: the cookie is HttpOnly and SameSite=Lax, its value is not what the
// store holds, sign-out ends it, and an open redirect through ?next is refused.
func TestSessionLifecycle(t *testing.T) {
	e := newTestEnv(t, Config{Production: true})
	u := e.user("ada", store.RoleMember)
	b := e.anon()
	res := b.postForm("/login", url.Values{"username": {u.Name}, "password": {"password-ada"}, "next": {"//evil.example/x"}}, b.pageCSRF("/login"))
	if res.StatusCode != 303 || res.Header.Get("Location") != "/" {
		t.Fatalf("redirect to %q (%d)", res.Header.Get("Location"), res.StatusCode)
	}
	var sess *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Name == sessionCookie {
			sess = ck
		}
	}
	if sess == nil || !sess.HttpOnly || !sess.Secure || sess.SameSite != http.SameSiteLaxMode {
		t.Fatalf("session cookie %+v", sess)
	}
	if _, err := e.st.SessionByHash(t.Context(), []byte(sess.Value)); err == nil {
		t.Fatal("the store holds the cookie's token itself")
	}
	// The jar does not send Secure cookies to http://; send it by hand.
	get := func() *http.Response {
		req, _ := http.NewRequest("GET", e.ts.URL+"/tokens", nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: sess.Value})
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
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: sess.Value})
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
	e := newTestEnv(t, Config{})
	u := e.user("ada", store.RoleMember)
	b := e.browser(u)
	res := b.postForm("/tokens", url.Values{"name": {"ci"}}, b.csrf)
	body := readBody(res)
	m := tokenValue.FindStringSubmatch(body)
	if res.StatusCode != 201 || m == nil {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	secret := m[1]
	if page := readBody(b.do("GET", "/tokens", "", nil)); strings.Contains(page, secret) {
		t.Fatal("the token is shown again")
	}
	script := e.anon()
	script.bearer = secret
	if res := script.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
		t.Fatalf("token use: %d", res.StatusCode)
	}
	list, _ := e.st.ListAPITokens(t.Context(), u.ID)
	if len(list) != 1 || string(list[0].Hash) == secret {
		t.Fatalf("stored tokens %+v", list)
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
// other users are unaffected, and the budget refills on the clock.
func TestRateLimits(t *testing.T) {
	e := newTestEnv(t, Config{APIPerMinute: 60, APIBurst: 3, MessagesPerMinute: 6, MessageBurst: 2})
	u := e.user("ada", store.RoleMember)
	c := e.script(u)
	for i := 0; i < 3; i++ {
		if res := c.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	res := c.api("GET", "/api/v1/conversations", "")
	if eb := decodeEnvelope(t, res); res.StatusCode != 429 || res.Header.Get("Retry-After") != "1" || eb.Error.Kind != "rate_limited" {
		t.Fatalf("over the API budget: %d %q %+v", res.StatusCode, res.Header.Get("Retry-After"), eb)
	}
	if res := e.script(e.user("bob", store.RoleMember)).api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
		t.Fatalf("another user was limited: %d", res.StatusCode)
	}
	e.clk.Advance(time.Minute)
	conv := e.conversation(u)
	msg := func() *http.Response {
		return c.api("POST", "/api/v1/conversations/"+conv.ID+"/messages", `{"text":"hi"}`)
	}
	for i := 0; i < 2; i++ {
		if res := msg(); res.StatusCode != 202 {
			t.Fatalf("message %d: %d", i, res.StatusCode)
		}
	}
	res = msg()
	if res.StatusCode != 429 || res.Header.Get("Retry-After") != "10" {
		t.Fatalf("over the message budget: %d %q %s", res.StatusCode, res.Header.Get("Retry-After"), readBody(res))
	}
	e.clk.Advance(10 * time.Second)
	if res := msg(); res.StatusCode != 202 {
		t.Fatalf("after refilling: %d", res.StatusCode)
	}
	if len(e.conv.sent) != 3 {
		t.Fatalf("%d messages reached the agent, want 3", len(e.conv.sent))
	}
}

// TestSecurityHeadersAndStatic: every response carries the CSP and friends; assets are served
// under their content hash with a year of caching, an old hash is served uncached.
func TestSecurityHeadersAndStatic(t *testing.T) {
	e := newTestEnv(t, Config{})
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

// TestConcurrentFirstSignups: of several sign-ups racing on an empty app, exactly one becomes
// the admin.
func TestConcurrentFirstSignups(t *testing.T) {
	e := newTestEnv(t, Config{})
	const n = 6
	browsers := make([]*client, n)
	tokens := make([]string, n)
	for i := range browsers {
		browsers[i] = e.anon()
		tokens[i] = browsers[i].pageCSRF("/signup")
	}
	codes := make(chan int, n)
	for i := range browsers {
		go func() {
			req, _ := http.NewRequest("POST", e.ts.URL+"/signup", strings.NewReader(url.Values{
				"username": {fmt.Sprintf("user%d", i)}, "password": {"correct horse"}, "_csrf": {tokens[i]}}.Encode()))
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
	for range n {
		if code := <-codes; code != http.StatusSeeOther {
			t.Fatalf("sign-up: %d", code)
		}
	}
	users, err := e.st.ListUsers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	admins := 0
	for _, u := range users {
		if u.Role == store.RoleAdmin {
			admins++
		}
	}
	if len(users) != n || admins != 1 {
		t.Fatalf("%d users, %d admins", len(users), admins)
	}
}
