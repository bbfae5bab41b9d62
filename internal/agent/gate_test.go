package agent

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// payTool is a server tool that requires the owner's approval, with the rules of the
// governance example (docs/tools-file.md): a large amount asks a reviewer, example.com is allowed, anything else is denied.
func payTool(t testing.TB, runs *counter, mod func(*tools.Spec)) *tools.Tool {
	s := tools.Spec{
		Name: "pay", Description: "pay someone", Executor: tools.Server, Approval: tools.RequiresApproval,
		Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"number"},"to":{"type":"string"}},"required":["amount","to"]}`),
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			runs.add(call.ToolCallID)
			return map[string]any{"paid": true}, nil
		},
		Rules: []tools.Rule{
			{When: "args.amount > 100", Action: tools.RuleAsk, Approvers: tools.ByReviewer},
			{When: "args.to.endsWith('@example.com') && user.role == 'member' && tool == 'pay'", Action: tools.RuleAllow},
			{When: "true", Action: tools.RuleDeny, Reason: "only example.com"},
		},
	}
	if mod != nil {
		mod(&s)
	}
	return mustTool(t, s)
}

func auditActions(t *testing.T, e *env, call string) []string {
	t.Helper()
	recs, err := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	var out []string
	for _, r := range slices.Backward(recs) {
		if r.ToolCallID == call {
			out = append(out, r.Action)
		}
	}
	return out
}

func TestRulesAllowDenyAsk(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(
			tc{"big", "pay", `{"amount": 500, "to": "a@example.com"}`},
			tc{"small", "pay", `{"amount": 5, "to": "b@example.com"}`},
			tc{"evil", "pay", `{"amount": 5, "to": "x@evil.test"}`},
		), say("done"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, nil)} }, nil)
		e.send("pay them")
		e.waitCall("big", store.CallAwaiting)

		if c := e.call("small"); c.Rule == nil || c.Rule.Action != "allow" || c.Approval != tools.Auto {
			t.Fatalf("allowed call = %+v", c)
		}
		evil := e.call("evil")
		if evil.Status != store.CallDenied || evil.Rule == nil || evil.Rule.Index != 2 {
			t.Fatalf("denied call = %+v", evil)
		}
		env := envelope(t, string(evil.Result))
		if errKind(t, env) != string(fault.KindDenied) || !strings.Contains(string(evil.Result), "only example.com") {
			t.Fatalf("denied envelope = %s", evil.Result)
		}
		big := e.call("big")
		if big.Approvers != tools.ByReviewer || big.Rule == nil || big.Rule.Action != "ask" || big.Plan == nil {
			t.Fatalf("asked call = %+v", big)
		}
		// The rule made it a reviewer's call: the owner may not approve it.
		if _, err := e.m.Resolve(e.ctx, e.conv, "big", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("owner approve of a reviewer-gated call: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "big", Resolution{Decision: "approve"}, e.rev); err != nil {
			t.Fatalf("reviewer approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); !slices.Contains(got, "small") || !slices.Contains(got, "big") || slices.Contains(got, "evil") {
			t.Fatalf("ran %v, want small and big, never evil", got)
		}
		for call, want := range map[string][]string{"big": {"rule_ask", "approve"}, "small": {"rule_allow"}, "evil": {"rule_deny"}} {
			if got := auditActions(t, e, call); !slices.Equal(got, want) {
				t.Errorf("audit of %s = %v, want %v", call, got, want)
			}
		}
		// The model read the denial with its reason.
		tm := toolMessages(prov.requests()[1])
		found := false
		for _, m := range tm {
			if m.ToolCallID == "evil" && strings.Contains(m.Content, "only example.com") {
				found = true
			}
		}
		if !found {
			t.Fatalf("tool messages %+v lack the denial", tm)
		}
	})
}

func TestRulesShadowModeActsAsNoRule(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"evil", "pay", `{"amount": 5, "to": "x@evil.test"}`}), say("done"))
		shadow := func(s *tools.Spec) { s.RulesShadow = true }
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, shadow)} }, nil)
		e.send("pay")
		e.waitCall("evil", store.CallAwaiting)
		c := e.call("evil")
		// As without rules: the tool's own approval (the owner's), though the rule would deny.
		if c.Approval != tools.RequiresApproval || c.Approvers != tools.ByOwner || c.Rule == nil || !c.Rule.Shadow || c.Rule.Action != "deny" {
			t.Fatalf("shadowed call = %+v (rule %+v)", c, c.Rule)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "evil", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); !slices.Equal(got, []string{"evil"}) {
			t.Fatalf("ran %v", got)
		}
		if got := auditActions(t, e, "evil"); !slices.Equal(got, []string{"rule_shadow", "approve"}) {
			t.Fatalf("audit = %v", got)
		}
	})
}

func TestRuleThatFailsToEvaluateAsks(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		// The first rule reads a key the call does not have: an evaluation error, never an allow.
		prov := newScripted(callTools(tc{"c1", "pay", `{"amount": 5, "to": "a@example.com"}`}), say("done"))
		mod := func(s *tools.Spec) {
			s.Approval = tools.Auto
			s.Rules = append([]tools.Rule{{When: "args.memo == 'x'", Action: tools.RuleDeny}}, s.Rules...)
		}
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		if c := e.call("c1"); c.Rule == nil || c.Rule.Error == "" || c.Rule.Action != "ask" || c.PendingKind != tools.PendingApproval {
			t.Fatalf("call = %+v (rule %+v)", c, c.Rule)
		}
	})
}

func TestBadRulesAreRefused(t *testing.T) {
	base := tools.Spec{Name: "x", Description: "x", Executor: tools.Server,
		Func: func(context.Context, tools.Call, map[string]any) (any, error) { return nil, nil }}
	for name, r := range map[string]tools.Rule{
		"syntax":         {When: "args.amount >", Action: tools.RuleAllow},
		"not boolean":    {When: "args.amount + 1", Action: tools.RuleAllow},
		"unknown var":    {When: "account.id == 'x'", Action: tools.RuleAllow},
		"unknown action": {When: "true", Action: "maybe"},
		"reason on ask":  {When: "true", Action: tools.RuleAsk, Reason: "why"},
		"count of owner": {When: "true", Action: tools.RuleAsk, Approvers: tools.ByOwner, Count: 2},
	} {
		s := base
		s.Rules = []tools.Rule{{When: "true", Action: tools.RuleAllow}, r}
		_, err := tools.New(s)
		var de *tools.DefinitionError
		if !errors.As(err, &de) || !strings.HasPrefix(de.Field, "/rules/1") {
			t.Errorf("%s: New = %v, want a refusal at /rules/1", name, err)
		}
	}
}

// TestRuleHelpersGateCalls: the rule helpers decide calls as the rules' other functions do —
// emailDomain denies an address whose domain plain string functions miss (case, a display
// name), and an argument a helper cannot read (a list of addresses) fails the rule, so the call
// is asked about rather than let through by the allow after it.
func TestRuleHelpersGateCalls(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) {
			s.Approval = tools.Auto
			s.Rules = []tools.Rule{
				{When: "emailDomain(args.to) == 'evil.test'", Action: tools.RuleDeny, Reason: "not to evil.test"},
				{When: "args.to.endsWith('@evil.test')", Action: tools.RuleDeny, Reason: "the naive rule"},
				{When: "true", Action: tools.RuleAllow},
			}
		}
		prov := newScripted(callTools(
			tc{"upper", "pay", `{"amount": 5, "to": "boss@EVIL.test"}`},
			tc{"named", "pay", `{"amount": 5, "to": "The Boss <boss@evil.test>"}`},
			tc{"list", "pay", `{"amount": 5, "to": "a@good.test, boss@evil.test"}`},
			tc{"good", "pay", `{"amount": 5, "to": "a@good.test"}`},
		), say("done"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
		e.send("pay them")
		e.waitCall("list", store.CallAwaiting)
		for _, id := range []string{"upper", "named"} {
			if c := e.call(id); c.Status != store.CallDenied || c.Rule == nil || c.Rule.Index != 0 {
				t.Fatalf("%s = %+v, want denied by rule 0", id, c)
			}
		}
		if c := e.call("list"); c.Rule == nil || c.Rule.Index != 0 || c.Rule.Error == "" || c.Approval != tools.RequiresApproval {
			t.Fatalf("an address list = %+v, want asked about on rule 0's error", c)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "list", Resolution{Decision: "deny"}, e.owner); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); !slices.Equal(got, []string{"good"}) {
			t.Fatalf("ran %v, want good only", got)
		}
	})
}
