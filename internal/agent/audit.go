package agent

import (
	"context"

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
