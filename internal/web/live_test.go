package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"parley/internal/auth"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// readClosed reads the socket until it closes and returns the close status, failing after 5 s.
func readClosed(t *testing.T, conn *websocket.Conn) websocket.StatusCode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, _, err := conn.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the socket is still open after 5 s")
			}
			return websocket.CloseStatus(err)
		}
	}
}

// TestLiveConnectionsEndWithTheirCredential: a page socket ends when its session signs out here,
// an event stream when its token is revoked here, a reviewer's socket when the reviewer is
// demoted, and — as another process would see it — a socket whose session row is deleted in the
// store ends at the next re-check.
func TestLiveConnectionsEndWithTheirCredential(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv := e.conversation(ann)
		gated := e.conversation(ann)
		e.pending(gated, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}))
		path := "/conversations/" + conv.ID + "/ws"

		// Sign out in this process: the socket the session opened closes at once.
		b := e.browser(ann)
		conn, _, err := b.dial(t, path, e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)
		if res := b.postForm("/logout", url.Values{}, b.csrf); res.StatusCode != 303 {
			t.Fatalf("logout = %d", res.StatusCode)
		}
		if st := readClosed(t, conn); st != websocket.StatusPolicyViolation {
			t.Fatalf("after logout the socket closed with %v, want policy violation", st)
		}

		// Revoke the token in this process: its event stream ends with signed_out.
		s := e.script(ann)
		events, stop := openStream(t, s, "/api/v1/conversations/"+conv.ID+"/events", "")
		defer stop()
		tokens, err := e.st.ListAPITokens(context.Background(), ann.ID)
		if err != nil || len(tokens) == 0 {
			t.Fatalf("tokens %v %v", tokens, err)
		}
		page := e.browser(ann)
		for _, tok := range tokens {
			page.postForm("/tokens/"+tok.ID+"/revoke", url.Values{}, page.csrf)
		}
		nextNamed(t, events, "signed_out", nil)

		// Demote the reviewer: their socket on a conversation they could read (a call of theirs
		// to decide) closes once the role no longer gives them the right.
		admin := e.user("root", store.RoleAdmin)
		rb := e.browser(rita)
		rconn, _, err := rb.dial(t, "/conversations/"+gated.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, rconn)
		ab := e.browser(admin)
		if res := ab.postForm("/admin/users/"+rita.ID+"/role", url.Values{"role": {"member"}}, ab.csrf); res.StatusCode >= 400 {
			t.Fatalf("demote = %d %s", res.StatusCode, readBody(res))
		}
		if st := readClosed(t, rconn); st != websocket.StatusPolicyViolation {
			t.Fatalf("after the demotion the socket closed with %v", st)
		}

		// Another process signs the session out (its row is gone from the shared store): this
		// process notices at its next re-check, with no local event.
		b2 := e.browser(ann)
		conn2, _, err := b2.dial(t, path, e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn2)
		cookie := sessionValue(t, b2)
		if err := e.st.DeleteSession(context.Background(), auth.Hash(cookie)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		closed := make(chan websocket.StatusCode, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for {
				if _, _, err := conn2.Read(ctx); err != nil {
					closed <- websocket.CloseStatus(err)
					return
				}
			}
		}()
		for {
			e.clk.Advance(e.srv.cfg.LiveRecheck)
			select {
			case st := <-closed:
				if st != websocket.StatusPolicyViolation {
					t.Fatalf("after the session row went, the socket closed with %v", st)
				}
				return
			case <-time.After(5 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal(errors.New("the socket outlived its session's row"))
			}
		}
	})
}

// sessionValue is the browser's session cookie.
func sessionValue(t *testing.T, c *client) string {
	t.Helper()
	u, _ := url.Parse(c.e.ts.URL)
	for _, ck := range c.hc.Jar.Cookies(u) {
		if ck.Name == c.e.srv.sessionCookie() {
			return ck.Value
		}
	}
	t.Fatal("no session cookie")
	return ""
}

// TestSlowBodyIsCutOff: a sign-in whose body trickles in is cut off after BodyTimeout instead of
// holding its connection for as long as the sender likes.
func TestSlowBodyIsCutOff(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{BodyTimeout: 300 * time.Millisecond})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\nusername=")
	began := time.Now()
	done := make(chan error, 1)
	go func() {
		// Trickle a byte every 100 ms, far slower than the body's 1000 bytes need.
		for range 100 {
			if _, err := conn.Write([]byte("a")); err != nil {
				done <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		done <- nil
	}()
	buf := make([]byte, 4096)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := conn.Read(buf) // the server answers (or closes) once the deadline passed
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("the slow body held the connection for %v", took)
	}
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 408") {
		t.Fatalf("answer to a slow body: %q, want 408", buf[:n])
	}
	conn.Close()
	<-done // the trickler stops at its next write
}

// TestLiveConnectionCaps: one person's live connections are capped (a clear 429 past the cap,
// and room again once one closes); page POSTs and socket upgrades spend a page budget.
func TestLiveConnectionCaps(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{MaxConnsPerUser: 2})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	b := e.browser(ann)
	path := "/conversations/" + conv.ID + "/ws"
	var open []*websocket.Conn
	for range 2 {
		conn, _, err := b.dial(t, path, e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)
		open = append(open, conn)
	}
	if _, res, err := b.dial(t, path, e.ts.URL); err == nil || res == nil || res.StatusCode != 429 {
		t.Fatalf("a third socket: %v %v, want 429", err, res)
	}
	s := e.script(ann)
	if res := s.api("GET", "/api/v1/conversations/"+conv.ID+"/events", ""); res.StatusCode != 429 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("an event stream past the cap = %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	_ = open[0].Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool {
		conn, _, err := b.dial(t, path, e.ts.URL)
		if err == nil {
			_ = conn.CloseNow()
		}
		return err == nil
	})

	// Page actions: the budget's burst, then 429 with Retry-After.
	pe := newTestEnv(t, openSQLite, Config{PagesPerMinute: 1, PageBurst: 3})
	bob := pe.user("bob", store.RoleMember)
	bb := pe.browser(bob) // signing in is not a page action of a signed-in user
	codes := []int{}
	for range 5 {
		res := bb.postForm("/conversations", url.Values{"title": {"x"}}, bb.csrf)
		codes = append(codes, res.StatusCode)
		readBody(res)
	}
	if codes[0] != 303 || codes[4] != 429 {
		t.Fatalf("page POSTs: %v, want 303s then 429", codes)
	}
}

// TestPasswordChangeAndSignOutEverywhere: changing the password keeps this browser signed in and
// signs out the others (their sockets close); a wrong current password changes nothing; "sign
// out everywhere" ends every session, this one too.
func TestPasswordChangeAndSignOutEverywhere(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		here, there := e.browser(ann), e.browser(ann)
		conn, _, err := there.dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)
		if res := here.postForm("/account/password", url.Values{"current": {"wrong"}, "password": {"a new long password"}}, here.csrf); res.StatusCode != 422 {
			t.Fatalf("a wrong current password: %d", res.StatusCode)
		}
		res := here.postForm("/account/password", url.Values{"current": {"password-ann"}, "password": {"a new long password"}}, here.csrf)
		if res.StatusCode != 303 || res.Header.Get("Location") != "/account?notice=password" {
			t.Fatalf("change the password: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if st := readClosed(t, conn); st != websocket.StatusPolicyViolation {
			t.Fatalf("the other browser's socket closed with %v", st)
		}
		if res := there.do("GET", "/conversations", "", nil); res.StatusCode != 303 {
			t.Fatalf("the other browser after the change: %d, want a redirect to sign in", res.StatusCode)
		}
		if res := here.do("GET", "/conversations", "", nil); res.StatusCode != 200 {
			t.Fatalf("this browser after the change: %d", res.StatusCode)
		}
		// Everywhere: this browser too.
		if res := here.postForm("/account/signout-all", url.Values{}, here.csrf); res.StatusCode != 303 {
			t.Fatalf("sign out everywhere: %d", res.StatusCode)
		}
		if res := here.do("GET", "/conversations", "", nil); res.StatusCode != 303 {
			t.Fatalf("this browser after signing out everywhere: %d", res.StatusCode)
		}
		if n, _ := e.st.EndUserSessions(context.Background(), ann.ID, nil); n != 0 {
			t.Fatalf("%d sessions were left", n)
		}
	})
}

// TestSessionIdleAndAbsoluteLifetime: a sign-in ends after SessionIdle without a request (each
// request slides it) and at the latest SessionTTL after it began, however active.
func TestSessionIdleAndAbsoluteLifetime(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{SessionIdle: 12 * time.Hour, SessionTTL: 24 * time.Hour})
	ann := e.user("ann", store.RoleMember)
	b := e.browser(ann)
	status := func() int {
		res := b.do("GET", "/conversations", "", nil)
		readBody(res)
		return res.StatusCode
	}
	e.clk.Advance(11 * time.Hour)
	if s := status(); s != 200 {
		t.Fatalf("active within the idle time: %d", s)
	}
	e.clk.Advance(11 * time.Hour) // 22h in, 11h after the last request: the request slid it
	if s := status(); s != 200 {
		t.Fatalf("active again within the slid idle time: %d", s)
	}
	e.clk.Advance(2*time.Hour + time.Minute) // 24h and a minute in: past the absolute lifetime
	if s := status(); s != 303 {
		t.Fatalf("past the absolute lifetime: %d, want a redirect to sign in", s)
	}
	// Idle: a new sign-in left alone for longer than SessionIdle ends.
	b = e.browser(ann)
	e.clk.Advance(12*time.Hour + time.Minute)
	if s := status(); s != 303 {
		t.Fatalf("idle past SessionIdle: %d, want a redirect to sign in", s)
	}
}

// TestConcurrentGuessesAreCounted: forty wrong passwords for one account sent at once are not
// all checked: each try is counted before its password is, so the ones past the free failures
// wait.
func TestConcurrentGuessesAreCounted(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{LoginFailures: 5})
	e.user("ada", store.RoleMember)
	b := e.anon()
	csrf := b.pageCSRF("/login")
	codes := make(chan int, 40)
	for range 40 {
		go func() {
			req, _ := http.NewRequest("POST", e.ts.URL+"/login", strings.NewReader(url.Values{
				"username": {"ada"}, "password": {"guess"}, "_csrf": {csrf}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			res, err := b.hc.Do(req)
			if err != nil {
				codes <- 0
				return
			}
			res.Body.Close()
			codes <- res.StatusCode
		}()
	}
	got := map[int]int{}
	for range 40 {
		got[<-codes]++
	}
	if got[401] > 5 || got[429] < 35 {
		t.Fatalf("answers %v: at most 5 passwords may be checked", got)
	}
}

// TestBodyDeadlineIsLiftedOnceRead: the body's read deadline bounds the body only: a handler
// that works longer than BodyTimeout after reading it keeps its request context.
func TestBodyDeadlineIsLiftedOnceRead(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{BodyTimeout: 200 * time.Millisecond})
	// A slow route behind the same middleware (added before any request reaches it).
	e.srv.echo.POST("/api/v1/test-slow", func(c echo.Context) error {
		var body struct {
			N int `json:"n"`
		}
		if err := decodeJSON(c, &body, false); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		if err := c.Request().Context().Err(); err != nil {
			return c.String(http.StatusTeapot, "cancelled: "+err.Error())
		}
		return c.String(http.StatusOK, "done")
	})
	res := e.script(e.user("ann", store.RoleMember)).api("POST", "/api/v1/test-slow", `{"n":1}`)
	body := readBody(res)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a slow handler after its body: %d %s", res.StatusCode, body)
	}
}

// TestConnectionsShareTheirCredentialsReads: the checks of connections opened with one token
// share a read for LiveRecheck/5, so a revocation made elsewhere (the row changed in the store,
// as another process would) is seen once that read is that old, and each connection checks
// often enough to learn it within LiveRecheck; a change made here drops the shared read at once.
func TestConnectionsShareTheirCredentialsReads(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		secret := e.token(ann)
		g := grant{token: auth.Hash(secret)}
		ctx := context.Background()
		share := e.srv.recheckShare()
		if share <= 0 || share >= e.srv.cfg.LiveRecheck {
			t.Fatalf("share %v of %v", share, e.srv.cfg.LiveRecheck)
		}
		if by, err := e.srv.reauthorizeShared(ctx, g, "token"); err != nil || by.UserID != ann.ID || by.Via != "token" {
			t.Fatalf("first check: %+v, %v", by, err)
		}
		toks, err := e.st.ListAPITokens(ctx, ann.ID)
		if err != nil || len(toks) != 1 {
			t.Fatalf("tokens: %v, %v", toks, err)
		}
		// Revoked as another process would: this process's shared read does not know yet.
		if err := e.st.RevokeAPIToken(ctx, ann.ID, toks[0].ID); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(share - time.Millisecond)
		if _, err := e.srv.reauthorizeShared(ctx, g, "token"); err != nil {
			t.Fatalf("within the shared read's age: %v, want it shared", err)
		}
		e.clk.Advance(time.Millisecond)
		if _, err := e.srv.reauthorizeShared(ctx, g, "token"); !ended(err) {
			t.Fatalf("once the shared read is %v old: %v, want the revocation seen", share, err)
		}

		// A change made here (ringAll) is never answered from a shared read.
		bob := e.user("bob", store.RoleMember)
		bg := grant{token: auth.Hash(e.token(bob))}
		if _, err := e.srv.reauthorizeShared(ctx, bg, "token"); err != nil {
			t.Fatal(err)
		}
		btoks, err := e.st.ListAPITokens(ctx, bob.ID)
		if err != nil || len(btoks) != 1 {
			t.Fatalf("tokens: %v, %v", btoks, err)
		}
		if err := e.st.RevokeAPIToken(ctx, bob.ID, btoks[0].ID); err != nil {
			t.Fatal(err)
		}
		e.srv.live.ringAll()
		if _, err := e.srv.reauthorizeShared(ctx, bg, "token"); !ended(err) {
			t.Fatalf("after a ring: %v, want the revocation seen at once", err)
		}
	})
}
