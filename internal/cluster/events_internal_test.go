package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
)

func TestHoldDeltas(t *testing.T) {
	delta := func(conv string, seq int64, offset int, text string) agent.Event {
		return agent.Event{ConversationID: conv, Seq: seq, Type: agent.EventTextDelta, Text: text, Offset: offset}
	}
	held := map[string]agent.Event{}
	out := holdDeltas([]agent.Event{delta("x", 3, 0, "Hel"), delta("y", 1, 0, "Bon"), delta("x", 3, 3, "lo")}, held)
	if len(out) != 0 || held["x"].Text != "Hello" || held["x"].Offset != 0 || held["y"].Text != "Bon" {
		t.Fatalf("deltas only: out %v, held %v", out, held)
	}
	// Another event of x sends x's text first; y's stays held.
	out = holdDeltas([]agent.Event{{ConversationID: "x", Seq: 4, Type: agent.EventMessage}}, held)
	if len(out) != 2 || out[0].Text != "Hello" || out[1].Type != agent.EventMessage || len(held) != 1 || held["y"].Text != "Bon" {
		t.Fatalf("message of x: out %v, held %v", out, held)
	}
	// A delta of a new sequence, one that does not continue the held text, or one past
	// deltaMerge, sends what was held.
	out = holdDeltas([]agent.Event{delta("y", 2, 0, "jour")}, held)
	if len(out) != 1 || out[0].Text != "Bon" || held["y"].Text != "jour" {
		t.Fatalf("new sequence: out %v, held %v", out, held)
	}
	out = holdDeltas([]agent.Event{delta("y", 2, 0, "jour")}, held)
	if len(out) != 1 || out[0].Text != "jour" || held["y"].Text != "jour" || held["y"].Offset != 0 {
		t.Fatalf("not continuing: out %v, held %v", out, held)
	}
	big := strings.Repeat("a", deltaMerge)
	out = holdDeltas([]agent.Event{delta("y", 2, 4, big)}, held)
	if len(out) != 1 || out[0].Text != "jour" || held["y"].Text != big || held["y"].Offset != 4 {
		t.Fatalf("past deltaMerge: out %d events, held %d bytes", len(out), len(held["y"].Text))
	}
}

// Events sent together are packed into few notifications, in order, each under the payload
// bound; one too large goes alone (without its entries when they are what makes it large).
func TestEncodePacksEvents(t *testing.T) {
	n := New(Config{})
	var events []agent.Event
	for i := range 60 {
		conv := "x"
		if i%3 == 0 {
			conv = "y"
		}
		events = append(events, agent.Event{ConversationID: conv, Seq: int64(i), Type: agent.EventMessage, Text: strings.Repeat("t", 200)})
	}
	big := agent.Event{ConversationID: "x", Seq: 60, Type: agent.EventMessage,
		Entries: []store.Entry{{Seq: 60, Data: json.RawMessage(`"` + strings.Repeat("e", 2*maxPayload) + `"`)}}}
	events = append(events, big, agent.Event{ConversationID: "y", Seq: 61, Type: agent.EventStatus, Status: store.StatusIdle})
	msgs := n.encode(events)
	if len(msgs) > 6 {
		t.Fatalf("%d events went as %d notifications: not packed", len(events), len(msgs))
	}
	var got []agent.Event
	for _, m := range msgs {
		if m.T == "evs" && len(m.Body)+convsSize(m.Convs) > maxPack {
			t.Fatalf("a pack of %d bytes and %d conversations, over %d", len(m.Body), len(m.Convs), maxPack)
		}
		if p, err := json.Marshal(m); err != nil || len(p) > maxPayload {
			t.Fatalf("a notification of %d bytes (%v), over %d", len(p), err, maxPayload)
		}
		var ws []wireEvent
		switch m.T {
		case "evs":
			if err := json.Unmarshal(m.Body, &ws); err != nil {
				t.Fatal(err)
			}
		case "ev":
			ws = make([]wireEvent, 1)
			if err := json.Unmarshal(m.Body, &ws[0]); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected message %q", m.T)
		}
		// The message names its events' conversations, so a receiver can skip them undecoded.
		var convs []string
		for _, w := range ws {
			if !slices.Contains(convs, w.ConversationID) {
				convs = append(convs, w.ConversationID)
			}
		}
		switch {
		case len(convs) == 1 && (m.Conv != convs[0] || m.Convs != nil):
			t.Fatalf("%s of %v named conv %q and convs %v", m.T, convs, m.Conv, m.Convs)
		case len(convs) > 1 && (m.Conv != "" || !slices.Equal(m.Convs, convs)):
			t.Fatalf("%s of %v named conv %q and convs %v", m.T, convs, m.Conv, m.Convs)
		}
		for _, w := range ws {
			e := w.Event
			e.Entries = w.Entries
			got = append(got, e)
		}
	}
	if len(got) != len(events) {
		t.Fatalf("%d events out, %d in", len(got), len(events))
	}
	for i := range got {
		if got[i].Seq != events[i].Seq || got[i].ConversationID != events[i].ConversationID || got[i].Text != events[i].Text {
			t.Fatalf("event %d = %+v, want %+v", i, got[i], events[i])
		}
	}
	if got[60].Entries != nil {
		t.Fatal("the oversized event kept its entries")
	}
}

// Replies ride in the last packed events while they fit, after them; the rest go in reps
// messages of their own, each under the payload bound.
func TestPackRepliesAfterEvents(t *testing.T) {
	n := New(Config{})
	msgs := n.encode([]agent.Event{{ConversationID: "x", Seq: 1, Type: agent.EventMessage, Text: "hi"}})
	rep := func(id uint64, size int) packedReply {
		return packedReply{To: "b", ID: id, Body: json.RawMessage(`"` + strings.Repeat("r", size) + `"`)}
	}
	out, packed := packReplies(msgs, []packedReply{rep(1, 10), rep(2, 10)})
	if packed != 2 || len(out) != 1 || out[0].T != "evs" || len(out[0].Reps) != 2 || out[0].Reps[0].ID != 1 {
		t.Fatalf("small replies with one event: %+v", out)
	}
	// Replies alone, or too many to fit beside the events.
	if out, packed := packReplies(nil, []packedReply{rep(1, 10)}); packed != 0 || len(out) != 1 || out[0].T != "reps" {
		t.Fatalf("a reply without events: %+v", out)
	}
	var many []packedReply
	for i := range 20 {
		many = append(many, rep(uint64(i+1), maxPackedReply-100))
	}
	out, _ = packReplies(n.encode([]agent.Event{{ConversationID: "x", Seq: 1, Type: agent.EventMessage}}), many)
	got := 0
	for _, m := range out {
		got += len(m.Reps)
		plain, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if len(plain) > maxPayload {
			t.Errorf("a %s message of %d bytes is over the payload bound %d", m.T, len(plain), maxPayload)
		}
	}
	if got != len(many) || len(out) < 2 {
		t.Fatalf("%d replies in %d messages, want %d in several", got, len(out), len(many))
	}
	if out[0].T != "evs" || out[0].Reps[0].ID != 1 || out[len(out)-1].Reps[len(out[len(out)-1].Reps)-1].ID != 20 {
		t.Fatalf("order: %+v", out)
	}
}

// twoNodes starts b on a fresh database and makes a, a node of the same cluster whose sender
// the test runs by hand.
func twoNodes(t *testing.T) (a, b *Node, cleanup func()) {
	key := NewKey()
	return twoNodesKeyed(t, Config{Key: key}, Config{Key: key})
}

// twoNodesKeyed is twoNodes with a's and b's keys (Key and PreviousKey) as given.
func twoNodesKeyed(t *testing.T, aKeys, bKeys Config) (a, b *Node, cleanup func()) {
	url := pgtest.NewURL(t)
	st, err := pgstore.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	b = New(Config{Pool: st.Pool(), TTL: 1500 * time.Millisecond, SubscriberBuffer: 4096, Key: bKeys.Key, PreviousKey: bKeys.PreviousKey})
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// a: its own pool and no goroutines: the test runs its sender itself.
	a = New(Config{Pool: st.Pool(), TTL: 1500 * time.Millisecond, Key: aKeys.Key, PreviousKey: aKeys.PreviousKey})
	pool, err := pgxpool.NewWithConfig(context.Background(), st.Pool().Config())
	if err != nil {
		t.Fatal(err)
	}
	a.pool = pool
	return a, b, func() { a.cancel(); pool.Close(); _ = b.Leave(context.Background()); _ = st.Close() }
}

// Replies still queued when the node closes are sent alone, whichever of the closing and the
// queued replies the sender sees first.
func TestRepliesQueuedAtShutdownAreSent(t *testing.T) {
	lostTrials := 0
	const trials = 10
	for trial := 0; trial < trials; trial++ {
		a, b, cleanup := twoNodes(t)
		const k = 5
		chans := make([]chan message, k)
		for i := range k {
			chans[i] = make(chan message, 1)
			b.waitMu.Lock()
			b.waiting[uint64(i+1)] = waiter{node: a.id, c: chans[i]}
			b.waitMu.Unlock()
			if !a.packReply(packedReply{To: b.id, ID: uint64(i + 1), Body: json.RawMessage(`{"ok":true}`)}) {
				t.Fatal("not packed")
			}
		}
		a.cancel() // Leave: the node closes with the replies queued
		a.wg.Add(1)
		a.send()
		got := 0
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, c := range chans {
			select {
			case <-c:
				got++
			case <-dctx.Done():
			}
		}
		dcancel()
		if got < k {
			lostTrials++
		}
		t.Logf("trial %d: %d of %d replies delivered", trial, got, k)
		cleanup()
	}
	if lostTrials > 0 {
		t.Errorf("replies lost at shutdown in %d of %d trials", lostTrials, trials)
	}
}

// A reply does not reach its caller before the events queued before it, even when they are
// more than one batch.
func TestReplyFollowsTheEventsQueuedBeforeIt(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	var seen atomic.Int64
	b.Serve(agent.Inbound{Owned: func(conv, from string) { seen.Add(1) }})
	const events = 300
	a.peers.Store(1)
	for i := range events {
		a.Publish(agent.Event{ConversationID: fmt.Sprintf("c%d", i), Seq: 1, Type: agent.EventMessage, Text: "hi"})
	}
	rep := make(chan message, 1)
	b.waitMu.Lock()
	b.waiting[7] = waiter{node: a.id, c: rep}
	b.waitMu.Unlock()
	if !a.packReply(packedReply{To: b.id, ID: 7, Body: json.RawMessage(`{"ok":true}`)}) {
		t.Fatal("not packed")
	}
	a.wg.Add(1)
	go a.send()
	select {
	case <-rep:
		if n := seen.Load(); n < events {
			t.Errorf("the reply arrived after %d of the %d events queued before it", n, events)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no reply")
	}
	a.cancel()
	a.wg.Wait()
}

// TestOwnBroadcast pins the head a node reads to skip its own broadcasts undecoded: every
// message it sends but its ping, and nothing another node sent.
func TestOwnBroadcast(t *testing.T) {
	const id = "0123456789abcdef"
	enc := func(m message) []byte {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name  string
		plain []byte
		own   bool
	}{
		{"events", enc(message{T: "evs", From: id, N: 7, Body: json.RawMessage(`[{"x":1}]`)}), true},
		{"request", enc(message{T: "req", From: id, N: 1, ID: 3, Body: json.RawMessage(`{}`), Pack: true}), true},
		{"ping", enc(message{T: "ping", From: id, N: 9}), false},
		{"another node", enc(message{T: "evs", From: "fedcba9876543210", N: 7}), false},
		{"a longer id", enc(message{T: "evs", From: id + "00", N: 7}), false},
		{"a shorter id", enc(message{T: "evs", From: id[:8], N: 7}), false},
		{"no sender", enc(message{T: "resync"}), false},
		{"not a message", []byte(`["evs"]`), false},
		{"cut short", []byte(`{"t":"evs","from":"` + id), false},
	} {
		if got := ownBroadcast(tc.plain, id); got != tc.own {
			t.Errorf("%s: ownBroadcast(%s) = %v, want %v", tc.name, tc.plain, got, tc.own)
		}
	}
}

// TestPackNamesManyConversations: events of many conversations with long names still go in
// notifications under the payload bound once their names are counted.
func TestPackNamesManyConversations(t *testing.T) {
	n := New(Config{})
	var events []agent.Event
	for i := range 200 {
		conv := fmt.Sprintf("%036d", i)
		events = append(events, agent.Event{ConversationID: conv, Seq: int64(i), Type: agent.EventStatus, Status: store.StatusIdle})
	}
	msgs := n.encode(events)
	seen := 0
	for _, m := range msgs {
		p, err := json.Marshal(m)
		if err != nil || len(p) > maxPayload {
			t.Fatalf("a notification of %d bytes (%v), over %d", len(p), err, maxPayload)
		}
		var ws []wireEvent
		if err := json.Unmarshal(m.Body, &ws); err != nil {
			t.Fatal(err)
		}
		for i, w := range ws {
			if m.Convs[i] != w.ConversationID {
				t.Fatalf("convs[%d] = %q, event of %q", i, m.Convs[i], w.ConversationID)
			}
		}
		seen += len(ws)
	}
	if seen != len(events) || len(msgs) < 2 {
		t.Fatalf("%d events in %d notifications, want %d in several", seen, len(msgs), len(events))
	}
}

// TestLostEventsResyncTheirFollowers: a pack of events that cannot be decoded resyncs the
// subscribers of the conversations it names and those of every conversation, not the others.
func TestLostEventsResyncTheirFollowers(t *testing.T) {
	n := New(Config{})
	a, c, all := n.hub.Subscribe("a"), n.hub.Subscribe("c"), n.hub.Subscribe("")
	defer c.Close()
	n.receiveEvents(message{T: "evs", From: "other", Convs: []string{"a", "b"}, Body: json.RawMessage(`[{"conversation_id":1}]`)}, nil)
	for name, s := range map[string]*agent.Subscription{"a's": a, "every conversation's": all} {
		if e, ok := <-s.C; !ok || e.Type != agent.EventResync {
			t.Fatalf("%s subscriber got %+v, %v; want a resync", name, e, ok)
		}
	}
	select {
	case e := <-c.C:
		t.Fatalf("c's subscriber got %+v from a pack of a's and b's events", e)
	default:
	}
}

// TestUnnamedPackIsDecoded: an older sender's pack names no conversations; it is decoded, so
// a subscriber of one of them gets its events even though nobody follows every conversation.
func TestUnnamedPackIsDecoded(t *testing.T) {
	n := New(Config{})
	b := n.hub.Subscribe("b")
	defer b.Close()
	body, err := json.Marshal([]wireEvent{{Event: agent.Event{ConversationID: "a", Seq: 1, Type: agent.EventStatus}},
		{Event: agent.Event{ConversationID: "b", Seq: 2, Type: agent.EventStatus}}})
	if err != nil {
		t.Fatal(err)
	}
	n.receiveEvents(message{T: "evs", From: "older", Body: body}, nil)
	select {
	case e := <-b.C:
		if e.ConversationID != "b" || e.Seq != 2 {
			t.Fatalf("b's subscriber got %+v", e)
		}
	default:
		t.Fatal("b's subscriber got nothing from an unnamed pack")
	}
}

// TestPackedRepliesCountTheNames: a reply rides with packed events only while the events, the
// names of their conversations and the replies fit under the bound.
func TestPackedRepliesCountTheNames(t *testing.T) {
	var convs []string
	for i := range 40 {
		convs = append(convs, fmt.Sprintf("%036d", i))
	}
	msgs := []message{{T: "evs", Convs: convs, Body: json.RawMessage(`["` + strings.Repeat("e", 3300) + `"]`)}}
	reps := []packedReply{{To: "0123456789abcdef", ID: 1, Body: json.RawMessage(`"` + strings.Repeat("r", 900) + `"`)}}
	out, _ := packReplies(msgs, reps)
	for _, m := range out {
		m.From, m.N = "0123456789abcdef", math.MaxUint64
		if p, err := json.Marshal(m); err != nil || len(p) > maxPayload {
			t.Fatalf("a %s notification of %d bytes (%v), over %d", m.T, len(p), err, maxPayload)
		}
	}
}

// spy is a session of some database role that LISTENs on a channel and records the payloads.
type spy struct {
	conn *pgx.Conn
}

func newSpy(t *testing.T, cfg *pgx.ConnConfig, channels ...string) *spy {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, ch := range channels {
		if _, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	return &spy{conn: conn}
}

// next returns the next payload heard on channel (others are skipped).
func (s *spy) next(t *testing.T, channel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		n, err := s.conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("spy heard nothing on %s: %v", channel, err)
		}
		if n.Channel == channel {
			return n.Payload
		}
	}
}

func (s *spy) replay(t *testing.T, channel, payload string) {
	t.Helper()
	if _, err := s.conn.Exec(context.Background(), `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		t.Fatal(err)
	}
}

func waitFor(cond func() bool, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// A sealed request heard on the owner's channel and notified again is refused: the owner
// remembers (From, N) of what it heard (found by an attack: it was served again, and a
// forwarded post was posted twice).
func TestReplayedRequestIsNotServedAgain(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	var served atomic.Int64
	b.Serve(agent.Inbound{Forward: func(ctx context.Context, body []byte) []byte {
		served.Add(1)
		return []byte(`{"posted":{}}`)
	}})
	ch := nodeChannel(b.id)
	s := newSpy(t, a.pool.Config().ConnConfig, ch)
	req := message{T: "req", ID: 1, Pack: true, Body: json.RawMessage(`{"conv":"c","kind":"post","text":"transfer $100"}`)}
	if err := a.notify(context.Background(), ch, req); err != nil {
		t.Fatal(err)
	}
	captured := s.next(t, ch)
	if !waitFor(func() bool { return served.Load() == 1 }, 3*time.Second) {
		t.Fatalf("served %d, want 1", served.Load())
	}
	s.replay(t, ch, captured)
	s.replay(t, ch, captured)
	// Both replays heard (refused: counted), or one of them served: either way the outcome is in.
	if !waitFor(func() bool { return b.Stats().Replays >= 2 || served.Load() > 1 }, 3*time.Second) {
		t.Fatalf("the two replays were neither refused nor served within 3 s (%d refused)", b.Stats().Replays)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("one forwarded request, replayed twice from the channel, was served %d times", n)
	}
}

// An old sealed reply to another node's request 1, notified on a new process's channel while
// its own request 1 waits, answers nothing: it was sealed for another channel, and it does not
// come from the node the request went to (found by an attack: it answered with someone else's
// view).
func TestReplayedReplyAnswersNoOtherRequest(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	oldNode := nodeChannel("00000000deadbeef")
	s := newSpy(t, a.pool.Config().ConnConfig, oldNode)
	// An old direct reply (a large view goes alone, not packed) to request 1 of another node.
	secret := json.RawMessage(`{"view":{"ID":"ann-private","Messages":[{"Text":"ann's secret"}]}}`)
	if err := a.notify(context.Background(), oldNode, message{T: "rep", ID: 1, Body: secret}); err != nil {
		t.Fatal(err)
	}
	captured := s.next(t, oldNode)

	// b's first forwarded request (id 1), for rita's conversation, to a node that is slow to
	// answer: a hears nothing, and its row says it is alive, so b waits for the reply until ctx
	// ends rather than finding a gone after TTL/3.
	if _, err := a.pool.Exec(context.Background(), `INSERT INTO cluster_nodes (id, host, heartbeat_at) VALUES ($1, 'test', now() + interval '1 hour')`, a.id); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		out, _ := b.Forward(ctx, a.id, []byte(`{"conv":"rita-conv","kind":"view"}`))
		got <- out
	}()
	if !waitFor(func() bool { b.waitMu.Lock(); defer b.waitMu.Unlock(); _, ok := b.waiting[1]; return ok }, 2*time.Second) {
		cancel()
		<-got
		t.Fatal("b's request 1 was not waiting for its reply within 2 s: the replay would answer nothing anyway")
	}
	s.replay(t, nodeChannel(b.id), captured)
	// The listener heard the replay when it refused it, or when it answered the request with it.
	if !waitFor(func() bool { return b.Stats().Replays >= 1 || len(got) > 0 }, 3*time.Second) {
		t.Fatal("b's listener neither refused the replayed reply nor answered with it within 3 s")
	}
	if len(got) == 0 {
		// Refused while the request still waited (nothing else ends it before ctx): it answered nothing.
		cancel()
	}
	if out := <-got; strings.Contains(string(out), "ann's secret") {
		t.Errorf("b's request for rita's conversation was answered with a replayed reply meant for another node: %s", out)
	} else if ctx.Err() == nil {
		t.Errorf("b's request ended (%q) before the replay was heard: nothing was tested", out)
	}
}

// Another database role — without the cluster's key — can LISTEN on the well-known events
// channel and notify what it hears again: a replayed resync or departure is refused (found by
// an attack: each replay made every page reload, or every process scan for orphans).
func TestAnotherRoleCannotReplayBroadcasts(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	role := fmt.Sprintf("mallory_%d", time.Now().UnixNano())
	if _, err := a.pool.Exec(context.Background(), `CREATE ROLE `+role+` LOGIN`); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = a.pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) }()
	cfg := a.pool.Config().ConnConfig.Copy()
	cfg.User = role
	s := newSpy(t, cfg, eventsChannel)
	var rescans atomic.Int64
	b.Serve(agent.Inbound{Rescan: func(string) { rescans.Add(1) }})
	first := b.Subscribe("c1")
	a.broadcast(context.Background(), message{T: "resync"})
	resync := s.next(t, eventsChannel)
	if e := <-first.C; e.Type != agent.EventResync {
		t.Fatalf("the resync itself: got %+v", e)
	}
	a.broadcast(context.Background(), message{T: "left"})
	left := s.next(t, eventsChannel)
	if !waitFor(func() bool { return rescans.Load() == 1 }, 3*time.Second) {
		t.Fatal("the departure itself asked no scan")
	}

	sub := b.Subscribe("c1")
	defer sub.Close()
	for range 5 {
		s.replay(t, eventsChannel, resync)
	}
	for range 50 {
		s.replay(t, eventsChannel, left)
	}
	if !waitFor(func() bool { return b.Stats().Replays >= 55 }, 5*time.Second) {
		t.Fatalf("%d of 55 replays refused", b.Stats().Replays)
	}
	select {
	case e := <-sub.C:
		t.Errorf("role %s (no key) replayed a sealed resync: the page got %+v", role, e)
	default:
	}
	if n := rescans.Load(); n != 1 {
		t.Errorf("role %s replayed a sealed departure 50 times: %d orphan scans, want 1", role, n)
	}
}

// TestReplayGuard: what a listener refuses — another channel, sent before it listened (less
// listenSkew), much older than its sender's latest, heard before, too far behind its sender's
// latest — and what it takes: the first hearing, out of order within the window, and a sender
// whose clock is far from the listener's (found by a review: a fixed age against the
// listener's clock refused every notification of a sender 31 s behind).
func TestReplayGuard(t *testing.T) {
	now := time.Date(2026, 11, 24, 23, 0, 0, 0, time.UTC)
	listened := now.Add(-time.Hour).UnixMilli()
	msg := func(from string, n uint64, at time.Time) message {
		return message{T: "evs", From: from, N: n, Ch: eventsChannel, At: at.UnixMilli()}
	}
	var g replayGuard
	for _, tc := range []struct {
		name  string
		ch    string
		msg   message
		fresh bool
	}{
		{"first", eventsChannel, msg("x", 10, now), true},
		{"again", eventsChannel, msg("x", 10, now), false},
		{"next", eventsChannel, msg("x", 12, now), true},
		{"late, within the window", eventsChannel, msg("x", 11, now), true},
		{"late, again", eventsChannel, msg("x", 11, now), false},
		{"on another channel", nodeChannel("y"), msg("x", 13, now), false},
		{"an earlier number, much older than the sender's latest", eventsChannel, msg("x", 9, now.Add(-maxAge-time.Second)), false},
		{"an earlier number, a little older", eventsChannel, msg("x", 8, now.Add(-time.Second)), true},
		{"a little older than the sender's latest", eventsChannel, msg("x", 15, now.Add(-time.Second)), true},
		{"before the listener listened", eventsChannel, msg("x", 16, time.UnixMilli(listened).Add(-listenSkew-time.Second)), false},
		{"far ahead", eventsChannel, msg("x", 10+replayWindow+5, now), true},
		{"behind the window", eventsChannel, msg("x", 12, now), false},
		{"another sender, same number", eventsChannel, msg("z", 10, now), true},
		{"a sender whose clock is 31 s behind", eventsChannel, msg("slow", 1, now.Add(-31*time.Second)), true},
		{"and its next", eventsChannel, msg("slow", 2, now.Add(-30*time.Second)), true},
		{"a sender whose clock stepped back 2 min", eventsChannel, msg("slow", 3, now.Add(-150*time.Second)), true},
		{"and its next", eventsChannel, msg("slow", 4, now.Add(-149*time.Second)), true},
		{"a late one from before the step, much newer than the sender now says", eventsChannel, msg("slow", 3, now), false},
		{"older than maxStale by the listener's clock", eventsChannel, msg("old", 1, now.Add(-maxStale-time.Second)), false},
	} {
		if got := g.fresh(tc.ch, tc.msg, now, listened); got != tc.fresh {
			t.Errorf("%s: fresh = %v, want %v", tc.name, got, tc.fresh)
		}
	}
	// The senders remembered are bounded: past maxSenders, those quiet for maxAge are forgotten,
	// and while all of them spoke lately a new one is refused.
	g = replayGuard{}
	for i := range maxSenders {
		g.fresh(eventsChannel, msg(fmt.Sprint(i), 1, now), now, listened)
	}
	if g.fresh(eventsChannel, msg("new", 1, now), now, listened) {
		t.Error("a sender past the bound was taken while every other spoke lately")
	}
	later := now.Add(maxAge + time.Second)
	if !g.fresh(eventsChannel, msg("new", 1, later), later, listened) || len(g.senders) != 1 {
		t.Errorf("after the others went quiet: %d senders remembered, want only the new one", len(g.senders))
	}
}

// TestRepliesAreSentWhileTheQueueStaysFull: a reply goes with the batch that holds the last
// event queued before it, even while every batch is full (found by an attack: the reply waited
// for a batch that was not full, which never came while events kept coming; the caller's
// forward timed out though its request was done).
func TestRepliesAreSentWhileTheQueueStaysFull(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	a.peers.Store(1)
	stop := make(chan struct{})
	flooded := make(chan struct{})
	go func() {
		defer close(flooded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a.Publish(agent.Event{ConversationID: fmt.Sprintf("c%d", i%50), Seq: int64(i), Type: agent.EventMessage, Text: "hi"})
		}
	}()
	defer func() { close(stop); <-flooded }()
	if !waitFor(func() bool { return len(a.out) == outQueue }, 2*time.Second) {
		t.Fatalf("the event queue did not fill within 2 s (%d of %d): the reply would not wait behind full batches", len(a.out), outQueue)
	}
	rep := make(chan message, 1)
	b.waitMu.Lock()
	b.waiting[7] = waiter{node: a.id, c: rep}
	b.waitMu.Unlock()
	sent := a.stats.notifications.Load()
	a.wg.Add(1)
	go a.send()
	// The sender is taking full batches when the reply is queued.
	if !waitFor(func() bool { return a.stats.notifications.Load() > sent }, 2*time.Second) {
		t.Fatal("the sender sent nothing within 2 s")
	}
	packed := a.stats.packed.Load()
	if !a.packReply(packedReply{To: b.id, ID: 7, Body: json.RawMessage(`{"posted":{}}`)}) {
		t.Fatal("not packed")
	}
	// The reply is due once the sender took the events queued before it (at most due): it goes
	// with that batch, so by the time the sender took two batches more it was sent.
	due := a.queued.Load()
	taken := func() int64 { return a.queued.Load() - int64(len(a.out)) }
	stalled := time.Now().Add(30 * time.Second)
	for a.stats.packed.Load() == packed {
		if n := taken(); n > due+2*sendBatch {
			t.Fatalf("the sender took %d events past the reply's while the queue stayed full, and the reply was not sent", n-due)
		}
		if time.Now().After(stalled) {
			t.Fatalf("the sender took %d events in 30 s and sent no reply", taken()-due)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-rep:
	case <-time.After(30 * time.Second):
		t.Errorf("a packed reply, sent, did not reach b within 30 s (%d notifications sent)", a.stats.notifications.Load())
	}
	a.cancel()
	a.wg.Wait()
}

// TestListenerHearsWhileServingIsFull: with maxServing requests in service, one more is
// answered busy and the listener goes on hearing — here a reply to this node's own request
// (found by an attack: the listener waited for a free slot, so no reply, event or ping got
// through until a request finished).
func TestListenerHearsWhileServingIsFull(t *testing.T) {
	a, b, cleanup := twoNodes(t)
	defer cleanup()
	release := make(chan struct{})
	defer close(release)
	b.Serve(agent.Inbound{Forward: func(ctx context.Context, body []byte) []byte {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return []byte(`{}`)
	}})
	for i := range maxServing {
		if err := a.notify(context.Background(), nodeChannel(b.id), message{T: "req", ID: uint64(i + 1), Body: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if !waitFor(func() bool { return len(b.serving) == maxServing }, 5*time.Second) {
		t.Fatalf("%d requests in service, want %d", len(b.serving), maxServing)
	}
	// One more is answered busy at once, on a's channel.
	s := newSpy(t, a.pool.Config().ConnConfig, nodeChannel(a.id))
	if err := a.notify(context.Background(), nodeChannel(b.id), message{T: "req", ID: 9999, Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	plain, err := a.open(s.next(t, nodeChannel(a.id)))
	if err != nil {
		t.Fatal(err)
	}
	var got message
	if err := json.Unmarshal(plain, &got); err != nil || got.T != "rep" || got.ID != 9999 || !strings.Contains(string(got.Body), `"kind":"`+string(fault.KindServiceUnavailable)+`"`) {
		t.Fatalf("the request past the bound got %s (%v), want a busy reply", plain, err)
	}
	// And b still hears: a reply to its own request comes through.
	rep := make(chan message, 1)
	b.waitMu.Lock()
	b.waiting[1<<40] = waiter{node: a.id, c: rep}
	b.waitMu.Unlock()
	if err := a.notify(context.Background(), nodeChannel(b.id), message{T: "rep", ID: 1 << 40, Body: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rep:
	case <-time.After(3 * time.Second):
		t.Fatal("a reply to b's own request was not heard while its serving slots were full")
	}
}

// TestEscapedDeltasFitANotification: text deltas are merged up to deltaMerge bytes as JSON
// writes them, so model text of characters it escapes ('<' takes six bytes) still goes in a
// notification rather than through cluster_mail (found by an attack: 2,048 bytes of '<' made a
// 12,498-byte event, a mail row per merged delta); escapedLen bounds what json.Marshal writes.
func TestEscapedDeltasFitANotification(t *testing.T) {
	for _, text := range []string{"<", "&", "\x01", "\"", "\\", "é", "\u2028", "\xff", "a"} {
		for _, n := range []int{1, 7, 300} {
			s := strings.Repeat(text, n)
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			if got := escapedLen(s); got < len(b)-2 {
				t.Errorf("escapedLen(%q × %d) = %d, json writes %d", text, n, got, len(b)-2)
			}
		}
	}
	n := New(Config{})
	held := map[string]agent.Event{}
	var events []agent.Event
	offset := 0
	for range 400 {
		d := agent.Event{ConversationID: "x", Seq: 3, Type: agent.EventTextDelta, Text: "<<<<<<<<<<", Offset: offset}
		offset += len(d.Text)
		events = append(events, holdDeltas([]agent.Event{d}, held)...)
	}
	events = append(events, held["x"])
	for _, m := range n.encode(events) {
		if m.T != "evs" {
			t.Fatalf("merged deltas of escaped text went as %q (%d bytes), not packed in a notification", m.T, len(m.Body))
		}
	}
}

// TestClosingRepliesAreBoundedTogether: when the database hangs (here: a server that accepts
// the connection and never answers), the replies a closing sender sends alone share one
// deadline, replyTimeout, rather than one each (found by an attack: up to 768 replies of 5 s
// each could hold Leave up for an hour): the first that times out drops the rest.
func TestClosingRepliesAreBoundedTogether(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	pool, err := pgxpool.New(context.Background(), "postgres://parley@"+ln.Addr().String()+"/hang?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	n := New(Config{Key: NewKey()})
	n.pool = pool
	var carried []packedReply
	for i := range 4 {
		carried = append(carried, packedReply{To: "someone", ID: uint64(i + 1), Body: json.RawMessage(`{}`)})
	}
	began := time.Now()
	n.closeReplies(carried)
	if d := time.Since(began); d > replyTimeout+2*time.Second {
		t.Errorf("4 replies to a database that hangs held the closing sender %v, want about %v", d, replyTimeout)
	}
}
