package agent

import (
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the access policy: who may see, follow, send to, decide and answer a
// conversation's calls. It is the only statement of those rules; the actor, the web handlers
// and the views all ask these functions, and TestPolicy is their specification.

// Role is an account's role as the policy reads it (the store keeps it with the account).
type Role = store.Role

// Roles.
const (
	RoleMember   = store.RoleMember
	RoleReviewer = store.RoleReviewer
	RoleAdmin    = store.RoleAdmin
)

// Right is the ground on which a principal may decide an approval.
type Right int

// Rights, from none to the system's.
const (
	// NoRight: the principal may not decide the call.
	NoRight Right = iota
	// AsOwner: the conversation's owner decides an owner-approved call.
	AsOwner
	// AsReviewer: a reviewer (or an admin) who is not the owner decides a reviewer-gated call.
	AsReviewer
	// AsOverride: an admin decides an owner-approved call in someone else's conversation. It is
	// allowed and audited as an override; the inbox does not offer it.
	AsOverride
	// AsSystem: the app's own decision (an expiry).
	AsSystem
)

// String names the right as the log and the audit trail record it.
func (r Right) String() string {
	switch r {
	case AsOwner:
		return "owner"
	case AsReviewer:
		return "reviewer"
	case AsOverride:
		return "override"
	case AsSystem:
		return "system"
	}
	return "none"
}

// Gate is what the policy reads of a call: how it is gated and who approves it.
type Gate struct {
	Approval  tools.Approval
	Approvers tools.Approvers
	// Count is how many distinct approvers the call needs (M-of-N); 0 and 1 mean one.
	Count int
	// Ruled says a rule of the tool (in enforce mode) decided the gate: it asked, or its
	// evaluation failed and the call is asked about.
	Ruled bool
	// Pending says the call awaits an approval decision now.
	Pending bool
}

// gated reports whether the call has an approval step at all.
func (g Gate) gated() bool { return g.Approval == tools.RequiresApproval }

func (p Principal) system() bool { return p.Via == "system" }

// Reviews reports whether the principal's role reviews other people's calls.
func (p Principal) Reviews() bool { return p.Role == RoleReviewer || p.Role == RoleAdmin }

// DecideRight is the ground on which by may decide the approval of a call gated by approvers in
// a conversation owned by ownerID. A reviewer-gated call needs a second pair of eyes: a reviewer
// or an admin who is not the owner (no self-approval, admins included). An owner-approved call
// is its owner's; an admin may decide it in someone else's conversation as an override.
func DecideRight(by Principal, ownerID string, approvers tools.Approvers) Right {
	switch {
	case by.system():
		return AsSystem
	case by.UserID == "":
		return NoRight
	case approvers == tools.ByReviewer:
		if by.Reviews() && by.UserID != ownerID {
			return AsReviewer
		}
		return NoRight
	case by.UserID == ownerID:
		return AsOwner
	case by.Role == RoleAdmin:
		return AsOverride
	}
	return NoRight
}

// MayDecide reports whether by may decide the approval of a call gated by approvers in a
// conversation owned by ownerID.
func MayDecide(by Principal, ownerID string, approvers tools.Approvers) bool {
	return DecideRight(by, ownerID, approvers) != NoRight
}

// AwaitsDecisionBy reports whether a pending approval waits for by: it is theirs to decide as
// the owner or as a reviewer (overrides are possible but not asked for). The inbox lists these.
func AwaitsDecisionBy(by Principal, ownerID string, approvers tools.Approvers) bool {
	r := DecideRight(by, ownerID, approvers)
	return r == AsOwner || r == AsReviewer
}

// MayAnswer reports whether by may answer a question (an elicitation) or report a browser
// tool's result in a conversation owned by ownerID: the owner alone (and the system, whose
// answer is an expiry).
func MayAnswer(by Principal, ownerID string) bool {
	return by.system() || (by.UserID != "" && by.UserID == ownerID)
}

// MaySend reports whether by may post a message (start a turn) in a conversation owned by
// ownerID: the owner alone.
func MaySend(by Principal, ownerID string) bool {
	return by.UserID != "" && by.UserID == ownerID && !by.system()
}

// MayManage reports whether by may rename or delete a conversation owned by ownerID: the owner
// alone. Nobody else, admins and the system included: a conversation is its owner's, and what
// others may decide in it gives them no say over the conversation itself.
func MayManage(by Principal, ownerID string) bool {
	return by.UserID != "" && by.UserID == ownerID && !by.system()
}

// MaySee reports whether by may read a conversation owned by ownerID whose calls are gated as
// gates say, and follow its events: the owner, the system, and whoever may decide one of its
// calls that awaits an approval now (read-only: a reviewer opening a call from the inbox sees its
// context). The right of a decider lasts while a call awaits them: once nothing of the
// conversation does, they read nothing of it any more, neither the owner's later messages nor
// the call they decided (its outcome reaches them as the owner's conversation, not theirs: the
// audit trail has it for admins). Anyone else learns nothing, not even that the conversation
// exists.
func MaySee(by Principal, ownerID string, gates []Gate) bool {
	if by.system() || (by.UserID != "" && by.UserID == ownerID) {
		return true
	}
	for _, g := range gates {
		if g.gated() && g.Pending && MayDecide(by, ownerID, g.Approvers) {
			return true
		}
	}
	return false
}

// MayFollowAll reports whether by has the inbox: its page, its socket (which follows every
// conversation's events and shows only what the inbox lists) and GET /api/v1/approvals.
// Reviewers and admins, and the system (whose inbox feed computes the pending approvals once
// for every socket). A member has nothing to review: they decide their own calls on their
// conversation's page.
func MayFollowAll(by Principal) bool {
	return by.system() || (by.UserID != "" && by.Reviews())
}

// InInbox reports whether a pending approval of a conversation owned by ownerID, gated by
// approvers, is listed in by's inbox: by has an inbox and the approval waits for by's decision.
func InInbox(by Principal, ownerID string, approvers tools.Approvers) bool {
	return !by.system() && MayFollowAll(by) && AwaitsDecisionBy(by, ownerID, approvers)
}

// MayRemember reports whether a decision taken on right may remember its approval (make a
// grant) for a call gated as g, and whether a grant may stand in for that approval: the owner's
// own approval of an owner-approved call that needs one approver, and that no rule decided. A
// grant never covers a reviewer-gated or M-of-N call, never rises above a rule (a rule's ask
// applies whoever it asks), and an admin's override is not the owner's consent.
func MayRemember(right Right, g Gate) bool {
	return right == AsOwner && g.gated() && g.Approvers == tools.ByOwner && g.Count <= 1 && !g.Ruled
}

// MayManageAllGrants reports whether by may list every person's grants: admins.
func MayManageAllGrants(by Principal) bool {
	return by.UserID != "" && !by.system() && by.Role == RoleAdmin
}

// MayRevokeGrant reports whether by may revoke a grant of userID's: its owner, or an admin.
func MayRevokeGrant(by Principal, userID string) bool {
	return by.UserID != "" && !by.system() && (by.UserID == userID || by.Role == RoleAdmin)
}

// InInboxCall is InInbox for a pending approval that may have been escalated (its own deadline
// passed with on_approval_timeout "escalate"): an escalated approval also waits for every admin
// but the owner, who may decide it (as a reviewer or as an override, DecideRight).
func InInboxCall(by Principal, ownerID string, approvers tools.Approvers, escalated bool) bool {
	if InInbox(by, ownerID, approvers) {
		return true
	}
	return escalated && !by.system() && by.Role == RoleAdmin && by.UserID != "" && by.UserID != ownerID
}
