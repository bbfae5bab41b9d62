package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
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
	e := newTestEnv(t, Config{})
	ann, bob := e.user("ann", store.RoleMember), e.user("bob", store.RoleMember)
	conv := e.conversation(ann)
	path := "/conversations/" + conv.ID + "/ws"
	tests := []struct {
		name   string
		c      *client
		origin string
		want   int // 0: the socket opens
	}{
		{"owner, same origin", e.browser(ann), e.ts.URL, 0},
		{"owner, foreign origin", e.browser(ann), "https://evil.example", http.StatusForbidden},
		{"owner, look-alike origin", e.browser(ann), e.ts.URL + ".evil.example", http.StatusForbidden},
		{"another user", e.browser(bob), e.ts.URL, http.StatusNotFound},
		{"anonymous", e.anon(), e.ts.URL, http.StatusSeeOther},
		{"owner's token, no Origin", e.script(ann), "", 0},
		{"another user's token", e.script(bob), "", http.StatusNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, res, err := tc.c.dial(t, path, tc.origin)
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
}

func TestSocketClientExecRoundTrip(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	e.setView(agent.View{ID: conv.ID, OwnerID: ann.ID, Status: store.StatusAwaiting,
		Calls: []agent.CallView{{Seq: 2, ID: "geo_1", Name: "geolocation", Executor: tools.Client, Status: store.CallAwaiting,
			PendingKind: tools.PendingClientExec, Args: json.RawMessage(`{"high_accuracy":true}`)}},
		Pending: map[string]agent.PendingView{"geo_1": {Executor: tools.Client, Kind: tools.PendingClientExec}}})
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
	write(map[string]any{"type": "resolve", "tool_call_id": "geo_1", "result": map[string]any{"latitude": 48.85, "longitude": 2.29, "accuracy": 10}})
	ack := readUntil(t, conn, "resolved", func(f frame) bool { return f.Type == "resolved" })
	if ack.OK == nil || !*ack.OK || ack.ToolCallID != "geo_1" {
		t.Fatalf("ack = %+v", ack)
	}
	r := e.lastResolution(t)
	if r.call != "geo_1" || r.by.UserID != ann.ID || r.by.Via != "session" || !strings.Contains(string(r.r.Result), `"latitude":48.85`) {
		t.Errorf("resolution = %+v %s", r, r.r.Result)
	}
	// An error result, then a stale one, then nonsense: each gets its answer.
	write(map[string]any{"type": "resolve", "tool_call_id": "geo_1", "error": map[string]any{"message": "User denied Geolocation"}})
	readUntil(t, conn, "resolved", func(f frame) bool { return f.Type == "resolved" })
	if r := e.lastResolution(t).r; r.Error == nil || r.Error.Message != "User denied Geolocation" || r.Result != nil {
		t.Errorf("error resolution = %+v", r)
	}
	e.setResolveErr(tools.NewError(tools.KindStale, "already resolved", nil))
	write(map[string]any{"type": "resolve", "tool_call_id": "geo_1", "result": map[string]any{}})
	if ack := readUntil(t, conn, "resolved", func(f frame) bool { return f.Type == "resolved" }); *ack.OK || ack.Kind != "stale" {
		t.Errorf("stale ack = %+v", ack)
	}
	write(map[string]any{"type": "resolve", "tool_call_id": "geo_1"})
	if ack := readUntil(t, conn, "resolved", func(f frame) bool { return f.Type == "resolved" }); *ack.OK || ack.Kind != "invalid_args" {
		t.Errorf("empty resolve ack = %+v", ack)
	}
	// A client call that starts while the page is open arrives as it starts.
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Type: agent.EventClientExec, ToolCallID: "geo_2",
		Data: json.RawMessage(`{"tool":"geolocation","args":{}}`)})
	if f := readUntil(t, conn, "client_exec", func(f frame) bool { return f.Type == "client_exec" }); f.ToolCallID != "geo_2" {
		t.Errorf("live client_exec = %+v", f)
	}
}

func TestSocketCoalescesTextAndUpdatesCards(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, conn, "status", func(f frame) bool { return f.Target == "status" })
	for _, d := range []string{"Hel", "lo", " there"} {
		e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Type: agent.EventTextDelta, Text: d})
	}
	// The first delta goes out at once; the fake clock stands still, so the next ones wait in
	// the coalescing window until a card changing flushes them, as one frame, before the card.
	f := readUntil(t, conn, "text", func(f frame) bool { return f.Type != "html" || f.Target != "streaming" })
	if f.Type != "text" || f.Text != "Hel" || f.Target != "streaming" {
		t.Fatalf("first text frame = %+v", f)
	}
	e.setView(approvalView(conv, "c1", tools.ByOwner))
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: 2, Type: agent.EventToolCall, ToolCallID: "c1"})
	f = readFrame(t, conn)
	if f.Type != "text" || f.Text != "lo there" {
		t.Fatalf("coalesced text frame = %+v", f)
	}
	f = readUntil(t, conn, "card", func(f frame) bool { return f.Type == "html" && f.Target == "call-c1" })
	if f.Op != "upsert" || f.Parent != "timeline" || f.Rev == "" || !strings.Contains(*f.HTML, `data-parley="approval"`) {
		t.Errorf("card frame = %+v", f)
	}
	// The same state again sends nothing new for the card; a change does.
	v := approvalView(conv, "c1", tools.ByOwner)
	v.Calls[0].Status, v.Calls[0].PendingKind = store.CallResolved, ""
	v.Calls[0].Result = json.RawMessage(`{"ok":true,"result":{"sent":true}}`)
	e.setView(v)
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: 3, Type: agent.EventToolCall, ToolCallID: "c1"})
	f = readUntil(t, conn, "card", func(f frame) bool { return f.Type == "html" && f.Target == "call-c1" })
	if !strings.Contains(*f.HTML, `data-status="resolved"`) {
		t.Errorf("updated card = %s", *f.HTML)
	}
	// Gathered text also leaves when the window ends (whether the pump saw the delta before or
	// after the clock moved, the text goes out once the window has passed).
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Type: agent.EventTextDelta, Text: "!"})
	e.clk.Advance(deltaFlush)
	if f := readFrame(t, conn); f.Type != "text" || f.Text != "!" {
		t.Errorf("text after the window = %+v", f)
	}
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
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	rita := e.user("rita", store.RoleReviewer)
	conv := e.conversation(ann)
	conn, _, err := e.browser(rita).dial(t, "/inbox/ws", e.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	f := readFrame(t, conn)
	if f.Target != "inbox" || strings.Contains(*f.HTML, `data-parley="approval"`) {
		t.Fatalf("first inbox frame = %+v", f)
	}
	e.pendingCall(conv, "gate_1", "approval", "reviewer")
	if n := e.conv.publish("", agent.Event{ConversationID: conv.ID, Seq: 1, Type: agent.EventToolCall, ToolCallID: "gate_1"}); n != 1 {
		t.Fatalf("inbox subscribers = %d", n)
	}
	f = readFrame(t, conn)
	if f.Target != "inbox" || f.Op != "replace" || !strings.Contains(*f.HTML, `data-tool-call-id="gate_1"`) {
		t.Errorf("inbox update = %+v", f)
	}
	// Events that change nothing send nothing: the next frame is the next real change.
	e.conv.publish("", agent.Event{ConversationID: conv.ID, Type: agent.EventTextDelta, Text: "x"})
	e.conv.publish("", agent.Event{ConversationID: conv.ID, Seq: 2, Type: agent.EventStatus})
	e.pendingCall(conv, "gate_2", "approval", "reviewer")
	e.conv.publish("", agent.Event{ConversationID: conv.ID, Seq: 3, Type: agent.EventToolCall, ToolCallID: "gate_2"})
	f = readFrame(t, conn)
	if !strings.Contains(*f.HTML, `data-tool-call-id="gate_2"`) {
		t.Errorf("an unchanged inbox was sent again: %+v", f)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

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

func TestSocketCatchesUpAfterLagging(t *testing.T) {
	e := newTestEnv(t, Config{})
	ann := e.user("ann", store.RoleMember)
	conv := e.conversation(ann)
	conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, conn, "streaming", func(f frame) bool { return f.Target == "streaming" })
	// The agent dropped this subscriber (it lagged): a resync notice, then the channel closes.
	v := approvalView(conv, "c9", tools.ByOwner)
	v.Streaming = "partial answer"
	e.setView(v)
	e.conv.mu.Lock()
	subs := e.conv.subs[conv.ID]
	e.conv.subs[conv.ID] = nil
	e.conv.mu.Unlock()
	if len(subs) != 1 {
		t.Fatalf("subscribers = %d", len(subs))
	}
	subs[0] <- agent.Event{ConversationID: conv.ID, Type: agent.EventResync}
	close(subs[0])
	got := map[string]frame{}
	for got["call-c9"].Type == "" || got["streaming"].Type == "" {
		f := readFrame(t, conn)
		got[f.Target] = f
	}
	if f := got["call-c9"]; f.HTML == nil || !strings.Contains(*f.HTML, `data-parley="approval"`) {
		t.Errorf("card missed while lagging not sent: %+v", got)
	}
	if f := got["streaming"]; f.HTML == nil || !strings.Contains(*f.HTML, "partial answer") {
		t.Errorf("streaming area not replaced: %+v", got)
	}
	if e.conv.subscribers(conv.ID) != 1 {
		t.Errorf("the socket did not subscribe again")
	}
}
