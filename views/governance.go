package views

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"
	"time"

	"parley/internal/agent"
)

// GrantRow is one remembered approval as the grants pages list it.
type GrantRow struct {
	ID             string
	Tool           string
	Scope          string // conversation or user
	ConversationID string
	Args           string // exact or any (agent.GrantArgsExact, GrantArgsAny)
	ArgsHash       string // the canonical hash of the arguments an exact grant covers
	Created        time.Time
	Expires        time.Time
	// Owner is whose grant it is (their name, else their id), on the admins' page; "" on the
	// viewer's own.
	Owner   string
	OwnerID string
}

// ScopeText is the grant's scope in words.
func (g GrantRow) ScopeText() string {
	if g.Scope == "user" {
		if g.Owner != "" {
			return "all their conversations"
		}
		return "all your conversations"
	}
	return "one conversation"
}

// ArgsText is which arguments the grant covers, in the words the card offered them.
func (g GrantRow) ArgsText() string {
	if g.Args == agent.GrantArgsExact {
		return "these exact arguments"
	}
	return "any arguments"
}

// ArgsTitle is a hover note on the arguments: the hash an exact grant compares with.
func (g GrantRow) ArgsTitle() string {
	if g.Args == agent.GrantArgsExact {
		return "only calls whose arguments are exactly those approved (canonical SHA-256 " + shortID(g.ArgsHash) + ")"
	}
	return "every call of the tool, whatever its arguments (rules still apply)"
}

// revokeURL is where a grant's revoke form posts: the admins' route on their page.
func (g GrantRow) revokeURL() string {
	if g.Owner != "" {
		return "/admin/grants/" + urlPart(g.ID) + "/revoke"
	}
	return "/grants/" + urlPart(g.ID) + "/revoke"
}

// AuditRow is one audit record as the admin page lists it.
type AuditRow struct {
	Seq            int64
	At             time.Time
	Actor          string // the actor's name, else their id
	ActorID        string
	Action         string
	Tool           string
	ConversationID string
	ToolCallID     string
	Reason         string
	Detail         string
	// Changes are, for an approval with edited arguments, what the edit changed, old → new.
	Changes []ArgChange
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
	// Now is the time the records' times are shown against.
	Now time.Time
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

// shortDuration writes d in the largest whole unit that fits: "40 s", "12 min", "3 h", "2 d".
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(max(d, 0)/time.Second)) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " d"
}

// inboxUrgency is "due-soon" when less than a fifth of an entry's time to decide remains (or
// none does), else "".
func inboxUrgency(now time.Time, e InboxEntry) string {
	if e.Call.ExpiresAt == nil || e.Call.CreatedAt.IsZero() {
		return ""
	}
	total, left := e.Call.ExpiresAt.Sub(e.Call.CreatedAt), e.Call.ExpiresAt.Sub(now)
	if left <= 0 || (total > 0 && left*5 < total) {
		return "due-soon"
	}
	return ""
}

// BulkItem is the value of an inbox entry's bulk checkbox: the conversation and the call,
// separated by a space (conversation ids hold none).
func BulkItem(conversationID, toolCallID string) string { return conversationID + " " + toolCallID }

// inboxReturn is where an inbox form returns to: the inbox with its filters.
func inboxReturn(f InboxFilter) string { return "/inbox" + f.Query() }

// bulkHeading sums up a bulk decision: how many of the items it applied to.
func bulkHeading(b *BulkSummary) string {
	n := b.OK
	for _, r := range b.Refused {
		n += r.N
	}
	verb := "Approved"
	if b.Decision == "deny" {
		verb = "Denied"
	}
	return verb + " " + strconv.Itoa(b.OK) + " of " + strconv.Itoa(n) + " selected"
}

// bulkRefusals says why some items of a bulk decision were not decided, for the kinds a
// decision is commonly refused with; any other kind is named as it is.
var bulkRefusals = map[string]string{
	"stale":             "already decided, expired or no longer waiting",
	"permission_denied": "not yours to decide",
	"not_found":         "not found",
	"invalid_args":      "refused as invalid",
	"conflict":          "changed meanwhile",
	"internal":          "failed on the server",
}

// bulkRefused is one line of a bulk decision's refusals: "2 not yours to decide".
func bulkRefused(r BulkCount) string {
	why, ok := bulkRefusals[r.Kind]
	if !ok {
		why = "refused (" + r.Kind + ")"
	}
	return strconv.Itoa(r.N) + " " + why
}

// contextLabel is the link to an entry's conversation: read-only unless it is the viewer's own.
func contextLabel(d InboxPage, e InboxEntry) string {
	if e.OwnerID == d.Viewer.Principal.UserID {
		return "Open the conversation"
	}
	return "Read the conversation (read-only)"
}

// inboxNewest identifies the newest entry (its conversation and call), so the page can tell a
// new approval from a list that changed otherwise; "" when the inbox is empty.
func inboxNewest(d InboxPage) string {
	if len(d.Entries) == 0 {
		return ""
	}
	return BulkItem(d.Entries[0].ConversationID, d.Entries[0].Call.ID)
}

// newestOf is the newest entry (the zero entry when the inbox is empty): its tool and requester
// are all a browser notification of it says.
func newestOf(d InboxPage) InboxEntry {
	if len(d.Entries) == 0 {
		return InboxEntry{}
	}
	return d.Entries[0]
}

// ArgChange is one argument an approver's edit changed (agent.ArgChanges).
type ArgChange = agent.ArgChange

// maxChangeValue bounds a value shown in a change, in runes.
const maxChangeValue = agent.MaxChangeRunes

// argChanges lists what an edit changed between the model's arguments and those that run.
func argChanges(model, run json.RawMessage) []ArgChange { return agent.ArgChanges(model, run) }

// editedText introduces a call's changed arguments: who proposed or approved them in place of
// the model's.
func editedText(p Page, c agent.CallView) string {
	switch c.Decision {
	case "propose_edit":
		return p.nameFor(c.DecidedBy) + " proposed other arguments than the assistant's; approving approves these:"
	case "approve_edited", "override_approve_edited":
		return p.nameFor(c.DecidedBy) + " edited the arguments before approving:"
	}
	return "The arguments were edited:"
}

// decodeNumbers decodes raw keeping numbers as written.
func decodeNumbers(raw json.RawMessage, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}
