package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// readInboxFrame reads the inbox socket's next frame. The inbox feed gathers changes for
// inboxFeedGap on the server's clock, so the web clock is moved on while the test waits.
func readInboxFrame(t *testing.T, e *testEnv, conn *websocket.Conn) frame {
	t.Helper()
	got := make(chan frame, 1)
	failed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, b, err := conn.Read(ctx)
		if err != nil {
			failed <- err
			return
		}
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			failed <- fmt.Errorf("frame %s: %w", b, err)
			return
		}
		got <- f
	}()
	for {
		select {
		case f := <-got:
			return f
		case err := <-failed:
			t.Fatalf("read inbox frame: %v", err)
		case <-time.After(5 * time.Millisecond):
			e.clk.Advance(inboxFeedGap)
		}
	}
}

// TestInboxIsForReviewersAndAdmins: a member has no inbox — the page is a 403 that says why,
// the socket is refused before the upgrade, and GET /api/v1/approvals answers 403
// permission_denied in the envelope — while reviewers and admins have theirs.
func TestInboxIsForReviewersAndAdmins(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		root := e.user("root", store.RoleAdmin)
		conv := e.conversation(ann)
		e.pending(conv, ann, llmtest.Call("gate", "publish", map[string]any{"text": "one"}),
			llmtest.Call("own", "send_email", emailArgs("bob@example.com")))

		member := e.browser(ann)
		res := member.do("GET", "/inbox", "", nil)
		if body := readBody(res); res.StatusCode != http.StatusForbidden || !strings.Contains(body, "conversation") {
			t.Errorf("a member's inbox page = %d %.200s", res.StatusCode, body)
		}
		if _, res, err := member.dial(t, "/inbox/ws", e.ts.URL); err == nil || res == nil || res.StatusCode != http.StatusForbidden {
			t.Errorf("a member's inbox socket: %v %v, want 403", err, res)
		}
		for _, c := range []*client{e.script(ann), member} {
			res := c.api("GET", "/api/v1/approvals", "")
			if res.StatusCode != http.StatusForbidden {
				t.Fatalf("a member's approvals = %d", res.StatusCode)
			}
			if eb := decodeEnvelope(t, res); eb.Error.Kind != fault.KindPermissionDenied {
				t.Errorf("a member's approvals: kind %q", eb.Error.Kind)
			}
		}
		for name, u := range map[string]store.User{"reviewer": rita, "admin": root} {
			res := e.script(u).api("GET", "/api/v1/approvals", "")
			var body struct {
				Approvals []approvalJSON `json:"approvals"`
			}
			if err := json.Unmarshal([]byte(readBody(res)), &body); res.StatusCode != 200 || err != nil {
				t.Fatalf("%s's approvals = %d %v", name, res.StatusCode, err)
			}
			if len(body.Approvals) != 1 || body.Approvals[0].ToolCallID != "gate" {
				t.Errorf("%s's approvals = %+v, want the reviewer-gated call alone", name, body.Approvals)
			}
			if res := e.browser(u).do("GET", "/inbox", "", nil); res.StatusCode != 200 {
				t.Errorf("%s's inbox page = %d", name, res.StatusCode)
			}
		}
	})
}

// TestInboxSocketEndsOnDemotion: a reviewer demoted to member loses the inbox at once (the
// admin's change rings this process's live connections) and at the next re-check when the
// role changed elsewhere (directly in the store).
func TestInboxSocketEndsOnDemotion(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		rita := e.user("rita", store.RoleReviewer)
		rex := e.user("rex", store.RoleReviewer)
		root := e.user("root", store.RoleAdmin)
		conn, _, err := e.browser(rita).dial(t, "/inbox/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)
		ab := e.browser(root)
		if res := ab.postForm("/admin/users/"+rita.ID+"/role", url.Values{"role": {"member"}}, ab.csrf); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("demote = %d", res.StatusCode)
		}
		if st := readClosed(t, conn); st != websocket.StatusPolicyViolation {
			t.Fatalf("a demoted reviewer's inbox socket closed with %v", st)
		}

		// Demoted as another process would (the row changed, no local doorbell): the next
		// re-check ends the socket.
		conn, _, err = e.browser(rex).dial(t, "/inbox/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFrame(t, conn)
		if err := e.st.SetUserRole(context.Background(), rex.ID, store.RoleMember); err != nil {
			t.Fatal(err)
		}
		if st := closedWhileAdvancing(t, e, conn); st != websocket.StatusPolicyViolation {
			t.Fatalf("a reviewer demoted elsewhere: socket closed with %v", st)
		}
	})
}

// closedWhileAdvancing moves the web clock by LiveRecheck until conn closes and returns its
// close status (failing after 5 s).
func closedWhileAdvancing(t *testing.T, e *testEnv, conn *websocket.Conn) websocket.StatusCode {
	t.Helper()
	closed := make(chan websocket.StatusCode, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for {
			if _, _, err := conn.Read(ctx); err != nil {
				closed <- websocket.CloseStatus(err)
				return
			}
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.clk.Advance(e.srv.cfg.LiveRecheck)
		select {
		case st := <-closed:
			return st
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the socket is still open after 5 s of re-checks")
		}
	}
}

// TestInboxFeedComputesOncePerChange: however many inbox sockets are open, a change is computed
// once (the feed gathers its events for inboxFeedGap), and every socket gets the new card —
// filtered for its viewer: a reviewer-gated call reaches reviewers and admins, never its owner.
func TestInboxFeedComputesOncePerChange(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		var computed atomic.Int64
		e.srv.inbox.recomputed = func() { computed.Add(1) }
		owner := e.user("olga", store.RoleReviewer) // a reviewer who owns the gated call
		var viewers []store.User
		for i := range 6 {
			role := store.RoleReviewer
			if i%3 == 0 {
				role = store.RoleAdmin
			}
			viewers = append(viewers, e.user(fmt.Sprintf("viewer%d", i), role))
		}
		var conns []*websocket.Conn
		for _, u := range append(viewers, owner) {
			for range 2 { // two tabs each
				conn, _, err := e.browser(u).dial(t, "/inbox/ws", e.ts.URL)
				if err != nil {
					t.Fatal(err)
				}
				readFrame(t, conn)
				conns = append(conns, conn)
			}
		}
		// The sockets' first snapshot: one computation for all of them.
		waitFor(t, func() bool { e.clk.Advance(inboxFeedGap); return computed.Load() >= 1 })
		if n := computed.Load(); n != 1 {
			t.Fatalf("%d sockets joining cost %d computations, want 1", len(conns), n)
		}
		waiting := e.clk.Waiters()

		// One change (a gated call becoming pending: several events) → one computation.
		conv := e.conversation(owner)
		e.pending(conv, owner, llmtest.Call("gate", "publish", map[string]any{"text": "one"}))
		e.awaitStatus(conv.ID, store.StatusAwaiting)
		waitFor(t, func() bool { return e.clk.Waiters() > waiting }) // the feed armed its timer
		e.clk.Advance(inboxFeedGap)
		for i, conn := range conns[:len(conns)-2] {
			if f := readFrame(t, conn); !strings.Contains(*f.HTML, `data-tool-call-id="gate"`) {
				t.Fatalf("socket %d: %+v, want the new card", i, f)
			}
		}
		if n := computed.Load(); n != 2 {
			t.Fatalf("one change for %d sockets cost %d computations, want 1", len(conns), n-1)
		}
		// The owner's sockets get nothing: the call is not theirs to decide (no self-approval),
		// so their inbox did not change. A socket's next frame is its next change: a decision
		// removes the card for the others, and the owner's stays silent.
		e.model.Push(llmtest.Reply("Published."))
		b := e.browser(viewers[1])
		res := b.postForm("/conversations/"+conv.ID+"/calls/gate/resolve", url.Values{"decision": {"approve"}, "return": {"/inbox"}}, b.csrf)
		if res.StatusCode != http.StatusSeeOther {
			t.Fatalf("decide = %d %s", res.StatusCode, readBody(res))
		}
		for i, conn := range conns[:len(conns)-2] {
			if f := readInboxFrame(t, e, conn); strings.Contains(*f.HTML, `data-tool-call-id="gate"`) {
				t.Fatalf("socket %d after the decision: %+v", i, f)
			}
		}
		for _, conn := range conns[len(conns)-2:] {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			_, b, err := conn.Read(ctx)
			cancel()
			if err == nil {
				t.Fatalf("the owner's inbox socket got a frame: %s", b)
			}
		}
	})
}

// TestInboxFeedFollowsOnlyWhileWatched: the feed follows the conversations' events only while
// an inbox socket is open (a process nobody watches the inbox on then leaves the other
// processes' events undecoded); a socket joining later gets what changed meanwhile.
func TestInboxFeedFollowsOnlyWhileWatched(t *testing.T) {
	e := newTestEnv(t, openSQLite, Config{})
	rev := e.user("rita", store.RoleReviewer)
	owner := e.user("olga", store.RoleMember)
	conn, _, err := e.browser(rev).dial(t, "/inbox/ws", e.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	readFrame(t, conn)
	published := func() bool {
		e.srv.inbox.mu.Lock()
		defer e.srv.inbox.mu.Unlock()
		return e.srv.inbox.latest != nil && !e.srv.inbox.stale
	}
	waitFor(t, func() bool { e.clk.Advance(inboxFeedGap); return e.srv.inbox.following.Load() && published() })
	conn.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return !e.srv.inbox.following.Load() })

	conv := e.conversation(owner)
	e.pending(conv, owner, llmtest.Call("gate", "publish", map[string]any{"text": "unwatched"}))
	e.awaitStatus(conv.ID, store.StatusAwaiting)
	if e.srv.inbox.following.Load() {
		t.Fatal("the feed follows the conversations with no inbox socket open")
	}
	conn, _, err = e.browser(rev).dial(t, "/inbox/ws", e.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(websocket.StatusNormalClosure, "")
	if f := readFrame(t, conn); f.HTML == nil || !strings.Contains(*f.HTML, `data-tool-call-id="gate"`) {
		t.Fatalf("a socket joining later: %+v, want the card of the call that came while nobody watched", f)
	}
	waitFor(t, func() bool { return e.srv.inbox.following.Load() })
	// The feed's next snapshots hold that card too: it was not handed the one from before.
	conv2 := e.conversation(owner)
	e.pending(conv2, owner, llmtest.Call("gate2", "publish", map[string]any{"text": "watched"}))
	for {
		f := readInboxFrame(t, e, conn)
		if f.HTML == nil || !strings.Contains(*f.HTML, `data-tool-call-id="gate"`) {
			t.Fatalf("the feed sent a list without the call that came while nobody watched: %+v", f)
		}
		if strings.Contains(*f.HTML, `data-tool-call-id="gate2"`) {
			break
		}
	}
}
