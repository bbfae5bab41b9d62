package web

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct{ id, name, data string }

// openStream starts an event stream and parses it on a goroutine that ends with the stream.
// When it returns, the server has subscribed to the conversation's events.
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
	out := make(chan sseEvent, 256)
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

// nextNamed skips events until one named name (the live hints a real turn sends in between
// are not the point) and returns it; entries skipped on the way are checked by check.
func nextNamed(t *testing.T, ch <-chan sseEvent, name string, check func(sseEvent)) sseEvent {
	t.Helper()
	for i := 0; i < 100; i++ {
		ev := next(t, ch)
		if ev.name == name {
			return ev
		}
		if check != nil {
			check(ev)
		}
	}
	t.Fatalf("no %s event", name)
	return sseEvent{}
}

// entryOf decodes an entry event.
func entryOf(t *testing.T, ev sseEvent) entryJSON {
	t.Helper()
	var ej entryJSON
	if ev.name != "entry" || json.Unmarshal([]byte(ev.data), &ej) != nil || strconv.FormatInt(ej.Seq, 10) != ev.id {
		t.Fatalf("not an entry event: %+v", ev)
	}
	return ej
}

// entryText is the text of a message entry.
func entryText(t *testing.T, ev sseEvent) string {
	t.Helper()
	var d struct{ Text string }
	_ = json.Unmarshal(entryOf(t, ev).Data, &d)
	return d.Text
}

// TestEventsResume: the stream replays the log after Last-Event-ID, then follows a real turn
// live, never sending an entry twice; after a lag it says resync and ends, and a reconnect with
// the last id seen misses nothing.
func TestEventsResume(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{SSEHeartbeat: time.Minute}, withTestHub())
		owner := e.user("owner", store.RoleMember)
		conv := e.conversation(owner)
		for i := 1; i <= 2; i++ { // entries 1 to 4: m1, r1, m2, r2
			e.say(conv, owner, fmt.Sprintf("m%d", i), llmtest.Reply(fmt.Sprintf("r%d", i)))
			e.awaitStatus(conv.ID, store.StatusIdle)
		}
		c := e.script(owner)
		path := "/api/v1/conversations/" + conv.ID + "/events"
		events, stop := openStream(t, c, path, "1")
		for _, want := range []struct {
			id   string
			typ  store.EntryType
			text string
		}{{"2", store.EntryAssistantMessage, "r1"}, {"3", store.EntryUserMessage, "m2"}, {"4", store.EntryAssistantMessage, "r2"}} {
			ev := next(t, events)
			if ev.name != "entry" || ev.id != want.id || entryOf(t, ev).Type != want.typ || entryText(t, ev) != want.text {
				t.Fatalf("got %+v, want entry %s (%s %q)", ev, want.id, want.typ, want.text)
			}
		}
		// Live: a logged change arrives as its entry (once), ephemeral events as themselves. The
		// model answers "Hel", then waits.
		release := make(chan struct{})
		e.say(conv, owner, "m3", llmtest.Step{Deltas: []string{"Hel", "lo"}, Release: release})
		if ev := next(t, events); ev.name != "entry" || ev.id != "5" || entryText(t, ev) != "m3" {
			t.Fatalf("got %+v, want entry 5", ev)
		}
		if ev := next(t, events); ev.name != "status" || !strings.Contains(ev.data, `"status":"generating"`) {
			t.Fatalf("got %+v, want status (entry 5 must not repeat)", ev)
		}
		if ev := next(t, events); ev.name != "text_delta" || ev.id != "" || !strings.Contains(ev.data, `"text":"Hel"`) {
			t.Fatalf("got %+v, want a text_delta without id", ev)
		}
		// Heartbeat on the server's clock.
		waitFor(t, func() bool { return e.clk.Waiters() > 0 })
		e.clk.Advance(time.Minute)
		if ev := next(t, events); ev.name != "comment" || ev.data != "ping" {
			t.Fatalf("got %+v, want a ping", ev)
		}
		// The answer (entry 6) is logged but its events are lost; then the stream lags: the
		// resync carries the catch-up.
		e.hub.drop(conv.ID)
		close(release)
		e.awaitStatus(conv.ID, store.StatusIdle)
		if n := e.hub.lag(conv.ID); n != 1 {
			t.Fatalf("%d subscribers lagged, want the stream's", n)
		}
		if ev := next(t, events); ev.id != "6" || entryText(t, ev) != "Hello" {
			t.Fatalf("got %+v, want entry 6 before the resync", ev)
		}
		if ev := next(t, events); ev.name != "resync" {
			t.Fatalf("got %+v, want resync", ev)
		}
		if _, ok := <-events; ok {
			t.Fatal("the stream went on after resync")
		}
		stop()
		e.hub.deliver(conv.ID)

		// Reconnect after 6: only what came later, each entry once, in order.
		events, stop = openStream(t, c, path, "6")
		defer stop()
		e.say(conv, owner, "what time is it", llmtest.Calls(llmtest.Call("x", "get_current_time", nil)), llmtest.Reply("Nine."))
		final := e.awaitStatus(conv.ID, store.StatusIdle).LastSeq
		last := int64(6)
		sawCall := false
		for last < final {
			ev := next(t, events)
			switch ev.name {
			case "entry":
				if seq := entryOf(t, ev).Seq; seq != last+1 {
					t.Fatalf("entry %d after %d", seq, last)
				}
				last++
			case "tool_call":
				sawCall = sawCall || strings.Contains(ev.data, `"tool_call_id":"x"`)
			}
		}
		if !sawCall {
			t.Fatal("no tool_call hint for the call")
		}
		// Shutdown ends the stream.
		e.srv.Shutdown()
		nextNamed(t, events, "shutdown", func(ev sseEvent) {
			if ev.name == "entry" {
				t.Fatalf("entry %s sent again", ev.id)
			}
		})
	})
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

// pagedLogReads records how an event stream reads the log for a request: the size of each page
// it asked for and got, and every unbounded read (Log), which a catch-up must never make.
type pagedLogReads struct {
	store.Store
	mu        sync.Mutex
	pages     []int // entries per page read
	unbounded int
}

func (s *pagedLogReads) Log(ctx context.Context, id string, after int64) ([]store.Entry, error) {
	if ctx.Value(http.ServerContextKey) != nil {
		s.mu.Lock()
		s.unbounded++
		s.mu.Unlock()
	}
	return s.Store.Log(ctx, id, after)
}

func (s *pagedLogReads) LogPage(ctx context.Context, id string, after int64, limit, maxBytes int) ([]store.Entry, error) {
	es, err := s.Store.LogPage(ctx, id, after, limit, maxBytes)
	if ctx.Value(http.ServerContextKey) != nil {
		s.mu.Lock()
		s.pages = append(s.pages, len(es))
		s.mu.Unlock()
	}
	return es, err
}

// TestEventsCatchUpInPages: a stream that resumes behind a log several pages long reads it a
// page at a time (never the whole log: 32 slow readers of a 10 MB log held 32 copies of it) and
// sends every entry once, in order, from its resume point on.
func TestEventsCatchUpInPages(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		var lr *pagedLogReads
		e := newTestEnv(t, open, Config{SSEHeartbeat: time.Minute}, withAgentStore(func(st store.Store) store.Store {
			lr = &pagedLogReads{Store: st}
			return lr
		}))
		owner := e.user("owner", store.RoleMember)
		conv := e.conversation(owner)
		const n = 3*catchUpPage + 7
		ctx := context.Background()
		for i := range n { // straight into the store: the conversation's actor is not running
			data := fmt.Sprintf(`{"text":"m%d"}`, i+1)
			if _, err := e.st.Append(ctx, conv.ID, int64(i), store.Batch{Entries: []store.Entry{
				{Type: store.EntryUserMessage, Actor: owner.ID, Data: json.RawMessage(data)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, from := range []int{0, 5} {
			lr.mu.Lock()
			lr.pages, lr.unbounded = nil, 0
			lr.mu.Unlock()
			last := ""
			if from > 0 {
				last = strconv.Itoa(from)
			}
			events, stop := openStream(t, e.script(owner), "/api/v1/conversations/"+conv.ID+"/events", last)
			for seq := from + 1; seq <= n; seq++ {
				ev := next(t, events)
				if ev.id != strconv.Itoa(seq) || entryText(t, ev) != fmt.Sprintf("m%d", seq) {
					t.Fatalf("from %d: got %+v, want entry %d", from, ev, seq)
				}
			}
			stop()
			lr.mu.Lock()
			pages, unbounded := lr.pages, lr.unbounded
			lr.mu.Unlock()
			if unbounded != 0 {
				t.Fatalf("from %d: the catch-up read the whole log %d times", from, unbounded)
			}
			want := (n-from)/catchUpPage + 1
			if len(pages) != want || slices.Max(pages) > catchUpPage {
				t.Fatalf("from %d: pages read %v, want %d of at most %d entries", from, pages, want, catchUpPage)
			}
		}
	})
}
