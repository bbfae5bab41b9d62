package agent

import (
	"context"
	"encoding/json"

	"parley/internal/fault"
	"parley/internal/store"
)

// MayReadAudit reports whether by may read the audit trail: admins (and the system).
func MayReadAudit(by Principal) bool {
	return by.system() || (by.UserID != "" && by.Role == RoleAdmin)
}

// MaxAuditPage bounds one page of the audit trail.
const MaxAuditPage = 1000

// AuditChain returns up to limit records of the audit trail after the place after, in chain
// order, each with its hash and its predecessor's (GET /api/v1/audit). Admins only.
func (m *Manager) AuditChain(ctx context.Context, by Principal, after int64, limit int) ([]store.AuditRecord, error) {
	if !MayReadAudit(by) {
		return nil, fault.New(fault.KindPermissionDenied, "the audit trail is for admins", nil)
	}
	if limit <= 0 || limit > MaxAuditPage {
		limit = MaxAuditPage
	}
	recs, err := m.cfg.Store.AuditChain(ctx, after, limit)
	if err != nil {
		return nil, m.internalError("read the audit trail", err)
	}
	return recs, nil
}

// Audit lists audit records newest first, filtered (the admin page). Admins only.
func (m *Manager) Audit(ctx context.Context, by Principal, f store.AuditFilter) ([]store.AuditRecord, error) {
	if !MayReadAudit(by) {
		return nil, fault.New(fault.KindPermissionDenied, "the audit trail is for admins", nil)
	}
	if f.Limit <= 0 || f.Limit > MaxAuditPage {
		f.Limit = MaxAuditPage
	}
	recs, err := m.cfg.Store.ListAudit(ctx, f)
	if err != nil {
		return nil, m.internalError("list the audit trail", err)
	}
	return recs, nil
}

// editHashes is what an audit record of an approval with edited arguments says of them
// (editDetail): their hashes, not their values.
type editHashes struct {
	Edited    bool   `json:"edited"`
	ModelHash string `json:"model_args_hash"`
	ArgsHash  string `json:"args_hash"`
}

func editHashesOf(rec store.AuditRecord) (editHashes, bool) {
	var d editHashes
	if len(rec.Detail) == 0 || json.Unmarshal(rec.Detail, &d) != nil || !d.Edited || rec.ConversationID == "" || rec.ToolCallID == "" {
		return editHashes{}, false
	}
	return d, true
}

// AuditsEdit reports whether rec records an approval whose approver edited the arguments.
func AuditsEdit(rec store.AuditRecord) bool {
	_, ok := editHashesOf(rec)
	return ok
}

// EditedArgs is, for an audit record of an approval whose approver edited the arguments
// (AuditsEdit), the model's arguments and those approved, read from the record's call in v (its
// conversation, as the reader may see it). The record keeps only their hashes, so the values
// stay with the conversation (and go with it); ok is false unless the call still holds the very
// arguments the record hashed.
func EditedArgs(v View, rec store.AuditRecord) (model, run json.RawMessage, ok bool) {
	d, edit := editHashesOf(rec)
	if !edit || v.ID != rec.ConversationID {
		return nil, nil, false
	}
	c, found := v.Call(rec.ToolCallID)
	if !found || canonicalHash(c.ModelArgs) != d.ModelHash || canonicalHash(c.Args) != d.ArgsHash {
		return nil, nil, false
	}
	return c.ModelArgs, c.Args, true
}
