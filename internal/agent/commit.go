package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file records the actor's work: commit appends to the log (and the tool_calls rows beside
// it), settle publishes the events of each message once it is handled.

// --- committing -----------------------------------------------------------------------------

// commit appends b after the actor's last sequence. The entries are folded into the state first
// (so the batch can carry the resulting status and tool_calls rows); if the append fails the
// actor is marked broken: it stops and is revived from the log, which is still the truth.
func (a *actor) commit(b store.Batch, touched []string) error {
	if a.evicted() {
		// Fenced while handling a message: nothing more is written or started from here (no
		// queued tool, no model call: halt); the loop stops the actor once the request in hand
		// is answered, and the conversation's next owner continues from the log.
		a.halt(true)
		return errClosed()
	}
	makeStorable(&b)
	a.observeBefore(touched)
	now := a.now()
	prevStatus := a.st.status
	after := a.st.lastSeq
	for i := range b.Entries {
		b.Entries[i].Seq = after + int64(i) + 1
		b.Entries[i].CreatedAt = now
		if err := a.st.apply(b.Entries[i], a.m.cfg.Tools); err != nil {
			a.broken = true
			a.announcing = nil
			return a.internalError("apply entry", err)
		}
	}
	a.st.status = a.st.derivedStatus()
	if a.st.status != prevStatus {
		b.Status = a.st.status
	}
	notes := a.announcements() // of the calls as this commit leaves them
	a.queueNotifications(&b, notes)
	for _, id := range touched {
		if c := a.st.calls[id]; c != nil {
			b.Calls = append(b.Calls, a.row(c, now))
		}
	}
	ctx, span := a.observeAppend(&b)
	last, err := a.m.cfg.Store.Append(ctx, a.id, after, b)
	a.observeAppended(span, &b, touched, err)
	if errors.Is(err, store.ErrNotOwner) {
		// Another process took the conversation over since this one claimed it (this one was
		// deemed dead): nothing was written, and nothing more will be from here. The actor
		// stops; its next owner continues from the log, and the request is refused here so its
		// sender tries again there.
		a.log.Warn("agent: another process owns the conversation now; stopping its actor here", "err", err)
		a.evictNow() // the loop stops the actor after the reply
		a.halt(true) // nothing more starts here: no queued tool, no model call
		return errTakenOver()
	}
	if err != nil {
		a.broken = true
		a.conflicted = errors.Is(err, store.ErrConflict)
		// Noted now, before this actor leaves the registry: whichever actor serves the
		// conversation next (revived by this one, or started by a request in between) takes it.
		a.m.noteFailure(a.id, writeFailure{count: a.failures.count + 1})
		return a.internalError("append to log", err)
	}
	a.st.lastSeq = last
	a.failures = writeFailure{}
	a.notifyAll(notes)
	for _, e := range b.Entries {
		e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond) // the store's resolution
		a.logged = append(a.logged, e)
	}
	// Before the caller hears back, so a resolve's reply finds the count already moved.
	a.reportPending()
	if a.st.status != prevStatus {
		a.statusEvents = append(a.statusEvents, Event{ConversationID: a.id, Seq: last, Type: EventStatus, Status: a.st.status})
	}
	return nil
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
