package agent

import (
	"encoding/json"
	"slices"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// What runs is what was approved: the attacks that edited arguments past the rules, counted a
// demoted approver, or ran something else than the record covered, each tried against the
// gate at dispatch, at Resolve and at release.

// transferRules gate pay like a bank would: an evil.test recipient or more than a million is
// denied, more than 1,000 needs two reviewers, more than 100 one reviewer, and the rest the
// owner (the tool's own gate).
func transferRules(s *tools.Spec) {
	s.Rules = []tools.Rule{
		{When: "args.to.endsWith('@evil.test')", Action: tools.RuleDeny, Reason: "no transfers to evil.test"},
		{When: "args.amount > 1000000", Action: tools.RuleDeny, Reason: "over the limit"},
		{When: "args.amount > 1000", Action: tools.RuleAsk, Approvers: tools.ByReviewer, Count: 2},
		{When: "args.amount > 100", Action: tools.RuleAsk, Approvers: tools.ByReviewer},
	}
}

func transferEnv(t *testing.T, open func(testing.TB, clock.Clock) store.Store, runs *counter, args string) *env {
	t.Helper()
	prov := newScripted(callTools(tc{"p1", "pay", args}), say("Done."))
	e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, transferRules)} }, nil)
	e.send("pay")
	e.waitCall("p1", store.CallAwaiting)
	return e
}

func TestAnEditPastADenyIsRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		e := transferEnv(t, open, runs, `{"amount": 10, "to": "x@ok.test"}`)
		for _, edit := range []string{`{"amount": 9000000, "to": "boss@evil.test"}`, `{"amount": 10, "to": "boss@evil.test"}`, `{"amount": 9000000, "to": "x@ok.test"}`} {
			_, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(edit)}, e.owner)
			if kindOf(err) != fault.KindDenied {
				t.Fatalf("the owner's edit %s: %v, want denied", edit, err)
			}
		}
		if c := e.call("p1"); c.Status != store.CallAwaiting || canonicalHash(c.Args) != canonicalHash(json.RawMessage(`{"amount": 10, "to": "x@ok.test"}`)) {
			t.Fatalf("a refused edit changed the call: %+v", c)
		}
		if got := runs.list(); len(got) != 0 {
			t.Fatalf("ran %v", got)
		}
		// The call as the model made it is still the owner's to approve.
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 1 {
			t.Fatalf("ran %v", got)
		}
	})
}

func TestAnEditThatNeedsAReviewerWaitsForOne(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		e := transferEnv(t, open, runs, `{"amount": 10, "to": "x@ok.test"}`)
		edited := `{"amount": 500, "to": "x@ok.test"}`
		res, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(edited)}, e.owner)
		if err != nil {
			t.Fatal(err)
		}
		if res.Call.Status != store.CallAwaiting || res.Call.Approvers != tools.ByReviewer {
			t.Fatalf("the proposal: %+v", res.Call)
		}
		if got := runs.list(); len(got) != 0 {
			t.Fatalf("the owner's own edit ran past the reviewer rule: %v", got)
		}
		// The owner cannot approve it again: it is a reviewer's now.
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("the owner approved the proposal: %v", err)
		}
		// The reviewer approves the proposal by restating it (an approve without arguments may
		// have been given to the model's 10).
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.rev); kindOf(err) != fault.KindStale {
			t.Fatalf("a reviewer's approve without the proposed arguments: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(edited)}, e.rev); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 1 {
			t.Fatalf("ran %v", got)
		}
		if c := e.call("p1"); canonicalHash(c.Args) != canonicalHash(json.RawMessage(edited)) || c.Decision != "approve_edited" {
			t.Fatalf("what ran: %+v", c)
		}
		if got := auditActions(t, e, "p1"); !slices.Contains(got, "propose_edit") || !slices.Contains(got, "approve_edited") {
			t.Fatalf("audit %v", got)
		}
	})
}

func TestAReviewerEditPastTheQuorumNeedsTheQuorum(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		e := transferEnv(t, open, runs, `{"amount": 150, "to": "x@ok.test"}`)
		// Past the final deny: refused.
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(`{"amount": 999999, "to": "thief@evil.test"}`)}, e.rev); kindOf(err) != fault.KindDenied {
			t.Fatalf("a reviewer's edit past the deny: %v", err)
		}
		// Past the two-reviewer rule: a proposal the reviewer's approval counts for once.
		res, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(`{"amount": 5000, "to": "x@ok.test"}`)}, e.rev)
		if err != nil {
			t.Fatal(err)
		}
		if res.Call.Status != store.CallAwaiting || res.Call.ApprovalsNeeded != 2 || len(res.Call.Approvals) != 1 {
			t.Fatalf("the proposal: %+v", res.Call)
		}
		if got := runs.list(); len(got) != 0 {
			t.Fatalf("one reviewer ran a two-reviewer call: %v", got)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.rev); kindOf(err) != fault.KindStale {
			t.Fatalf("the same reviewer twice: %v", err)
		}
		// Another approver who approves without restating the proposal may have seen the
		// model's 150 (an inbox, a bulk decision): refused, nothing counted.
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.admin); kindOf(err) != fault.KindStale {
			t.Fatalf("an approve without the proposed arguments: %v", err)
		}
		if got := runs.list(); len(got) != 0 {
			t.Fatalf("an approval of unseen arguments ran the call: %v", got)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(`{"to": "x@ok.test", "amount": 5000}`)}, e.admin); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 1 {
			t.Fatalf("ran %v", got)
		}
	})
}

func TestADemotedApproverStopsCounting(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		e := transferEnv(t, open, runs, `{"amount": 5000, "to": "x@ok.test"}`)
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.rev); err != nil {
			t.Fatal(err)
		}
		if err := e.st.SetUserRole(e.ctx, e.rev.UserID, store.RoleMember); err != nil {
			t.Fatal(err)
		}
		res, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.admin)
		if err != nil {
			t.Fatal(err)
		}
		if res.Call.Status != store.CallAwaiting {
			t.Fatalf("a demoted reviewer's approval counted: %+v", res.Call)
		}
		if got := runs.list(); len(got) != 0 {
			t.Fatalf("ran %v", got)
		}
	})
}

// reviewerPay is pay gated by one reviewer, for the core tests.
func reviewerPay(t *testing.T, runs *counter) func(st store.Store) []*tools.Tool {
	return func(store.Store) []*tools.Tool {
		return []*tools.Tool{payTool(t, runs, func(s *tools.Spec) { s.Rules, s.Approvers = nil, tools.ByReviewer })}
	}
}

func TestTheEffectGateRunsOnlyWhatTheRecordCovers(t *testing.T) {
	for _, tt := range []struct {
		name   string
		tamper func(t *testing.T, c *core, e *effect)
		reason string
	}{
		{"other arguments than recorded", func(t *testing.T, c *core, e *effect) { e.run.args["amount"] = 9000000.0 }, refusedArgs},
		{"another tool", func(t *testing.T, c *core, e *effect) {
			e.run.tool = payTool(t, &counter{}, func(s *tools.Spec) { s.Rules = nil })
		}, refusedTool},
		{"an approver demoted before the run", func(t *testing.T, c *core, e *effect) {
			if err := c.st.SetUserRole(c.a.m.base, c.rev.UserID, store.RoleMember); err != nil {
				t.Fatal(err)
			}
		}, refusedApprovals},
		{"nothing changed", func(*testing.T, *core, *effect) {}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			runs := &counter{}
			c := newCoreWith(t, nil, reviewerPay(t, runs))
			a := c.a
			if err := a.handleSend(&request{kind: reqSend, by: c.owner, text: "pay"}); err != nil {
				t.Fatal(err)
			}
			a.commitReady()
			a.ready.follow, a.llmBusy = nil, false
			a.onLLMResponse(llm.Response{ToolCalls: []llm.ToolCall{{ID: "p1", Name: "pay", Args: json.RawMessage(`{"amount": 50, "to": "x@ok.test"}`)}}})
			a.ready.effects = nil
			a.onPlan(planDone{id: "p1", plan: tools.Plan{Summary: "pay"}})
			if w := a.commitReady(); w.err != nil {
				t.Fatal(w.err)
			}
			if err := a.handleResolve(&request{kind: reqResolve, by: c.rev, callID: "p1", res: Resolution{Decision: "approve"}}); err != nil {
				t.Fatal(err)
			}
			if w := a.commitReady(); w.err != nil {
				t.Fatal(w.err)
			}
			a.releaseReady()
			follow := a.ready.follow
			a.ready.follow = nil
			for _, f := range follow {
				a.followUp(f)
			}
			if len(a.ready.effects) != 1 || a.ready.effects[0].kind != effectToolRun {
				t.Fatalf("effects %+v", a.ready.effects)
			}
			tt.tamper(t, c, &a.ready.effects[0])
			var before float64
			if tt.reason != "" {
				before = counterValue(t, metrics.EffectRefusals.WithLabelValues(tt.reason))
			}
			a.settleSteps()
			cl := a.st.calls["p1"]
			if tt.reason == "" {
				if cancel := a.running["p1"]; cancel == nil || a.inflight != 1 {
					t.Fatalf("the covered run did not start: inflight %d, call %+v", a.inflight, cl)
				}
				for a.inflight > 0 { // let the run report back, as the loop would
					a.handleInternal(<-a.internal)
				}
				a.settleSteps()
				if got := runs.list(); len(got) != 1 {
					t.Fatalf("ran %v", got)
				}
				return
			}
			// The turn goes on (the model reads the refusal): the one thing in flight is its call.
			if _, started := a.running["p1"]; started || len(runs.list()) != 0 || !a.llmBusy || a.inflight != 1 {
				t.Fatalf("a refused run started: running %v, runs %v, inflight %d", a.running, runs.list(), a.inflight)
			}
			if !cl.finished() || cl.decision != "refused" {
				t.Fatalf("the refused call: status %q decision %q", cl.status, cl.decision)
			}
			recs, err := c.st.ListAudit(a.m.base, store.AuditFilter{ConversationID: a.id})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(recs, func(r store.AuditRecord) bool { return r.Action == "effect_refused" && r.ToolCallID == "p1" }) {
				t.Fatalf("no effect_refused in the trail: %+v", recs)
			}
			if got := counterValue(t, metrics.EffectRefusals.WithLabelValues(tt.reason)); got != before+1 {
				t.Fatalf("refusals{%s} %v → %v", tt.reason, before, got)
			}
		})
	}
}

func TestAToolMayForbidEdits(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"p1", "pay", `{"amount": 10, "to": "x@ok.test"}`}), say("Done."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool {
			return []*tools.Tool{payTool(t, runs, func(s *tools.Spec) { transferRules(s); s.ForbidEdits = true })}
		}, nil)
		e.send("pay")
		e.waitCall("p1", store.CallAwaiting)
		_, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(`{"amount": 11, "to": "x@ok.test"}`)}, e.owner)
		if kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("an edit of a tool that forbids them: %v", err)
		}
		// The same arguments, sent back as they were, are a plain approval.
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(`{"to":"x@ok.test","amount":10}`)}, e.owner); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 1 {
			t.Fatalf("ran %v", got)
		}
	})
}
