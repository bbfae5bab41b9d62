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

// TestCardsShowWhatAnEditChanged: a proposal waiting for a reviewer shows, field by field, what
// its proposer changed in the model's arguments (and who proposed it); the call once run with
// edited arguments says so too; unedited arguments (whatever their spacing or key order) show
// no change, and hostile values are escaped and cut short.
func TestCardsShowWhatAnEditChanged(t *testing.T) {
	c := pendingApproval(tools.ByReviewer)
	c.ModelArgs = json.RawMessage(`{"amount": 10, "to": "x@ok.test", "memo": "rent"}`)
	c.Args = json.RawMessage(`{"to":"boss@evil.test","amount":9000000,"memo":"rent","note":"<script>x</script>"}`)
	c.Decision, c.DecidedBy = "propose_edit", "m1"
	p := page(reviewer())
	p.Names = map[string]string{"m1": "mia"}
	html, doc := render(t, ToolCallCard(p, c))
	box, n := doc.One(`[data-parley="approval"] [data-parley="arg-changes"]`)
	if n != 1 || !strings.Contains(viewstest.Text(box), "mia proposed other arguments") {
		t.Fatalf("the proposal's card: %d change boxes: %s", n, html)
	}
	items := doc.All(`[data-parley="arg-changes"] li`)
	var got []string
	for _, li := range items {
		got = append(got, strings.Join(strings.Fields(viewstest.Text(li)), " "))
	}
	want := []string{`amount: 10 → 9000000`, `note: (not set) → "<script>x</script>"`, `to: "x@ok.test" → "boss@evil.test"`}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("changes %q, want %q", got, want)
	}
	if strings.Contains(html, "<script>x") {
		t.Fatal("an argument's value reached the page unescaped")
	}

	ran := c
	ran.Status, ran.PendingKind, ran.Decision = agent.CallResolved, "", "approve_edited"
	ran.Result = json.RawMessage(`{"ok":true}`)
	if _, doc := render(t, ToolCallCard(p, ran)); len(doc.All(`[data-parley="arg-changes"] li`)) != 3 {
		t.Fatal("the call that ran with edited arguments does not say what changed")
	}

	same := pendingApproval(tools.ByOwner)
	same.ModelArgs, same.Args = json.RawMessage(`{"a": 1, "b": [1, 2]}`), json.RawMessage(`{"b":[1,2],"a":1}`)
	if _, doc := render(t, ToolCallCard(page(owner()), same)); len(doc.All(`[data-parley="arg-changes"]`)) != 0 {
		t.Fatal("unedited arguments show a change")
	}

	long := pendingApproval(tools.ByOwner)
	long.ModelArgs, long.Args = json.RawMessage(`{"body": "short"}`), json.RawMessage(`{"body": "`+strings.Repeat("x", 5000)+`"}`)
	_, doc = render(t, ToolCallCard(page(owner()), long))
	if li, n := doc.One(`[data-parley="arg-changes"] li`); n != 1 || len([]rune(viewstest.Text(li))) > 2*maxChangeValue {
		t.Fatalf("a long value is not cut short: %d", len(viewstest.Text(li)))
	}
}
