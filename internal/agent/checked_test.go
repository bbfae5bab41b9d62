package agent

import (
	"testing"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/tools"
)

// TestCheckedRequestsSeeTheActorsFacts: a caller's Check runs in the actor with the
// conversation's owner and the named call as the actor knows them (found or not, gated how,
// awaiting what); its error is the answer and nothing changes; a nil error lets the request
// through to the agent's own checks. Sends see Found false.
func TestCheckedRequestsSeeTheActorsFacts(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		var seen []Facts
		refuse := tools.NewError(tools.KindNotFound, "refused by the caller", nil)
		refusing := func(f Facts) error { seen = append(seen, f); return refuse }
		passing := func(f Facts) error { seen = append(seen, f); return nil }

		if err := e.m.SendChecked(e.ctx, e.conv, e.owner, "email bob", refusing); err != refuse {
			t.Fatalf("refused send: %v", err)
		}
		if log, _ := e.st.Log(e.ctx, e.conv, 0); len(log) != 0 {
			t.Fatalf("a refused send was logged: %+v", log)
		}
		if err := e.m.SendChecked(e.ctx, e.conv, e.owner, "email bob", passing); err != nil {
			t.Fatalf("send: %v", err)
		}
		e.waitCall("c1", store.CallAwaiting)

		if err := e.m.ResolveChecked(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner, refusing); err != refuse {
			t.Fatalf("refused resolve: %v", err)
		}
		if p, ok := e.view().Pending["c1"]; !ok || p.Kind != tools.PendingApproval {
			t.Fatalf("a refused resolve changed the call: %+v", e.view().Pending)
		}
		if err := e.m.ResolveChecked(e.ctx, e.conv, "nope", Resolution{Decision: "approve"}, e.owner, passing); kindOf(err) != tools.KindStale {
			t.Fatalf("unknown call after a passing check: %v, want the agent's stale", err)
		}
		if err := e.m.ResolveChecked(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner, passing); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if err := e.m.ResolveChecked(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner, passing); kindOf(err) != tools.KindStale {
			t.Fatalf("second resolve: %v, want stale", err)
		}

		owner := e.owner.UserID
		want := []Facts{
			{OwnerID: owner},
			{OwnerID: owner},
			{OwnerID: owner, Found: true, Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Status: store.CallAwaiting, PendingKind: tools.PendingApproval},
			{OwnerID: owner},
			{OwnerID: owner, Found: true, Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Status: store.CallAwaiting, PendingKind: tools.PendingApproval},
			{OwnerID: owner, Found: true, Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Status: store.CallResolved, PendingKind: ""},
		}
		if len(seen) != len(want) {
			t.Fatalf("checks saw %d requests, want %d: %+v", len(seen), len(want), seen)
		}
		for i := range want {
			if seen[i] != want[i] {
				t.Fatalf("check %d saw %+v, want %+v", i, seen[i], want[i])
			}
		}
	})
}
