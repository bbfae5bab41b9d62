package web

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// requestLogReads counts the log reads the agent's store serves on behalf of an HTTP request
// (an event stream's catch-up reads through its subscription), not the agent's own (an actor
// loading its state reads with the agent's context).
type requestLogReads struct {
	store.Store
	reads atomic.Int64
}

func (s *requestLogReads) LogPage(ctx context.Context, id string, after int64, limit, maxBytes int) ([]store.Entry, error) {
	if ctx.Value(http.ServerContextKey) != nil {
		s.reads.Add(1)
	}
	return s.Store.LogPage(ctx, id, after, limit, maxBytes)
}

// withLogReads has the agent read through a requestLogReads, stored in *into.
func withLogReads(into **requestLogReads) envOption {
	return withAgentStore(func(st store.Store) store.Store {
		*into = &requestLogReads{Store: st}
		return *into
	})
}

// TestEventsCarriedEntries: live, a stream writes the entries the agent's events carry instead
// of reading the log; entries it already sent are not repeated (events held while the stream
// replayed them arrive after); when the carried entries do not continue the stream (the events
// of a commit were lost), it reads the missing ones from the store.
func TestEventsCarriedEntries(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		var lr *requestLogReads
		e := newTestEnv(t, open, Config{SSEHeartbeat: time.Minute}, withTestHub(), withLogReads(&lr))
		owner := e.user("owner", store.RoleMember)
		conv := e.conversation(owner)
		// The first turn's events are held: the stream opens, replays entries 1 and 2 from the
		// store, and only then gets the events that carry them.
		e.hub.hold(conv.ID)
		e.say(conv, owner, "m1", llmtest.Reply("r1"))
		e.awaitStatus(conv.ID, store.StatusIdle)
		c := e.script(owner)
		events, stop := openStream(t, c, "/api/v1/conversations/"+conv.ID+"/events", "")
		defer stop()
		for _, want := range []string{"1", "2"} {
			if ev := next(t, events); ev.id != want {
				t.Fatalf("got %+v, want the replayed entry %s", ev, want)
			}
		}
		if n := lr.reads.Load(); n != 1 {
			t.Fatalf("the replay read the log %d times, want once", n)
		}
		e.hub.release(conv.ID)
		for { // the held events, up to the turn's end: hints, and no entry again
			ev := next(t, events)
			if ev.name == "entry" {
				t.Fatalf("entry %s sent again from a held event", ev.id)
			}
			if ev.name == "status" && strings.Contains(ev.data, `"status":"idle"`) {
				break
			}
		}

		// A live turn: its entries ride on its events; the store is not read.
		e.say(conv, owner, "m2", llmtest.Reply("r2"))
		for _, want := range []string{"m2", "r2"} {
			ev := nextNamed(t, events, "entry", nil)
			if entryText(t, ev) != want {
				t.Fatalf("got %+v, want the entry of %q", ev, want)
			}
		}
		if n := lr.reads.Load(); n != 1 {
			t.Fatalf("the stream read the log %d times while the events carried the entries", n)
		}

		// A gap: the events of the next message are lost; the answer's event carries only the
		// answer. Entries 5 and 6 come from the store, in order.
		e.hub.drop(conv.ID)
		release := make(chan struct{})
		e.say(conv, owner, "m3", llmtest.Step{Deltas: []string{"r3"}, Release: release})
		e.await(conv.ID, "the answer under way", func(v agent.View) bool { return v.Streaming == "r3" })
		e.hub.deliver(conv.ID)
		close(release)
		for _, want := range []string{"m3", "r3"} {
			ev := nextNamed(t, events, "entry", nil)
			if entryText(t, ev) != want {
				t.Fatalf("got %+v, want the stored entry of %q", ev, want)
			}
		}
		if n := lr.reads.Load(); n != 2 {
			t.Fatalf("the stream read the log %d times, want once more for the gap", n)
		}
		e.awaitStatus(conv.ID, store.StatusIdle)
	})
}

// TestEventsOpenReadsTheLogOnlyWhenBehind: opening a stream reads the log only when the
// conversation has entries past where the stream starts: not for a new conversation, not for a
// resume that is up to date; a resume that is behind replays from the store.
func TestEventsOpenReadsTheLogOnlyWhenBehind(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		var lr *requestLogReads
		e := newTestEnv(t, open, Config{SSEHeartbeat: time.Minute}, withLogReads(&lr))
		owner := e.user("owner", store.RoleMember)
		c := e.script(owner)
		conv := e.conversation(owner)
		path := "/api/v1/conversations/" + conv.ID + "/events"

		// A live turn reaches the client only after the stream decided about the replay.
		live := func(events <-chan sseEvent, text string) {
			t.Helper()
			release := make(chan struct{})
			e.say(conv, owner, text, llmtest.Step{Deltas: []string{"x"}, Release: release})
			nextNamed(t, events, "text_delta", nil)
			close(release)
			e.awaitStatus(conv.ID, store.StatusIdle)
		}
		events, stop := openStream(t, c, path, "")
		live(events, "hi")
		stop()
		if n := lr.reads.Load(); n != 0 {
			t.Fatalf("a new conversation's stream read the log %d times", n)
		}

		events, stop = openStream(t, c, path, "2") // entries 1 and 2: the first turn
		live(events, "again")
		stop()
		if n := lr.reads.Load(); n != 0 {
			t.Fatalf("an up-to-date resume read the log %d times", n)
		}
		events, stop = openStream(t, c, path, "1")
		defer stop()
		if ev := next(t, events); ev.id != "2" || lr.reads.Load() != 1 {
			t.Fatalf("a resume behind the log: %+v after %d reads, want entry 2 after one", ev, lr.reads.Load())
		}
	})
}
