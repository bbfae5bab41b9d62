package views

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/tools"
	"parley/views/viewstest"
)

func pendingApproval(approvers tools.Approvers) agent.CallView {
	return agent.CallView{ID: "a", Name: "note", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: approvers,
		Status: agent.CallAwaiting, PendingKind: tools.PendingApproval, Args: json.RawMessage(`{}`), ApprovalsNeeded: 1}
}

// TestApprovalCardOffersRememberOnlyWhenThePolicyDoes: the owner of an owner-approved call gets
// the "approve and remember" control (scope and life); a reviewer-gated call, an M-of-N call and
// an admin's override do not (agent.MayRemember).
func TestApprovalCardOffersRememberOnlyWhenThePolicyDoes(t *testing.T) {
	_, doc := render(t, ToolCallCard(page(owner()), pendingApproval(tools.ByOwner)))
	if _, n := doc.One(`[data-parley="remember"] button[name="decision"][value="remember"]`); n != 1 {
		t.Fatal("the owner's card offers no approve-and-remember button")
	}
	if n := len(doc.All(`[data-parley="remember"] input[name="remember_scope"]`)); n != 2 {
		t.Errorf("%d scope choices, want 2 (conversation, user)", n)
	}
	if opts := doc.All(`[data-parley="remember"] select[name="remember_for"] option`); len(opts) != 3 {
		t.Errorf("%d durations, want 3", len(opts))
	}
	admin := Viewer{Principal: agent.Principal{UserID: "ad", Role: agent.RoleAdmin, Via: "session"}, Name: "root"}
	mofn := pendingApproval(tools.ByReviewer)
	mofn.ApprovalsNeeded = 2
	for name, tc := range map[string]struct {
		v Viewer
		c agent.CallView
	}{
		"reviewer-gated": {reviewer(), pendingApproval(tools.ByReviewer)},
		"M-of-N":         {reviewer(), mofn},
		"admin override": {admin, pendingApproval(tools.ByOwner)},
	} {
		_, doc := render(t, ToolCallCard(page(tc.v), tc.c))
		if _, n := doc.One(`button[name="decision"][value="approve"]`); n != 1 {
			t.Fatalf("%s: the viewer cannot approve at all", name)
		}
		if _, n := doc.One(`[data-parley="remember"]`); n != 0 {
			t.Errorf("%s: the card offers to remember the approval", name)
		}
	}
}

// TestCardsSayHowGovernanceDecided: quorum ("1 of 2 approved — by rita"), escalation, the rule's
// words and the grant that let a call run.
func TestCardsSayHowGovernanceDecided(t *testing.T) {
	c := pendingApproval(tools.ByReviewer)
	c.ApprovalsNeeded = 2
	c.Approvals = []agent.ApprovalView{{By: "r9", At: time.Now()}}
	c.Escalated = true
	c.Rule = &agent.RuleView{Index: 0, When: `args.amount > 100`, Action: "ask"}
	p := page(reviewer())
	p.Names = map[string]string{"r9": "rita"}
	_, doc := render(t, ToolCallCard(p, c))
	for sel, want := range map[string]string{
		`[data-parley="quorum"]`:    "1 of 2 approved — by rita",
		`[data-parley="escalated"]`: "admins may decide it now",
		`[data-parley="rule"]`:      "Rule 1 asked for an approval: when args.amount > 100",
	} {
		e, n := doc.One(sel)
		if n != 1 || !strings.Contains(viewstest.Text(e), want) {
			t.Errorf("%s: %d element(s), want one saying %q", sel, n, want)
		}
	}

	done := agent.CallView{ID: "g", Name: "note", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByOwner,
		Status: agent.CallResolved, Grant: "grant_abc", Result: json.RawMessage(`{"ok":true,"result":{}}`),
		Rule: &agent.RuleView{Index: 2, When: strings.Repeat("x", 200), Action: "allow", Shadow: true}}
	_, doc = render(t, ToolCallCard(page(owner()), done))
	e, n := doc.One(`[data-parley="grant"][data-grant-id="grant_abc"]`)
	if n != 1 || !strings.Contains(viewstest.Text(e), "Allowed by your remembered approval grant_abc") {
		t.Fatalf("the grant is not named on the owner's card")
	}
	if a, _ := doc.One(`[data-parley="grant"] a[href="/grants"]`); a == nil {
		t.Error("no link to the remembered approvals")
	}
	e, _ = doc.One(`[data-parley="rule"]`)
	if txt := viewstest.Text(e); !strings.Contains(txt, "Rule 3 would have allowed (shadow mode)") || len([]rune(txt)) > 140 {
		t.Errorf("shadow rule text %q", txt)
	}
	_, doc = render(t, ToolCallCard(page(reviewer()), done))
	if e, _ := doc.One(`[data-parley="grant"]`); e == nil || !strings.Contains(viewstest.Text(e), "the owner's remembered approval") {
		t.Error("another viewer is told it was their own grant")
	}
}
