package web

import (
	"strings"
	"testing"

	"parley/internal/agent"
)

// TestCoalesceDeltas: waiting deltas merge into one in order; the first other event stops the
// merge and is handed back; a closed channel is reported; nothing waiting adds nothing; the
// merged text is bounded.
func TestCoalesceDeltas(t *testing.T) {
	delta := func(s string) agent.Event {
		return agent.Event{Type: agent.EventTextDelta, Text: s, ConversationID: "c"}
	}
	t.Run("merge until another event", func(t *testing.T) {
		c := make(chan agent.Event, 8)
		c <- delta("lo ")
		c <- delta("world")
		c <- agent.Event{Type: agent.EventStatus, Status: "idle"}
		c <- delta("after")
		got, next, ok := coalesceDeltas(delta("hel"), c)
		if !ok || got.Text != "hello world" || got.Type != agent.EventTextDelta || got.ConversationID != "c" {
			t.Fatalf("merged %+v ok=%v", got, ok)
		}
		if next == nil || next.Type != agent.EventStatus {
			t.Fatalf("next %+v, want the status event", next)
		}
		if len(c) != 1 {
			t.Fatalf("%d events left, want the delta after the status", len(c))
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
		c := make(chan agent.Event, 2)
		c <- delta("y")
		close(c)
		got, next, ok := coalesceDeltas(delta("x"), c)
		if ok || next != nil || got.Text != "xy" {
			t.Fatalf("%+v %v %v", got, next, ok)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		c := make(chan agent.Event, 64)
		big := strings.Repeat("a", 1<<10)
		for i := 0; i < 40; i++ {
			c <- delta(big)
		}
		got, _, ok := coalesceDeltas(delta(big), c)
		if !ok || len(got.Text) < maxCoalesced || len(got.Text) > maxCoalesced+len(big) || len(c) == 0 {
			t.Fatalf("merged %d bytes, %d left", len(got.Text), len(c))
		}
	})
}
