package agent

import (
	"time"

	"parley/internal/tools"
)

// Notification kinds (API.md "Approval governance": the notification webhook's "type").
const (
	NotifyRequested = "approval.requested"
	NotifyEscalated = "approval.escalated"
	NotifyDecided   = "approval.decided"
)

// Notification is what a Notifier is told about an approval, after it is durable.
type Notification struct {
	Type           string          `json:"type"`
	ConversationID string          `json:"conversation_id"`
	ToolCallID     string          `json:"tool_call_id"`
	Tool           string          `json:"tool"`
	OwnerID        string          `json:"owner_id"`
	Approvers      tools.Approvers `json:"approvers"`
	// ApprovalsNeeded and Approvals are the call's quorum (1 and none unless M-of-N).
	ApprovalsNeeded int            `json:"approvals_needed"`
	Approvals       []ApprovalView `json:"approvals,omitempty"`
	Escalated       bool           `json:"escalated,omitempty"`
	// Decision (approve, approve_edited, deny, expire) and By (a user id, or "system") say how
	// a decided approval ended; Reason is a denial's.
	Decision  string     `json:"decision,omitempty"`
	By        string     `json:"by,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	At        time.Time  `json:"at"`
}

// Notifier takes notifications. Notify is called from a conversation's actor and must not
// block: an implementation queues (bounded) and sends elsewhere.
type Notifier interface {
	Notify(Notification)
}

// notify tells the configured Notifier about c's approval.
func (a *actor) notify(c *call, typ, decision, by, reason string) {
	nf := a.cfg().Notifier
	if nf == nil {
		return
	}
	nf.Notify(Notification{Type: typ, ConversationID: a.id, ToolCallID: c.id, Tool: c.name, OwnerID: a.st.conv.OwnerID,
		Approvers: c.approvers, ApprovalsNeeded: c.approvalsNeeded(), Approvals: c.approvalViews(), Escalated: c.escalated,
		Decision: decision, By: by, Reason: reason, ExpiresAt: c.expiresAt, At: a.now()})
}
