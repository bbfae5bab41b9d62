package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"

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

// ArgChange is one argument an approver's edit changed: its top-level field ("" when the
// arguments are not an object), and its value before and after as compact JSON, each bounded
// to MaxChangeRunes ("" when the field was not set, or was removed).
type ArgChange struct {
	Field string `json:"field"`
	From  string `json:"from,omitempty"`
	To    string `json:"to,omitempty"`
}

// MaxChangeRunes bounds each value an audit record keeps of an edit: the record says what
// changed; the arguments in full stay with the conversation (and go with it).
const MaxChangeRunes = 160

// ArgChanges lists what an edit changed between the model's arguments and those that run, by
// top-level field in name order (one change without a field when either is not an object); nil
// when they mean the same JSON, whatever their spacing or key order. The card, the requester's
// view and the audit record all say it this way.
func ArgChanges(from, to json.RawMessage) []ArgChange {
	if len(from) == 0 || len(to) == 0 {
		return nil
	}
	var a, b any
	if decodeNumbers(from, &a) != nil || decodeNumbers(to, &b) != nil {
		if bytes.Equal(from, to) {
			return nil
		}
		return []ArgChange{{From: changeValue(a, from), To: changeValue(b, to)}}
	}
	ma, okA := a.(map[string]any)
	mb, okB := b.(map[string]any)
	if !okA || !okB {
		if sameJSON(a, b) {
			return nil
		}
		return []ArgChange{{From: changeValue(a, nil), To: changeValue(b, nil)}}
	}
	keys := maps.Clone(ma)
	maps.Copy(keys, mb)
	var out []ArgChange
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		va, inA := ma[k]
		vb, inB := mb[k]
		if inA && inB && sameJSON(va, vb) {
			continue
		}
		ch := ArgChange{Field: k}
		if inA {
			ch.From = changeValue(va, nil)
		}
		if inB {
			ch.To = changeValue(vb, nil)
		}
		out = append(out, ch)
	}
	return out
}

func decodeNumbers(raw json.RawMessage, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// sameJSON compares two decoded values as JSON text (maps encode with sorted keys).
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// changeValue is v as compact JSON, <, > and & as themselves (raw when v did not decode),
// bounded to MaxChangeRunes.
func changeValue(v any, raw json.RawMessage) string {
	s := string(raw)
	if v != nil || raw == nil {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if enc.Encode(v) == nil {
			s = strings.TrimSuffix(b.String(), "\n")
		}
	}
	if r := []rune(s); len(r) > MaxChangeRunes {
		s = string(r[:MaxChangeRunes-1]) + "…"
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
