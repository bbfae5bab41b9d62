package agent

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is remembered approvals (grants): an owner who approves a call "and remember" for
// this conversation or for themselves, for a time, lets later calls of that tool in that scope,
// with the arguments the grant covers, run without a suspension. Grants are rows in the store (the
// truth for every process), made in the approval's own append, listed and revoked through the
// door (by their owner, or by an admin), audited.
//
// A grant stands in for the owner's plain approval and nothing more (policy.go: MayRemember):
// it never covers a reviewer-gated or M-of-N call, and never a call whose gate a rule of the tool
// decided. A rule's ask (whoever it asks, however many) and its deny apply as if there were no
// grant; a grant is looked up only when no rule (in enforce mode) matched the call.
//
// A grant covers the arguments it was given for: by default the approved call's exact
// arguments (their canonical form: key order and spacing do not matter, any other difference
// does). The owner may instead remember it for any arguments, but only of a tool that has no
// rules at all: a tool whose author wrote rules tells arguments apart, and one approval is not
// consent to every argument such a tool can take. Grants made before arguments were recorded
// (migration 019) cover any arguments and say so wherever grants are listed.

// Remember asks an approve to make a grant.
type Remember struct {
	Scope   string // "conversation" or "user"
	ForSecs int64  // how long it lasts
	// Args is which arguments of later calls it covers: "exact" (the default: the approved
	// call's arguments, and no others) or "any" (a tool without rules only).
	Args string
}

// Bounds of a grant's life.
const (
	MinGrantSecs = 60
	MaxGrantSecs = 90 * 24 * 3600
)

// Which arguments a grant covers (Remember.Args, Grant.Args).
const (
	GrantArgsExact = store.GrantArgsExact
	GrantArgsAny   = store.GrantArgsAny
)

// grantData is the grant an approve made, in its decision entry.
type grantData struct {
	ID        string    `json:"id"`
	Scope     string    `json:"scope"`
	ExpiresAt time.Time `json:"expires_at"`
	Args      string    `json:"args,omitempty"` // exact or any ("" before migration 019: any)
}

// Grant is a remembered approval as the door lists it (the API's JSON of it is web's).
type Grant struct {
	ID             string
	UserID         string // whose calls it lets run (the conversation's owner)
	Tool           string
	Scope          string
	ConversationID string
	ToolCallID     string // the approval that made it
	Args           string // "exact" or "any"
	ArgsHash       string
	ExpiresAt      time.Time
	CreatedAt      time.Time
}

// grantOf is a grant row as the door lists it.
func grantOf(g store.Grant) Grant {
	return Grant{ID: g.ID, UserID: g.UserID, Tool: g.Tool, Scope: g.Scope, ConversationID: g.ConversationID, ToolCallID: g.ToolCallID,
		Args: g.ArgsScope, ArgsHash: g.ArgsHash, ExpiresAt: g.ExpiresAt, CreatedAt: g.CreatedAt}
}

// grantFrom checks an approve's remember and returns the grant it makes (nil when it asks for
// none). run is the arguments approved (the call's, or the approver's edit): an exact grant
// covers those. ruled says an enforced rule decided how those arguments are gated.
func (a *actor) grantFrom(c *call, r Resolution, by Principal, right Right, run json.RawMessage, ruled bool, now time.Time) (*store.Grant, error) {
	if r.Remember == nil {
		return nil, nil
	}
	if !MayRemember(right, Gate{Approval: c.approval, Approvers: c.approvers, Count: c.approvalsNeeded(), Ruled: ruled}) {
		if ruled && right == AsOwner {
			return nil, fault.New(fault.KindPermissionDenied,
				"a rule of the tool decides calls like this one, and a remembered approval never stands in for a rule: approve it without remembering", nil)
		}
		return nil, fault.New(fault.KindPermissionDenied,
			"only the owner remembers an approval, and never of a reviewer-gated or M-of-N call", nil)
	}
	rem := *r.Remember
	if rem.Scope != store.GrantConversation && rem.Scope != store.GrantUser {
		return nil, fault.InvalidAt("a grant's scope is conversation or user", "/remember/scope", `must be "conversation" or "user"`)
	}
	if rem.ForSecs < MinGrantSecs || rem.ForSecs > MaxGrantSecs {
		return nil, fault.InvalidAt("a grant lasts from a minute to 90 days", "/remember/for_secs", "must be between 60 and 7776000")
	}
	g := &store.Grant{ID: "grant_" + newCallID()[len("call_"):], UserID: a.st.conv.OwnerID, Tool: c.name, Scope: rem.Scope,
		ConversationID: a.id, ToolCallID: c.id, CreatedBy: by.UserID, CreatedAt: now,
		ExpiresAt: now.Add(time.Duration(rem.ForSecs) * time.Second)}
	switch rem.Args {
	case "", GrantArgsExact:
		g.ArgsScope, g.ArgsHash = GrantArgsExact, canonicalHash(run)
	case GrantArgsAny:
		if c.tool == nil || len(c.tool.Rules()) > 0 {
			return nil, fault.InvalidAt("this tool has rules that tell its arguments apart: remember these exact arguments only",
				"/remember/args", `must be "exact" for a tool with rules`)
		}
		g.ArgsScope = GrantArgsAny
	default:
		return nil, fault.InvalidAt("a grant covers these exact arguments or any arguments", "/remember/args", `must be "exact" or "any"`)
	}
	return g, nil
}

// grantAudit is the audit record of a grant made.
func grantAudit(g store.Grant, c *call, now time.Time) store.AuditRecord {
	return store.AuditRecord{ConversationID: g.ConversationID, ToolCallID: c.id, Tool: g.Tool, ActorID: g.CreatedBy, Action: "grant_create",
		ArgsHash: canonicalHash(c.args), At: now,
		Detail: mustJSON(map[string]any{"grant_id": g.ID, "scope": g.Scope, "expires_at": g.ExpiresAt, "user_id": g.UserID,
			"args": g.ArgsScope, "grant_args_hash": g.ArgsHash})}
}

// applyGrant lets a call of t with args run without a suspension when the owner has a grant for
// its tool in this conversation that covers those arguments. Only a gate that the owner's plain
// approval would open may be opened by a grant (MayRemember: owner-approved, one approval, no
// rule decided it); a failed read keeps the gate closed.
func (a *actor) applyGrant(t *tools.Tool, args json.RawMessage, g callGate) callGate {
	if !MayRemember(AsOwner, Gate{Approval: g.approval, Approvers: g.approvers, Count: max(1, g.needed), Ruled: g.ruled()}) {
		return g
	}
	gr, err := a.cfg().Store.ActiveGrant(a.m.base, a.st.conv.OwnerID, a.id, t.Name(), canonicalHash(args), a.now())
	if errors.Is(err, store.ErrNotFound) {
		return g
	}
	if err != nil {
		a.log.Warn("read grants; the call waits for an approval", "tool", t.Name(), "err", err)
		return g
	}
	a.log.Info("grant lets the call run", "tool", t.Name(), "grant_id", gr.ID, "args", gr.ArgsScope)
	g.approval, g.grant = tools.Auto, gr.ID
	return g
}

// Grants lists by's active grants, newest first.
func (m *Manager) Grants(ctx context.Context, by Principal) ([]Grant, error) {
	if by.UserID == "" || by.system() {
		return nil, permissionDenied("grants belong to people")
	}
	list, err := m.cfg.Store.ListGrants(ctx, by.UserID, m.cfg.Clock.Now())
	if err != nil {
		return nil, m.internalError("list grants", err)
	}
	out := make([]Grant, len(list))
	for i, g := range list {
		out[i] = grantOf(g)
	}
	return out, nil
}

// MaxListedGrants bounds the grants AllGrants lists.
const MaxListedGrants = 1000

// AllGrants lists every person's active grants, newest first (at most MaxListedGrants), for an
// admin (MayManageAllGrants); anyone else is refused with permission_denied.
func (m *Manager) AllGrants(ctx context.Context, by Principal) ([]Grant, error) {
	if !MayManageAllGrants(by) {
		return nil, permissionDenied("only admins list everyone's remembered approvals")
	}
	list, err := m.cfg.Store.AllGrants(ctx, m.cfg.Clock.Now(), MaxListedGrants)
	if err != nil {
		return nil, m.internalError("list every grant", err)
	}
	out := make([]Grant, len(list))
	for i, g := range list {
		out[i] = grantOf(g)
	}
	return out, nil
}

// RevokeGrant revokes the grant id at once: later calls suspend again. Its owner may revoke it,
// and an admin may revoke anyone's (MayRevokeGrant). It is not_found when there is no such
// active grant, or when by may not revoke it (someone else's, to a non-admin: they learn nothing
// of it). Audited as grant_revoke, by by, naming whose grant it was.
func (m *Manager) RevokeGrant(ctx context.Context, by Principal, id string) error {
	if by.UserID == "" || by.system() {
		return permissionDenied("grants belong to people")
	}
	notFound := fault.New(fault.KindNotFound, "no such grant", map[string]any{"grant_id": id})
	now := m.cfg.Clock.Now()
	g, err := m.cfg.Store.GrantByID(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound
	}
	if err != nil {
		return m.internalError("read grant", err)
	}
	if !MayRevokeGrant(by, g.UserID) {
		return notFound
	}
	detail := map[string]any{"grant_id": id, "user_id": g.UserID}
	if g.UserID != by.UserID {
		detail["admin"] = true
	}
	audit := store.AuditRecord{ConversationID: g.ConversationID, Tool: g.Tool, ActorID: by.UserID, Action: "grant_revoke", At: now,
		Detail: mustJSON(detail)}
	err = m.cfg.Store.RevokeGrant(ctx, g.UserID, id, now, audit)
	if errors.Is(err, store.ErrNotFound) {
		return notFound // revoked or expired already
	}
	if err != nil {
		return m.internalError("revoke grant", err)
	}
	m.cfg.Logger.Info("grant revoked", "grant_id", id, "by", by.UserID, "user_id", g.UserID)
	return nil
}
