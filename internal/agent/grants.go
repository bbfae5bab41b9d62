package agent

import (
	"context"
	"errors"
	"time"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is remembered approvals (grants): an owner who approves a call "and remember" for
// this conversation or for themselves, for a time, lets later calls of that tool in that scope
// run without a suspension. Grants are rows in the store (the truth for every process), made in
// the approval's own append, listed and revoked through the door, audited, and never cover a
// reviewer-gated or M-of-N call (policy.go: MayRemember).

// Remember asks an approve to make a grant.
type Remember struct {
	Scope   string // "conversation" or "user"
	ForSecs int64  // how long it lasts
}

// Bounds of a grant's life.
const (
	MinGrantSecs = 60
	MaxGrantSecs = 90 * 24 * 3600
)

// grantData is the grant an approve made, in its decision entry.
type grantData struct {
	ID        string    `json:"id"`
	Scope     string    `json:"scope"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Grant is a remembered approval as the door lists it (the API's JSON of it is web's).
type Grant struct {
	ID             string
	Tool           string
	Scope          string
	ConversationID string
	ExpiresAt      time.Time
	CreatedAt      time.Time
}

// grantFrom checks an approve's remember and returns the grant it makes (nil when it asks for
// none).
func (a *actor) grantFrom(c *call, r Resolution, by Principal, right Right, now time.Time) (*store.Grant, error) {
	if r.Remember == nil {
		return nil, nil
	}
	if !MayRemember(right, Gate{Approval: c.approval, Approvers: c.approvers, Count: c.approvalsNeeded()}) {
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
	return &store.Grant{ID: "grant_" + newCallID()[len("call_"):], UserID: a.st.conv.OwnerID, Tool: c.name, Scope: rem.Scope,
		ConversationID: a.id, ToolCallID: c.id, CreatedBy: by.UserID, CreatedAt: now,
		ExpiresAt: now.Add(time.Duration(rem.ForSecs) * time.Second)}, nil
}

// grantAudit is the audit record of a grant made.
func grantAudit(g store.Grant, c *call, now time.Time) store.AuditRecord {
	return store.AuditRecord{ConversationID: g.ConversationID, ToolCallID: c.id, Tool: g.Tool, ActorID: g.CreatedBy, Action: "grant_create",
		ArgsHash: canonicalHash(c.args), At: now,
		Detail: mustJSON(map[string]any{"grant_id": g.ID, "scope": g.Scope, "expires_at": g.ExpiresAt, "user_id": g.UserID})}
}

// applyGrant lets a call run without a suspension when the owner has a grant for its tool in
// this conversation. Only an owner-approved, single-approval gate may be opened by a grant; a
// failed read keeps the gate closed.
func (a *actor) applyGrant(t *tools.Tool, g callGate) callGate {
	if !MayRemember(AsOwner, Gate{Approval: g.approval, Approvers: g.approvers, Count: max(1, g.needed)}) {
		return g
	}
	gr, err := a.cfg().Store.ActiveGrant(a.m.base, a.st.conv.OwnerID, a.id, t.Name(), a.now())
	if errors.Is(err, store.ErrNotFound) {
		return g
	}
	if err != nil {
		a.log.Warn("read grants; the call waits for an approval", "tool", t.Name(), "err", err)
		return g
	}
	a.log.Info("grant lets the call run", "tool", t.Name(), "grant_id", gr.ID)
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
		out[i] = Grant{ID: g.ID, Tool: g.Tool, Scope: g.Scope, ConversationID: g.ConversationID, ExpiresAt: g.ExpiresAt, CreatedAt: g.CreatedAt}
	}
	return out, nil
}

// RevokeGrant revokes by's grant id at once: later calls suspend again. It is not_found when by
// has no such active grant (someone else's included). Audited as grant_revoke.
func (m *Manager) RevokeGrant(ctx context.Context, by Principal, id string) error {
	if by.UserID == "" || by.system() {
		return permissionDenied("grants belong to people")
	}
	now := m.cfg.Clock.Now()
	audit := store.AuditRecord{ActorID: by.UserID, Action: "grant_revoke", At: now, Detail: mustJSON(map[string]string{"grant_id": id})}
	for _, g := range mustList(m.cfg.Store.ListGrants(ctx, by.UserID, now)) {
		if g.ID == id {
			audit.Tool, audit.ConversationID = g.Tool, g.ConversationID
		}
	}
	err := m.cfg.Store.RevokeGrant(ctx, by.UserID, id, now, audit)
	if errors.Is(err, store.ErrNotFound) {
		return fault.New(fault.KindNotFound, "no such grant", map[string]any{"grant_id": id})
	}
	if err != nil {
		return m.internalError("revoke grant", err)
	}
	m.cfg.Logger.Info("grant revoked", "grant_id", id, "by", by.UserID)
	return nil
}

// mustList keeps a list read for an audit record's particulars; a failed read leaves them out.
func mustList(gs []store.Grant, err error) []store.Grant {
	if err != nil {
		return nil
	}
	return gs
}
