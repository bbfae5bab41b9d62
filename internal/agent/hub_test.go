package agent

import (
	"testing"
	"time"
)

// TestHubBacklog: a subscriber that falls behind past its channel's room still gets every event
// in order up to its bound (the backlog, drained while it lags); past the bound it gets
// EventResync last and is closed; one that leaves while a backlog waits stops its drainer
// (goleak in TestMain checks that no drainer is left).
func TestHubBacklog(t *testing.T) {
	const size = 3 * directSlots
	h := NewHub(size)
	publish := func(n int) {
		for i := range n {
			h.Publish(Event{ConversationID: "c", Seq: int64(i + 1), Type: EventStatus})
		}
	}
	read := func(s *Subscription) []Event {
		var got []Event
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev, ok := <-s.C:
				if !ok {
					return got
				}
				got = append(got, ev)
			case <-timeout:
				t.Fatalf("channel not closed after %d events", len(got))
			}
		}
	}

	within := h.Subscribe("c")
	publish(size)
	h.Resync("c") // ends it: the events, then the resync, then the close
	got := read(within)
	if len(got) != size+1 || got[size].Type != EventResync {
		t.Fatalf("within the bound: %d events, last %+v; want %d then a resync", len(got), got[len(got)-1], size)
	}
	for i, ev := range got[:size] {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: out of order", i, ev.Seq)
		}
	}

	over := h.Subscribe("c")
	publish(size + 5)
	got = read(over)
	if len(got) != size+1 || got[size].Type != EventResync || h.Dropped() != 1 {
		t.Fatalf("past the bound: %d events, last %+v, dropped %d; want %d then a resync", len(got), got[len(got)-1], h.Dropped(), size)
	}

	left := h.Subscribe("c")
	publish(2 * directSlots)
	left.Close() // a drainer is blocked on the full channel; it must end
	lagging := h.Subscribe("c")
	publish(2 * directSlots)
	h.Close() // shutdown ends a lagging subscriber's drainer too
	if got := read(lagging); len(got) == 0 || len(got) > 2*directSlots {
		t.Fatalf("after Close: %d events", len(got))
	}
}

// TestHubFollows: whether an event of some conversations would reach anyone, as subscriptions
// come and go — those conversations' or every conversation's.
func TestHubFollows(t *testing.T) {
	h := NewHub(8)
	if h.Follows([]string{"a", "b"}) {
		t.Fatal("an empty hub follows a and b")
	}
	sa := h.Subscribe("a")
	if !h.Follows([]string{"b", "a"}) || h.Follows([]string{"b"}) || h.Follows(nil) {
		t.Fatal("with a subscriber of a: want a followed, b not")
	}
	all := h.Subscribe("")
	if !h.Follows([]string{"b"}) || !h.Follows(nil) {
		t.Fatal("with a subscriber of every conversation: want b followed")
	}
	all.Close()
	sa.Close()
	if h.Follows([]string{"a", "b"}) {
		t.Fatal("after every subscriber left: a or b still followed")
	}
}

// TestHubResyncReachesGlobal: events of a conversation lost on the way reach neither its
// subscribers nor those of every conversation, so a resync of it ends both; the subscribers of
// other conversations keep going.
func TestHubResyncReachesGlobal(t *testing.T) {
	h := NewHub(8)
	a, b, all := h.Subscribe("a"), h.Subscribe("b"), h.Subscribe("")
	defer b.Close()
	h.Resync("a")
	for name, s := range map[string]*Subscription{"a's": a, "every conversation's": all} {
		e, ok := <-s.C
		if !ok || e.Type != EventResync {
			t.Fatalf("%s subscriber got %+v, %v; want a resync", name, e, ok)
		}
		if _, ok := <-s.C; ok {
			t.Fatalf("%s subscriber still open after its resync", name)
		}
	}
	h.Publish(Event{ConversationID: "b", Type: EventStatus})
	if e := <-b.C; e.Type != EventStatus {
		t.Fatalf("b's subscriber got %+v, want its event", e)
	}
}
