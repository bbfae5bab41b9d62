package views

import (
	"net/url"
	"strconv"
)

// GrantRow is one remembered approval as the grants page lists it.
type GrantRow struct {
	ID             string
	Tool           string
	Scope          string // conversation or user
	ConversationID string
	Created        string
	Expires        string
}

// ScopeText is the grant's scope in words.
func (g GrantRow) ScopeText() string {
	if g.Scope == "user" {
		return "all your conversations"
	}
	return "one conversation"
}

// AuditRow is one audit record as the admin page lists it.
type AuditRow struct {
	Seq            int64
	At             string
	Actor          string // the actor's name, else their id
	ActorID        string
	Action         string
	Tool           string
	ConversationID string
	ToolCallID     string
	Reason         string
	Detail         string
}

// AuditFilters are the audit page's filters, as the query carries them.
type AuditFilters struct {
	Conversation string
	Actor        string
	Action       string
	Tool         string
}

// AuditPage is the admin audit trail: one page of records, newest first.
type AuditPage struct {
	Rows    []AuditRow
	Filters AuditFilters
	// Before is the place this page starts before (0: the newest); Next the place the next
	// (older) page starts before, 0 when there is none.
	Before, Next int64
	Notice       string
}

// auditURL is the audit page with the filters f, starting before the place before.
func auditURL(f AuditFilters, before int64) string {
	q := url.Values{}
	for k, v := range map[string]string{"conversation": f.Conversation, "actor": f.Actor, "action": f.Action, "tool": f.Tool} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if before > 0 {
		q.Set("before", strconv.FormatInt(before, 10))
	}
	if len(q) == 0 {
		return "/admin/audit"
	}
	return "/admin/audit?" + q.Encode()
}

// shortID is the start of a long id, for a table cell (the full id is the link's title).
func shortID(id string) string {
	if len(id) > 10 {
		return id[:10] + "…"
	}
	return id
}
