package agent

import (
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the approval's own deadline running out with on_approval_timeout "escalate":
// the call stays pending, admins may now decide it (policy.go: InInboxCall lists it in their
// inbox), it gets a new deadline of the same length, the notification webhook is told, and
// the audit trail records the escalation. When the new deadline passes too, the call expires
// as any other (handleExpire).

// escalate records the escalation of c's approval.
func (a *actor) escalate(c *call) error {
	now := a.now()
	exp := now.Add(a.cfg().approvalTimeout(c.tool))
	d := decisionData{Decision: decisionEscalate, By: System.UserID, Via: System.Via, ArgsHash: canonicalHash(c.args), ExpiresAt: &exp}
	b := store.Batch{
		Entries:  []store.Entry{{Type: store.EntryDecision, ToolCallID: c.id, Actor: System.UserID, Data: mustJSON(d)}},
		Schedule: []store.Expiry{{ConversationID: a.id, ToolCallID: c.id, At: exp}},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: System.UserID, Action: "escalate",
			ArgsHash: d.ArgsHash, Detail: mustJSON(map[string]any{"expires_at": exp, "approvers": "admin"}), At: now}},
	}
	a.announce(c.id, NotifyEscalated, "", System.UserID, "")
	a.stage(b, []string{c.id})
	a.log.Info("approval escalated to admins", "tool_call_id", c.id, "tool", c.name, "expires_at", exp)
	a.publishCall(c)
	return nil
}

// Decisions the governance code records in decision entries beside approve and deny.
const (
	decisionEscalate = "escalate"       // the approval's time ran out; admins may decide it
	decisionPartial  = "approve_quorum" // one approval of an M-of-N call that needs more
	decisionPropose  = "propose_edit"   // edited arguments that need more than their proposer (resolve.go)
)

// applyGovernance folds a decision entry that does not end the approval (an escalation, one of
// several approvals) into the call; it reports whether it did.
func (c *call) applyGovernance(d decisionData) bool {
	switch d.Decision {
	case decisionEscalate:
		c.escalated = true
		c.expiresAt = d.ExpiresAt
		return true
	case decisionPartial:
		c.approvals = append(c.approvals, approval{By: d.By, At: d.At, ArgsHash: d.ArgsHash})
		return true
	case decisionPropose:
		// Edited arguments that the rules put under a stricter gate: they become the call's
		// pending arguments, under that gate, and approvals of the earlier ones stop counting.
		c.runArgs, c.proposedBy = d.Args, d.By
		c.approvers, c.needed, c.rule = tools.Approvers(d.Approvers), d.Needed, d.Rule
		c.approvals = nil
		if d.Counts {
			c.approvals = append(c.approvals, approval{By: d.By, At: d.At, ArgsHash: d.ArgsHash})
		}
		return true
	}
	return false
}
