package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
)

// TestLiveRecheckAcrossProcesses: two servers, each on its own agent and store handle, share one
// PostgreSQL database, as two processes of a cluster do. A sign-out, a token revocation and a
// demotion made through the second end the live connections the first holds — a page socket,
// an event stream, an inbox socket — at the first's next re-checks, with no event between them
// (the first process is told nothing; it reads the store).
func TestLiveRecheckAcrossProcesses(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewURL(t)
	shared := func(t testing.TB, clk clock.Clock) store.Store {
		t.Helper()
		st, err := pgstore.Open(context.Background(), dbURL, discardLogger(), pgstore.WithClock(clk))
		if err != nil {
			t.Fatalf("open postgres store: %v", err)
		}
		return st
	}
	one := newTestEnv(t, shared, Config{})
	two := newTestEnv(t, shared, Config{})
	ann := one.user("ann", store.RoleMember)
	rita := one.user("rita", store.RoleReviewer)
	root := one.user("root", store.RoleAdmin)
	conv := one.conversation(ann)

	// Sign-out through the second process of a session whose socket the first holds.
	b := one.browser(ann)
	conn, _, err := b.dial(t, "/conversations/"+conv.ID+"/ws", one.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	readFrame(t, conn)
	req, _ := http.NewRequest("POST", two.ts.URL+"/logout", strings.NewReader(url.Values{"_csrf": {b.csrf}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: one.srv.sessionCookie(), Value: sessionValue(t, b)})
	res, err := two.anon().hc.Do(req) // a client that does not follow the redirect
	if err != nil {
		t.Fatal(err)
	}
	readBody(res)
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out through the second process: %d", res.StatusCode)
	}
	if st := closedWhileAdvancing(t, one, conn); st != websocket.StatusPolicyViolation {
		t.Fatalf("the first process's socket after a sign-out in the second: %v", st)
	}

	// A token revoked through the second process: the first's event stream ends.
	s := one.script(ann)
	events, stop := openStream(t, s, "/api/v1/conversations/"+conv.ID+"/events", "")
	defer stop()
	tokens, err := one.st.ListAPITokens(context.Background(), ann.ID)
	if err != nil || len(tokens) != 1 {
		t.Fatalf("tokens %v %v", tokens, err)
	}
	page := two.browser(ann)
	if res := page.postForm("/tokens/"+tokens[0].ID+"/revoke", url.Values{}, page.csrf); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("revoke through the second process: %d", res.StatusCode)
	}
	streamEndsWhileAdvancing(t, one, events)

	// A reviewer demoted through the second process: the first's inbox socket closes.
	rconn, _, err := one.browser(rita).dial(t, "/inbox/ws", one.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	readFrame(t, rconn)
	ab := two.browser(root)
	if res := ab.postForm("/admin/users/"+rita.ID+"/role", url.Values{"role": {"member"}}, ab.csrf); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("demote through the second process: %d", res.StatusCode)
	}
	if st := closedWhileAdvancing(t, one, rconn); st != websocket.StatusPolicyViolation {
		t.Fatalf("the first process's inbox socket after a demotion in the second: %v", st)
	}
}
