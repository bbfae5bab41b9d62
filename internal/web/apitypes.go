package web

import (
	"encoding/json"
	"strings"
	"time"

	"parley/internal/agent"
	"parley/internal/tools"
	"parley/views"
)

// This file is the API's JSON: every shape a conversation, a call, an event, an approval, a
// plan or a grant takes on the wire, each with its converter from the agent's read model
// (agent.View, agent.CallView, agent.Event …). The agent's types carry no JSON tags of the
// API's: renaming a field inside the agent cannot change what the API says, and what it says
// is written here once. (The log's entries, which the event stream carries as they are stored,
// are the log's own format.)

// --- conversations --------------------------------------------------------------------------

// conversationJSON is a conversation in the list.
type conversationJSON struct {
	ID        string     `json:"id"`
	Title     string     `json:"title"`
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
	Match     *matchJSON `json:"match,omitempty"`
}

func conversationOf(s agent.Summary) conversationJSON {
	return conversationJSON{ID: s.ID, Title: s.Title, Status: s.Status, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, Match: matchOf(s.Match)}
}

// matchJSON is the message a search matched: its seq, an excerpt in plain text and where the
// matched words are in it ([start, end) byte offsets).
type matchJSON struct {
	Seq        int64    `json:"seq"`
	Snippet    string   `json:"snippet"`
	Highlights [][2]int `json:"highlights"`
}

func matchOf(m *agent.SearchMatch) *matchJSON {
	if m == nil {
		return nil
	}
	out := &matchJSON{Seq: m.Seq, Highlights: [][2]int{}}
	var b strings.Builder
	for _, p := range views.SnippetParts(m.Snippet) {
		if p.Match {
			out.Highlights = append(out.Highlights, [2]int{b.Len(), b.Len() + len(p.Text)})
		}
		b.WriteString(p.Text)
	}
	out.Snippet = b.String()
	return out
}

// viewJSON is the API's shape of one conversation.
type viewJSON struct {
	ID        string                 `json:"id"`
	Title     string                 `json:"title"`
	Status    string                 `json:"status"`
	LastSeq   int64                  `json:"last_seq"`
	Messages  []messageJSON          `json:"messages"`
	ToolCalls []toolCallJSON         `json:"tool_calls"`
	Pending   map[string]pendingJSON `json:"pending"`
	// Queued are the owner's messages that wait for the running turn to end.
	Queued []messageJSON `json:"queued,omitempty"`
}

type messageJSON struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func toViewJSON(v agent.View) viewJSON {
	out := viewJSON{
		ID: v.ID, Title: v.Title, Status: v.Status, LastSeq: v.LastSeq,
		Messages: make([]messageJSON, len(v.Messages)), ToolCalls: make([]toolCallJSON, len(v.Calls)),
		Pending: map[string]pendingJSON{}, Queued: make([]messageJSON, len(v.Queued)),
	}
	for i, m := range v.Messages {
		out.Messages[i] = messageJSON{Role: m.Role, Content: m.Content}
	}
	for i, m := range v.Queued {
		out.Queued[i] = messageJSON{Role: m.Role, Content: m.Content}
	}
	for i, cl := range v.Calls {
		out.ToolCalls[i] = toolCallJSON{ID: cl.ID, Name: cl.Name, Executor: cl.Executor, Approval: cl.Approval,
			Status: cl.Status, Args: rawOrNull(cl.Args), Result: rawOrNull(cl.Result)}
		if cl.Awaiting() {
			out.Pending[cl.ID] = pendingOf(cl)
		}
	}
	return out
}

// --- calls ----------------------------------------------------------------------------------

// toolCallJSON is a call in a conversation's "tool_calls".
type toolCallJSON struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Executor tools.Executor  `json:"executor"`
	Approval tools.Approval  `json:"approval"`
	Status   string          `json:"status"`
	Args     json.RawMessage `json:"args"`
	Result   json.RawMessage `json:"result"`
}

// pendingJSON is what an awaiting call waits for: a conversation's "pending" entry, and the
// "pending" of its tool_call event.
type pendingJSON struct {
	Executor  tools.Executor    `json:"executor"`
	Kind      tools.PendingKind `json:"kind"`
	Prompt    any               `json:"prompt"` // promptOf
	Schema    json.RawMessage   `json:"schema,omitempty"`
	URL       string            `json:"url,omitempty"` // a URL-mode question's link (never fetched by Parley)
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
	// An approval's quorum (docs/api.md, "Approvals and the inbox"): the distinct approvals it needs and
	// those given so far; Escalated when admins may now decide it.
	ApprovalsNeeded int            `json:"approvals_needed,omitempty"`
	Approvals       []approvalMade `json:"approvals,omitempty"`
	Escalated       bool           `json:"escalated,omitempty"`
}

func pendingOf(c agent.CallView) pendingJSON {
	p := pendingJSON{Executor: c.Executor, Kind: c.PendingKind, Prompt: promptOf(c), ExpiresAt: c.ExpiresAt}
	if c.PendingKind == tools.PendingApproval {
		p.ApprovalsNeeded, p.Approvals, p.Escalated = c.ApprovalsNeeded, approvalsOf(c.Approvals), c.Escalated
	}
	if c.PendingKind == tools.PendingElicitation && c.Prompt != nil {
		p.Schema, p.URL = c.Prompt.Schema, c.Prompt.URL
	}
	return p
}

// promptOf is what a suspension shows, as the API words it: an approval's tool, the model's
// arguments and the plan (with the quorum and the escalation when they say something); a
// question's text; a browser call's tool, arguments and whether the page asks first.
func promptOf(c agent.CallView) any {
	switch c.PendingKind {
	case tools.PendingApproval:
		p := map[string]any{"tool": c.Name, "args": c.ModelArgs, "plan": planOf(c.Plan)}
		if c.ApprovalsNeeded > 1 {
			p["approvals_needed"], p["approvals"] = c.ApprovalsNeeded, approvalsOf(c.Approvals)
		}
		if c.Escalated {
			p["escalated"] = true
		}
		return p
	case tools.PendingElicitation:
		if c.Prompt != nil && c.Prompt.URL != "" {
			return c.Prompt.Message + "\n\nOpen " + c.Prompt.URL + " in your browser, then answer accept when you are done there (or decline, or cancel)."
		}
		if c.Prompt != nil {
			return c.Prompt.Message
		}
	case tools.PendingClientExec:
		return clientExecOf(c)
	}
	return nil
}

// approvalMade is one approve of an M-of-N call.
type approvalMade struct {
	By string    `json:"by"`
	At time.Time `json:"at"`
}

// approvalsOf is nil (JSON null) when there are none.
func approvalsOf(aps []agent.ApprovalView) []approvalMade {
	if len(aps) == 0 {
		return nil
	}
	out := make([]approvalMade, len(aps))
	for i, a := range aps {
		out[i] = approvalMade{By: a.By, At: a.At}
	}
	return out
}

// planJSON is a dry run's plan.
type planJSON struct {
	Summary string         `json:"summary"`
	Details map[string]any `json:"details,omitempty"`
}

// planOf is nil (JSON null) when there is no plan.
func planOf(p *tools.Plan) *planJSON {
	if p == nil {
		return nil
	}
	return &planJSON{Summary: p.Summary, Details: p.Details}
}

// clientExecJSON is a browser call's run: its tool_call prompt and its client_exec event.
type clientExecJSON struct {
	Args json.RawMessage `json:"args"`
	Ask  bool            `json:"ask"`
	Tool string          `json:"tool"`
}

func clientExecOf(c agent.CallView) clientExecJSON {
	return clientExecJSON{Args: c.Args, Ask: c.AskFirst, Tool: c.Name}
}

// approvalJSON is one pending approval in the listing (GET /api/v1/approvals).
type approvalJSON struct {
	ConversationID string          `json:"conversation_id"`
	Title          string          `json:"title"`
	OwnerID        string          `json:"owner_id"`
	ToolCallID     string          `json:"tool_call_id"`
	Tool           string          `json:"tool"`
	Approvers      string          `json:"approvers"`
	Args           json.RawMessage `json:"args"`
	Prompt         json.RawMessage `json:"prompt"`
	ExpiresAt      *time.Time      `json:"expires_at,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
}

func approvalOf(p agent.PendingApproval) approvalJSON {
	prompt, _ := json.Marshal(promptOf(p.Call))
	return approvalJSON{ConversationID: p.ConversationID, Title: p.Title, OwnerID: p.OwnerID, ToolCallID: p.Call.ID,
		Tool: p.Call.Name, Approvers: string(p.Call.Approvers), Args: rawOrNull(p.Call.Args),
		Prompt: rawOrNull(prompt), ExpiresAt: p.Call.ExpiresAt, CreatedAt: p.Call.CreatedAt}
}

// resolveRequest is the body of a resolve (POST …/calls/{call}/resolve): exactly one of a
// decision, an answer or a browser's report (agent.Resolution.Kind).
type resolveRequest struct {
	// Approval.
	Decision string          `json:"decision,omitempty"` // approve or deny
	Args     json.RawMessage `json:"args,omitempty"`     // edited arguments (approve only)
	Reason   string          `json:"reason,omitempty"`   // deny reason, reaches the model
	// Remember, with approve, makes a grant.
	Remember *rememberJSON `json:"remember,omitempty"`
	// Elicitation.
	Action  string          `json:"action,omitempty"` // accept, decline or cancel
	Content json.RawMessage `json:"content,omitempty"`
	// Client execution.
	Result json.RawMessage  `json:"result,omitempty"`
	Error  *clientErrorJSON `json:"error,omitempty"`
}

// rememberJSON asks an approve to make a grant.
type rememberJSON struct {
	Scope   string `json:"scope"`          // "conversation" or "user"
	ForSecs int64  `json:"for_secs"`       // how long it lasts
	Args    string `json:"args,omitempty"` // "exact" (the default) or "any"
}

// clientErrorJSON is a browser tool's failure report (the resolve body's, the page socket's).
type clientErrorJSON struct {
	Message string `json:"message"`
}

func (r resolveRequest) resolution() agent.Resolution {
	out := agent.Resolution{Decision: r.Decision, Args: r.Args, Reason: r.Reason, Action: r.Action, Content: r.Content,
		Result: r.Result, Error: r.Error.clientError()}
	if r.Remember != nil {
		out.Remember = &agent.Remember{Scope: r.Remember.Scope, ForSecs: r.Remember.ForSecs, Args: r.Remember.Args}
	}
	return out
}

func (e *clientErrorJSON) clientError() *agent.ClientError {
	if e == nil {
		return nil
	}
	return &agent.ClientError{Message: e.Message}
}

// --- events ---------------------------------------------------------------------------------

// eventJSON is a live event of a conversation's stream (GET …/events): named after its type.
type eventJSON struct {
	ConversationID string          `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	Type           agent.EventType `json:"type"`
	ToolCallID     string          `json:"tool_call_id,omitempty"`
	Status         string          `json:"status,omitempty"`
	Text           string          `json:"text,omitempty"`
	Offset         int             `json:"offset,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
}

func eventOf(ev agent.Event) (eventJSON, error) {
	out := eventJSON{ConversationID: ev.ConversationID, Seq: ev.Seq, Type: ev.Type, ToolCallID: ev.ToolCallID,
		Status: ev.Status, Text: ev.Text, Offset: ev.Offset, Data: ev.Data}
	if ev.Call == nil {
		return out, nil
	}
	var data any = callEventOf(*ev.Call)
	if ev.Type == agent.EventClientExec {
		data = clientExecOf(*ev.Call)
	}
	b, err := json.Marshal(data)
	out.Data = b
	return out, err
}

// callEventJSON is a tool_call event's data: the call as it stands after the change.
type callEventJSON struct {
	ID          string            `json:"id"`
	Name        string            `json:"name"`
	Executor    tools.Executor    `json:"executor"`
	Approval    tools.Approval    `json:"approval"`
	Approvers   tools.Approvers   `json:"approvers"`
	Status      string            `json:"status"`
	Kind        tools.PendingKind `json:"kind,omitempty"`
	Args        json.RawMessage   `json:"args,omitempty"`
	Result      json.RawMessage   `json:"result,omitempty"`
	Attempts    int               `json:"attempts,omitempty"`
	NextAttempt *time.Time        `json:"next_attempt_at,omitempty"`
	ExpiresAt   *time.Time        `json:"expires_at,omitempty"`
	Decision    string            `json:"decision,omitempty"`
	DecidedBy   string            `json:"decided_by,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	Pending     *pendingJSON      `json:"pending,omitempty"`
}

func callEventOf(c agent.CallView) callEventJSON {
	ev := callEventJSON{ID: c.ID, Name: c.Name, Executor: c.Executor, Approval: c.Approval, Approvers: c.Approvers,
		Status: c.Status, Kind: c.PendingKind, Args: nullAbsent(c.Args), Result: nullAbsent(c.Result), Attempts: c.Attempts,
		NextAttempt: c.NextAttempt, ExpiresAt: c.ExpiresAt, Decision: c.Decision, DecidedBy: c.DecidedBy, Reason: c.Reason}
	if c.Status == agent.CallAwaiting {
		p := pendingOf(c)
		ev.Pending = &p
	}
	return ev
}

// --- grants ---------------------------------------------------------------------------------

// grantJSON is a remembered approval (GET /api/v1/grants).
type grantJSON struct {
	ID             string    `json:"id"`
	UserID         string    `json:"user_id"` // whose calls it lets run
	Tool           string    `json:"tool"`
	Scope          string    `json:"scope"`
	ConversationID string    `json:"conversation_id"`
	ToolCallID     string    `json:"tool_call_id"` // the approval that made it
	Args           string    `json:"args"`         // "exact" or "any"
	ArgsHash       string    `json:"args_hash,omitempty"`
	ExpiresAt      time.Time `json:"expires_at"`
	CreatedAt      time.Time `json:"created_at"`
}

func grantsOf(list []agent.Grant) []grantJSON {
	out := make([]grantJSON, len(list))
	for i, g := range list {
		out[i] = grantJSON{ID: g.ID, UserID: g.UserID, Tool: g.Tool, Scope: g.Scope, ConversationID: g.ConversationID,
			ToolCallID: g.ToolCallID, Args: g.Args, ArgsHash: g.ArgsHash, ExpiresAt: g.ExpiresAt, CreatedAt: g.CreatedAt}
	}
	return out
}

// nullAbsent is raw, or nothing when it is JSON null: a call that crossed from another process
// (agent.Event.Call, agent.View) holds null where it had nothing, and the API leaves those out.
func nullAbsent(raw json.RawMessage) json.RawMessage {
	if string(raw) == "null" {
		return nil
	}
	return raw
}

// rawOrNull is raw, or JSON null when there is none, so the field is always present.
func rawOrNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// --- requests and short answers -------------------------------------------------------------

// The JSON API's request bodies and the answers that are not a conversation, a call or an
// event. docs/api.md shows an example of each type in this file, and TestAPIDocExamples
// decodes every example into its type.

// createConversationRequest is POST /api/v1/conversations' optional body.
type createConversationRequest struct {
	Title string `json:"title"`
}

// sendMessageRequest is POST /api/v1/conversations/{id}/messages' body.
type sendMessageRequest struct {
	Text *string `json:"text"`
}

// renameRequest is PATCH /api/v1/conversations/{id}'s body.
type renameRequest struct {
	Title *string `json:"title"`
}

// bulkResolveRequest is POST /api/v1/approvals/resolve's body.
type bulkResolveRequest struct {
	Decision string     `json:"decision"`
	Reason   string     `json:"reason"`
	Items    []bulkItem `json:"items"`
}

// okJSON is the answer of a request that has nothing more to say than that it was done.
type okJSON struct {
	OK bool `json:"ok"`
}

// sentJSON is the answer to a message: queued when a running turn makes it wait.
type sentJSON struct {
	OK     bool `json:"ok"`
	Queued bool `json:"queued,omitempty"`
}

// createdJSON is the answer to a new conversation.
type createdJSON struct {
	ID string `json:"id"`
}

// renamedJSON is the answer to a rename: the title as stored. (Fields in the order the map it
// replaced wrote them.)
type renamedJSON struct {
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Title string `json:"title"`
}

// conversationListJSON is the caller's conversations.
type conversationListJSON struct {
	Conversations []conversationJSON `json:"conversations"`
}

// approvalListJSON is the approvals that wait for the caller.
type approvalListJSON struct {
	Approvals []approvalJSON `json:"approvals"`
}

// planResponseJSON is an awaiting approval's dry-run plan.
type planResponseJSON struct {
	Plan *planJSON `json:"plan"`
}

// bulkResponseJSON is a bulk decision's outcome, one result per item in order.
type bulkResponseJSON struct {
	Results []bulkResultJSON `json:"results"`
}

// claimJSON is an inbox claim taken.
type claimJSON struct {
	ClaimedBy string    `json:"claimed_by"`
	ExpiresAt time.Time `json:"expires_at"`
}

// grantListJSON is the caller's active grants.
type grantListJSON struct {
	Grants []grantJSON `json:"grants"`
}

// auditPageJSON is a page of the audit chain; Next is the place to ask after for the next one.
type auditPageJSON struct {
	Next    int64       `json:"next"`
	Records []auditJSON `json:"records"`
}

// readyJSON is /readyz's answer when the process can take writes.
type readyJSON struct {
	Details map[string]any `json:"details,omitempty"`
	OK      bool           `json:"ok"`
}
