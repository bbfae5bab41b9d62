package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/store"
)

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct{ id, name, data string }

// openStream starts an event stream and parses it on a goroutine that ends with the stream.
func openStream(t *testing.T, c *client, path, lastID string) (<-chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", c.e.ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.bearer)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	res, err := c.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	out := make(chan sseEvent, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(res.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			case strings.HasPrefix(line, ": "):
				out <- sseEvent{name: "comment", data: line[2:]}
			}
		}
	}()
	return out, func() {
		cancel()
		res.Body.Close()
		<-done
	}
}

func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("stream ended")
			}
			if ev.name == "comment" && strings.HasPrefix(ev.data, "stream of") {
				continue
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5 s")
		}
	}
}

func appendMessage(t *testing.T, st store.Store, conv string, text string) int64 {
	t.Helper()
	cur, err := st.GetConversation(context.Background(), conv)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(map[string]string{"text": text})
	seq, err := st.Append(context.Background(), conv, cur.LastSeq, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "u", Data: data}}})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestEventsResume: the stream replays the log after Last-Event-ID, then follows live events,
// never sending an entry twice; after a lag it says resync and ends, and a reconnect with the
// last id seen misses nothing.
func TestEventsResume(t *testing.T) {
	e := newTestEnv(t, Config{SSEHeartbeat: time.Minute})
	owner := e.user("owner", store.RoleMember)
	conv := e.conversation(owner)
	for i := 1; i <= 3; i++ {
		appendMessage(t, e.st, conv.ID, fmt.Sprintf("m%d", i))
	}
	c := e.script(owner)
	path := "/api/v1/conversations/" + conv.ID + "/events"
	events, stop := openStream(t, c, path, "1")
	for _, want := range []string{"2", "3"} {
		ev := next(t, events)
		if ev.name != "entry" || ev.id != want {
			t.Fatalf("got %+v, want entry %s", ev, want)
		}
		var ej entryJSON
		if err := json.Unmarshal([]byte(ev.data), &ej); err != nil || fmt.Sprint(ej.Seq) != want || ej.Type != store.EntryUserMessage {
			t.Fatalf("entry data %s", ev.data)
		}
	}
	// Live: a logged change arrives as its entry (once), ephemeral events as themselves.
	seq := appendMessage(t, e.st, conv.ID, "m4")
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: seq, Type: agent.EventMessage})
	if ev := next(t, events); ev.name != "entry" || ev.id != "4" {
		t.Fatalf("got %+v, want entry 4", ev)
	}
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Type: agent.EventTextDelta, Text: "Hel"})
	if ev := next(t, events); ev.name != "text_delta" || ev.id != "" || !strings.Contains(ev.data, `"text":"Hel"`) {
		t.Fatalf("got %+v, want a text_delta without id", ev)
	}
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: seq, Type: agent.EventStatus, Status: "generating"})
	if ev := next(t, events); ev.name != "status" {
		t.Fatalf("got %+v, want status (entry 4 must not repeat)", ev)
	}
	// Heartbeat on the injected clock.
	waitFor(t, func() bool { return e.clk.Waiters() > 0 })
	e.clk.Advance(time.Minute)
	if ev := next(t, events); ev.name != "comment" || ev.data != "ping" {
		t.Fatalf("got %+v, want a ping", ev)
	}
	// Entry 5 is logged but its event is lost in a lag: the resync carries the catch-up.
	appendMessage(t, e.st, conv.ID, "m5")
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Type: agent.EventResync})
	if ev := next(t, events); ev.id != "5" {
		t.Fatalf("got %+v, want entry 5 before the resync", ev)
	}
	if ev := next(t, events); ev.name != "resync" {
		t.Fatalf("got %+v, want resync", ev)
	}
	if _, ok := <-events; ok {
		t.Fatal("the stream went on after resync")
	}
	stop()
	waitFor(t, func() bool { return e.conv.subscribers(conv.ID) == 0 })

	// Reconnect after 5: only what came later.
	events, stop = openStream(t, c, path, "5")
	defer stop()
	waitFor(t, func() bool { return e.conv.subscribers(conv.ID) == 1 })
	seq = appendMessage(t, e.st, conv.ID, "m6")
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: seq, Type: agent.EventToolCall, ToolCallID: "x"})
	if ev := next(t, events); ev.id != "6" {
		t.Fatalf("got %+v, want entry 6", ev)
	}
	if ev := next(t, events); ev.name != "tool_call" {
		t.Fatalf("got %+v, want the tool_call hint", ev)
	}
	// Shutdown ends the stream.
	e.srv.Shutdown()
	if ev := next(t, events); ev.name != "shutdown" {
		t.Fatalf("got %+v, want shutdown", ev)
	}
}

// waitFor polls cond (state owned by another goroutine that offers no channel) for up to 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}
