package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/cluster"
	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
)

// awaitInbox reads the inbox socket's frames until one's list satisfies ok, and returns it.
func awaitInbox(t *testing.T, e *testEnv, conn *websocket.Conn, what string, ok func(html string) bool) string {
	t.Helper()
	for range 20 {
		f := readInboxFrame(t, e, conn)
		if f.HTML != nil && ok(*f.HTML) {
			return *f.HTML
		}
	}
	t.Fatalf("the inbox never showed %s", what)
	return ""
}

// claimForm posts a claim action of the call gate of conv as c.
func claimForm(c *client, convID, action, ret string) *http.Response {
	return c.postForm("/inbox/claim", url.Values{"conversation_id": {convID}, "tool_call_id": {"gate"}, "action": {action}, "return": {ret}}, c.csrf)
}

// TestInboxClaims: a reviewer's claim shows live in another reviewer's inbox ("rita is looking
// at this") and as hers in her own; another claim of it is refused, saying who holds it, but
// does not stop anyone deciding; it ends when released, when its time runs out (the feed
// computes again then, with no event), and when the call is decided. A member has no claims.
func TestInboxClaims(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		const ttl = 30 * time.Second // less than the approval's own timeout
		e := newTestEnv(t, open, Config{}, func(_ *testEnv, cfg *agent.Config) { cfg.ClaimTTL = ttl })
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		sam := e.user("sam", store.RoleReviewer)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "one"}))
		rb, sb := e.browser(rita), e.browser(sam)
		conn, _, err := sb.dial(t, "/inbox/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)

		ret := "/inbox?tool=publish"
		if res := claimForm(rb, conv.ID, "claim", ret); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != ret {
			t.Fatalf("claim = %d %s, want 303 to %s", res.StatusCode, res.Header.Get("Location"), ret)
		}
		awaitInbox(t, e, conn, "rita's claim", func(h string) bool { return strings.Contains(h, "rita is looking at this") })
		if body := readBody(rb.do("GET", "/inbox", "", nil)); !strings.Contains(body, "You are looking at this") || !strings.Contains(body, `data-parley="release"`) {
			t.Fatal("rita's inbox does not show her claim with a release button")
		}
		// Another reviewer: refused, told who holds it (page and API); a member: no inbox.
		if res := claimForm(sb, conv.ID, "claim", "/inbox"); res.Header.Get("Location") != "/inbox?notice=claimed" {
			t.Fatalf("sam's claim of rita's = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		res := e.script(sam).api("POST", "/api/v1/conversations/"+conv.ID+"/calls/gate/claim", "")
		if eb := decodeEnvelope(t, res); res.StatusCode != http.StatusConflict || eb.Error.Kind != fault.KindConflict || eb.Error.Details["claimed_by"] != rita.ID {
			t.Fatalf("sam's claim through the API = %d %+v", res.StatusCode, eb.Error)
		}
		if res := e.script(ann).api("POST", "/api/v1/conversations/"+conv.ID+"/calls/gate/claim", ""); res.StatusCode != http.StatusForbidden {
			t.Fatalf("a member's claim = %d", res.StatusCode)
		}
		if res := claimForm(sb, conv.ID+"x", "claim", "/inbox"); res.Header.Get("Location") != "/inbox?notice=stale" {
			t.Fatalf("a claim of no such call = %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		if res := claimForm(rb, conv.ID, "claim", "https://evil.example/inbox"); res.Header.Get("Location") != "/inbox" {
			t.Fatalf("a claim returning elsewhere went to %q", res.Header.Get("Location"))
		}

		// Released: gone from sam's inbox.
		claimForm(rb, conv.ID, "release", "/inbox")
		awaitInbox(t, e, conn, "the claim released", func(h string) bool { return !strings.Contains(h, "is looking at this") })

		// Lapsed: claimed through the API, then its time runs out with no event at all.
		res = e.script(rita).api("POST", "/api/v1/conversations/"+conv.ID+"/calls/gate/claim", "")
		if res.StatusCode != http.StatusOK || !strings.Contains(readBody(res), rita.ID) {
			t.Fatalf("rita's claim through the API = %d", res.StatusCode)
		}
		awaitInbox(t, e, conn, "rita's claim again", func(h string) bool { return strings.Contains(h, "rita is looking at this") })
		e.aclk.Advance(ttl)
		e.clk.Advance(ttl)
		awaitInbox(t, e, conn, "the claim lapsed", func(h string) bool { return !strings.Contains(h, "is looking at this") })

		// Decided while claimed: a claim does not block; the call leaves both inboxes.
		claimForm(rb, conv.ID, "claim", "/inbox")
		awaitInbox(t, e, conn, "rita's claim once more", func(h string) bool { return strings.Contains(h, "rita is looking at this") })
		e.model.Push(llmtest.Reply("Published."))
		if res := sb.postForm("/conversations/"+conv.ID+"/calls/gate/resolve", url.Values{"decision": {"approve"}, "return": {"/inbox"}}, sb.csrf); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("sam's decision of a call rita claimed = %d %s", res.StatusCode, readBody(res))
		}
		awaitInbox(t, e, conn, "the decided call gone", func(h string) bool { return !strings.Contains(h, `data-tool-call-id="gate"`) })
		if d := e.decision(conv.ID, "gate"); d == nil || d["by"] != sam.ID {
			t.Fatalf("the decision %v, want sam's", d)
		}
	})
}

// testClusterKey is the key of the tests' clusters.
var testClusterKey = cluster.NewKey()

// withCluster makes the env's agent a node of a cluster on the PostgreSQL database at dbURL,
// as app.New does: its events reach the other nodes' subscribers.
func withCluster(dbURL string) envOption {
	return func(e *testEnv, cfg *agent.Config) {
		st, err := pgstore.Open(context.Background(), dbURL, discardLogger())
		if err != nil {
			e.t.Fatal(err)
		}
		node := cluster.New(cluster.Config{Pool: st.Pool(), Logger: discardLogger(), TTL: 3 * time.Second, Key: testClusterKey})
		if err := node.Start(context.Background()); err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { // after the env's own cleanup: the agent has stopped
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := node.Leave(ctx); err != nil {
				e.t.Errorf("leave the cluster: %v", err)
			}
			st.Close()
		})
		if ps, ok := cfg.Store.(*pgstore.Store); ok {
			ps.SetWriter(node.Self()) // as app.New does
		}
		cfg.Cluster, cfg.Events = node, node
	}
}

// TestInboxClaimsAcrossProcesses: two processes (agent, web server and cluster node each) on one
// PostgreSQL database. A claim made through the second shows in an inbox socket the first
// serves, and its release too: claims are rows every process reads, and the change travels as
// an event through the cluster to the first's inbox feed.
func TestInboxClaimsAcrossProcesses(t *testing.T) {
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
	one := newTestEnv(t, shared, Config{}, withCluster(dbURL))
	two := newTestEnv(t, shared, Config{}, withCluster(dbURL))
	ann := one.user("ann", store.RoleMember)
	rita := one.user("rita", store.RoleReviewer)
	sam := one.user("sam", store.RoleReviewer)
	conv := one.conversation(ann)
	one.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "one"}))

	conn, _, err := one.browser(sam).dial(t, "/inbox/ws", one.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	readFrame(t, conn)
	rb := two.browser(rita)
	if res := claimForm(rb, conv.ID, "claim", "/inbox"); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/inbox" {
		t.Fatalf("claim through the second process = %d %s", res.StatusCode, res.Header.Get("Location"))
	}
	awaitInbox(t, one, conn, "the claim made in the other process", func(h string) bool { return strings.Contains(h, "rita is looking at this") })
	// The second process refuses sam too: the claim is in the database, not in a process.
	if res := claimForm(two.browser(sam), conv.ID, "claim", "/inbox"); res.Header.Get("Location") != "/inbox?notice=claimed" {
		t.Fatalf("sam's claim through the second process = %s", res.Header.Get("Location"))
	}
	claimForm(rb, conv.ID, "release", "/inbox")
	awaitInbox(t, one, conn, "the release made in the other process", func(h string) bool { return !strings.Contains(h, "is looking at this") })
}
