package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is stopping and moving on (docs/api.md, "Messages and turns"). The owner's Stop ends
// the open turn; a message sent while the turn awaits a person ends the turn's open calls and
// starts the next turn with it; a message sent while the turn generates or dispatches waits in
// a bounded queue and starts the next turn when this one ends. Each is one log append, so a
// kill at any moment leaves all of it or none of it: the log, not memory, says what was stopped
// and which messages wait.

// Why a stop ends a turn.
const (
	reasonStopped = "stopped"  // the Stop button or POST …/cancel
	reasonMovedOn = "moved_on" // a message while the turn awaited a person
)

// queuedMessage is a message of the owner's that waits for the running turn to end.
type queuedMessage struct {
	seq  int64 // of its queued_message entry
	text string
}

// queuedMessageData is the queued_message entry.
type queuedMessageData struct {
	Text string `json:"text"`
	Key  string `json:"key,omitempty"` // request.key
}

// turnCancelledData is the turn_cancelled entry.
type turnCancelledData struct {
	Reason string `json:"reason"` // stopped or moved_on
	By     string `json:"by"`
}

// Posted says what became of a message the owner sent.
type Posted struct {
	// Queued: a turn was generating or dispatching; the message starts the next turn when that
	// one ends.
	Queued bool
	// MovedOn: the turn awaited a person; its open calls ended as cancelled and the message
	// started the next turn.
	MovedOn bool
}

// cancelState is the actor's part in stopping (owned by run).
type cancelState struct {
	// dropLLM: the model call in flight belongs to a stopped turn; its answer is dropped.
	dropLLM bool
	// posted is what the send being handled did, for its reply.
	posted Posted
}

// Post is Send that also says what became of the message: started a turn, queued behind the
// running one (Posted.Queued), or ended the open calls of a turn that awaited a person
// (Posted.MovedOn). Errors as Send, and rate_limited when MaxQueuedMessages already wait.
func (m *Manager) Post(ctx context.Context, convID string, by Principal, text string) (Posted, error) {
	r, err := m.call(ctx, convID, &request{kind: reqSend, by: by, text: text})
	return r.posted, err
}

// Cancel stops the conversation's open turn: the model's stream stops, running server calls are
// cancelled through their context, every open call ends with the error kind cancelled (the
// model reads it in its next request; the stop itself starts no model call) and the
// conversation becomes idle (or starts the turn of a queued message). Only the owner may stop:
// not_found for whoever may not see the conversation, permission_denied for whoever may; stale
// when no turn runs.
func (m *Manager) Cancel(ctx context.Context, convID string, by Principal) error {
	_, err := m.call(ctx, convID, &request{kind: reqCancel, by: by})
	return err
}

// ownerOnly answers a request only the owner may make (MaySend): not_found for whoever may not
// see the conversation, permission_denied for whoever may.
func (s *convState) ownerOnly(by Principal, what string) error {
	if MaySend(by, s.conv.OwnerID) {
		return nil
	}
	if s.maySee(by) {
		return fault.New(fault.KindPermissionDenied, "only the conversation's owner may "+what, nil)
	}
	return errNotFound()
}

// handleCancel is Cancel inside the actor.
func (a *actor) handleCancel(req *request) error {
	if err := a.st.ownerOnly(req.by, "stop it"); err != nil {
		return err
	}
	if !a.st.turnOpen {
		return fault.New(fault.KindStale, "nothing is running to stop", map[string]any{"status": a.st.status})
	}
	b, touched, partial := a.stopBatch(req.by, reasonStopped)
	a.stage(b, touched)
	a.afterStop(touched, partial)
	a.log.Info("turn stopped by the owner", "calls", len(touched))
	return nil
}

// sendDuringTurn takes the owner's message while a turn is open (or messages already wait): it
// moves on from a turn that awaits a person, else it queues the message.
func (a *actor) sendDuringTurn(req *request) error {
	st := a.st
	if st.turnOpen && st.status == store.StatusAwaiting && !a.llmBusy && a.drafting == nil && len(st.queue) == 0 {
		b, touched, partial := a.stopBatch(req.by, reasonMovedOn)
		b.Entries = append(b.Entries, store.Entry{Type: store.EntryUserMessage, Actor: req.by.UserID, Data: mustJSON(userMessageData{Text: req.text, Key: req.key})})
		a.stage(b, touched)
		a.afterStop(touched, partial)
		a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Text: req.text, Data: roleData("user")})
		a.cancel.posted = Posted{MovedOn: true}
		a.log.Info("the owner moved on from an awaiting turn", "calls", len(touched))
		a.ready.after(followUp{kind: followAdvance})
		return nil
	}
	if n := len(st.queue); n >= a.cfg().MaxQueuedMessages {
		return fault.New(fault.KindRateLimited,
			fmt.Sprintf("%d messages already wait for the assistant to finish; wait for it, or stop it", n), map[string]any{"queued": n})
	}
	d := mustJSON(queuedMessageData{Text: req.text, Key: req.key})
	a.stage(store.Batch{Entries: []store.Entry{{Type: store.EntryQueuedMessage, Actor: req.by.UserID, Data: d}}, Urgent: true}, nil)
	a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Text: req.text, Data: mustJSON(map[string]any{"role": "user", "queued": true})})
	a.cancel.posted = Posted{Queued: true}
	return nil
}

// stopBatch is the append that ends the open turn: the answer streamed so far (kept as the
// assistant's message, so the model sees what it had said), a cancelled result for every open
// call of the turn, and the turn_cancelled entry. touched are the calls it ends.
func (a *actor) stopBatch(by Principal, reason string) (b store.Batch, touched []string, partial string) {
	st := a.st
	switch {
	case a.drafting != nil:
		partial = a.drafting.resp.Text
	case a.llmBusy:
		partial = storable(a.stream.String())
	}
	if partial != "" {
		b.Entries = append(b.Entries, store.Entry{Type: store.EntryAssistantMessage, Actor: "model",
			Data: mustJSON(assistantMessageData{Text: partial, Step: st.llmStep()})})
	}
	if st.llmFailed > 0 || st.llmNext != nil {
		b.DoneSteps = append(b.DoneSteps, st.llmStep())
	}
	now := a.now()
	for _, c := range st.currentCalls() {
		if c.finished() {
			continue
		}
		msg := "the user stopped the turn before this call had a result"
		if c.status == store.CallRunning {
			msg += "; it may have done part of its work"
		}
		if reason == reasonMovedOn {
			msg = "the user moved on without answering; their next message follows"
		}
		rd := resultData{Envelope: tools.ErrorEnvelope(fault.New(fault.KindCancelled, msg, map[string]any{"reason": reason})),
			Status: store.CallCancelled, Decision: reason, By: by.UserID}
		b.Entries = append(b.Entries, store.Entry{Type: store.EntryToolError, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(rd)})
		b.Cancel = append(b.Cancel, c.id)
		if c.attempts > 1 || c.nextAttempt != nil {
			b.DoneSteps = append(b.DoneSteps, "tool:"+c.id)
		}
		if c.status == store.CallAwaiting && c.kind == tools.PendingApproval {
			// An approval that nobody decided is closed by the owner: the trail says so.
			b.Audit = append(b.Audit, store.AuditRecord{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID,
				Action: "cancel", Reason: reason, ArgsHash: canonicalHash(c.effectiveArgs()), At: now})
		}
		touched = append(touched, c.id)
	}
	b.Entries = append(b.Entries, store.Entry{Type: store.EntryTurnCancelled, Actor: by.UserID,
		Data: mustJSON(turnCancelledData{Reason: reason, By: by.UserID})})
	b.Urgent = true // the owner's request waits for it
	return b, touched, partial
}

// afterStop stops the work of a turn whose end is now in the log: the model's stream (its
// answer is dropped when it reports), dry runs, running server calls (their late results find
// the calls finished), retries and client graces; then the events.
func (a *actor) afterStop(touched []string, partial string) {
	for _, id := range touched {
		if cancel, ok := a.running[id]; ok {
			if cancel == nil {
				delete(a.running, id) // reserved by this step, never started (release skips it)
			} else {
				cancel() // the run reports back and is dropped (onToolDone: finished)
			}
		}
		delete(a.graceAt, id)
	}
	a.queued = slices.DeleteFunc(a.queued, func(id string) bool { return slices.Contains(touched, id) })
	if a.drafting != nil {
		a.drafting.cancel()
		a.drafting = nil // its plans find no draft (onPlan)
	}
	if a.llmBusy && a.llmCancel != nil {
		a.llmCancel()
		a.cancel.dropLLM = true
	}
	a.stream.reset()
	if partial != "" {
		a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Text: partial, Data: roleData("assistant")})
	}
	for _, id := range touched {
		a.publishCall(a.st.calls[id])
	}
	a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Data: roleData("stopped")})
}

// droppedLLM reports whether the model call that just reported belonged to a stopped turn;
// then its answer is dropped and the next turn (a queued message's) may start.
func (a *actor) droppedLLM() bool {
	if !a.cancel.dropLLM {
		return false
	}
	a.cancel.dropLLM = false
	a.stream.reset()
	a.advance()
	return true
}

// startQueued starts the next turn with the messages that wait, once no turn is open: all of
// them, in order, in one append (they become the turn's user messages).
func (a *actor) startQueued() {
	st := a.st
	if !a.lc.mayStart() || st.turnOpen || len(st.queue) == 0 {
		return
	}
	var b store.Batch
	for _, q := range st.queue {
		b.Entries = append(b.Entries, store.Entry{Type: store.EntryUserMessage, Actor: st.conv.OwnerID,
			Data: mustJSON(userMessageData{Text: q.text, Queued: q.seq})})
	}
	a.stage(b, nil)
	a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Data: roleData("user")})
	a.advance()
}

// takePosted hands a send's outcome to its reply.
func (a *actor) takePosted() Posted {
	p := a.cancel.posted
	a.cancel.posted = Posted{}
	return p
}

// applyCancel folds the entries of this file into the state (state.go apply).
func (s *convState) applyCancel(e store.Entry) error {
	switch e.Type {
	case store.EntryQueuedMessage:
		var d queuedMessageData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		s.queue = append(s.queue, queuedMessage{seq: e.Seq, text: d.Text})
		s.noteKey(d.Key)
	case store.EntryTurnCancelled:
		var d turnCancelledData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		s.turnOpen = false
		s.llmFailed, s.llmNext = 0, nil
		text := "Stopped."
		if d.Reason == reasonMovedOn {
			text = "Moved on without answering."
		}
		s.messages = append(s.messages, Message{Seq: e.Seq, Role: "stopped", Content: text, At: e.CreatedAt})
	}
	return nil
}

// dequeue takes the queued message of the queued_message entry seq out of the queue.
func (s *convState) dequeue(seq int64) {
	s.queue = slices.DeleteFunc(s.queue, func(q queuedMessage) bool { return q.seq == seq })
}

// queuedView lists the messages that wait, for View.
func (s *convState) queuedView() []Message {
	if len(s.queue) == 0 {
		return nil
	}
	out := make([]Message, len(s.queue))
	for i, q := range s.queue {
		out[i] = Message{Seq: q.seq, Role: "user", Content: q.text, Queued: true}
	}
	return out
}
