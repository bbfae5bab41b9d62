package agent

import (
	"testing"

	"parley/internal/tools"
)

// TestPolicy is the specification of who may do what to a conversation (policy.go). Every rule
// has a row that fails when the rule is removed; nothing else in Parley restates these rules.
func TestPolicy(t *testing.T) {
	const owner = "owner"
	var (
		ownerMember   = Principal{UserID: owner, Role: RoleMember, Via: "session"}
		ownerReviewer = Principal{UserID: owner, Role: RoleReviewer, Via: "session"}
		ownerAdmin    = Principal{UserID: owner, Role: RoleAdmin, Via: "session"}
		stranger      = Principal{UserID: "other", Role: RoleMember, Via: "session"}
		reviewer      = Principal{UserID: "rev", Role: RoleReviewer, Via: "token"}
		admin         = Principal{UserID: "adm", Role: RoleAdmin, Via: "session"}
		anonymous     = Principal{}
	)
	ownerGate := Gate{Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Pending: true}
	reviewerGate := Gate{Approval: tools.RequiresApproval, Approvers: tools.ByReviewer, Pending: true}
	autoCall := Gate{Approval: tools.Auto, Approvers: tools.ByReviewer} // no approval step at all
	// Calls that were gated and are decided (or expired, or cancelled) now.
	decidedOwnerGate := Gate{Approval: tools.RequiresApproval, Approvers: tools.ByOwner}
	decidedReviewerGate := Gate{Approval: tools.RequiresApproval, Approvers: tools.ByReviewer}

	t.Run("decide", func(t *testing.T) {
		cases := []struct {
			name      string
			approvers tools.Approvers
			by        Principal
			want      Right
			awaits    bool // the inbox lists it for by
		}{
			{"the owner decides an owner-approved call", tools.ByOwner, ownerMember, AsOwner, true},
			{"a stranger does not", tools.ByOwner, stranger, NoRight, false},
			{"a reviewer does not decide an owner-approved call", tools.ByOwner, reviewer, NoRight, false},
			{"an admin overrides in someone else's conversation", tools.ByOwner, admin, AsOverride, false},
			{"an admin owner decides their own owner-approved call as its owner", tools.ByOwner, ownerAdmin, AsOwner, true},
			{"a reviewer decides a reviewer-gated call", tools.ByReviewer, reviewer, AsReviewer, true},
			{"an admin decides a reviewer-gated call of someone else", tools.ByReviewer, admin, AsReviewer, true},
			{"the owner alone cannot pass a reviewer gate", tools.ByReviewer, ownerMember, NoRight, false},
			{"nor can a reviewer owner: no self-approval", tools.ByReviewer, ownerReviewer, NoRight, false},
			{"nor can an admin owner: admins included", tools.ByReviewer, ownerAdmin, NoRight, false},
			{"a member is no reviewer", tools.ByReviewer, stranger, NoRight, false},
			{"nobody signed in decides nothing", tools.ByOwner, anonymous, NoRight, false},
			{"the system decides (expiries)", tools.ByReviewer, System, AsSystem, false},
		}
		for _, c := range cases {
			if got := DecideRight(c.by, owner, c.approvers); got != c.want {
				t.Errorf("%s: DecideRight = %s, want %s", c.name, got, c.want)
			}
			if got := MayDecide(c.by, owner, c.approvers); got != (c.want != NoRight) {
				t.Errorf("%s: MayDecide = %v", c.name, got)
			}
			if got := AwaitsDecisionBy(c.by, owner, c.approvers); got != c.awaits {
				t.Errorf("%s: AwaitsDecisionBy = %v, want %v", c.name, got, c.awaits)
			}
			// The inbox lists what awaits its viewer, when the viewer has an inbox: a member
			// owner decides on the conversation's page instead.
			if got, want := InInbox(c.by, owner, c.approvers), c.awaits && c.by.Reviews(); got != want {
				t.Errorf("%s: InInbox = %v, want %v", c.name, got, want)
			}
		}
	})

	t.Run("answer and send", func(t *testing.T) {
		cases := []struct {
			name         string
			by           Principal
			answer, send bool
		}{
			{"the owner", ownerMember, true, true},
			{"an admin owner", ownerAdmin, true, true},
			{"a reviewer", reviewer, false, false},
			{"an admin of someone else's conversation", admin, false, false},
			{"a stranger", stranger, false, false},
			{"nobody", anonymous, false, false},
			{"the system answers (an expiry) but sends nothing", System, true, false},
		}
		for _, c := range cases {
			if got := MayAnswer(c.by, owner); got != c.answer {
				t.Errorf("%s: MayAnswer = %v, want %v", c.name, got, c.answer)
			}
			if got := MaySend(c.by, owner); got != c.send {
				t.Errorf("%s: MaySend = %v, want %v", c.name, got, c.send)
			}
		}
	})

	t.Run("see", func(t *testing.T) {
		cases := []struct {
			name  string
			by    Principal
			gates []Gate
			want  bool
		}{
			{"the owner sees their conversation", ownerMember, nil, true},
			{"the system sees every conversation", System, nil, true},
			{"a stranger sees nothing", stranger, []Gate{ownerGate, reviewerGate}, false},
			{"a reviewer sees nothing without a call of theirs", reviewer, []Gate{ownerGate, autoCall}, false},
			{"a reviewer who may decide a call reads its conversation", reviewer, []Gate{ownerGate, reviewerGate}, true},
			{"an admin who may override a call reads its conversation", admin, []Gate{ownerGate}, true},
			{"an admin sees nothing without a gated call", admin, []Gate{autoCall}, false},
			{"a reviewer reads nothing once the call they could decide is decided", reviewer, []Gate{decidedReviewerGate, ownerGate}, false},
			{"an admin reads nothing once nothing awaits a decision", admin, []Gate{decidedReviewerGate, decidedOwnerGate}, false},
			{"a reviewer reads again while a later call awaits them", reviewer, []Gate{decidedReviewerGate, reviewerGate}, true},
			{"the owner reads their decided calls", ownerMember, []Gate{decidedReviewerGate}, true},
			{"nobody sees nothing", anonymous, []Gate{reviewerGate}, false},
		}
		for _, c := range cases {
			if got := MaySee(c.by, owner, c.gates); got != c.want {
				t.Errorf("%s: MaySee = %v, want %v", c.name, got, c.want)
			}
		}
		for _, c := range []struct {
			name string
			by   Principal
			want bool
		}{
			{"a reviewer has the inbox", reviewer, true},
			{"an admin has the inbox", admin, true},
			{"a reviewer owner has the inbox", ownerReviewer, true},
			{"the system follows every conversation (the inbox feed)", System, true},
			{"a member has no inbox, not even as an owner", ownerMember, false},
			{"a stranger has no inbox", stranger, false},
			{"nobody signed in has no inbox", anonymous, false},
		} {
			if got := MayFollowAll(c.by); got != c.want {
				t.Errorf("%s: MayFollowAll = %v, want %v", c.name, got, c.want)
			}
		}
	})

	t.Run("grants", func(t *testing.T) {
		for _, c := range []struct {
			name  string
			right Right
			gate  Gate
			want  bool
		}{
			{"the owner remembers their approval of an owner-approved call", AsOwner, ownerGate, true},
			{"an admin's override is not the owner's consent", AsOverride, ownerGate, false},
			{"a reviewer's approval is not remembered", AsReviewer, reviewerGate, false},
			{"nor the owner's of a reviewer-gated call", AsOwner, reviewerGate, false},
			{"nor of an M-of-N call", AsOwner, Gate{Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Count: 2}, false},
			{"nor of a call with no approval step", AsOwner, Gate{Approval: tools.Auto, Approvers: tools.ByOwner}, false},
			{"a grant never rises above a rule: not of a call a rule asked about", AsOwner,
				Gate{Approval: tools.RequiresApproval, Approvers: tools.ByOwner, Ruled: true}, false},
		} {
			if got := MayRemember(c.right, c.gate); got != c.want {
				t.Errorf("%s: MayRemember = %v, want %v", c.name, got, c.want)
			}
		}
		for _, c := range []struct {
			name          string
			by            Principal
			revoke, admin bool // revoke the owner's grant; list everyone's
		}{
			{"the grant's owner revokes it", ownerMember, true, false},
			{"an admin revokes anyone's and lists everyone's", admin, true, true},
			{"a reviewer does not", reviewer, false, false},
			{"a stranger does not", stranger, false, false},
			{"nobody signed in does not", anonymous, false, false},
			{"the system does not", System, false, false},
		} {
			if got := MayRevokeGrant(c.by, owner); got != c.revoke {
				t.Errorf("%s: MayRevokeGrant = %v, want %v", c.name, got, c.revoke)
			}
			if got := MayManageAllGrants(c.by); got != c.admin {
				t.Errorf("%s: MayManageAllGrants = %v, want %v", c.name, got, c.admin)
			}
		}
	})
}
