package agent

import (
	"time"

	"parley/internal/fault"
	"parley/internal/store"
)

// approval is one approver's approve of an M-of-N call.
type approval struct {
	By       string    `json:"by"`
	At       time.Time `json:"at"`
	ArgsHash string    `json:"-"` // the arguments approved: approvals of other arguments do not count
}

// approvalsNeeded is how many distinct approvals the call needs (at least 1).
func (c *call) approvalsNeeded() int { return max(1, c.needed) }

// approvalsMade copies the approvals so far, who and when (records and notifications write them
// so: {"by", "at"}), without the arguments they approved.
func (c *call) approvalsMade() []approval {
	if len(c.approvals) == 0 {
		return nil
	}
	out := make([]approval, len(c.approvals))
	for i, a := range c.approvals {
		out[i] = approval{By: a.By, At: a.At}
	}
	return out
}

// approvalViews copies the approvals so far.
func (c *call) approvalViews() []ApprovalView { return viewsOf(c.approvals) }

// checkQuorum checks one approve of an M-of-N call by by, and says whether it is the last one
// needed. Each approval counts once per person: a repeat is stale (409), as an answer to a
// question already answered. The approvers' arguments must be the model's: people approving
// one after the other must approve the same thing.
//
// counting is how many of the approvals so far still count (approvers who hold the right now,
// of the arguments as they stand).
func (c *call) checkQuorum(r Resolution, by Principal, counting int) (final bool, err error) {
	for _, ap := range c.approvals {
		if ap.By == by.UserID {
			return false, fault.New(fault.KindStale, "you have already approved this call; it needs another approver",
				map[string]any{"tool_call_id": c.id, "approvals": len(c.approvals), "approvals_needed": c.approvalsNeeded()})
		}
	}
	if present(r.Args) && canonicalHash(r.Args) != canonicalHash(c.effectiveArgs()) {
		return false, errQuorumEdit()
	}
	if r.Remember != nil {
		return false, fault.InvalidAt("a call that needs several approvers cannot be remembered", "/remember", "grants never cover M-of-N tools")
	}
	return counting+1 >= c.approvalsNeeded(), nil
}

// approvePartly records one approval of an M-of-N call that needs more: the call stays pending,
// its card says "1 of 2 approved — by rita", and the approval is audited.
func (a *actor) approvePartly(c *call, by Principal, right Right, key string) error {
	now := a.now()
	d := decisionData{Decision: decisionPartial, By: by.UserID, Role: string(by.Role), Via: by.Via, ArgsHash: canonicalHash(c.effectiveArgs()), At: now, Key: key}
	b := store.Batch{
		Entries: []store.Entry{{Type: store.EntryDecision, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(d)}},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID, Action: auditAction("approve", right),
			ArgsHash: d.ArgsHash, At: now,
			Detail: mustJSON(map[string]any{"approval": len(c.approvals) + 1, "approvals_needed": c.approvalsNeeded(), "partial": true})}},
		Urgent: true,
	}
	a.stage(b, []string{c.id})
	a.publishCall(c)
	a.log.Info("approval recorded; more needed", "tool_call_id", c.id, "approvals", len(c.approvals), "needed", c.approvalsNeeded())
	return nil
}

// errQuorumEdit refuses edited arguments of a call that needs several approvers: people
// approving one after the other must approve the same thing.
func errQuorumEdit() *fault.Error {
	return fault.InvalidAt("a call that needs several approvers cannot be edited", "/args",
		"approve the arguments as they are, or deny the call")
}
