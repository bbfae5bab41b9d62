package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// TestProbesIgnoreAuthorization: /healthz, /readyz and /metrics answer 200 whatever Bearer
// header a monitoring script sends with them, valid, unknown or none; the API still refuses an
// unknown token.
func TestProbesIgnoreAuthorization(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	u := e.user("ops", store.RoleMember)
	valid := e.script(u)
	bogus := e.anon()
	bogus.bearer = "pt_not-a-token"
	for name, c := range map[string]*client{"none": e.anon(), "valid token": valid, "unknown token": bogus} {
		for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
			res := c.do("GET", p, "", nil)
			body := readBody(res)
			if res.StatusCode != http.StatusOK {
				t.Errorf("%s with %s: %d %s", p, name, res.StatusCode, body)
			}
		}
	}
	if res := bogus.api("GET", "/api/v1/conversations", ""); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unknown token on the API: %d", res.StatusCode)
	} else {
		readBody(res)
	}
	// A token is still refused outside the API and the sockets (the probes are not a way in).
	if res := valid.do("GET", "/tokens", "", nil); res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("token on an account page: %d", res.StatusCode)
	} else {
		readBody(res)
	}
}

// TestTokenCacheTTL: a token's user is cached for tokenCacheTTL. A revocation made outside this
// process (straight in the store, like `web token revoke`) takes effect once the TTL has passed;
// one made through this process's tokens page, and a role change through the admin page, take
// effect at once (the role decides, in the agent, whether a reviewer-gated call is theirs).
func TestTokenCacheTTL(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) { testTokenCacheTTL(t, open) })
}

func testTokenCacheTTL(t *testing.T, open opener) {
	e := newTestEnv(t, open, Config{APIBurst: 1000})
	ctx := context.Background()
	u := e.user("bob", store.RoleMember)
	c := e.script(u)
	status := func() int {
		t.Helper()
		res := c.api("GET", "/api/v1/conversations", "")
		readBody(res)
		return res.StatusCode
	}
	if got := status(); got != 200 {
		t.Fatalf("fresh token: %d", got)
	}
	toks, err := e.st.ListAPITokens(ctx, u.ID)
	if err != nil || len(toks) != 1 {
		t.Fatalf("tokens: %v %v", toks, err)
	}
	if err := e.st.RevokeAPIToken(ctx, u.ID, toks[0].ID); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(tokenCacheTTL - time.Millisecond)
	if got := status(); got != 200 {
		t.Fatalf("revoked elsewhere, within the TTL: %d, want 200 from the cache", got)
	}
	e.clk.Advance(time.Millisecond)
	if got := status(); got != 401 {
		t.Fatalf("revoked elsewhere, TTL over: %d, want 401", got)
	}

	// Revoked through this process: refused at once, though the cache had it.
	c2 := e.script(u)
	if res := c2.api("GET", "/api/v1/conversations", ""); res.StatusCode != 200 {
		t.Fatalf("second token: %d", res.StatusCode)
	} else {
		readBody(res)
	}
	toks, _ = e.st.ListAPITokens(ctx, u.ID)
	var live string
	for _, tk := range toks {
		if tk.RevokedAt == nil {
			live = tk.ID
		}
	}
	b := e.browser(u)
	if res := b.postForm("/tokens/"+live+"/revoke", url.Values{}, b.csrf); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke: %d", res.StatusCode)
	}
	if res := c2.api("GET", "/api/v1/conversations", ""); res.StatusCode != 401 {
		t.Fatalf("revoked here: %d, want 401 at once", res.StatusCode)
	} else {
		readBody(res)
	}

	// A role changed by an admin here applies to the next request, not after the TTL.
	admin := e.user("root", store.RoleAdmin)
	member := e.user("carol", store.RoleMember)
	owner := e.user("dave", store.RoleMember)
	conv := e.conversation(owner)
	e.pending(conv, owner, llmtest.Call("rev-call", "publish", map[string]any{"text": "hello"}))
	e.model.Push(llmtest.Reply("Published."))
	carol := e.script(member)
	resolve := func() int {
		res := carol.api("POST", "/api/v1/conversations/"+conv.ID+"/calls/rev-call/resolve", `{"decision":"approve"}`)
		readBody(res)
		return res.StatusCode
	}
	if got := resolve(); got != 404 {
		t.Fatalf("a member resolving another's reviewer call: %d, want 404", got)
	}
	ab := e.browser(admin)
	if res := ab.postForm("/admin/users/"+member.ID+"/role", url.Values{"role": {"reviewer"}}, ab.csrf); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("set role: %d", res.StatusCode)
	}
	if got := resolve(); got != 200 {
		t.Fatalf("the new reviewer's resolve: %d, want 200 without waiting for the TTL", got)
	}
	if got := strings.Join(e.auditOf(conv.ID, "rev-call"), ","); got != "approve by carol" {
		t.Fatalf("audit: %q", got)
	}
	e.awaitStatus(conv.ID, store.StatusIdle)
}

// TestTokenCacheBounded: the cache never holds more than its bound; expired entries go first.
func TestTokenCacheBounded(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	tc := newTokenCache(clk, time.Second, 3)
	for i, h := range []string{"a", "b", "c"} {
		tc.put(h, store.APIToken{ID: h}, store.User{ID: "u" + h})
		if i == 0 {
			clk.Advance(2 * time.Second) // "a" expires
		}
	}
	tc.put("d", store.APIToken{ID: "d"}, store.User{ID: "ud"})
	if _, _, ok := tc.get("a"); ok || tc.len() != 3 {
		t.Fatalf("after sweeping the expired entry: len %d, a cached %v", tc.len(), ok)
	}
	for _, h := range []string{"b", "c", "d"} {
		if _, _, ok := tc.get(h); !ok {
			t.Fatalf("%s was dropped though fresh entries had room", h)
		}
	}
	tc.put("e", store.APIToken{ID: "e"}, store.User{ID: "ue"}) // full of fresh entries: dropped wholesale
	if tc.len() > 3 {
		t.Fatalf("len %d over the bound", tc.len())
	}
	if u, _, ok := tc.get("e"); !ok || u.ID != "ue" {
		t.Fatalf("the newest entry is missing: %v %v", u, ok)
	}
	tc.forgetUser("ue")
	if _, _, ok := tc.get("e"); ok {
		t.Fatal("forgetUser left the user's token")
	}
}

// slowTokenStore holds the first token lookup until a second one arrives or a while passes,
// and counts the lookups.
type slowTokenStore struct {
	store.Store
	lookups atomic.Int64
	second  chan struct{}
}

func (s *slowTokenStore) APITokenByHash(ctx context.Context, hash []byte) (store.APIToken, error) {
	switch s.lookups.Add(1) {
	case 1:
		select {
		case <-s.second: // a concurrent miss went to the store: the test fails below
		case <-time.After(200 * time.Millisecond): // long enough for every caller to be waiting
		}
	case 2:
		close(s.second)
	}
	return s.Store.APITokenByHash(ctx, hash)
}

// TestTokenLookupsCollapse: many requests with one uncached token at once cost one lookup.
func TestTokenLookupsCollapse(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{APIBurst: 1000})
	u := e.user("crowd", store.RoleMember)
	c := e.script(u)
	slow := &slowTokenStore{Store: e.st, second: make(chan struct{})}
	e.srv.store = slow
	const n = 20
	codes := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/conversations", nil)
			req.Header.Set("Authorization", "Bearer "+c.bearer)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	for range n {
		if code := <-codes; code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	if got := slow.lookups.Load(); got != 1 {
		t.Fatalf("%d token lookups for %d concurrent requests, want 1", got, n)
	}
}
