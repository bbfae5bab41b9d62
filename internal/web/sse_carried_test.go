package web

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/store"
)

// TestEventsCarriedEntries: live, a stream writes the entries the agent's event carries instead
// of reading the log (the carried entries here exist only in the event, so seeing them proves
// the store was not read); entries it already sent are not repeated; when the carried entries
// do not continue the stream (a gap), it reads the missing ones from the store.
func TestEventsCarriedEntries(t *testing.T) {
	e := newTestEnv(t, Config{SSEHeartbeat: time.Minute})
	owner := e.user("owner", store.RoleMember)
	conv := e.conversation(owner)
	appendMessage(t, e.st, conv.ID, "m1")
	c := e.script(owner)
	events, stop := openStream(t, c, "/api/v1/conversations/"+conv.ID+"/events", "")
	defer stop()
	if ev := next(t, events); ev.id != "1" {
		t.Fatalf("got %+v, want the replayed entry 1", ev)
	}
	waitFor(t, func() bool { return e.conv.subscribers(conv.ID) == 1 })

	text := func(ev sseEvent) string {
		t.Helper()
		var ej entryJSON
		if err := json.Unmarshal([]byte(ev.data), &ej); err != nil {
			t.Fatalf("entry data %s: %v", ev.data, err)
		}
		var d struct{ Text string }
		_ = json.Unmarshal(ej.Data, &d)
		return d.Text
	}
	carried := func(seqs ...int64) []store.Entry {
		var out []store.Entry
		for _, s := range seqs {
			out = append(out, store.Entry{Seq: s, Type: store.EntryUserMessage, Actor: "u",
				Data: json.RawMessage(fmt.Sprintf(`{"text":"carried %d"}`, s)), CreatedAt: e.clk.Now()})
		}
		return out
	}

	// Entries 1 (already sent) to 3 ride on the event; the store has none of 2 and 3.
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: 3, Type: agent.EventStatus, Status: "generating", Entries: carried(1, 2, 3)})
	for _, want := range []string{"2", "3"} {
		ev := next(t, events)
		if ev.name != "entry" || ev.id != want || text(ev) != "carried "+want {
			t.Fatalf("got %+v, want carried entry %s", ev, want)
		}
	}
	if ev := next(t, events); ev.name != "status" {
		t.Fatalf("got %+v, want the status hint after its entries", ev)
	}

	// A gap: the stream has 3, the event carries only 6. Entries 4 to 6 come from the store.
	for i := 2; i <= 6; i++ { // the store's own 2 to 6 (2 and 3 were sent from the event)
		appendMessage(t, e.st, conv.ID, fmt.Sprintf("stored %d", i))
	}
	e.conv.publish(conv.ID, agent.Event{ConversationID: conv.ID, Seq: 6, Type: agent.EventToolCall, ToolCallID: "x", Entries: carried(6)})
	for _, want := range []string{"4", "5", "6"} {
		ev := next(t, events)
		if ev.name != "entry" || ev.id != want || text(ev) != "stored "+want {
			t.Fatalf("got %+v (%s), want stored entry %s", ev, ev.data, want)
		}
	}
	if ev := next(t, events); ev.name != "tool_call" {
		t.Fatalf("got %+v, want the tool_call hint", ev)
	}
}

// logCounter counts reads of the log.
type logCounter struct {
	store.Store
	reads atomic.Int64
}

func (s *logCounter) Log(ctx context.Context, id string, after int64) ([]store.Entry, error) {
	s.reads.Add(1)
	return s.Store.Log(ctx, id, after)
}

// TestEventsOpenReadsTheLogOnlyWhenBehind: opening a stream reads the log only when the
// conversation has entries past where the stream starts: not for a new conversation, not for a
// resume that is up to date; a resume that is behind replays from the store.
func TestEventsOpenReadsTheLogOnlyWhenBehind(t *testing.T) {
	e := newTestEnv(t, Config{SSEHeartbeat: time.Minute})
	lc := &logCounter{Store: e.st}
	e.srv.store = lc
	owner := e.user("owner", store.RoleMember)
	c := e.script(owner)
	fresh := e.conversation(owner)
	path := func(id string) string { return "/api/v1/conversations/" + id + "/events" }

	// A live event reaches the client only after the stream decided about the replay.
	live := func(id string, events <-chan sseEvent) {
		t.Helper()
		waitFor(t, func() bool { return e.conv.subscribers(id) == 1 })
		e.conv.publish(id, agent.Event{ConversationID: id, Type: agent.EventTextDelta, Text: "x"})
		if ev := next(t, events); ev.name != "text_delta" {
			t.Fatalf("got %+v, want the live text_delta", ev)
		}
	}
	events, stop := openStream(t, c, path(fresh.ID), "")
	live(fresh.ID, events)
	stop()
	if n := lc.reads.Load(); n != 0 {
		t.Fatalf("a new conversation's stream read the log %d times", n)
	}
	for range events {
	}

	conv := e.conversation(owner)
	appendMessage(t, e.st, conv.ID, "m1")
	appendMessage(t, e.st, conv.ID, "m2")
	events, stop = openStream(t, c, path(conv.ID), "2")
	live(conv.ID, events)
	if n := lc.reads.Load(); n != 0 {
		t.Fatalf("an up-to-date resume read the log %d times", n)
	}
	stop()
	for range events {
	}
	waitFor(t, func() bool { return e.conv.subscribers(conv.ID) == 0 })
	events, stop = openStream(t, c, path(conv.ID), "1")
	defer stop()
	if ev := next(t, events); ev.id != "2" || lc.reads.Load() != 1 {
		t.Fatalf("a resume behind the log: %+v after %d reads, want entry 2 after one", ev, lc.reads.Load())
	}
}
