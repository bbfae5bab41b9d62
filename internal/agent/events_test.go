package agent

import (
	"bytes"
	"testing"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/tools"
)

// TestEventsCarryTheLoggedEntries: a subscriber that keeps up receives every log entry of a
// turn on the events (Event.Entries), in order and without gaps, as the store keeps them
// (CreatedAt aside), so an event stream need not read the log per change. A turn with a server call and an
// elicitation answered by the owner covers the actor's appends and a resolve's.
func TestEventsCarryTheLoggedEntries(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(
			callTools(tc{"l1", "lookup", `{"n":1}`}, tc{"a1", "ask_user", askArgs}),
			say("Done."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{lookupTool(t, nil), tools.AskUser()} }, nil)
		var carried []store.Entry
		collect := func(ev Event) { carried = append(carried, ev.Entries...) }
		e.send("go")
		e.next("a1 awaiting", func(ev Event) bool {
			collect(ev)
			return ev.Type == EventToolCall && ev.ToolCallID == "a1" && ev.Status == store.CallAwaiting
		})
		if _, err := e.m.Resolve(e.ctx, e.conv, "a1", Resolution{Action: "decline"}, e.owner); err != nil {
			t.Fatalf("decline: %v", err)
		}
		e.next("idle", func(ev Event) bool {
			collect(ev)
			return ev.Type == EventStatus && ev.Status == store.StatusIdle
		})
		log, err := e.st.Log(e.ctx, e.conv, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(log) < 5 || len(carried) != len(log) {
			t.Fatalf("events carried %d entries, the log has %d", len(carried), len(log))
		}
		for i, want := range log {
			// CreatedAt is the actor's time of the commit; the store stamps its own in the same
			// append (strictly increasing per handle), so the two differ by moments.
			got := carried[i]
			if got.Seq != want.Seq || got.Type != want.Type || got.ToolCallID != want.ToolCallID || got.Actor != want.Actor ||
				!bytes.Equal(got.Data, want.Data) {
				t.Fatalf("carried entry %d = %+v, the log has %+v", i, got, want)
			}
		}
	})
}
