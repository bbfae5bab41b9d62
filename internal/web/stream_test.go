package web

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"parley/internal/agent"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// streamingFrame reports whether f replaces the page's streaming area.
func streamingFrame(f frame) bool {
	return f.Type == "html" && f.Target == "streaming" && f.Op == "replace" && f.HTML != nil
}

// TestSocketDoesNotRepeatTextTheViewHad: a socket that connects while an answer streams shows
// the text so far from the view it reads; deltas it then gets that the view already held
// (published after it subscribed, before it read the view: here held back by the hub until it
// connected) are skipped, so the page shows each piece of text once.
func TestSocketDoesNotRepeatTextTheViewHad(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{}, withTestHub())
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		e.hub.hold(conv.ID)
		release := make(chan struct{})
		e.say(conv, ann, "tell me", llmtest.Step{Deltas: []string{"partial answer", " and the rest"}, Release: release})
		e.await(conv.ID, "the answer under way", func(v agent.View) bool { return v.Streaming == "partial answer" })
		conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
		if err != nil {
			t.Fatal(err)
		}
		if f := readUntil(t, conn, "streaming", streamingFrame); !strings.Contains(*f.HTML, "<p>partial answer</p>") {
			t.Fatalf("connect's streaming area = %s", *f.HTML)
		}
		// The deltas the view already held reach the socket now, then the rest of the answer.
		e.hub.release(conv.ID)
		close(release)
		const whole = "partial answer and the rest"
		for {
			f := readFrame(t, conn)
			if streamingFrame(f) && strings.Contains(*f.HTML, "partial answerpartial") {
				t.Fatalf("text repeated: %s", *f.HTML)
			}
			if f.Type == "html" && strings.HasPrefix(f.Target, "msg-") && f.HTML != nil && strings.Contains(*f.HTML, whole) {
				break
			}
			if streamingFrame(f) && !strings.Contains(*f.HTML, "<p>partial answer") && strings.Contains(*f.HTML, "<p>") {
				t.Fatalf("streaming area lost its text: %s", *f.HTML)
			}
		}
	})
}

// settle returns once the pump of every page socket in conns has done all it had to do for the
// conversation's events published before it. The hub sends the sockets a client_exec of a call
// that does not exist (marker names it); a pump handles its events in order and passes that
// one on as a frame of its own, reading no view and rendering nothing, so the marker's frame
// on a page says its pump is done with what came before, the view it read after them included.
func settle(t *testing.T, e *testEnv, convID, marker string, conns []*websocket.Conn) {
	t.Helper()
	e.hub.Publish(agent.Event{ConversationID: convID, Type: agent.EventClientExec, ToolCallID: marker,
		Call: &agent.CallView{ID: marker, Name: marker}})
	for _, conn := range conns {
		readUntil(t, conn, marker, func(f frame) bool { return f.Type == "client_exec" && f.ToolCallID == marker })
	}
}

// TestOneRenderForEverySocket: N pages of one conversation get every render of the streaming
// answer, and each render is made once for all of them.
//
// Before the test lets an answer end (release) it waits until every socket's pump is done
// with the first delta (settle), not only until the page shows it: a pump that took the delta
// together with the events before it (the question logged, the status) reads the view after
// showing it, and had the answer been logged by then, that view shows it over: the page gets
// the logged message and an empty streaming area instead of the last render, rightly, and this
// test would wait for a render that never comes.
func TestOneRenderForEverySocket(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		const pages = 4
		e := newTestEnv(t, open, Config{}, withTestHub())
		ann := e.user("ann", store.RoleMember)
		conv := e.conversation(ann)
		var conns []*websocket.Conn
		for range pages {
			conn, _, err := e.browser(ann).dial(t, "/conversations/"+conv.ID+"/ws", e.ts.URL)
			if err != nil {
				t.Fatal(err)
			}
			readUntil(t, conn, "streaming", streamingFrame) // the connect's
			conns = append(conns, conn)
		}
		before := e.srv.streams.renders.Load()
		// The first delta is rendered at once; the server's clock stands still, so the next ones
		// wait in the window until the logged answer's events flush them: two renders in all.
		release := make(chan struct{})
		e.say(conv, ann, "hi", llmtest.Step{Deltas: []string{"Hel", "lo", " there"}, Release: release})
		for i, conn := range conns {
			if f := readUntil(t, conn, "text", streamingFrame); !strings.Contains(*f.HTML, "<p>Hel</p>") {
				t.Fatalf("page %d: first render = %s", i, *f.HTML)
			}
		}
		if n := e.srv.streams.renders.Load() - before; n != 1 {
			t.Errorf("%d renders of the first delta for %d pages, want 1", n, pages)
		}
		settle(t, e, conv.ID, "settle-1", conns)
		close(release)
		for i, conn := range conns {
			if f := readUntil(t, conn, "text", streamingFrame); !strings.Contains(*f.HTML, "<p>Hello there</p>") {
				t.Fatalf("page %d: second render = %s", i, *f.HTML)
			}
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
		if n := e.srv.streams.renders.Load() - before; n != 2 {
			t.Errorf("%d renders of the answer for %d pages, want 2", n, pages)
		}
		// The next answer, after a quiet spell: its first delta is rendered at once, the rest
		// with its logged message, once each for every page.
		e.clk.Advance(time.Hour)
		mid := e.srv.streams.renders.Load()
		release = make(chan struct{})
		e.say(conv, ann, "more", llmtest.Step{Deltas: []string{"One", " two"}, Release: release})
		for _, conn := range conns {
			readUntil(t, conn, "text", func(f frame) bool { return streamingFrame(f) && strings.Contains(*f.HTML, "<p>One</p>") })
		}
		if n := e.srv.streams.renders.Load() - mid; n != 1 {
			t.Errorf("%d renders of the first delta for %d pages, want 1", n, pages)
		}
		settle(t, e, conv.ID, "settle-2", conns)
		close(release)
		for _, conn := range conns {
			readUntil(t, conn, "text", func(f frame) bool { return streamingFrame(f) && strings.Contains(*f.HTML, "<p>One two</p>") })
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
		if n := e.srv.streams.renders.Load() - mid; n != 2 {
			t.Errorf("%d renders of the second answer for %d pages, want 2", n, pages)
		}
		for _, conn := range conns {
			_ = conn.Close(websocket.StatusNormalClosure, "")
		}
	})
}

// TestSharedStreamRendersOncePerWindow: sockets that feed the same deltas and ask for renders
// at their own moments get one render per window between them, each of all the text fed; what
// one of them feeds again (a delta the text has) changes nothing; a delta past the text's end
// is a gap; a delta that disagrees with the text at offset 0 starts it over.
func TestSharedStreamRendersOncePerWindow(t *testing.T) {
	var set streamSet
	const sockets = 5
	var shared []*streamMember
	for range sockets {
		shared = append(shared, set.join("c"))
	}
	s := shared[0]
	for _, x := range shared {
		if x.sharedStream != s.sharedStream {
			t.Fatal("sockets of one conversation got different streams")
		}
	}
	ctx := context.Background()
	now := t0
	text := ""
	delta := func(piece string) agent.Event {
		ev := agent.Event{Type: agent.EventTextDelta, Seq: 3, Offset: len(text), Text: piece}
		text += piece
		return ev
	}
	for i := range 100 { // 100 deltas 10 ms apart: 1 s of streaming, 20 windows of 50 ms
		ev := delta(strings.Repeat("w", 7) + " ")
		for range sockets {
			if s.feed(ev) {
				t.Fatalf("delta %d: gap", i)
			}
			if _, err := s.tick(ctx, now, false); err != nil {
				t.Fatal(err)
			}
		}
		if r := s.latest(); r.seq != 3 || r.n > len(text) {
			t.Fatalf("delta %d: render %d/%d", i, r.n, len(text))
		}
		now = now.Add(10 * time.Millisecond)
	}
	if n := set.renders.Load(); n != 20 {
		t.Errorf("%d renders for %d sockets over 20 windows, want 20", n, sockets)
	}
	if _, err := s.tick(ctx, now, true); err != nil {
		t.Fatal(err)
	}
	if r := s.latest(); r.n != len(text) || !strings.Contains(r.html, strings.TrimSpace(text)) {
		t.Errorf("last render: %d of %d bytes", r.n, len(text))
	}
	rendered := set.renders.Load()
	if s.feed(agent.Event{Type: agent.EventTextDelta, Seq: 3, Offset: 8, Text: "wwwwwww "}); s.dirty {
		t.Error("a delta the text has made it change")
	}
	if _, err := s.tick(ctx, now.Add(time.Hour), true); err != nil || set.renders.Load() != rendered {
		t.Errorf("rendered again with nothing new (%v)", err)
	}
	if !s.feed(agent.Event{Type: agent.EventTextDelta, Seq: 3, Offset: len(text) + 1, Text: "x"}) {
		t.Error("a delta past the end was taken")
	}
	if s.feed(agent.Event{Type: agent.EventTextDelta, Seq: 3, Offset: 0, Text: "Again"}) || string(s.text) != "Again" {
		t.Errorf("a call tried again did not start the text over: %q", s.text[:min(len(s.text), 20)])
	}
	if s.feed(agent.Event{Type: agent.EventTextDelta, Seq: 2, Offset: 5, Text: "old"}) || string(s.text) != "Again" {
		t.Error("a delta of an earlier answer changed the text")
	}
	for i, x := range shared {
		if s.seq != 3 || s.latest().seq != 3 {
			t.Fatalf("an answer was dropped before every socket was past it (%d of %d)", i, sockets)
		}
		x.forget(4)
		x.forget(4) // the same socket again counts once
	}
	if s.seq != 0 || s.text != nil || s.latest().seq != 0 {
		t.Error("an answer every socket is past was kept")
	}
	for _, x := range shared {
		set.leave("c", x)
	}
	if len(set.convs) != 0 {
		t.Error("the stream outlived its sockets")
	}
}

// BenchmarkSharedStream: renders per window for N sockets following one answer (one per window
// whatever N), and the cost of a delta to a socket.
func BenchmarkSharedStream(b *testing.B) {
	for _, sockets := range []int{1, 10, 100} {
		b.Run(strconv.Itoa(sockets)+" sockets", func(b *testing.B) {
			var set streamSet
			s := set.join("c")
			ctx := context.Background()
			now, off, seq := t0, 0, int64(1)
			piece := strings.Repeat("word ", 4)
			windows := 0
			for b.Loop() {
				if off > 8<<10 { // a new answer every 8 KiB, so the renders stay short
					seq, off = seq+1, 0
				}
				ev := agent.Event{Type: agent.EventTextDelta, Seq: seq, Offset: off, Text: piece}
				off += len(piece)
				for range sockets {
					s.feed(ev)
					if _, err := s.tick(ctx, now, false); err != nil {
						b.Fatal(err)
					}
				}
				now = now.Add(10 * time.Millisecond)
				windows++
			}
			b.ReportMetric(float64(set.renders.Load())/float64(windows)*5, "renders/window")
		})
	}
}
