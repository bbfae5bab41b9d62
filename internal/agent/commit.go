package agent

import (
	"encoding/json"
	"fmt"
	"time"

	"parley/internal/store"
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
		r.Prompt = recordOf(c) // callrecord.go: what the inbox shows of the call, beside the columns
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

// publishCall publishes c as it stands now; the event carries its read model.
func (a *actor) publishCall(c *call) {
	a.publish(Event{Seq: a.st.lastSeq, Type: EventToolCall, ToolCallID: c.id, Status: c.status, Call: eventCall(c)})
}

// publishClientExec asks the owner's browsers to run c.
func (a *actor) publishClientExec(c *call) {
	a.publish(Event{Seq: a.st.lastSeq, Type: EventClientExec, ToolCallID: c.id, Call: eventCall(c)})
}

// eventCall is c as an event carries it: without its tool's schema, which every follower has.
func eventCall(c *call) *CallView {
	cv := callView(c)
	cv.Schema = nil
	return &cv
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agent: encode %T: %v", v, err))
	}
	return b
}

func roleData(role string) json.RawMessage { return mustJSON(map[string]string{"role": role}) }
