// Package views renders Parley's pages and fragments with templ: the layout, the conversation
// timeline and its cards, the inbox and the account pages. Components take view models (the
// agent's View and this package's page types) and never reach the store; whether the viewer may
// act on a card is asked of the agent's policy.
package views

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"parley/internal/agent"
	"parley/internal/fault"
	"parley/internal/tools"
)

// CSRFField is the name of the hidden form field that carries the session's CSRF token.
const CSRFField = "_csrf"

// AnswerFieldPrefix begins the form name of each answer of a question form: the input of
// property p is named AnswerFieldPrefix + p. The model names the properties, and any name may
// clash with the form's own fields (CSRFField, action, return, decision); only prefixed fields
// are answers, so every property name, whatever its characters, comes back as it was.
const AnswerFieldPrefix = "f."

// Viewer is who looks at a page; the agent's policy, asked with its Principal, decides which
// buttons a card offers. The agent still authorizes every decision: hiding a button is a
// courtesy, not a check.
type Viewer struct {
	agent.Principal
	Name string
}

// FormState is what a re-rendered card remembers of a rejected submission: the values typed and
// an error per field ("" keys the form as a whole).
type FormState struct {
	// ConversationID, when set, narrows the state to that conversation's call: in the inbox,
	// calls of different conversations may share an id.
	ConversationID string
	ToolCallID     string
	Values         map[string]string
	Errors         map[string]string
	// Notice is a message about the call itself, e.g. that it was already decided elsewhere.
	Notice string
}

// Error returns the error for a field.
func (f *FormState) Error(field string) string {
	if f == nil {
		return ""
	}
	return f.Errors[field]
}

// Value returns the submitted value of a field and whether there was one.
func (f *FormState) Value(field string) (string, bool) {
	if f == nil || f.Values == nil {
		return "", false
	}
	v, ok := f.Values[field]
	return v, ok
}

// Page is the context shared by a conversation page's components.
type Page struct {
	ConversationID string
	CSRF           string
	Viewer         Viewer
	// OwnerID is the conversation's owner; only the owner answers questions and runs client tools.
	OwnerID string
	// Demo says the conversation runs on the built-in demo model.
	Demo bool
	// Return is where a decision redirects after a plain POST ("" = the conversation page).
	Return string
	// Inbox says the cards are shown in the inbox, beside other conversations' calls whose ids
	// may be the same: their element ids then carry the conversation too (IDKey).
	Inbox bool
	// Form is the state of one card after a rejected submission.
	Form *FormState
	// Notice is a page-level message (e.g. the composer's error).
	Notice string
	// Names maps user ids (who decided a call) to the names shown.
	Names map[string]string
}

// formFor returns the form state of one call, nil when the state is about another call.
func (p Page) formFor(id string) *FormState {
	if p.Form != nil && p.Form.ToolCallID == id && (p.Form.ConversationID == "" || p.Form.ConversationID == p.ConversationID) {
		return p.Form
	}
	return nil
}

// IDKey is what the element ids of a call's card derive from: the call id on its conversation's
// page, where it is unique; the conversation and the call in the inbox (InboxKey).
func (p Page) IDKey(callID string) string {
	if p.Inbox {
		return InboxKey(p.ConversationID, callID)
	}
	return callID
}

// CanAnswer reports whether the viewer may answer the conversation's questions (agent.MayAnswer).
func (p Page) CanAnswer() bool { return agent.MayAnswer(p.Viewer.Principal, p.OwnerID) }

// CanSend reports whether the viewer may write in the conversation (agent.MaySend): others
// read it without a composer.
func (p Page) CanSend() bool { return agent.MaySend(p.Viewer.Principal, p.OwnerID) }

// CanManage reports whether the viewer may rename or delete the conversation (agent.MayManage).
func (p Page) CanManage() bool { return agent.MayManage(p.Viewer.Principal, p.OwnerID) }

// CanDecide reports whether the viewer may decide a call's approval (agent.MayDecide).
func (p Page) CanDecide(c agent.CallView) bool {
	return agent.MayDecide(p.Viewer.Principal, p.OwnerID, c.Approvers)
}

// ConversationPage is everything the conversation page shows.
type ConversationPage struct {
	Page
	View agent.View
}

// ConversationsPage is the list of the viewer's conversations.
type ConversationsPage struct {
	CSRF          string
	Conversations []agent.Summary
	Demo          bool
	Notice        string
	// Query is the search the list answers ("" lists every conversation).
	Query string
	// Now is the time the list's times are shown against.
	Now time.Time
}

// InboxEntry is one pending approval in a reviewer's inbox: the call in its conversation, with
// the name of the person who asked.
type InboxEntry struct {
	agent.PendingApproval
	Requester string
	// Claim is who is looking at it, when someone is (nil: nobody).
	Claim *InboxClaim
}

// InboxClaim is a reviewer's claim of an inbox entry ("rita is looking at this").
type InboxClaim struct {
	By   string // the holder's name
	Mine bool   // the viewer holds it
}

// InboxFilter is the inbox's filters, as the URL's query carries them (?tool=&requester=&age=):
// the tool's name, the requester's name (exact, case-insensitive) and the least age ("" or a
// duration such as 1h). Zero fields match everything.
type InboxFilter struct {
	Tool      string
	Requester string
	Age       string
}

// Query is the filter as a URL query ("" when it filters nothing), "?" included.
func (f InboxFilter) Query() string {
	q := url.Values{}
	for k, v := range map[string]string{"tool": f.Tool, "requester": f.Requester, "age": f.Age} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// InboxAges are the age filter's choices: value and words.
var InboxAges = [][2]string{{"", "any age"}, {"5m", "older than 5 min"}, {"1h", "older than 1 hour"}, {"24h", "older than 1 day"}}

// BulkSummary is what a bulk decision did, in counts: how many items it decided and how many
// each kind of error refused. It reaches the inbox through the redirect after the decision (in
// the URL: counts and kinds only), so a reload shows it again and decides nothing.
type BulkSummary struct {
	Decision string // approve or deny
	OK       int
	Refused  []BulkCount // by kind, in the order of fault.Kinds
}

// BulkCount is how many items of a bulk decision one kind of error refused.
type BulkCount struct {
	Kind string
	N    int
}

// InboxPage is the reviewer inbox.
type InboxPage struct {
	CSRF    string
	Viewer  Viewer
	Entries []InboxEntry // as filtered
	Form    *FormState
	// Names maps user ids (an M-of-N call's approvers) to the names shown.
	Names map[string]string
	// Filter is the inbox's filters; Total counts the entries before filtering (the pending
	// count); Tools and Requesters are the names the unfiltered entries hold, for the filters'
	// suggestions.
	Filter     InboxFilter
	Total      int
	Tools      []string
	Requesters []string
	// Now is the time ages and deadlines are shown against.
	Now time.Time
	// Bulk is the outcome of the bulk decision just made (nil: none was).
	Bulk *BulkSummary
	// ReviewedTools names the tools whose calls may wait for a reviewer (agent.ReviewedTools):
	// an empty inbox says what will arrive there.
	ReviewedTools []string
}

// Item is one entry of a conversation's timeline: a message or a tool call, in log order.
type Item struct {
	Seq     int64
	Message *agent.Message
	Call    *agent.CallView
}

// DOMID is the element id of the item; socket updates address items by it.
func (it Item) DOMID() string {
	if it.Call != nil {
		return CallDOMID(it.Call.ID)
	}
	return fmt.Sprintf("msg-%d", it.Seq)
}

// CallDOMID is the element id of a tool call's timeline item.
func CallDOMID(toolCallID string) string { return "call-" + toolCallID }

// InboxKey names a call among every conversation's: call ids are unique only within their
// conversation. Conversation ids are the store's hex digits, without "-", so the first "-"
// ends it and two different (conversation, call) pairs never share a key.
func InboxKey(conversationID, toolCallID string) string { return conversationID + "-" + toolCallID }

// InboxDOMID is the element id of an inbox entry, unique per conversation and call; the inbox
// socket's list and a decision's fetch answer address the entry by it.
func InboxDOMID(conversationID, toolCallID string) string {
	return "entry-" + InboxKey(conversationID, toolCallID)
}

// Items interleaves a view's messages and calls by log sequence.
func Items(v agent.View) []Item {
	items := make([]Item, 0, len(v.Messages)+len(v.Calls))
	for i := range v.Messages {
		items = append(items, Item{Seq: v.Messages[i].Seq, Message: &v.Messages[i]})
	}
	for i := range v.Calls {
		items = append(items, Item{Seq: v.Calls[i].Seq, Call: &v.Calls[i]})
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].Seq < items[j].Seq })
	return items
}

// prettyJSON indents JSON for display; invalid JSON is shown as it is (escaped by templ).
// Go's encoder writes <, > and & as \u003c, \u003e and \u0026; they are shown as the
// characters they are (templ escapes them for HTML).
func prettyJSON(raw json.RawMessage) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "{}"
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return string(raw)
	}
	return unescapeHTMLChars(out.String())
}

// unescapeHTMLChars turns the \u003c, \u003e and \u0026 escapes of JSON text back into the
// characters. It walks escapes pairwise, so an escaped backslash followed by "u003c" stays
// as it is.
func unescapeHTMLChars(s string) string {
	if !strings.Contains(s, `\u00`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		if s[i+1] == 'u' && i+6 <= len(s) {
			switch strings.ToLower(s[i+2 : i+6]) {
			case "003c":
				b.WriteByte('<')
				i += 5
				continue
			case "003e":
				b.WriteByte('>')
				i += 5
				continue
			case "0026":
				b.WriteByte('&')
				i += 5
				continue
			}
		}
		b.WriteByte(s[i])
		b.WriteByte(s[i+1])
		i++
	}
	return b.String()
}

// PrettyJSON is prettyJSON for handlers that compare an edited-arguments field with the original.
func PrettyJSON(raw json.RawMessage) string { return prettyJSON(raw) }

// valueText shows a plan detail: strings as they are, anything else as compact JSON.
func valueText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

type kv struct{ K, V string }

// envelope is the result the model got.
type envelope struct {
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Kind    string         `json:"kind"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

func parseEnvelope(raw json.RawMessage) (envelope, bool) {
	var e envelope
	if len(raw) == 0 || json.Unmarshal(raw, &e) != nil {
		return envelope{}, false
	}
	if !e.OK && e.Error == nil {
		return envelope{}, false
	}
	return e, true
}

// statusText is a call status in words.
func statusText(s string) string {
	switch s {
	case agent.CallRunning:
		return "running"
	case agent.CallAwaiting:
		return "waiting"
	case agent.CallResolved:
		return "done"
	case agent.CallErrored:
		return "failed"
	case agent.CallDenied:
		return "denied"
	case agent.CallExpired:
		return "expired"
	case agent.CallCancelled:
		return "cancelled"
	}
	return s
}

// callState is the state a card shows: a question the person declined is "declined", not a
// failure.
func callState(c agent.CallView) string {
	if c.Status == agent.CallErrored && (c.Decision == "decline" || c.Decision == "cancel") {
		return "declined"
	}
	return c.Status
}

// callStateText is callState in words.
func callStateText(c agent.CallView) string {
	if s := callState(c); s == "declined" {
		return "declined"
	}
	if c.Status == agent.CallAwaiting {
		// What it waits for, not the executor or the status word.
		switch c.PendingKind {
		case tools.PendingApproval:
			return "needs approval"
		case tools.PendingElicitation:
			return "needs an answer"
		case tools.PendingClientExec:
			return "in your browser"
		}
	}
	return statusText(c.Status)
}

// quietKind reports whether an error kind is a person's choice rather than a failure: shown as
// a plain note, not in red.
func quietKind(kind string) bool {
	switch fault.Kind(kind) {
	case fault.KindDeclined, fault.KindCancelled, fault.KindDenied:
		return true
	}
	return false
}

// kindWords is an error kind in words ("client_error" → "Browser error").
func kindWords(kind string) string {
	switch fault.Kind(kind) {
	case fault.KindClientError:
		return "Browser error"
	case fault.KindNoClient:
		return "No browser"
	case fault.KindInvalidArgs:
		return "Invalid arguments"
	case fault.KindTimeout:
		return "Timed out"
	case fault.KindHTTPError:
		return "HTTP error"
	case fault.KindBlockedHost:
		return "Blocked host"
	case fault.KindUnknownTool:
		return "Unknown tool"
	case fault.KindInternal:
		return "Internal error"
	}
	w := strings.ReplaceAll(kind, "_", " ")
	if w == "" {
		return "Error"
	}
	return strings.ToUpper(w[:1]) + w[1:]
}

// sentence capitalizes a message and ends it with a full stop.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return s
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// statusWords is the status line's words for this viewer: what the turn waits for, said as
// it is ("your answer", "a reviewer"), and nothing once the turn has ended.
func statusWords(p Page, v agent.View) string {
	switch v.Status {
	case agent.StatusGenerating:
		if len(v.Queued) > 0 && v.Streaming == "" {
			return "Working… your next message goes when this answer ends."
		}
		return "Working…"
	case agent.StatusDispatching:
		return "Running tools…"
	case agent.StatusAwaiting:
		yours, reviewer, owner, browser := false, false, false, false
		for _, c := range v.Calls {
			if !c.Awaiting() {
				continue
			}
			switch {
			case c.PendingKind == tools.PendingClientExec:
				browser = true
			case c.PendingKind == tools.PendingApproval && p.CanDecide(c):
				yours = true
			case c.PendingKind == tools.PendingApproval && c.Approvers == tools.ByReviewer:
				reviewer = true
			case c.PendingKind == tools.PendingElicitation && p.CanAnswer():
				yours = true
			default:
				owner = true
			}
		}
		switch {
		case yours:
			return "Waiting for your answer."
		case reviewer:
			return "Waiting for a reviewer."
		case browser:
			return "Waiting for your browser."
		case owner:
			return "Waiting for the conversation's owner."
		}
		return "Waiting."
	}
	return ""
}

// decisionWords are how a finished call was decided or ended, as a sentence's start: the one
// vocabulary of outcomes (approved, edited and approved, denied, expired, cancelled) that the
// cards, the inbox and the audit page share (actionText).
var decisionWords = map[string]string{
	"approve":        "Approved",
	"approve_edited": "Edited and approved",
	"deny":           "Denied",
	"accept":         "Answered",
	"decline":        "Declined to answer",
	"cancel":         "Question cancelled",
	"client_result":  "Ran in the browser",
	"client_error":   "The browser could not run it",
	"expire":         "Expired",
	"no_client":      "No browser was open to run it",
	"stopped":        "Cancelled: the turn was stopped",
	"moved_on":       "Left unanswered: the conversation moved on",
}

// decisionText describes a finished call's decision, naming who made it ("Approved by
// alice"); Parley's own endings (an expiry, no browser) name nobody.
func decisionText(p Page, c agent.CallView) string {
	if c.Decision == "" {
		return ""
	}
	words, ok := decisionWords[c.Decision]
	if !ok {
		words = strings.ReplaceAll(c.Decision, "_", " ")
	}
	if c.DecidedBy == "" || c.DecidedBy == "system" {
		return words
	}
	who := "another user"
	if n := p.Names[c.DecidedBy]; n != "" {
		who = n
	}
	return words + " by " + who
}

// actionText is an audit record's action in words: a decision as the cards say it (decisionWords),
// anything else with its underscores as spaces.
func actionText(action string) string {
	if w, ok := decisionWords[action]; ok {
		return w
	}
	return strings.ReplaceAll(action, "_", " ")
}

// providerResults pulls titled links out of a provider's search result block, whatever its
// exact shape: any object with a "url" (and maybe a "title") found while walking it.
func providerResults(raw json.RawMessage) []kv {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return nil
	}
	var out []kv
	var walk func(any)
	walk = func(x any) {
		if len(out) >= 10 {
			return
		}
		switch t := x.(type) {
		case map[string]any:
			if u, ok := t["url"].(string); ok && (strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://")) {
				title, _ := t["title"].(string)
				if title == "" {
					title = u
				}
				out = append(out, kv{title, u})
				return
			}
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				walk(t[k])
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// searchQuery is the query of a provider search call, if its arguments name one.
func searchQuery(args json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(args, &m) != nil {
		return ""
	}
	for _, k := range []string{"query", "q", "search"} {
		if s, ok := m[k].(string); ok {
			return s
		}
	}
	return ""
}

func resolveURL(conversationID, toolCallID string) string {
	return "/conversations/" + url.PathEscape(conversationID) + "/calls/" + url.PathEscape(toolCallID) + "/resolve"
}

// The "approve and remember" fields of an approval card: the pressed button says
// decision=RememberDecision, with the grant's scope and its life in seconds.
const (
	RememberDecision   = "remember"
	RememberScopeField = "remember_scope"
	RememberForField   = "remember_for"
	RememberArgsField  = "remember_args" // agent.GrantArgsExact (the default) or GrantArgsAny
)

// RememberChoice is one life a remembered approval may be given on the card.
type RememberChoice struct {
	Secs  int64
	Label string
}

// RememberChoices are the lives the card offers, shortest first.
var RememberChoices = []RememberChoice{{3600, "1 hour"}, {86400, "1 day"}, {7 * 86400, "7 days"}}

// CanRemember reports whether the viewer may approve c "and remember" (agent.MayRemember on the
// viewer's right to decide it): the owner's own approval of an owner-approved call that needs
// one approver, and that no rule asked about.
func (p Page) CanRemember(c agent.CallView) bool {
	right := agent.DecideRight(p.Viewer.Principal, p.OwnerID, c.Approvers)
	return agent.MayRemember(right, agent.Gate{Approval: c.Approval, Approvers: c.Approvers, Count: c.ApprovalsNeeded,
		Ruled: c.Rule != nil && !c.Rule.Shadow})
}

// nameFor is the name of a user id as the page knows it ("another user" when it does not).
func (p Page) nameFor(id string) string {
	if n := p.Names[id]; n != "" {
		return n
	}
	return "another user"
}

// quorumText is an M-of-N call's approvals so far ("1 of 2 approved — by rita"); "" for a call
// that needs one approver.
func quorumText(p Page, c agent.CallView) string {
	if c.ApprovalsNeeded <= 1 {
		return ""
	}
	s := fmt.Sprintf("%d of %d approved", len(c.Approvals), c.ApprovalsNeeded)
	if len(c.Approvals) == 0 {
		return s
	}
	names := make([]string, len(c.Approvals))
	for i, a := range c.Approvals {
		names[i] = p.nameFor(a.By)
	}
	return s + " — by " + strings.Join(names, ", ")
}

// ruleWhenMax bounds how much of a rule's condition a card shows.
const ruleWhenMax = 80

// ruleText says briefly which tools-file rule decided a call (or would have, in shadow mode).
func ruleText(r *agent.RuleView) string {
	when := strings.TrimSpace(r.When)
	if rs := []rune(when); len(rs) > ruleWhenMax {
		when = string(rs[:ruleWhenMax-1]) + "…"
	}
	verb := map[string]string{"allow": "allowed", "deny": "denied", "ask": "asked for an approval"}[r.Action]
	if verb == "" {
		verb = r.Action
	}
	s := fmt.Sprintf("Rule %d %s", r.Index+1, verb)
	if r.Shadow {
		s = fmt.Sprintf("Rule %d would have %s (shadow mode)", r.Index+1, verb)
	}
	if when != "" {
		s += ": when " + when
	}
	if r.Error != "" {
		s += " (" + r.Error + ")"
	}
	return s
}

// grantText says which remembered approval let a call run without asking.
func grantText(p Page, c agent.CallView) string {
	if p.Viewer.UserID == p.OwnerID {
		return "Allowed by your remembered approval " + c.Grant
	}
	return "Allowed by the owner's remembered approval " + c.Grant
}

// rememberChecked reports whether scope is the card's chosen one (the submitted, else
// "conversation").
func rememberChecked(f *FormState, scope string) bool {
	v, ok := f.Value(RememberScopeField)
	if !ok || v == "" {
		v = "conversation"
	}
	return v == scope
}

// rememberArgsChecked reports whether args is the card's chosen argument scope (the submitted,
// else these exact arguments).
func rememberArgsChecked(f *FormState, args string) bool {
	v, ok := f.Value(RememberArgsField)
	if !ok || v == "" {
		v = agent.GrantArgsExact
	}
	return v == args
}

// rememberSelected reports whether secs is the card's chosen life (the submitted, else a day).
func rememberSelected(f *FormState, secs int64) bool {
	v, ok := f.Value(RememberForField)
	if !ok || v == "" {
		return secs == 86400
	}
	return v == strconv.FormatInt(secs, 10)
}

// escalatedText says that a call's approval was escalated to admins.
func escalatedText(c agent.CallView) string {
	if c.Status == agent.CallAwaiting {
		return "Escalated: nobody decided in time, so admins may decide it now."
	}
	return "Escalated to admins: nobody decided it in time."
}
