package agent

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
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

// ArgChange is one argument an approver's edit changed: its top-level field ("" when the
// arguments are not an object), and its value before and after as compact JSON, each bounded
// to maxChangeRunes ("" when the field was not set, or was removed).
type ArgChange struct {
	Field string `json:"field"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
}

// maxChangeRunes bounds each value an audit record keeps of an edit: the record says what
// changed; the arguments in full stay with the conversation (and go with it).
const maxChangeRunes = 160

// argChangesOf lists what an edit changed from the model's arguments to those approved, field
// by field in name order.
func argChangesOf(from, to json.RawMessage) []ArgChange {
	a, errA := tools.DecodeJSON(nonEmpty(from))
	b, errB := tools.DecodeJSON(nonEmpty(to))
	ma, okA := a.(map[string]any)
	mb, okB := b.(map[string]any)
	if errA != nil || errB != nil || !okA || !okB {
		return []ArgChange{{From: changeValue(a, from), To: changeValue(b, to)}}
	}
	var out []ArgChange
	for _, k := range slices.Sorted(maps.Keys(ma)) {
		if vb, ok := mb[k]; !ok || canonicalHash(mustJSON(ma[k])) != canonicalHash(mustJSON(vb)) {
			ch := ArgChange{Field: k, From: changeValue(ma[k], nil)}
			if ok {
				ch.To = changeValue(vb, nil)
			}
			out = append(out, ch)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(mb)) {
		if _, ok := ma[k]; !ok {
			out = append(out, ArgChange{Field: k, To: changeValue(mb[k], nil)})
		}
	}
	return out
}

// changeValue is v as compact JSON (raw when it does not decode), bounded to maxChangeRunes.
func changeValue(v any, raw json.RawMessage) string {
	s := string(raw)
	if b, err := json.Marshal(v); err == nil && (raw == nil || v != nil) {
		s = string(b)
	}
	if r := []rune(s); len(r) > maxChangeRunes {
		s = string(r[:maxChangeRunes-1]) + "…"
	}
	return s
}

// AuditChanges is what an audit record of an approval with edited arguments says changed (its
// detail's "changes", editDetail); none for any other record, or one written before they were
// kept (it has only the arguments' hashes).
func AuditChanges(rec store.AuditRecord) []ArgChange {
	var d struct {
		Edited  bool        `json:"edited"`
		Changes []ArgChange `json:"changes"`
	}
	if len(rec.Detail) == 0 || json.Unmarshal(rec.Detail, &d) != nil || !d.Edited {
		return nil
	}
	return d.Changes
}
