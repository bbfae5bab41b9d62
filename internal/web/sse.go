package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
)

// sseWriteTimeout bounds each write to an event stream: a client that stops reading is dropped
// instead of holding a goroutine forever.
const sseWriteTimeout = 10 * time.Second

// entryJSON is a log entry as an event stream carries it.
type entryJSON struct {
	Seq        int64           `json:"seq"`
	Type       store.EntryType `json:"type"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Actor      string          `json:"actor,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
}

// apiEvents: GET /api/v1/conversations/{id}/events, Server-Sent Events.
//
// The stream is the conversation's log: each entry is an event named "entry" whose id is its
// sequence, so Last-Event-ID (or ?after=N) resumes exactly after the last one seen, replayed
// from the store. Between entries come live hints without an id, named after the agent's
// event type (text_delta, progress, status, tool_call, client_exec); they are not replayed.
// The subscription is taken before the replay, so nothing logged in between is missed. Live,
// the entries come with the agent's events (Event.Entries), so a stream that keeps up does not
// read the store per change; a live event whose sequence is still past the last entry sent
// (the entries it carried do not continue the stream) triggers a read of the log from there. A
// subscriber that lags gets a "resync" event and the stream ends; the client reconnects with
// Last-Event-ID.
func (s *Server) apiEvents(c echo.Context) error {
	id := c.Param("id")
	after, terr := lastEventID(c)
	if terr != nil {
		return terr
	}
	// The agent subscribes before it reads the conversation: its last_seq is committed with its
	// entries, so whatever sub.LastSeq does not count yet comes with a later event.
	release, err := s.openConn(principal(c).UserID)
	if err != nil {
		return err
	}
	defer release()
	sub, err := s.agent.Subscribe(c.Request().Context(), id, principal(c))
	if err != nil {
		return err
	}
	defer sub.Close()
	// Guard from the start, so a sign-out during the replay below is not missed.
	guard := s.newLiveGuard(c, id, sub.OwnerID)
	defer guard.leave()

	w := c.Response()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	st := &sseStream{w: w, rc: http.NewResponseController(w), last: after}
	if err := st.comment("stream of conversation " + id); err != nil {
		return nil // the client is gone
	}
	ctx := c.Request().Context()
	es := &eventStream{s: s, id: id, sub: sub, st: st, guard: guard, log: s.log.With("conversation_id", id)}
	if sub.LastSeq > st.last { // nothing to replay (a new conversation, an up-to-date resume): no read
		if err := es.catchUp(ctx); err != nil {
			es.log.InfoContext(ctx, "event stream ended", "err", err)
			return nil
		}
	}
	es.hb = s.clock.NewTimer(s.cfg.SSEHeartbeat)
	defer es.hb.Stop()
	runLive[agent.Event](ctx, guard, es.log, es)
	return nil
}

// eventStream is one conversation's event stream as runLive drives it.
type eventStream struct {
	s   *Server
	id  string
	sub *agent.Subscription
	st  *sseStream
	hb  clock.Timer // the heartbeat
	// guard asks the policy again before a change of the conversation's calls is passed on
	guard *liveGuard
	log   *slog.Logger // with the conversation's id
}

var _ liveSink[agent.Event] = (*eventStream)(nil)

// A catch-up reads the log a page at a time, at most catchUpPage entries and catchUpBytes of
// their data (one entry more when a single entry is larger), and writes each page before it
// reads the next: a stream holds one page of the log, never the log (32 slow readers of a 10 MB
// log held 32 copies of it: docs/benchmarks.md, "Event stream catch-up").
const (
	catchUpPage  = 64
	catchUpBytes = 256 << 10
)

// catchUp writes the log's entries after the last one sent, read from the store page by page.
func (es *eventStream) catchUp(ctx context.Context) error {
	for {
		entries, err := es.sub.Log(ctx, es.st.last, catchUpPage, catchUpBytes)
		if err != nil {
			return fmt.Errorf("read log of %s: %w", es.id, err)
		}
		size := 0
		for i := range entries {
			size += len(entries[i].Data)
			if err := es.st.entry(entries[i]); err != nil {
				return err
			}
			entries[i] = store.Entry{} // written: let it go before the page ends
		}
		if len(entries) < catchUpPage && size < catchUpBytes {
			return nil // the log ends here
		}
	}
}

// updates is the conversation's events.
func (es *eventStream) updates() <-chan agent.Event { return es.sub.C }

// update writes ev and the events already queued after it (up to maxBatched) in a single flush:
// one write to the socket instead of one per event; nothing waits for more to arrive.
func (es *eventStream) update(ctx context.Context, ev agent.Event, ok bool) bool {
	st := es.st
	st.hold = true
	more := es.live(ctx, ev, ok)
	for n := 1; more && n < maxBatched; n++ {
		select {
		case ev, ok = <-es.sub.C:
			more = es.live(ctx, ev, ok)
		default:
			n = maxBatched
		}
	}
	st.hold = false
	return st.flush() == nil && more
}

// live writes one event of the subscription (ok false: it closed); false ends the stream.
func (es *eventStream) live(ctx context.Context, ev agent.Event, ok bool) bool {
	st := es.st
	for ok && ev.Type == agent.EventTextDelta {
		// Deltas that queued up while this stream was writing go out as one event: fewer
		// writes when the server is busy, no added delay when it is not.
		var next *agent.Event
		ev, next, ok = coalesceDeltas(ev, es.sub.C)
		if err := st.liveEvent(ev); err != nil {
			return false
		}
		if !ok {
			break // closed while draining: handled below
		}
		if next == nil {
			return true
		}
		ev = *next // another event, or a delta that does not continue this one
	}
	if !ok || ev.Type == agent.EventResync {
		if err := es.catchUp(ctx); err == nil {
			_ = st.event("", string(agent.EventResync), []byte(`{}`))
		}
		return false
	}
	if ev.Type == agent.EventClientExec && es.guard.borrowed() {
		return true // a browser tool's run is for its owner's clients alone
	}
	if err := es.guard.mayStillFollow(ctx, ev); err != nil {
		// A decider's right ended (their decision, or another's): nothing more of the
		// conversation is theirs.
		_ = st.event("", "signed_out", []byte(`{}`))
		return false
	}
	if len(ev.Entries) > 0 {
		if err := st.carried(ev.Entries); err != nil {
			return false // the client is gone
		}
	}
	if ev.Seq > st.last {
		// The event did not carry what it follows (this stream subscribed in between,
		// or the commit published nothing): read the log.
		if err := es.catchUp(ctx); err != nil {
			es.log.InfoContext(ctx, "event stream ended", "err", err)
			return false
		}
	}
	if ev.Type == agent.EventMessage {
		return true // the log entry carries it
	}
	return st.liveEvent(ev) == nil
}

// keepalive is the heartbeat's channel; heartbeat writes a comment and sets the next.
func (es *eventStream) keepalive() <-chan time.Time { return es.hb.C() }

func (es *eventStream) heartbeat() bool {
	if err := es.st.comment("ping"); err != nil {
		return false
	}
	es.hb.Reset(es.s.cfg.SSEHeartbeat)
	return true
}

// due: an event stream has no wait of its own.
func (es *eventStream) due() <-chan time.Time { return nil }

func (es *eventStream) fire(context.Context) bool { return true }

// reauthorized: the stream is the conversation's log whoever follows it; guard.check has asked
// whether the principal, as it now stands, may still follow it.
func (es *eventStream) reauthorized(context.Context, agent.Principal) bool { return true }

// ending tells the client why the stream ends: "signed_out" when its credential or right is
// gone, "shutdown" when the server stops.
func (es *eventStream) ending(why liveEnd) {
	name := "signed_out"
	if why == liveShutdown {
		name = "shutdown"
	}
	_ = es.st.event("", name, []byte(`{}`))
}

// maxBatched bounds the events written to a stream between two flushes.
const maxBatched = 64

// maxCoalesced bounds the text gathered into one text_delta event.
const maxCoalesced = 16 << 10

// coalesceDeltas appends to first the text deltas already waiting in c that continue it (the
// same answer, at the offset where it ends), without blocking. It returns the merged delta, the
// first waiting event that does not continue it (nil when none), and whether c is still open
// (false: c closed while draining; next is nil then).
func coalesceDeltas(first agent.Event, c <-chan agent.Event) (agent.Event, *agent.Event, bool) {
	var b strings.Builder
	b.WriteString(first.Text)
	for b.Len() < maxCoalesced {
		select {
		case ev, ok := <-c:
			if !ok {
				first.Text = b.String()
				return first, nil, false
			}
			if ev.Type != agent.EventTextDelta || ev.Seq != first.Seq || ev.Offset != first.Offset+b.Len() {
				first.Text = b.String()
				return first, &ev, true
			}
			b.WriteString(ev.Text)
		default:
			first.Text = b.String()
			return first, nil, true
		}
	}
	first.Text = b.String()
	return first, nil, true
}

// liveEvent writes one of the agent's live events, named after its type and without an id.
func (st *sseStream) liveEvent(ev agent.Event) error {
	out, err := eventOf(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	data, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return st.event("", string(ev.Type), data)
}

// lastEventID is where a stream resumes: the Last-Event-ID header, or ?after=N for clients that
// cannot set headers, or 0 (the whole log).
func lastEventID(c echo.Context) (int64, *fault.Error) {
	v := c.Request().Header.Get("Last-Event-ID")
	if v == "" {
		v = c.QueryParam("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, fault.New(fault.KindBadRequest, "Last-Event-ID must be a log sequence (a number ≥ 0)", nil)
	}
	return n, nil
}

// sseStream writes events, each under a write deadline, and flushes after each, except while
// hold is set: then writes stay in the response's buffer until flush sends them at once.
type sseStream struct {
	w    io.Writer
	rc   *http.ResponseController
	last int64 // the sequence of the last entry sent
	hold bool  // set while a batch of queued events is written; flush ends it
}

func (st *sseStream) entry(e store.Entry) error {
	data, err := json.Marshal(entryJSON{Seq: e.Seq, Type: e.Type, ToolCallID: e.ToolCallID, Actor: e.Actor, Data: e.Data, CreatedAt: e.CreatedAt})
	if err != nil {
		return fmt.Errorf("encode entry %d: %w", e.Seq, err)
	}
	if err := st.event(strconv.FormatInt(e.Seq, 10), "entry", data); err != nil {
		return err
	}
	st.last = e.Seq
	return nil
}

// carried writes the entries an agent event carried that continue the stream: those already
// sent are skipped, and at the first gap it stops (the caller reads the rest from the store).
func (st *sseStream) carried(entries []store.Entry) error {
	for _, e := range entries {
		if e.Seq <= st.last {
			continue
		}
		if e.Seq != st.last+1 {
			return nil
		}
		if err := st.entry(e); err != nil {
			return err
		}
	}
	return nil
}

// event writes one event; data is one line of JSON (json.Marshal never emits a newline).
func (st *sseStream) event(id, name string, data []byte) error {
	var b strings.Builder
	if id != "" {
		b.WriteString("id: " + id + "\n")
	}
	b.WriteString("event: " + name + "\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	return st.write(b.String())
}

func (st *sseStream) comment(text string) error { return st.write(": " + text + "\n\n") }

func (st *sseStream) write(s string) error {
	// Deadlines are best effort: a writer that cannot take one (a test recorder) still works.
	_ = st.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	if _, err := io.WriteString(st.w, s); err != nil {
		return err
	}
	if st.hold {
		return nil
	}
	return st.rc.Flush()
}

// flush sends what the writes made while hold was set left in the response's buffer.
func (st *sseStream) flush() error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
	return st.rc.Flush()
}
