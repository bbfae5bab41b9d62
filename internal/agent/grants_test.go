package agent

import (
	"encoding/json"
	"slices"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// rememberExact approves a call and remembers it for the conversation, for an hour, for its
// exact arguments (the default).
var rememberExact = &Remember{Scope: store.GrantConversation, ForSecs: 3600}

// TestGrantsNeverRiseAboveARule: a grant stands in for the owner's plain approval only. When a
// rule of the tool decides a later call — it asks (the owner, reviewers, several approvers), it
// denies, or it fails to evaluate — the rule applies as if there were no grant, even for the very
// arguments the grant covers.
func TestGrantsNeverRiseAboveARule(t *testing.T) {
	for _, c := range []struct {
		name string
		rule tools.Rule
		want string // the later call's status
	}{
		{"a plain ask", tools.Rule{When: "user.role == 'reviewer'", Action: tools.RuleAsk}, store.CallAwaiting},
		{"an ask of reviewers", tools.Rule{When: "user.role == 'reviewer'", Action: tools.RuleAsk, Approvers: tools.ByReviewer}, store.CallAwaiting},
		{"an ask of two reviewers", tools.Rule{When: "user.role == 'reviewer'", Action: tools.RuleAsk, Approvers: tools.ByReviewer, Count: 2}, store.CallAwaiting},
		{"a rule that fails to evaluate", tools.Rule{When: "user.role == 'reviewer' && args.memo == 'x'", Action: tools.RuleAsk}, store.CallAwaiting},
		{"a deny", tools.Rule{When: "user.role == 'reviewer'", Action: tools.RuleDeny, Reason: "not for reviewers"}, store.CallDenied},
	} {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
				runs := &counter{}
				mod := func(s *tools.Spec) { s.Rules = []tools.Rule{c.rule} }
				prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("paid"),
					callTools(tc{"c2", "pay", smallPay}), say("paid again"),
					callTools(tc{"c3", "pay", smallPay}), say("and again"))
				e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
				e.send("pay")
				e.waitCall("c1", store.CallAwaiting)
				if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: rememberExact}, e.owner); err != nil {
					t.Fatalf("approve and remember: %v", err)
				}
				e.waitStatus(store.StatusIdle)
				e.send("pay again")
				e.waitStatus(store.StatusIdle)
				if c2 := e.call("c2"); c2.Status != store.CallResolved || c2.Grant == "" {
					t.Fatalf("the remembered call, no rule matching = %+v", c2)
				}
				// The rule matches the owner from now on: the grant does not open its gate.
				if err := e.st.SetUserRole(e.ctx, e.owner.UserID, store.RoleReviewer); err != nil {
					t.Fatal(err)
				}
				e.send("and again")
				e.waitCall("c3", c.want)
				c3 := e.call("c3")
				if c3.Grant != "" || c3.Rule == nil {
					t.Fatalf("a call a rule decided = %+v, want the rule's gate and no grant", c3)
				}
				if got := runs.list(); !slices.Equal(got, []string{"c1", "c2"}) {
					t.Fatalf("ran %v", got)
				}
				if got := auditActions(t, e, "c3"); slices.Contains(got, "grant_used") {
					t.Fatalf("audit of c3 %v", got)
				}
			})
		})
	}
}

// TestGrantCoversItsArgumentsOnly: a grant made without a choice covers the approved call's exact
// arguments (in canonical form: key order and spacing do not matter), not the tool's other
// calls; "any arguments" is refused for a tool with rules, and covers every argument of a tool
// without.
func TestGrantCoversItsArgumentsOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		noRules := func(s *tools.Spec) { s.Rules = nil }
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("paid"),
			callTools(tc{"c2", "pay", `{"to":"a@example.com",  "amount":5}`}), say("the same, written otherwise"),
			callTools(tc{"c3", "pay", `{"amount": 5, "to": "evil@example.net"}`}), say("someone else"),
			callTools(tc{"c4", "pay", `{"amount": 900, "to": "evil@example.net"}`}), say("more"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, noRules)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: rememberExact}, e.owner); err != nil {
			t.Fatalf("approve and remember: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		grants, err := e.m.Grants(e.ctx, e.owner)
		if err != nil || len(grants) != 1 || grants[0].Args != GrantArgsExact || grants[0].ArgsHash != canonicalHash(json.RawMessage(smallPay)) ||
			grants[0].UserID != e.owner.UserID || grants[0].ToolCallID != "c1" {
			t.Fatalf("grants %+v, %v", grants, err)
		}
		e.send("same")
		e.waitStatus(store.StatusIdle)
		if c2 := e.call("c2"); c2.Status != store.CallResolved || c2.Grant != grants[0].ID {
			t.Fatalf("the same arguments, written otherwise = %+v", c2)
		}
		e.send("someone else")
		e.waitCall("c3", store.CallAwaiting)
		if c3 := e.call("c3"); c3.Grant != "" {
			t.Fatalf("other arguments ran on the grant: %+v", c3)
		}
		if got := runs.list(); !slices.Equal(got, []string{"c1", "c2"}) {
			t.Fatalf("ran %v", got)
		}
		// Any arguments: this tool has no rules, so the owner may choose it.
		anyArgs := &Remember{Scope: store.GrantConversation, ForSecs: 3600, Args: GrantArgsAny}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c3", Resolution{Decision: "approve", Remember: &Remember{Scope: "conversation", ForSecs: 3600, Args: "similar"}}, e.owner); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("an unknown args choice: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c3", Resolution{Decision: "approve", Remember: anyArgs}, e.owner); err != nil {
			t.Fatalf("approve and remember for any arguments: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		e.send("more")
		e.waitStatus(store.StatusIdle)
		if c4 := e.call("c4"); c4.Status != store.CallResolved || c4.Grant == "" || c4.Grant == grants[0].ID {
			t.Fatalf("a grant of any arguments = %+v", c4)
		}
		recs, _ := e.st.ListAudit(e.ctx, store.AuditFilter{Action: "grant_create"})
		if len(recs) != 2 || !json.Valid(recs[0].Detail) {
			t.Fatalf("grant_create records %+v", recs)
		}
		var d struct{ Args string }
		if err := json.Unmarshal(recs[0].Detail, &d); err != nil || d.Args != GrantArgsAny {
			t.Fatalf("the newest grant_create's detail %s", recs[0].Detail)
		}
	})
}

// TestGrantRefusedWhereARuleDecides: a call a rule asked about cannot be remembered (the grant
// could never stand in for the rule), and a tool with rules cannot be remembered for any
// arguments; nothing is decided by the refused request.
func TestGrantRefusedWhereARuleDecides(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) {
			s.Rules = []tools.Rule{{When: "args.amount > 100", Action: tools.RuleAsk}, {When: "args.to.endsWith('@evil.test')", Action: tools.RuleDeny}}
		}
		prov := newScripted(callTools(tc{"big", "pay", `{"amount": 500, "to": "a@example.com"}`}, tc{"small", "pay", smallPay}), say("done"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
		e.send("pay")
		e.waitCall("big", store.CallAwaiting)
		e.waitCall("small", store.CallAwaiting)
		_, err := e.m.Resolve(e.ctx, e.conv, "big", Resolution{Decision: "approve", Remember: rememberExact}, e.owner)
		if kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("remembering a call a rule asked about: %v", err)
		}
		_, err = e.m.Resolve(e.ctx, e.conv, "small", Resolution{Decision: "approve", Remember: &Remember{Scope: "user", ForSecs: 3600, Args: GrantArgsAny}}, e.owner)
		if kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("any arguments of a tool with rules: %v", err)
		}
		// An edit that a rule asks about cannot be remembered either.
		_, err = e.m.Resolve(e.ctx, e.conv, "small", Resolution{Decision: "approve", Args: json.RawMessage(`{"amount": 700, "to": "a@example.com"}`),
			Remember: rememberExact}, e.owner)
		if kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("remembering an edit a rule asks about: %v", err)
		}
		if c := e.call("big"); c.Status != store.CallAwaiting {
			t.Fatalf("a refused remember decided the call: %+v", c)
		}
		if c := e.call("small"); c.Status != store.CallAwaiting {
			t.Fatalf("a refused remember decided the call: %+v", c)
		}
		if grants, _ := e.m.Grants(e.ctx, e.owner); len(grants) != 0 {
			t.Fatalf("grants %+v", grants)
		}
	})
}

// TestAdminsManageEveryGrant: an admin lists every person's grants and revokes any of them
// (audited as grant_revoke by the admin, naming whose grant it was); a reviewer or another
// member can do neither, and learns nothing of someone else's grant.
func TestAdminsManageEveryGrant(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		noRules := func(s *tools.Spec) { s.Rules = nil }
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("paid"), callTools(tc{"c2", "pay", smallPay}), say("asks again"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, noRules)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: rememberExact}, e.owner); err != nil {
			t.Fatalf("approve and remember: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		for _, p := range []Principal{e.rev, e.other, e.owner, System} {
			if _, err := e.m.AllGrants(e.ctx, p); kindOf(err) != fault.KindPermissionDenied {
				t.Fatalf("%s lists everyone's grants: %v", p.UserID, err)
			}
		}
		all, err := e.m.AllGrants(e.ctx, e.admin)
		if err != nil || len(all) != 1 || all[0].UserID != e.owner.UserID || all[0].Tool != "pay" || all[0].Args != GrantArgsExact {
			t.Fatalf("the admin's list %+v, %v", all, err)
		}
		if own, _ := e.m.Grants(e.ctx, e.admin); len(own) != 0 {
			t.Fatalf("the admin's own grants %+v", own)
		}
		for _, p := range []Principal{e.rev, e.other} {
			if err := e.m.RevokeGrant(e.ctx, p, all[0].ID); kindOf(err) != fault.KindNotFound {
				t.Fatalf("%s revokes someone else's grant: %v", p.UserID, err)
			}
		}
		if err := e.m.RevokeGrant(e.ctx, e.admin, "grant_nope"); kindOf(err) != fault.KindNotFound {
			t.Fatalf("revoking no grant: %v", err)
		}
		if err := e.m.RevokeGrant(e.ctx, e.admin, all[0].ID); err != nil {
			t.Fatalf("the admin revokes: %v", err)
		}
		if err := e.m.RevokeGrant(e.ctx, e.admin, all[0].ID); kindOf(err) != fault.KindNotFound {
			t.Fatalf("revoking twice: %v", err)
		}
		if left, _ := e.m.Grants(e.ctx, e.owner); len(left) != 0 {
			t.Fatalf("the owner's grants after the admin revoked: %+v", left)
		}
		recs, _ := e.st.ListAudit(e.ctx, store.AuditFilter{Action: "grant_revoke"})
		if len(recs) != 1 || recs[0].ActorID != e.admin.UserID || recs[0].Tool != "pay" || recs[0].ConversationID != e.conv {
			t.Fatalf("revocation audit %+v", recs)
		}
		var d struct {
			GrantID string `json:"grant_id"`
			UserID  string `json:"user_id"`
			Admin   bool   `json:"admin"`
		}
		if err := json.Unmarshal(recs[0].Detail, &d); err != nil || d.GrantID != all[0].ID || d.UserID != e.owner.UserID || !d.Admin {
			t.Fatalf("revocation detail %s", recs[0].Detail)
		}
		e.send("pay again")
		e.waitCall("c2", store.CallAwaiting)
		if got := runs.list(); !slices.Equal(got, []string{"c1"}) {
			t.Fatalf("ran %v", got)
		}
	})
}
