package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"parley/internal/agent"
	"parley/internal/llm"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// dial opens a socket as c with the given Origin ("" sends none).
func (c *client) dial(t *testing.T, path, origin string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	if c.bearer != "" {
		h.Set("Authorization", "Bearer "+c.bearer)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.e.ts.URL, "http")+path, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if conn != nil {
		t.Cleanup(func() { _ = conn.CloseNow() })
	}
	return conn, res, err
}

// readFrame reads the next frame, failing the test after 5 s.
func readFrame(t *testing.T, conn *websocket.Conn) frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, b, err := conn.Read(ctx)
	if err != nil {
		t.Fatalf("read frame: %v", err)
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("frame %s: %v", b, err)
	}
	return f
}

// readUntil reads frames until one satisfies ok and returns it.
func readUntil(t *testing.T, conn *websocket.Conn, what string, ok func(frame) bool) frame {
	t.Helper()
	for i := 0; i < 100; i++ {
		if f := readFrame(t, conn); ok(f) {
			return f
		}
	}
	t.Fatalf("no %s frame", what)
	return frame{}
}

func TestSocketOriginAndOwner(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv, gated := e.conversation(ann), e.conversation(ann)
		e.pending(gated, ann, llmtest.Call("gate", "publish", map[string]any{"text": "hello"}))
		path := "/conversations/" + conv.ID + "/ws"
		tests := []struct {
			name   string
			c      *client
			path   string
			origin string
			want   int // 0: the socket opens
		}{
			{"owner, same origin", e.browser(ann), path, e.ts.URL, 0},
			{"owner, foreign origin", e.browser(ann), path, "https://evil.example", http.StatusForbidden},
			{"owner, look-alike origin", e.browser(ann), path, e.ts.URL + ".evil.example", http.StatusForbidden},
			{"another user", e.browser(bob), path, e.ts.URL, http.StatusNotFound},
			{"reviewer with nothing to decide", e.browser(rita), path, e.ts.URL, http.StatusNotFound},
			{"reviewer who may decide a call", e.browser(rita), "/conversations/" + gated.ID + "/ws", e.ts.URL, 0},
			{"anonymous", e.anon(), path, e.ts.URL, http.StatusSeeOther},
			{"owner's token, no Origin", e.script(ann), path, "", 0},
			{"another user's token", e.script(bob), path, "", http.StatusNotFound},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				conn, res, err := tc.c.dial(t, tc.path, tc.origin)
				if tc.want == 0 {
					if err != nil {
						t.Fatalf("dial: %v", err)
					}
					if f := readFrame(t, conn); f.Type != "html" {
						t.Errorf("first frame = %+v", f)
					}
					return
				}
				if err == nil {
					t.Fatal("socket opened")
				}
				if res == nil || res.StatusCode != tc.want {
					t.Fatalf("refusal = %v, want %d", res, tc.want)
				}
			})
		}
	})
}

func TestSocketClientExecRoundTrip(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		// No socket is open yet: the call waits (the agent's clock holds its no-client grace).
		e.pending(conv, ann, llmtest.Call("geo_1", "geolocation", map[string]any{"high_accuracy": true}))
		e.model.Push(llmtest.Calls(llmtest.Call("geo_2", "geolocation", nil)), llmtest.Reply("You are in Paris."))
		conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		// A page that connects while a client call is pending gets it again.
		f := readUntil(t, conn, "client_exec", func(f frame) bool { return f.Type == "client_exec" })
		if f.ToolCallID != "geo_1" || f.Tool != "geolocation" || string(f.Args) != `{"high_accuracy":true}` {
			t.Fatalf("client_exec = %+v", f)
		}
		write := func(v any) {
			b, _ := json.Marshal(v)
			if err := conn.Write(context.Background(), websocket.MessageText, b); err != nil {
				t.Fatal(err)
			}
		}
		resolved := func(f frame) bool { return f.Type == "resolved" }
		write(map[string]any{"type": "resolve", "tool_call_id": "geo_1", "result": map[string]any{"latitude": 48.85, "longitude": 2.29, "accuracy": 10}})
		// The turn goes on as soon as the result is durable, so the next call's
		// client_exec may reach the socket before the acknowledgement does.
		var live *frame
		ack := readUntil(t, conn, "resolved", func(f frame) bool {
			if f.Type == "client_exec" && live == nil {
				live = &f
			}
			return resolved(f)
		})
		if ack.OK == nil || !*ack.OK || ack.ToolCallID != "geo_1" {
			t.Fatalf("ack = %+v", ack)
		}
		if c := e.call(conv.ID, "geo_1"); c.Status != store.CallResolved || !strings.Contains(string(c.Result), `"latitude":48.85`) || c.DecidedBy != ann.ID {
			t.Errorf("geo_1 = %+v %s", c, c.Result)
		}
		if !strings.Contains(e.alog.String(), "tool_call_id=geo_1 by="+ann.ID+" via=session") {
			t.Errorf("the result did not reach the agent as the owner's session: %s", e.alog)
		}
		// A client call that starts while the page is open arrives as it starts.
		if live == nil {
			f := readUntil(t, conn, "client_exec", func(f frame) bool { return f.Type == "client_exec" })
			live = &f
		}
		if live.ToolCallID != "geo_2" || string(live.Args) != `{}` {
			t.Errorf("live client_exec = %+v", *live)
		}
		// An error result, then a stale one, then nonsense: each gets its answer.
		write(map[string]any{"type": "resolve", "tool_call_id": "geo_2", "error": map[string]any{"message": "User denied Geolocation"}})
		if ack := readUntil(t, conn, "resolved", resolved); ack.OK == nil || !*ack.OK || ack.ToolCallID != "geo_2" {
			t.Errorf("error ack = %+v", ack)
		}
		if c := e.call(conv.ID, "geo_2"); c.Status != store.CallErrored || !strings.Contains(string(c.Result), "User denied Geolocation") {
			t.Errorf("geo_2 = %+v %s", c, c.Result)
		}
		write(map[string]any{"type": "resolve", "tool_call_id": "geo_1", "result": map[string]any{}})
		if ack := readUntil(t, conn, "resolved", resolved); *ack.OK || ack.Kind != "stale" {
			t.Errorf("stale ack = %+v", ack)
		}
		write(map[string]any{"type": "resolve", "tool_call_id": "geo_1"})
		if ack := readUntil(t, conn, "resolved", resolved); *ack.OK || ack.Kind != "invalid_args" {
			t.Errorf("empty resolve ack = %+v", ack)
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
		if got := strings.Join(e.auditOf(conv.ID, "geo_1"), ",") + ";" + strings.Join(e.auditOf(conv.ID, "geo_2"), ","); got != "client_result by ann;client_error by ann" {
			t.Errorf("audit = %s", got)
		}
	})
}

func TestSocketCoalescesTextAndUpdatesCards(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{}, withTestHub())
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, conn, "streaming", func(f frame) bool { return f.Target == "streaming" }) // the connect's last frame
		// The model streams "Hel", waits, then "lo" and " there" and asks to send an email. The
		// socket renders the view as it is when it gets to an event, so the events of the turn's
		// start (the message, the status) are kept from it: a render of theirs running late would
		// show the card before the deltas that precede it. The socket sees the deltas, then the
		// card's events.
		e.hub.dropIf(conv.ID, func(ev agent.Event) bool { return ev.Type != agent.EventTextDelta })
		release := make(chan struct{})
		e.say(conv, ann, "email bob", llmtest.Step{Deltas: []string{"Hel", "lo", " there"}, Release: release,
			ToolCalls: []llm.ToolCall{llmtest.Call("c1", "send_email", emailArgs("bob@example.com"))}})
		// The streaming area is rendered whole each time, as Markdown through the sanitizer.
		text := func(f frame) bool { return f.Type == "html" && f.Target == "streaming" && f.Op == "replace" }
		streamed := func(f frame) string {
			t.Helper()
			if !text(f) || f.HTML == nil {
				t.Fatalf("not a render of the streaming area: %+v", f)
			}
			return *f.HTML
		}
		// The first delta goes out at once; the server's clock stands still, so the next ones
		// wait in the coalescing window until the card's change flushes them, as one render,
		// before the card.
		if h := streamed(readFrame(t, conn)); !strings.Contains(h, `data-parley="message-streaming"`) || !strings.Contains(h, "<p>Hel</p>") {
			t.Fatalf("first streaming render = %s", h)
		}
		e.hub.deliver(conv.ID)
		close(release)
		if h := streamed(readFrame(t, conn)); !strings.Contains(h, "<p>Hello there</p>") {
			t.Fatalf("coalesced streaming render = %s", h)
		}
		f := readUntil(t, conn, "card", func(f frame) bool { return f.Type == "html" && f.Target == "call-c1" })
		if f.Op != "upsert" || f.Parent != "timeline" || f.Rev == "" || !strings.Contains(*f.HTML, `data-parley="approval"`) {
			t.Errorf("card frame = %+v", f)
		}
		// An item is sent again only when it changed: the approval moves the card on (running,
		// then resolved) and every frame for it is new.
		revs := map[string]bool{f.Rev: true}
		release2 := make(chan struct{})
		e.model.Push(llmtest.Step{Deltas: []string{"!", " Sent."}, Release: release2})
		if _, err := e.m.Resolve(context.Background(), conv.ID, "c1", agent.Resolution{Decision: "approve"}, as(ann)); err != nil {
			t.Fatal(err)
		}
		for {
			f := readUntil(t, conn, "card", func(f frame) bool { return f.Type == "html" && f.Target == "call-c1" })
			if revs[f.Rev] {
				t.Fatalf("the card was sent again unchanged: %s", *f.HTML)
			}
			revs[f.Rev] = true
			if strings.Contains(*f.HTML, `data-status="resolved"`) {
				break
			}
		}
		// Gathered text also leaves when the window ends (whether the pump saw the delta before or
		// after the clock moved, the text goes out once the window has passed): the model holds
		// after "!", so nothing else flushes it.
		e.await(conv.ID, "the next answer under way", func(v agent.View) bool { return v.Streaming == "!" })
		e.clk.Advance(deltaFlush)
		if f := readUntil(t, conn, "text", text); !strings.Contains(*f.HTML, "<p>!</p>") {
			t.Errorf("text after the window = %s", *f.HTML)
		}
		close(release2)
		for f := readFrame(t, conn); !(f.Type == "html" && f.Target == "status" && strings.Contains(*f.HTML, `data-status="idle"`)); f = readFrame(t, conn) {
			if f.Target == "call-c1" && revs[f.Rev] {
				t.Fatalf("the card was sent again unchanged as the turn ended")
			}
		}
	})
}

func TestSocketOverflowClosesWithPolicyViolation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := newSocket(&Server{}, nil, discardLogger(), cancel)
	before := SocketOverflows.Load()
	for i := 0; i < sendQueueSize; i++ {
		if !k.enqueue(frame{Type: "text", Text: "x"}) {
			t.Fatalf("frame %d refused before the queue was full", i)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("socket stopped before overflow")
	}
	if k.enqueue(frame{Type: "text", Text: "one too many"}) {
		t.Fatal("a frame beyond the queue was accepted")
	}
	if ctx.Err() == nil || k.closeCode != websocket.StatusPolicyViolation || SocketOverflows.Load() != before+1 {
		t.Errorf("after overflow: stopped=%v code=%v overflows=%d", ctx.Err() != nil, k.closeCode, SocketOverflows.Load()-before)
	}
	// The first reason wins: a later normal finish does not hide the overflow.
	k.finish(websocket.StatusNormalClosure, "")
	if k.closeCode != websocket.StatusPolicyViolation {
		t.Errorf("close code overwritten: %v", k.closeCode)
	}
}

func TestInboxSocketIsLive(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{})
		ann := e.user("ann", store.RoleMember)
		rita := e.user("rita", store.RoleReviewer)
		conv, chat := e.conversation(ann), e.conversation(ann)
		conn, _, err := e.browser(rita).dial(t, "/inbox/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		f := readFrame(t, conn)
		if f.Target != "inbox" || strings.Contains(*f.HTML, `data-parley="approval"`) {
			t.Fatalf("first inbox frame = %+v", f)
		}
		e.pending(conv, ann, llmtest.Call("gate_1", "publish", map[string]any{"text": "one"}))
		f = readInboxFrame(t, e, conn)
		if f.Target != "inbox" || f.Op != "replace" || !strings.Contains(*f.HTML, `data-tool-call-id="gate_1"`) {
			t.Errorf("inbox update = %+v", f)
		}
		// Events that change nothing send nothing (a turn streaming and ending elsewhere): the
		// next frame is the next real change.
		release := make(chan struct{})
		e.say(chat, ann, "chat", llmtest.Step{Deltas: []string{"x", "y"}, Release: release})
		e.await(chat.ID, "the answer under way", func(v agent.View) bool { return v.Streaming == "x" })
		close(release)
		e.awaitStatus(chat.ID, store.StatusIdle)
		e.pending(chat, ann, llmtest.Call("gate_2", "publish", map[string]any{"text": "two"}))
		f = readInboxFrame(t, e, conn)
		if !strings.Contains(*f.HTML, `data-tool-call-id="gate_2"`) || !strings.Contains(*f.HTML, `data-tool-call-id="gate_1"`) {
			t.Errorf("an unchanged inbox was sent again: %+v", f)
		}
		// A decision made elsewhere takes the entry away.
		e.model.Push(llmtest.Reply("Published."))
		if _, err := e.m.Resolve(context.Background(), conv.ID, "gate_1", agent.Resolution{Decision: "approve"}, as(e.user("rex", store.RoleReviewer))); err != nil {
			t.Fatal(err)
		}
		f = readInboxFrame(t, e, conn)
		if strings.Contains(*f.HTML, `data-tool-call-id="gate_1"`) || !strings.Contains(*f.HTML, `data-tool-call-id="gate_2"`) {
			t.Errorf("inbox after the decision = %+v", f)
		}
	})
}

func TestNormalClosesAreNotErrors(t *testing.T) {
	tests := []struct {
		err    error
		normal bool
	}{
		{websocket.CloseError{Code: websocket.StatusNormalClosure}, true},
		{fmt.Errorf("read: %w", websocket.CloseError{Code: websocket.StatusGoingAway}), true},
		{websocket.CloseError{Code: websocket.StatusPolicyViolation, Reason: "send queue overflow; resync"}, true},
		{context.Canceled, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{websocket.CloseError{Code: websocket.StatusInternalError}, false},
		{errors.New("write tcp: broken pipe"), false},
	}
	for _, tc := range tests {
		if got := normalClose(tc.err); got != tc.normal {
			t.Errorf("normalClose(%v) = %v, want %v", tc.err, got, tc.normal)
		}
	}
}

// TestSocketCatchesUpAfterLagging: a socket the agent dropped for lagging (a resync, then its
// events' channel closes) subscribes again and catches up as a page that just connected would:
// the cards it missed, and the streaming text in place of what it had.
func TestSocketCatchesUpAfterLagging(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{}, withTestHub())
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		readUntil(t, conn, "streaming", func(f frame) bool { return f.Target == "streaming" })
		if n := e.hub.subscriptions(conv.ID); n != 1 {
			t.Fatalf("subscriptions = %d", n)
		}
		catchUp := func(what string, done func(map[string]frame) bool) map[string]frame {
			t.Helper()
			if n := e.hub.lag(conv.ID); n != 1 {
				t.Fatalf("%s: %d subscribers lagged", what, n)
			}
			got := map[string]frame{}
			for !done(got) {
				f := readFrame(t, conn)
				got[f.Target] = f
			}
			return got
		}
		// The socket misses a turn that leaves a card waiting.
		e.hub.drop(conv.ID)
		e.pending(conv, ann, llmtest.Call("c9", "send_email", emailArgs("bob@example.com")))
		got := catchUp("card", func(got map[string]frame) bool { return got["call-c9"].Type != "" && got["streaming"].Type != "" })
		if f := got["call-c9"]; f.HTML == nil || !strings.Contains(*f.HTML, `data-parley="approval"`) {
			t.Errorf("card missed while lagging not sent: %+v", got)
		}
		// Then the approval and the first words of the answer.
		release := make(chan struct{})
		e.model.Push(llmtest.Step{Deltas: []string{"partial answer", " and the rest"}, Release: release})
		if _, err := e.m.Resolve(context.Background(), conv.ID, "c9", agent.Resolution{Decision: "approve"}, as(ann)); err != nil {
			t.Fatal(err)
		}
		e.await(conv.ID, "the answer under way", func(v agent.View) bool { return v.Streaming == "partial answer" })
		got = catchUp("streaming", func(got map[string]frame) bool {
			f := got["call-c9"]
			return f.HTML != nil && strings.Contains(*f.HTML, `data-status="resolved"`) && got["streaming"].Type != ""
		})
		if f := got["streaming"]; f.HTML == nil || !strings.Contains(*f.HTML, "partial answer") {
			t.Errorf("streaming area not replaced: %+v", got)
		}
		if n := e.hub.subscriptions(conv.ID); n != 3 {
			t.Errorf("the socket did not subscribe again after each lag: %d subscriptions", n)
		}
		// It follows the conversation live again.
		e.hub.deliver(conv.ID)
		close(release)
		if f := readUntil(t, conn, "the answer", func(f frame) bool {
			return f.Type == "html" && strings.HasPrefix(f.Target, "msg-") && f.HTML != nil && strings.Contains(*f.HTML, "partial answer and the rest")
		}); f.Op != "upsert" {
			t.Errorf("answer frame = %+v", f)
		}
	})
}

// TestStreamGapGrowsWithTheText: short answers are rendered every deltaFlush; past streamUnit
// the gap grows with the text, so the bytes rendered per second stay bounded.
func TestStreamGapGrowsWithTheText(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{0, deltaFlush}, {streamUnit - 1, deltaFlush}, {streamUnit, 2 * deltaFlush}, {80 << 10, 11 * deltaFlush}} {
		if got := streamGap(tc.n); got != tc.want {
			t.Errorf("streamGap(%d) = %v, want %v", tc.n, got, tc.want)
		}
		if rate := float64(tc.n) / streamGap(tc.n).Seconds(); rate > float64(streamUnit)/deltaFlush.Seconds() {
			t.Errorf("streamGap(%d): %.0f bytes/s rendered, above the bound", tc.n, rate)
		}
	}
}
