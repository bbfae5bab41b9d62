package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// The JSON payloads of the log entries this package writes. The log is the truth: a
// conversation's state is rebuilt from these alone (plus the retry steps), so every field the
// loop needs after a restart is here.

type userMessageData struct {
	Text string `json:"text"`
	// Key is the message's key when it came through the cluster (request.key).
	Key string `json:"key,omitempty"`
	// Queued is the sequence of the queued_message entry this message takes out of the queue
	// (cancel.go): the message was acknowledged while a turn ran and starts this one.
	Queued int64 `json:"queued,omitempty"`
}

type assistantCallData struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Args     json.RawMessage `json:"args,omitempty"`
	Provider bool            `json:"provider,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
}

type assistantMessageData struct {
	Text      string              `json:"text"`
	ToolCalls []assistantCallData `json:"tool_calls,omitempty"`
	Step      string              `json:"step"`
	Usage     llm.Usage           `json:"usage"`
}

// toolCallData is the tool_call entry: the call as dispatched, with what its first suspension
// shows (a plan or a question) and when that suspension expires.
type toolCallData struct {
	Name      string          `json:"name"`
	ModelID   string          `json:"model_id,omitempty"` // the provider's id when Parley assigned a fresh one
	Executor  string          `json:"executor"`
	Approval  string          `json:"approval,omitempty"`
	Approvers string          `json:"approvers,omitempty"`
	Args      json.RawMessage `json:"args"`
	Turn      int             `json:"turn"`
	Plan      *planData       `json:"plan,omitempty"`
	Prompt    *promptData     `json:"prompt,omitempty"`
	Pending   string          `json:"pending,omitempty"` // the pending kind when it suspends at once
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	// How the call was gated (gate.go): the rule that matched, the grant that let it run, the
	// distinct approvals it needs (M-of-N; 0 is one).
	Rule   *ruleData `json:"rule,omitempty"`
	Grant  string    `json:"grant,omitempty"`
	Needed int       `json:"approvals_needed,omitempty"`
}

// planData is a dry run's plan as the log keeps it (tool_call entries, the tool_calls row's
// record).
type planData struct {
	Summary string         `json:"summary"`
	Details map[string]any `json:"details,omitempty"`
}

func planDataOf(p *tools.Plan) *planData {
	if p == nil {
		return nil
	}
	return &planData{Summary: p.Summary, Details: p.Details}
}

func (p *planData) plan() *tools.Plan {
	if p == nil {
		return nil
	}
	return &tools.Plan{Summary: p.Summary, Details: p.Details}
}

// promptData is a question as the log keeps it (tool_call and question entries, the tool_calls
// row's record).
type promptData struct {
	Message string          `json:"message"`
	Schema  json.RawMessage `json:"schema"`
	URL     string          `json:"url,omitempty"`
}

func promptDataOf(p *tools.Prompt) *promptData {
	if p == nil {
		return nil
	}
	return &promptData{Message: p.Message, Schema: p.Schema, URL: p.URL}
}

func (p *promptData) prompt() *tools.Prompt {
	if p == nil {
		return nil
	}
	return &tools.Prompt{Message: p.Message, Schema: p.Schema, URL: p.URL}
}

// decisionData is an approval decision. An approved gated client call suspends again; its
// second expiry is recorded here.
type decisionData struct {
	Decision  string          `json:"decision"` // approve, approve_edited, deny
	By        string          `json:"by"`
	Role      string          `json:"role,omitempty"`
	Via       string          `json:"via,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Override  bool            `json:"override,omitempty"` // an admin decided an owner's call (policy.go: AsOverride)
	Args      json.RawMessage `json:"args,omitempty"`     // the edited arguments
	ArgsHash  string          `json:"args_hash"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	At        time.Time       `json:"at,omitzero"`        // when (an approval of an M-of-N call)
	Remember  *grantData      `json:"remember,omitempty"` // the grant an approve made (grants.go)
	Key       string          `json:"key,omitempty"`      // the resolve's key (request.key)
	// A proposal (decisionPropose): the gate the rules put on the edited arguments, and whether
	// the proposer's own approval counts under it.
	Approvers string    `json:"approvers,omitempty"`
	Needed    int       `json:"needed,omitempty"`
	Rule      *ruleData `json:"rule,omitempty"`
	Counts    bool      `json:"counts,omitempty"`
}

// resultData is a tool_result or tool_error entry: the envelope the model reads and the call's
// final status; Decision and By say who answered a question or a client run.
type resultData struct {
	Envelope json.RawMessage `json:"envelope"`
	Status   string          `json:"status"`
	Decision string          `json:"decision,omitempty"`
	By       string          `json:"by,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Attempt  int             `json:"attempt,omitempty"`
	Key      string          `json:"key,omitempty"` // the resolve's key (request.key) that ended the call
}

type attemptData struct {
	Step          string         `json:"step"`
	Attempt       int            `json:"attempt"`
	Error         map[string]any `json:"error,omitempty"`
	NextAttemptAt *time.Time     `json:"next_attempt_at,omitempty"`
}

type turnErrorData struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// call is the in-memory tracking entry of one tool call (its entry in the pending set, plus
// what the view shows).
type call struct {
	id        string
	name      string
	tool      *tools.Tool // nil for an unknown tool or a provider call not in the registry
	executor  tools.Executor
	approval  tools.Approval
	approvers tools.Approvers
	args      json.RawMessage // as the model gave them
	runArgs   json.RawMessage // edited arguments when an approver changed them
	// proposedBy is who proposed runArgs while the call still awaits (decisionPropose): anyone
	// else approves them only by restating them (resolve.go, errUnseenProposal).
	proposedBy string
	seq        int64
	turn       int
	at         time.Time

	status    string // store.Call*
	kind      tools.PendingKind
	approved  bool
	plan      *tools.Plan
	prompt    *tools.Prompt
	result    json.RawMessage
	expiresAt *time.Time

	attempts    int // attempts started so far
	nextAttempt *time.Time
	progress    []string

	// a running server call's question (elicit.go)
	resume  json.RawMessage // the pending question's resume state; nil when it cannot survive a restart
	resumed *tools.Resumed  // the answered question a run carries on from

	decision  string
	decidedBy string
	reason    string

	// governance (gate.go, quorum.go)
	rule      *ruleData
	grant     string
	needed    int        // distinct approvals needed; 0 is one
	approvals []approval // the approvals so far of an M-of-N call (of the arguments they approved)
	// approvedHash is the canonical hash of the arguments the final approval covered: the effect
	// gate runs the call only with these (ready.go: refusal).
	approvedHash string
	escalated    bool // its approval's time ran out and admins may decide it
}

func (c *call) finished() bool { return c.result != nil }

// effectiveArgs are the arguments that run: the edited ones when an approver changed them.
func (c *call) effectiveArgs() json.RawMessage {
	if c.runArgs != nil {
		return c.runArgs
	}
	return c.args
}

// item is one message of the model's context.
type item struct {
	role    llm.Role
	text    string
	callIDs []string
	seq     int64
	turn    int
}

// convState is a conversation as the loop sees it, rebuilt from the log on revival.
type convState struct {
	conv    store.Conversation
	lastSeq int64
	status  string
	keys    []string // the latest maxKeys requests' keys (request.key), oldest first

	messages []Message
	items    []item
	calls    map[string]*call
	order    []string // call ids in log order

	turn      int  // user turns so far (the current one included)
	turnOpen  bool // a user turn is in progress
	llmCalls  int  // completed LLM calls of the current turn
	llmFailed int  // failed attempts of the current LLM step
	llmNext   *time.Time
	lastError string
	// current is the index in items of the newest assistant message of the open turn, -1 when
	// the turn has not had one yet.
	current int
	// queue holds the owner's messages acknowledged while a turn ran, oldest first (cancel.go).
	queue []queuedMessage
}

func newState(conv store.Conversation) *convState {
	return &convState{conv: conv, status: store.StatusIdle, calls: map[string]*call{}, current: -1}
}

// llmStep names the current LLM step for the retry table.
func (s *convState) llmStep() string {
	return "llm:" + strconv.Itoa(s.turn) + ":" + strconv.Itoa(s.llmCalls+1)
}

// currentCalls are the local (non-provider) calls of the open turn's newest assistant message.
func (s *convState) currentCalls() []*call {
	if s.current < 0 {
		return nil
	}
	var out []*call
	for _, id := range s.items[s.current].callIDs {
		if c := s.calls[id]; c != nil && c.executor != tools.Provider {
			out = append(out, c)
		}
	}
	return out
}

// loadState rebuilds a conversation from the store: the log, then the retry steps.
func loadState(ctx context.Context, st store.Store, reg *tools.Registry, id string) (*convState, error) {
	conv, err := st.GetConversation(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("load conversation %s: %w", id, err)
	}
	if conv.LastSeq == 0 {
		// Nothing logged yet (typically a new conversation's first message): no log to replay,
		// and retry steps matter only to an open turn, which has entries. Two reads saved.
		s := newState(conv)
		s.status = s.derivedStatus()
		return s, nil
	}
	entries, err := st.Log(ctx, id, 0)
	if err != nil {
		return nil, fmt.Errorf("load log of %s: %w", id, err)
	}
	steps, err := st.Steps(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("load steps of %s: %w", id, err)
	}
	s := newState(conv)
	for _, e := range entries {
		if err := s.apply(e, reg); err != nil {
			return nil, fmt.Errorf("replay %s entry %d: %w", id, e.Seq, err)
		}
	}
	for _, step := range steps {
		switch {
		case step.Key == s.llmStep() && s.turnOpen:
			s.llmFailed = step.Attempts
			s.llmNext = step.NextAttemptAt
		case strings.HasPrefix(step.Key, "tool:"):
			if c := s.calls[strings.TrimPrefix(step.Key, "tool:")]; c != nil && !c.finished() {
				c.nextAttempt = step.NextAttemptAt
				if step.Attempts > c.attempts {
					c.attempts = step.Attempts
				}
			}
		}
	}
	s.status = s.derivedStatus()
	return s, nil
}

// apply folds one log entry into the state. It is used both for replay and, by the actor, for
// the entries it has just appended, so the live state and a revived one cannot drift apart.
func (s *convState) apply(e store.Entry, reg *tools.Registry) error {
	s.lastSeq = e.Seq
	switch e.Type {
	case store.EntryUserMessage:
		var d userMessageData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		if d.Queued > 0 {
			s.dequeue(d.Queued) // cancel.go: it waited for the previous turn to end
		}
		s.noteKey(d.Key)
		s.turn++
		s.turnOpen = true
		s.llmCalls, s.llmFailed, s.llmNext = 0, 0, nil
		s.current = -1
		s.lastError = ""
		s.items = append(s.items, item{role: llm.RoleUser, text: d.Text, seq: e.Seq, turn: s.turn})
		s.messages = append(s.messages, Message{Seq: e.Seq, Role: "user", Content: d.Text, At: e.CreatedAt})
	case store.EntryAssistantMessage:
		var d assistantMessageData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		it := item{role: llm.RoleAssistant, text: d.Text, seq: e.Seq, turn: s.turn}
		for _, tc := range d.ToolCalls {
			it.callIDs = append(it.callIDs, tc.ID)
			if tc.Provider {
				// A provider call resolved in the stream; it has no tool_call entry of its own.
				c := &call{id: tc.ID, name: tc.Name, executor: tools.Provider, approval: tools.Auto, approvers: tools.ByOwner,
					args: tc.Args, seq: e.Seq, turn: s.turn, at: e.CreatedAt, status: store.CallResolved, result: tc.Result}
				if t, ok := reg.Get(tc.Name); ok {
					c.tool = t
				}
				s.addCall(c)
			}
		}
		s.items = append(s.items, it)
		s.current = len(s.items) - 1
		s.llmCalls++
		s.llmFailed, s.llmNext = 0, nil
		if d.Text != "" {
			s.messages = append(s.messages, Message{Seq: e.Seq, Role: "assistant", Content: d.Text, At: e.CreatedAt})
		}
		if len(s.currentCalls()) == 0 && !s.hasPendingToolCallEntries(d) {
			s.turnOpen = false
		}
	case store.EntryToolCall:
		var d toolCallData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		c := &call{id: e.ToolCallID, name: d.Name, executor: tools.Executor(d.Executor), approval: tools.Approval(d.Approval),
			approvers: tools.Approvers(d.Approvers), args: d.Args, seq: e.Seq, turn: d.Turn, at: e.CreatedAt,
			plan: d.Plan.plan(), prompt: d.Prompt.prompt(), expiresAt: d.ExpiresAt, attempts: 1,
			rule: d.Rule, grant: d.Grant, needed: d.Needed}
		if t, ok := reg.Get(d.Name); ok {
			c.tool = t
		}
		c.kind = tools.PendingKind(d.Pending)
		if c.kind != "" {
			c.status = store.CallAwaiting
			c.attempts = 0
		} else {
			c.status = store.CallRunning
		}
		s.addCall(c)
	case store.EntryDecision:
		c := s.calls[e.ToolCallID]
		if c == nil {
			return fmt.Errorf("decision for unknown call %s", e.ToolCallID)
		}
		var d decisionData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		s.noteKey(d.Key)
		if c.applyGovernance(d) {
			return nil
		}
		c.decision, c.decidedBy, c.reason = d.Decision, d.By, d.Reason
		if d.Decision == "approve" || d.Decision == "approve_edited" {
			c.approved, c.approvedHash = true, d.ArgsHash
			if len(d.Args) > 0 {
				c.runArgs = d.Args
			}
			c.expiresAt = d.ExpiresAt
			if c.executor == tools.Client {
				c.status, c.kind = store.CallAwaiting, tools.PendingClientExec
			} else {
				c.status, c.kind = store.CallRunning, ""
				c.attempts = 1
			}
		}
	case store.EntryToolResult, store.EntryToolError:
		c := s.calls[e.ToolCallID]
		if c == nil {
			return fmt.Errorf("result for unknown call %s", e.ToolCallID)
		}
		var d resultData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		s.noteKey(d.Key)
		c.result, c.status, c.kind, c.expiresAt, c.nextAttempt = d.Envelope, d.Status, "", nil, nil
		if d.Decision != "" {
			c.decision, c.decidedBy = d.Decision, d.By
		}
		if d.Reason != "" {
			c.reason = d.Reason
		}
	case store.EntryAttemptStarted, store.EntryAttemptFailed:
		var d attemptData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		if e.ToolCallID == "" {
			if e.Type == store.EntryAttemptFailed {
				s.llmFailed = d.Attempt
				s.llmNext = d.NextAttemptAt
			} else {
				s.llmNext = nil
			}
			return nil
		}
		c := s.calls[e.ToolCallID]
		if c == nil {
			return fmt.Errorf("attempt for unknown call %s", e.ToolCallID)
		}
		if d.Attempt > c.attempts {
			c.attempts = d.Attempt
		}
		if e.Type == store.EntryAttemptFailed {
			c.nextAttempt = d.NextAttemptAt
		} else {
			c.nextAttempt = nil
		}
	case entryQuestion, entryAnswer:
		return s.applyAsk(e)
	case store.EntryExpiry:
		// The tool_error entry written beside it carries the outcome.
	case store.EntryQueuedMessage, store.EntryTurnCancelled:
		return s.applyCancel(e)
	case store.EntryTurnError:
		var d turnErrorData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		s.turnOpen = false
		s.lastError = d.Message
		s.llmFailed, s.llmNext = 0, nil
		s.messages = append(s.messages, Message{Seq: e.Seq, Role: "error", Content: d.Message, At: e.CreatedAt})
	default:
		// Entries written by other packages (none today) do not change the loop's state.
	}
	return nil
}

// hasPendingToolCallEntries reports whether an assistant message names local calls whose
// tool_call entries follow it in the same batch (apply sees the assistant entry first).
func (s *convState) hasPendingToolCallEntries(d assistantMessageData) bool {
	for _, tc := range d.ToolCalls {
		if !tc.Provider {
			return true
		}
	}
	return false
}

// gates lists how the conversation's calls are gated, and which await an approval, for the
// policy.
func (s *convState) gates() []Gate {
	out := make([]Gate, 0, len(s.calls))
	for _, c := range s.calls {
		out = append(out, Gate{Approval: c.approval, Approvers: c.approvers, Pending: c.awaitsApproval()})
	}
	return out
}

// awaitsApproval reports whether the call waits for an approval decision now.
func (c *call) awaitsApproval() bool {
	return !c.finished() && c.status == store.CallAwaiting && c.kind == tools.PendingApproval
}

// maySee asks the policy whether by may read this conversation.
func (s *convState) maySee(by Principal) bool { return MaySee(by, s.conv.OwnerID, s.gates()) }

func (s *convState) addCall(c *call) {
	if _, dup := s.calls[c.id]; !dup {
		s.order = append(s.order, c.id)
	}
	s.calls[c.id] = c
}

// derivedStatus is the conversation status the state implies.
func (s *convState) derivedStatus() string {
	if !s.turnOpen {
		if len(s.queue) > 0 {
			// A queued message is about to start the next turn: the conversation is not idle
			// (so a revival at start-up finds it, and nothing shows idle in between).
			return store.StatusGenerating
		}
		return store.StatusIdle
	}
	calls := s.currentCalls()
	running, awaiting, done := false, false, true
	for _, c := range calls {
		switch {
		case c.finished():
		case c.status == store.CallAwaiting:
			awaiting, done = true, false
		default:
			running, done = true, false
		}
	}
	switch {
	case s.current < 0 || done:
		return store.StatusGenerating
	case running:
		return store.StatusDispatching
	case awaiting:
		return store.StatusAwaiting
	}
	return store.StatusGenerating
}

// maxKeys bounds the request keys a conversation's state remembers: a request is sent again
// only moments after its first try, while a handful of others could have been done since.
const maxKeys = 64

// noteKey remembers the key of a request done (none when it did not come through the cluster).
func (s *convState) noteKey(key string) {
	if key == "" {
		return
	}
	if len(s.keys) >= maxKeys {
		s.keys = append(s.keys[:0], s.keys[1:]...)
	}
	s.keys = append(s.keys, key)
}

// hasKey reports whether the request with key was done lately.
func (s *convState) hasKey(key string) bool {
	return key != "" && slices.Contains(s.keys, key)
}
