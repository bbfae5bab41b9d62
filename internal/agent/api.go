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

// Resolution is the answer to one suspended call. Its JSON shape is the API's resolve body.
type Resolution struct {
	// Approval.
	Decision string          `json:"decision,omitempty"` // approve or deny
	Args     json.RawMessage `json:"args,omitempty"`     // edited arguments (approve only)
	Reason   string          `json:"reason,omitempty"`   // deny reason, reaches the model
	// Elicitation.
	Action  string          `json:"action,omitempty"` // accept, decline or cancel
	Content json.RawMessage `json:"content,omitempty"`
	// Client execution.
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ClientError    `json:"error,omitempty"`
}

// ClientError is a browser tool's failure report.
type ClientError struct {
	Message string `json:"message"`
}

// EventType names a change published to subscribers.
type EventType string

// Events.
const (
	EventTextDelta EventType = "text_delta" // Text is the new text (coalescing is the subscriber's business)
	EventMessage   EventType = "message"    // a user or assistant message was logged
	EventToolCall  EventType = "tool_call"  // a call started, progressed, became pending, or finished
	EventProgress  EventType = "progress"   // a streaming tool reported progress (Text)
	EventStatus    EventType = "status"     // the conversation's status changed (Status)
	EventError     EventType = "turn_error" // a turn ended with an error (Text)
	// EventClientExec asks the owner's browsers to run a client tool (ToolCallID, Data: {"tool","args"}).
	EventClientExec EventType = "client_exec"
	// EventResync is the last event a lagging subscriber gets before its channel closes: it must
	// reload the view and subscribe again.
	EventResync EventType = "resync"
)

// Event is one change of a conversation. Seq is the log sequence the change was recorded at
// (0 for ephemeral events such as text deltas and progress).
type Event struct {
	ConversationID string          `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	Type           EventType       `json:"type"`
	ToolCallID     string          `json:"tool_call_id,omitempty"`
	Status         string          `json:"status,omitempty"`
	Text           string          `json:"text,omitempty"`
	Data           json.RawMessage `json:"data,omitempty"`
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
	Pending   map[string]PendingView
	LastError string // the error that ended the last turn, if it ended with one
}

// Message is a user or assistant text message (role "error" for a turn error shown to the user).
type Message struct {
	Seq     int64
	Role    string
	Content string
	At      time.Time
}

// CallView is one tool call.
type CallView struct {
	Seq         int64
	ID          string
	Name        string
	Executor    tools.Executor
	Approval    tools.Approval
	Approvers   tools.Approvers
	Status      string // running, awaiting, resolved, errored, denied, expired
	PendingKind tools.PendingKind
	Args        json.RawMessage
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
}

// PendingView is the API's "pending" entry of an awaiting call.
type PendingView struct {
	Executor  tools.Executor    `json:"executor"`
	Kind      tools.PendingKind `json:"kind"`
	Prompt    any               `json:"prompt"`
	Schema    json.RawMessage   `json:"schema,omitempty"`
	ExpiresAt *time.Time        `json:"expires_at,omitempty"`
}

// Subscription receives a conversation's events (or every conversation's, for the inbox). C is
// closed after an EventResync (the subscriber lagged) or after Close.
type Subscription struct {
	C     <-chan Event
	close func()
}

// NewSubscription wraps a channel and its cancel function; package agent's hub creates them.
func NewSubscription(c <-chan Event, cancel func()) *Subscription {
	return &Subscription{C: c, close: cancel}
}

// Close stops the subscription; it is safe to call more than once.
func (s *Subscription) Close() {
	if s.close != nil {
		s.close()
	}
}

// Facts are what a conversation's actor knows when a checked request reaches it: the owner and,
// for a resolve, the call it names. A caller's Check decides from them inside the actor, so an
// entry point with rules of its own (the JSON API's 404 for strangers, its 422 for a resolution
// of the wrong kind) needs no store read before asking.
type Facts struct {
	OwnerID string
	// Found reports whether the conversation has a call with the id (in any turn); the fields
	// below describe it when it does.
	Found       bool
	Approval    tools.Approval
	Approvers   tools.Approvers
	Status      string            // store.Call*
	PendingKind tools.PendingKind // what an awaiting call waits for
}

// Check runs inside the conversation's actor before the request's own checks; a non-nil error
// is the request's answer and nothing changes. It must not block.
type Check func(Facts) error
