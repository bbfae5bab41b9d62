package agent

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// Notification kinds (docs/api.md, "Approval notifications": the notification webhook's "type").
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
	ApprovalsNeeded int        `json:"approvals_needed"`
	Approvals       []approval `json:"approvals,omitempty"`
	Escalated       bool       `json:"escalated,omitempty"`
	// Decision (approve, approve_edited, deny, expire) and By (a user id, or "system") say how
	// a decided approval ended; Reason is a denial's.
	Decision  string     `json:"decision,omitempty"`
	By        string     `json:"by,omitempty"`
	Reason    string     `json:"reason,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	At        time.Time  `json:"at"`
}

// Notifier takes notifications. Notify is called from a conversation's actor once the change it
// announces is durable, and must not block: an implementation queues (bounded) and sends
// elsewhere. With Config.NotifyOutbox the notification is already in the store's outbox,
// written with the change: Notify is then only a nudge to deliver it now.
type Notifier interface {
	Notify(Notification)
}

// announcement is a notification the next commit makes: of call id's approval, built from the
// call as that commit leaves it.
type announcement struct {
	id, typ, decision, by, reason string
	// ifAsks announces only when the call then awaits an approval (a call the model just made).
	ifAsks bool
}

// announce says that the next commit announces typ about call id (requested, escalated,
// decided). Called right before that commit, which takes every announcement, committed or not.
func (a *actor) announce(id, typ, decision, by, reason string) {
	if a.cfg().Notifier == nil && !a.cfg().NotifyOutbox {
		return
	}
	a.announcing = append(a.announcing, announcement{id: id, typ: typ, decision: decision, by: by, reason: reason})
}

// announceIfAsks is announce of approval.requested for a call the next commit makes, when it
// makes it wait for an approval.
func (a *actor) announceIfAsks(id string) {
	if a.cfg().Notifier == nil && !a.cfg().NotifyOutbox {
		return
	}
	a.announcing = append(a.announcing, announcement{id: id, typ: NotifyRequested, ifAsks: true})
}

// announcements builds the pending announcements from the calls as the commit being made left
// them (its entries applied), and forgets them.
func (a *actor) announcements() []Notification {
	if len(a.announcing) == 0 {
		return nil
	}
	var out []Notification
	for _, an := range a.announcing {
		c := a.st.calls[an.id]
		if c == nil || (an.ifAsks && (c.status != store.CallAwaiting || c.kind != tools.PendingApproval)) {
			continue
		}
		out = append(out, Notification{Type: an.typ, ConversationID: a.id, ToolCallID: c.id, Tool: c.name, OwnerID: a.st.conv.OwnerID,
			Approvers: c.approvers, ApprovalsNeeded: c.approvalsNeeded(), Approvals: c.approvalsMade(), Escalated: c.escalated,
			Decision: an.decision, By: an.by, Reason: an.reason, ExpiresAt: c.expiresAt, At: a.now()})
	}
	a.announcing = nil
	return out
}

// queueNotifications puts notes in b's outbox rows when notifications are durable.
func (a *actor) queueNotifications(b *store.Batch, notes []Notification) {
	if !a.cfg().NotifyOutbox {
		return
	}
	for _, n := range notes {
		var id [12]byte
		_, _ = rand.Read(id[:])
		b.Notify = append(b.Notify, store.NotifyMessage{ID: "ntf_" + hex.EncodeToString(id[:]), Payload: mustJSON(n)})
	}
}

// notifyAll tells the Notifier about notes, once they are durable.
func (a *actor) notifyAll(notes []Notification) {
	if nf := a.cfg().Notifier; nf != nil {
		for _, n := range notes {
			nf.Notify(n)
		}
	}
}
