package cluster

import (
	"encoding/json"
	"strings"
	"testing"

	"parley/internal/agent"
	"parley/internal/store"
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
		if len(m.Body) > maxPack && m.T == "evs" {
			t.Fatalf("a pack of %d bytes, over %d", len(m.Body), maxPack)
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
	out := packReplies(msgs, []packedReply{rep(1, 10), rep(2, 10)})
	if len(out) != 1 || out[0].T != "evs" || len(out[0].Reps) != 2 || out[0].Reps[0].ID != 1 {
		t.Fatalf("small replies with one event: %+v", out)
	}
	// Replies alone, or too many to fit beside the events.
	if out := packReplies(nil, []packedReply{rep(1, 10)}); len(out) != 1 || out[0].T != "reps" {
		t.Fatalf("a reply without events: %+v", out)
	}
	var many []packedReply
	for i := range 20 {
		many = append(many, rep(uint64(i+1), maxPackedReply-100))
	}
	out = packReplies(n.encode([]agent.Event{{ConversationID: "x", Seq: 1, Type: agent.EventMessage}}), many)
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
