package web

import (
	"strings"
	"testing"

	"parley/internal/agent"
)

// TestCoalesceDeltas: waiting deltas that continue one another merge into one in order; the
// first other event, or a delta that does not continue the text, stops the merge and is handed
// back; a closed channel is reported; nothing waiting adds nothing; the merged text is bounded.
func TestCoalesceDeltas(t *testing.T) {
	at := 0 // the offset of the next delta of answer 7
	delta := func(s string) agent.Event {
		ev := agent.Event{Type: agent.EventTextDelta, Text: s, ConversationID: "c", Seq: 7, Offset: at}
		at += len(s)
		return ev
	}
	t.Run("merge until another event", func(t *testing.T) {
		at = 0
		first := delta("hel")
		c := make(chan agent.Event, 8)
		c <- delta("lo ")
		c <- delta("world")
		c <- agent.Event{Type: agent.EventStatus, Status: "idle"}
		c <- delta("after")
		got, next, ok := coalesceDeltas(first, c)
		if !ok || got.Text != "hello world" || got.Type != agent.EventTextDelta || got.ConversationID != "c" || got.Seq != 7 || got.Offset != 0 {
			t.Fatalf("merged %+v ok=%v", got, ok)
		}
		if next == nil || next.Type != agent.EventStatus {
			t.Fatalf("next %+v, want the status event", next)
		}
		if len(c) != 1 {
			t.Fatalf("%d events left, want the delta after the status", len(c))
		}
	})
	t.Run("merge until a delta that does not continue", func(t *testing.T) {
		c := make(chan agent.Event, 8)
		c <- agent.Event{Type: agent.EventTextDelta, Text: "lo", Seq: 7, Offset: 3}
		c <- agent.Event{Type: agent.EventTextDelta, Text: "New", Seq: 9, Offset: 0} // the next answer
		c <- agent.Event{Type: agent.EventTextDelta, Text: "s", Seq: 9, Offset: 3}
		got, next, ok := coalesceDeltas(agent.Event{Type: agent.EventTextDelta, Text: "Hel", Seq: 7}, c)
		if !ok || got.Text != "Hello" || got.Seq != 7 || next == nil || next.Text != "New" || next.Seq != 9 {
			t.Fatalf("merged %+v, next %+v", got, next)
		}
		c <- agent.Event{Type: agent.EventTextDelta, Text: "lo", Seq: 7, Offset: 0} // repeats text
		if got, next, _ := coalesceDeltas(agent.Event{Type: agent.EventTextDelta, Text: "Hel", Seq: 7}, c); got.Text != "Hel" || next == nil || next.Text != "s" {
			t.Fatalf("merged %+v, next %+v", got, next)
		}
	})
	t.Run("nothing waiting", func(t *testing.T) {
		c := make(chan agent.Event, 1)
		got, next, ok := coalesceDeltas(delta("x"), c)
		if !ok || next != nil || got.Text != "x" {
			t.Fatalf("%+v %v %v", got, next, ok)
		}
	})
	t.Run("closed while draining", func(t *testing.T) {
		at = 0
		first := delta("x")
		c := make(chan agent.Event, 2)
		c <- delta("y")
		close(c)
		got, next, ok := coalesceDeltas(first, c)
		if ok || next != nil || got.Text != "xy" {
			t.Fatalf("%+v %v %v", got, next, ok)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		c := make(chan agent.Event, 64)
		big := strings.Repeat("a", 1<<10)
		at = 0
		first := delta(big)
		for i := 0; i < 40; i++ {
			c <- delta(big)
		}
		got, _, ok := coalesceDeltas(first, c)
		if !ok || len(got.Text) < maxCoalesced || len(got.Text) > maxCoalesced+len(big) || len(c) == 0 {
			t.Fatalf("merged %d bytes, %d left", len(got.Text), len(c))
		}
	})
}
