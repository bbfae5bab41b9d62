// Package agent runs conversations: one actor goroutine per conversation owns its state, runs
// the turn loop (LLM call → dispatch tool calls → await resolutions → next LLM call), records
// everything in the store's log before acting, and resolves every suspended call through one
// path, Resolve, whoever the resolver is.
package agent

import (
	"encoding/json"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// Principal is who asks for something: a signed-in user (through the page or a token) or the
// system (expiry, the no-client grace).
type Principal struct {
	UserID string
	Role   store.Role
	// Via is "session" (the page's cookie, including its socket), "token" (a bearer token) or
	// "system".
	Via string
}

// System is the principal of the app's own decisions (expiries, the no-client grace).
var System = Principal{UserID: "system", Via: "system"}

// Resolution is the answer to one suspended call. (The API's resolve body is web's; its shape
// between processes is wireResolution's.)
type Resolution struct {
	// Approval.
	Decision string          // approve or deny
	Args     json.RawMessage // edited arguments (approve only)
	// ArgFields are edited arguments as a card's fields (approve only): text by property name,
	// which Resolve types by the tool's schema over the call's arguments into Args (answers.go).
	ArgFields map[string]string
	Reason    string // deny reason, reaches the model
	// Remember, with approve, makes a grant: later calls of the tool in its scope run without
	// a suspension until it ends (grants.go).
	Remember *Remember
	// Elicitation.
	Action  string // accept, decline or cancel
	Content json.RawMessage
	// Answers are a question's answers as a card's fields (accept only): text by property name,
	// which Resolve types by the question's form into Content (answers.go).
	Answers map[string]string
	// Client execution.
	Result json.RawMessage
	Error  *ClientError
}

// ClientError is a browser tool's failure report.
type ClientError struct {
	Message string
}

// EventType names a change published to subscribers.
type EventType string

// Events.
const (
	// EventTextDelta is new text of the answer streaming (Text), at Offset in it; Seq names the
	// answer (the log sequence its model call started after). Coalescing is the subscriber's
	// business.
	EventTextDelta EventType = "text_delta"
	EventMessage   EventType = "message"    // a user or assistant message was logged
	EventToolCall  EventType = "tool_call"  // a call started, progressed, became pending, or finished (Call)
	EventProgress  EventType = "progress"   // a streaming tool reported progress (Text)
	EventStatus    EventType = "status"     // the conversation's status changed (Status)
	EventError     EventType = "turn_error" // a turn ended with an error (Text)
	// EventClientExec asks the owner's browsers to run a client tool (ToolCallID, Call).
	EventClientExec EventType = "client_exec"
	// EventInbox says something only the inbox shows changed (a claim, claims.go). It is
	// published with no conversation, so only inbox followers (Subscribe "") get it.
	EventInbox EventType = "inbox"
	// EventResync is the last event a lagging subscriber gets before its channel closes: it must
	// reload the view and subscribe again.
	EventResync EventType = "resync"
)

// Event is one change of a conversation. Seq is the log sequence the change was recorded at (0
// for ephemeral events such as progress); a text delta's is the sequence its answer's model call
// started after, shared by all the deltas of that answer and by no other answer's (View.StreamSeq).
//
// Its JSON is how events cross between Parley's processes (the cluster), never the API's: the
// web layer writes its own shape of an event (web's apitypes.go).
type Event struct {
	ConversationID string    `json:"conversation_id"`
	Seq            int64     `json:"seq"`
	Type           EventType `json:"type"`
	ToolCallID     string    `json:"tool_call_id,omitempty"`
	Status         string    `json:"status,omitempty"`
	Text           string    `json:"text,omitempty"`
	// Offset is where a text delta's Text starts in its answer's text, in bytes: a follower
	// that already has the text up to some point (View.Streaming) skips what it has.
	Offset int `json:"offset,omitempty"`
	// Call is the call a tool_call or client_exec event is about, as it stands after the change
	// (without its tool's schema: a follower has the tool).
	Call *CallView `json:"call,omitempty"`
	// Data is the particulars of the other events: a message's role, a turn error's kind, a
	// retry's time.
	Data json.RawMessage `json:"data,omitempty"`
	// Entries are the log entries committed since the previous message the actor published
	// events for, in sequence order, carried by the first event published after them (nil on
	// every other event, and on events a hub sends itself). A subscriber that follows the log
	// writes them when they continue what it has and reads the store only when they do not (it
	// subscribed in between, or a commit published nothing). Their CreatedAt is the actor's
	// time of the commit, which can precede the store's own stamp by moments. Shared by every
	// subscriber: read-only.
	Entries []store.Entry `json:"-"`
}

// View is a conversation as the page and the API show it.
type View struct {
	ID        string
	OwnerID   string
	Title     string
	Status    string
	LastSeq   int64
	Messages  []Message
	Calls     []CallView
	Streaming string // the assistant text received so far in the current LLM call
	// StreamSeq names the answer Streaming is of: the Seq of its text deltas (0 when no model
	// call streams). The deltas a follower gets after reading the view continue Streaming when
	// they carry this Seq: those whose Offset falls before len(Streaming) repeat text it has.
	StreamSeq int64
	LastError string // the error that ended the last turn, if it ended with one
	// Queued are the owner's messages that wait for the running turn to end, oldest first.
	Queued []Message
}

// Pending are the calls that await an answer (an approval, a question, a browser), by id.
func (v View) Pending() map[string]CallView {
	out := map[string]CallView{}
	for _, c := range v.Calls {
		if c.Awaiting() {
			out[c.ID] = c
		}
	}
	return out
}

// Call is the call id of the view; ok false when it has none.
func (v View) Call(id string) (CallView, bool) {
	for _, c := range v.Calls {
		if c.ID == id {
			return c, true
		}
	}
	return CallView{}, false
}

// Message is a user or assistant text message (role "error" for a turn error shown to the user,
// "stopped" where the owner stopped a turn or moved on from it).
type Message struct {
	Seq     int64
	Role    string
	Content string
	At      time.Time
	// Queued marks a user message sent while a turn ran: it starts the next turn when this one
	// ends.
	Queued bool
}

// CallView is one tool call: the one read model of a call, which the page, the inbox, the
// events and the API all show (the API through web's own JSON of it). It is a copy: its holder
// may keep it.
type CallView struct {
	Seq         int64
	ID          string
	Name        string
	Executor    tools.Executor
	Approval    tools.Approval
	Approvers   tools.Approvers
	Status      string // running, awaiting, resolved, errored, denied, expired, cancelled
	PendingKind tools.PendingKind
	Args        json.RawMessage // the arguments that run: an approver's edit, else the model's
	ModelArgs   json.RawMessage // the arguments as the model gave them
	CreatedAt   time.Time       // when the model made the call
	Result      json.RawMessage // the envelope the model got, once finished
	Plan        *tools.Plan     // the dry run shown on an approval card
	Prompt      *tools.Prompt   // the question of an elicitation
	Progress    []string        // a streaming tool's progress lines
	Attempts    int
	NextAttempt *time.Time // when a retry is scheduled
	Decision    string     // approve, approve_edited, deny, accept, decline, cancel …
	DecidedBy   string
	Reason      string
	ExpiresAt   *time.Time
	// AskFirst says the owner's page asks the person before it runs this client call
	// (tools.Tool.AsksBeforeRunning).
	AskFirst bool
	// Schema is the tool's parameter schema (empty when the tool is not registered any more):
	// the page builds the approval card's argument fields and orders the plan from it.
	Schema json.RawMessage
	// Governance: the rule that decided the call (nil: none matched), the grant that let it run
	// without a suspension, the distinct approvals it needs (1 unless M-of-N) and those given so
	// far, and whether its approval was escalated to admins.
	Rule            *RuleView
	Grant           string
	ApprovalsNeeded int
	Approvals       []ApprovalView
	Escalated       bool
}

// Awaiting reports whether the call waits for an answer: its PendingKind says which. (A call
// with a result never awaits: the result sets its final status.)
func (c CallView) Awaiting() bool { return c.Status == CallAwaiting }

// RuleView is the tools-file rule that decided a call (or would have, in shadow mode).
type RuleView struct {
	Index  int
	When   string
	Action string
	Shadow bool
	Error  string
}

// ApprovalView is one approve of an M-of-N call: who and when.
type ApprovalView struct {
	By string
	At time.Time
}

// Subscription receives a conversation's events (or every conversation's, for the inbox). C is
// closed after an EventResync (the subscriber lagged) or after Close. Subscribe checked that
// its principal may follow them; Log reads the conversation's log on the same grounds.
type Subscription struct {
	C <-chan Event
	// OwnerID and LastSeq are the conversation's owner and last sequence when the subscription
	// began (zero for every conversation's): events for later entries come on C.
	OwnerID string
	LastSeq int64

	convID string
	m      *Manager
	close  func()
}

// NewSubscription is how an Events implementation outside this package hands out a
// subscription: c carries the events, and close (called once per Close, which callers may call
// more than once) stops them.
func NewSubscription(c <-chan Event, close func()) *Subscription {
	return &Subscription{C: c, close: close}
}

// Close stops the subscription; it is safe to call more than once.
func (s *Subscription) Close() {
	if s.close != nil {
		s.close()
	}
}

// Resolved is a call as it stands after Resolve answered, with its conversation's owner, so a
// caller can show it without reading the conversation again.
type Resolved struct {
	ConversationID string
	OwnerID        string
	Call           CallView
	// Hidden says the resolver may not read the conversation any more: their decision was the
	// last thing of it that awaited them (MaySee). Call is the call they just decided, as their
	// decision left it, and nothing else of the conversation is theirs to show.
	Hidden bool
	// Fields are the problems of a resolution that came as a card's fields (ArgFields, Answers)
	// and was refused as invalid: by property name, "" for the answer as a whole.
	Fields map[string]string
}

// Summary is a conversation in a list.
type Summary struct {
	ID        string
	Title     string
	Status    string
	CreatedAt time.Time
	UpdatedAt time.Time
	// Match is set by Search when a message matched (nil when only the title did, or in a list).
	Match *SearchMatch
}

// SearchMatch is the message a search found in a conversation: its sequence and an excerpt in
// plain text, the matched words between SnippetMark and SnippetEnd (escape it).
type SearchMatch struct {
	Seq     int64
	Snippet string
}

// The markers around the matched words of a SearchMatch's excerpt (control characters no
// stored message holds in an excerpt: the stores remove them from the indexed text).
const (
	SnippetMark = store.SnippetMark
	SnippetEnd  = store.SnippetEnd
)

// PendingApproval is an approval that waits for a principal's decision (the inbox): the call,
// with the conversation it belongs to.
type PendingApproval struct {
	ConversationID string
	Title          string
	OwnerID        string
	Call           CallView
}

// Conversation statuses, as View and Summary report them.
const (
	StatusIdle        = store.StatusIdle
	StatusGenerating  = store.StatusGenerating
	StatusDispatching = store.StatusDispatching
	StatusAwaiting    = store.StatusAwaiting
)

// Call statuses, as CallView reports them.
const (
	CallRunning  = store.CallRunning
	CallAwaiting = store.CallAwaiting
	CallResolved = store.CallResolved
	CallErrored  = store.CallErrored
	CallDenied   = store.CallDenied
	CallExpired  = store.CallExpired
	// CallCancelled is a call the owner stopped, or moved on from, before it had a result.
	CallCancelled = store.CallCancelled
)
