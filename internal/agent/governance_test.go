package agent

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// notes is a Notifier that keeps what it is told.
type notes struct {
	mu  sync.Mutex
	all []Notification
}

func (n *notes) Notify(x Notification) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = append(n.all, x)
}

func (n *notes) types(call string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, x := range n.all {
		if x.ToolCallID == call {
			out = append(out, x.Type)
		}
	}
	return out
}

const smallPay = `{"amount": 5, "to": "a@example.com"}`

func TestApprovalTimeoutIsItsOwnDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) {
			s.Rules = nil
			s.Timeout, s.ApprovalTimeout = 30*time.Second, time.Hour
		}
		nf := &notes{}
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("nobody decided"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} },
			func(c *Config) { c.Notifier = nf })
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		if exp := e.call("c1").ExpiresAt; exp == nil || !exp.Equal(t0.Add(time.Hour)) {
			t.Fatalf("expires at %v, want an hour after the call (approval_timeout_secs, not timeout_secs)", exp)
		}
		e.clk.Advance(time.Minute) // past the run timeout: still pending
		if got := e.call("c1").Status; got != store.CallAwaiting {
			t.Fatalf("status %s after a minute", got)
		}
		e.clk.Advance(time.Hour)
		e.waitCall("c1", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		if len(runs.list()) != 0 {
			t.Fatal("an expired approval ran")
		}
		if got := nf.types("c1"); !slices.Equal(got, []string{NotifyRequested, NotifyDecided}) {
			t.Fatalf("notifications %v", got)
		}
	})
}

func TestApprovalTimeoutEscalatesToAdmins(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) {
			s.Rules = nil
			s.ApprovalTimeout, s.OnApprovalTimeout = 10*time.Minute, tools.TimeoutEscalate
		}
		nf := &notes{}
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("paid"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} },
			func(c *Config) { c.Notifier = nf })
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		inbox := func(p Principal) int {
			list, err := e.m.PendingApprovals(e.ctx, p)
			if err != nil {
				t.Fatalf("inbox: %v", err)
			}
			return len(list)
		}
		if inbox(e.admin) != 0 {
			t.Fatal("an owner's approval is in the admin's inbox before it escalated")
		}
		e.clk.Advance(10*time.Minute + time.Second)
		e.next("escalation", func(ev Event) bool { return ev.Type == EventToolCall && ev.ToolCallID == "c1" })
		c := e.call("c1")
		if c.Status != store.CallAwaiting || !c.Escalated || c.ExpiresAt == nil || !c.ExpiresAt.After(t0.Add(20*time.Minute)) {
			t.Fatalf("escalated call = %+v", c)
		}
		if inbox(e.admin) != 1 || inbox(e.rev) != 0 {
			t.Fatalf("inboxes after escalation: admin %d, reviewer %d; want the admin's only", inbox(e.admin), inbox(e.rev))
		}
		if got := nf.types("c1"); !slices.Equal(got, []string{NotifyRequested, NotifyEscalated}) {
			t.Fatalf("notifications %v", got)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.admin); err != nil {
			t.Fatalf("admin approves the escalated call: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); !slices.Equal(got, []string{"c1"}) {
			t.Fatalf("ran %v", got)
		}
		if got := auditActions(t, e, "c1"); !slices.Equal(got, []string{"escalate", "override_approve"}) {
			t.Fatalf("audit %v", got)
		}
	})
}

func TestEscalatedApprovalExpiresAtItsSecondDeadline(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) {
			s.Rules = nil
			s.ApprovalTimeout, s.OnApprovalTimeout = time.Minute, tools.TimeoutEscalate
		}
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("nobody"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		e.clk.Advance(time.Minute + time.Second)
		e.next("escalation", func(ev Event) bool { return ev.Type == EventToolCall && ev.ToolCallID == "c1" })
		escalated := e.clk.Now()
		// The poller re-arms after the actor answered the first expiry, which may be after the
		// escalation event reached the test: tick past the new deadline rather than jump once.
		stop := e.tick(time.Second)
		e.waitCall("c1", store.CallExpired)
		stop()
		if waited := e.clk.Now().Sub(escalated); waited < time.Minute {
			t.Fatalf("expired %v after the escalation, before its new deadline of a minute", waited)
		}
		if got := auditActions(t, e, "c1"); !slices.Equal(got, []string{"escalate", "expire"}) {
			t.Fatalf("audit %v", got)
		}
	})
}

func TestGrantRemembersAnApprovalUntilRevoked(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		noRules := func(s *tools.Spec) { s.Rules = nil }
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("paid"),
			callTools(tc{"c2", "pay", smallPay}), say("paid again"),
			callTools(tc{"c3", "pay", smallPay}), say("waiting"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, noRules)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		remember := &Remember{Scope: store.GrantConversation, ForSecs: 3600}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: &Remember{Scope: "team", ForSecs: 3600}}, e.owner); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("a bad scope: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: remember}, e.admin); kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("an admin's override remembers: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: remember}, e.owner); err != nil {
			t.Fatalf("approve and remember: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		grants, err := e.m.Grants(e.ctx, e.owner)
		if err != nil || len(grants) != 1 || grants[0].Tool != "pay" || grants[0].Scope != "conversation" || grants[0].ConversationID != e.conv ||
			!grants[0].ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("grants %+v, %v", grants, err)
		}
		if other, _ := e.m.Grants(e.ctx, e.other); len(other) != 0 {
			t.Fatalf("another user sees %+v", other)
		}

		e.send("pay again")
		e.waitStatus(store.StatusIdle)
		c2 := e.call("c2")
		if c2.Status != store.CallResolved || c2.Grant != grants[0].ID || c2.Approval != tools.Auto {
			t.Fatalf("the remembered call = %+v", c2)
		}
		if got := auditActions(t, e, "c2"); !slices.Equal(got, []string{"grant_used"}) {
			t.Fatalf("audit of c2 %v", got)
		}
		if got := auditActions(t, e, "c1"); !slices.Equal(got, []string{"approve", "grant_create"}) {
			t.Fatalf("audit of c1 %v", got)
		}

		if err := e.m.RevokeGrant(e.ctx, e.other, grants[0].ID); kindOf(err) != fault.KindNotFound {
			t.Fatalf("someone else revokes: %v", err)
		}
		if err := e.m.RevokeGrant(e.ctx, e.owner, grants[0].ID); err != nil {
			t.Fatalf("revoke: %v", err)
		}
		if left, _ := e.m.Grants(e.ctx, e.owner); len(left) != 0 {
			t.Fatalf("grants after revoking %+v", left)
		}
		e.send("pay once more")
		e.waitCall("c3", store.CallAwaiting)
		if got := runs.list(); !slices.Equal(got, []string{"c1", "c2"}) {
			t.Fatalf("ran %v", got)
		}
		recs, _ := e.st.ListAudit(e.ctx, store.AuditFilter{Action: "grant_revoke"})
		if len(recs) != 1 || recs[0].ActorID != e.owner.UserID || recs[0].Tool != "pay" {
			t.Fatalf("revocation audit %+v", recs)
		}
	})
}

func TestGrantsNeverCoverReviewerGatedCalls(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) { s.Rules, s.Approvers = nil, tools.ByReviewer }
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("ok"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		_, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Remember: &Remember{Scope: "user", ForSecs: 600}}, e.rev)
		if kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("remembering a reviewer's approval: %v", err)
		}
	})
}

func TestMOfNApprovals(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) { s.Rules, s.Approvers, s.ApproverCount = nil, tools.ByReviewer, 2 }
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("paid"), callTools(tc{"c2", "pay", smallPay}), say("not paid"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} }, nil)
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		if p := e.view().Pending()["c1"]; p.ApprovalsNeeded != 2 || len(p.Approvals) != 0 {
			t.Fatalf("pending %+v", p)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindPermissionDenied {
			t.Fatalf("the owner counts: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.rev); err != nil {
			t.Fatalf("first approval: %v", err)
		}
		c := e.call("c1")
		if c.Status != store.CallAwaiting || len(c.Approvals) != 1 || c.Approvals[0].By != e.rev.UserID || len(runs.list()) != 0 {
			t.Fatalf("after one approval: %+v, ran %v", c, runs.list())
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.rev); kindOf(err) != fault.KindStale {
			t.Fatalf("a repeat approver: %v, want stale", err)
		}
		if list, _ := e.m.PendingApprovals(e.ctx, e.rev); len(list) != 0 {
			t.Fatalf("the reviewer who approved still has it in the inbox: %+v", list)
		}
		if list, _ := e.m.PendingApprovals(e.ctx, e.admin); len(list) != 1 || len(list[0].Call.Approvals) != 1 || list[0].Call.ApprovalsNeeded != 2 {
			t.Fatalf("the admin's inbox: %+v", list)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.admin); err != nil {
			t.Fatalf("second approval: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); !slices.Equal(got, []string{"c1"}) {
			t.Fatalf("ran %v", got)
		}
		if got := auditActions(t, e, "c1"); !slices.Equal(got, []string{"approve", "approve"}) {
			t.Fatalf("audit %v", got)
		}

		// One deny ends it, whatever came before.
		e.send("pay again")
		e.waitCall("c2", store.CallAwaiting)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c2", Resolution{Decision: "approve"}, e.rev); err != nil {
			t.Fatalf("approval: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c2", Resolution{Decision: "deny", Reason: "no"}, e.admin); err != nil {
			t.Fatalf("deny: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if c := e.call("c2"); c.Status != store.CallDenied {
			t.Fatalf("c2 = %+v", c)
		}
		if len(runs.list()) != 1 {
			t.Fatalf("ran %v", runs.list())
		}
	})
}

// TestNotificationsQueuedWithTheChange: with NotifyOutbox, each approval notification is a row
// of the store's outbox written by the append that makes the change (there as soon as the call
// is pending, before any sender ran), with the payload a Notifier would get; the Notifier is
// still told, as a nudge to deliver.
func TestNotificationsQueuedWithTheChange(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		mod := func(s *tools.Spec) { s.Rules = nil; s.ApprovalTimeout = time.Hour }
		nf := &notes{}
		prov := newScripted(callTools(tc{"c1", "pay", smallPay}), say("nobody decided"))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, mod)} },
			func(c *Config) { c.Notifier, c.NotifyOutbox = nf, true })
		outbox := func() []Notification {
			t.Helper()
			rows, err := e.st.ClaimNotify(e.ctx, e.clk.Now().Add(24*time.Hour), time.Millisecond, 100)
			if err != nil {
				t.Fatal(err)
			}
			var out []Notification
			for _, r := range rows {
				var n Notification
				if err := json.Unmarshal(r.Payload, &n); err != nil || !strings.HasPrefix(r.ID, "ntf_") {
					t.Fatalf("outbox row %s %s: %v", r.ID, r.Payload, err)
				}
				out = append(out, n)
			}
			return out
		}
		e.send("pay")
		e.waitCall("c1", store.CallAwaiting)
		got := outbox()
		if len(got) != 1 || got[0].Type != NotifyRequested || got[0].ToolCallID != "c1" || got[0].Tool != "pay" || got[0].ExpiresAt == nil {
			t.Fatalf("the outbox after the call asked: %+v", got)
		}
		e.clk.Advance(2 * time.Hour)
		e.waitCall("c1", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		got = outbox()
		if len(got) != 2 || got[1].Type != NotifyDecided || got[1].Decision != "expire" {
			t.Fatalf("the outbox after the expiry: %+v", got)
		}
		if types := nf.types("c1"); !slices.Equal(types, []string{NotifyRequested, NotifyDecided}) {
			t.Fatalf("the Notifier was told %v", types)
		}
	})
}
