package agent

import (
	"context"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
)

// TestStartRevivesOnlyTurnsThatGoOn: after a restart a conversation awaiting an approval has no
// actor until it is needed, is counted as pending, and its durable expiry still fires from the
// store (reviving it); a conversation awaiting a client call is revived at start, so its
// no-client grace runs.
func TestStartRevivesOnlyTurnsThatGoOn(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), callTools(tc{"g1", "geolocation", `{}`}))
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.ClientGrace = 5 * time.Second })
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		conv2, err := e.st.CreateConversation(e.ctx, store.Conversation{OwnerID: e.owner.UserID, Title: "where"})
		if err != nil {
			t.Fatal(err)
		}
		sub := e.m.events.Subscribe(conv2.ID)
		if err := e.m.Send(e.ctx, conv2.ID, e.owner, "where am I"); err != nil {
			t.Fatal(err)
		}
		for ev := range sub.C {
			if ev.Type == EventClientExec {
				break
			}
		}
		sub.Close()
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		if err := e.m.Close(ctx); err != nil {
			t.Fatal(err)
		}

		e.startManager()
		st := e.m.Stats()
		if e.m.live(e.conv) != nil || e.m.live(conv2.ID) == nil || st.LiveActors != 1 {
			t.Fatalf("after start: approval conversation live %v, client conversation live %v, %d live; want only the client one",
				e.m.live(e.conv) != nil, e.m.live(conv2.ID) != nil, st.LiveActors)
		}
		if st.Pending["approval"] != 1 || st.Pending["client_exec"] != 1 {
			t.Fatalf("pending after start %v, want one approval and one client call", st.Pending)
		}
		// The client call's grace runs in its revived actor (once it has loaded: a request
		// answered by the actor says so).
		prov.add(say("I cannot see where you are."))
		sub = e.m.events.Subscribe(conv2.ID)
		defer sub.Close()
		if _, err := e.m.call(e.ctx, conv2.ID, &request{kind: reqView, by: System}); err != nil {
			t.Fatal(err)
		}
		e.clk.Advance(5 * time.Second)
		for ev := range sub.C {
			if ev.Type == EventStatus && ev.Status == store.StatusIdle {
				break
			}
		}
		// The approval's expiry fires from the store and revives its conversation.
		prov.add(say("The email was not sent."))
		e.clk.Advance(e.m.cfg.DefaultTimeout)
		e.waitCall("c1", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		if st := e.m.Stats(); len(st.Pending) != 0 {
			t.Fatalf("pending at the end %v", st.Pending)
		}
	})
}
