package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file stages the actor's writes (stage: the entries folded into the state, the batch merged
// for commitReady in ready.go), the tool_calls rows beside the log, and the events: publish
// queues them, settle publishes them once the loop's pass is over.

// --- committing -----------------------------------------------------------------------------

// stage adds b to the batch the loop commits next (ready.go) and folds its entries into the
// state at once, so the rest of the step sees them: the conversation as this step leaves it.
// touched are the calls b changes (their tool_calls rows are written from the state at commit).
// A batch the state cannot take fails the whole step's write: nothing of it is appended.
func (a *actor) stage(b store.Batch, touched []string) {
	r := &a.ready
	if r.failed != nil {
		return
	}
	makeStorable(&b)
	a.observeBefore(touched)
	now := a.now()
	for i := range b.Entries {
		b.Entries[i].Seq = a.st.lastSeq + 1
		b.Entries[i].CreatedAt = now
		if err := a.st.apply(b.Entries[i], a.m.cfg.Tools); err != nil { // moves st.lastSeq on
			r.failed = a.internalError("apply entry", err)
			return
		}
	}
	a.st.status = a.st.derivedStatus()
	r.merge(b, touched)
}

func (a *actor) row(c *call, now time.Time) store.ToolCall {
	r := store.ToolCall{
		ConversationID: a.id, ToolCallID: c.id, Name: c.name, Executor: string(c.executor),
		Approval: string(c.approval), Approvers: string(c.approvers), Status: c.status,
		PendingKind: string(c.kind), Args: c.effectiveArgs(), Result: c.result, ExpiresAt: c.expiresAt,
		Seq: c.seq, CreatedAt: c.at, UpdatedAt: now,
	}
	if c.status == store.CallAwaiting {
		r.Prompt, _ = json.Marshal(pendingPrompt(c))
	}
	return r
}

// settle runs after every message: it re-arms the wake-up timer, then publishes the events the
// message produced. Publishing last means a subscriber that sees an event can rely on the timers
// behind it being armed (tests advance a fake clock on that signal).
func (a *actor) settle() {
	a.rearm()
	a.reportPending()
	if len(a.logged) > 0 {
		// A fresh slice each time: subscribers keep reading the one they were given.
		switch {
		case len(a.events) > 0:
			a.events[0].Entries = a.logged
		case len(a.statusEvents) > 0:
			a.statusEvents[0].Entries = a.logged
		}
		a.logged = nil // nothing published: a stream that needs them reads the store
	}
	for _, e := range a.events {
		a.m.events.Publish(e)
	}
	for _, e := range a.statusEvents {
		a.m.events.Publish(e)
	}
	a.events = a.events[:0]
	a.statusEvents = a.statusEvents[:0]
	a.ready.events, a.ready.statusEvents = 0, 0 // the published ones are no step's to take back
}

// reportPending tells the manager how many calls of this conversation await an answer, by
// kind, when that changed. The count is recomputed from the state (not moved by deltas), so it
// cannot drift; it stays with the manager while the actor hibernates, since the calls are still
// pending in the store.
func (a *actor) reportPending() {
	var now pendingByKind
	for _, c := range a.st.currentCalls() {
		if c.status == store.CallAwaiting && c.kind != "" {
			now.add(c.kind)
		}
	}
	if now == a.pending {
		return
	}
	a.pending = now
	a.m.setPending(a.id, now)
}

func (a *actor) publish(e Event) {
	e.ConversationID = a.id
	a.events = append(a.events, e)
}

// --- events ---------------------------------------------------------------------------------

// callEvent is the Data of an EventToolCall.
type callEvent struct {
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
	Pending     *PendingView      `json:"pending,omitempty"`
}

func (a *actor) publishCall(c *call) {
	ev := callEvent{ID: c.id, Name: c.name, Executor: c.executor, Approval: c.approval, Approvers: c.approvers,
		Status: c.status, Kind: c.kind, Args: c.effectiveArgs(), Result: c.result, Attempts: c.attempts,
		NextAttempt: c.nextAttempt, ExpiresAt: c.expiresAt, Decision: c.decision, DecidedBy: c.decidedBy, Reason: c.reason}
	if c.status == store.CallAwaiting {
		p := pendingView(c)
		ev.Pending = &p
	}
	a.publish(Event{Seq: a.st.lastSeq, Type: EventToolCall, ToolCallID: c.id, Status: c.status, Data: mustJSON(ev)})
}

func (a *actor) publishClientExec(c *call) {
	a.publish(Event{Seq: a.st.lastSeq, Type: EventClientExec, ToolCallID: c.id,
		Data: mustJSON(map[string]any{"tool": c.name, "args": c.effectiveArgs(), "ask": c.asksFirst()})})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agent: encode %T: %v", v, err))
	}
	return b
}

func roleData(role string) json.RawMessage { return mustJSON(map[string]string{"role": role}) }
