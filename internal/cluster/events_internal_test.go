package cluster

import (
	"strings"
	"testing"

	"parley/internal/agent"
)

func TestHoldDeltas(t *testing.T) {
	delta := func(conv string, seq int64, text string) agent.Event {
		return agent.Event{ConversationID: conv, Seq: seq, Type: agent.EventTextDelta, Text: text}
	}
	held := map[string]agent.Event{}
	out := holdDeltas([]agent.Event{delta("x", 3, "Hel"), delta("y", 1, "Bon"), delta("x", 3, "lo")}, held)
	if len(out) != 0 || held["x"].Text != "Hello" || held["y"].Text != "Bon" {
		t.Fatalf("deltas only: out %v, held %v", out, held)
	}
	// Another event of x sends x's text first; y's stays held.
	out = holdDeltas([]agent.Event{{ConversationID: "x", Seq: 4, Type: agent.EventMessage}}, held)
	if len(out) != 2 || out[0].Text != "Hello" || out[1].Type != agent.EventMessage || len(held) != 1 || held["y"].Text != "Bon" {
		t.Fatalf("message of x: out %v, held %v", out, held)
	}
	// A delta of a new sequence, or one past deltaMerge, sends what was held.
	out = holdDeltas([]agent.Event{delta("y", 2, "jour")}, held)
	if len(out) != 1 || out[0].Text != "Bon" || held["y"].Text != "jour" {
		t.Fatalf("new sequence: out %v, held %v", out, held)
	}
	big := strings.Repeat("a", deltaMerge)
	out = holdDeltas([]agent.Event{delta("y", 2, big)}, held)
	if len(out) != 1 || out[0].Text != "jour" || held["y"].Text != big {
		t.Fatalf("past deltaMerge: out %d events, held %d bytes", len(out), len(held["y"].Text))
	}
}
