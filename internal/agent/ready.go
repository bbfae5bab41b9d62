package agent

import (
	"context"
	"errors"
	"slices"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the actor's imperative shell. The handlers (resolve.go, turn.go, toolrun.go, …)
// are its functional core: they read the state and their input, stage what to write (stage)
// and queue what to do once it is written (effects and follow-ups), and perform no I/O that
// changes anything. The loop alone then
//
//  1. commits the step's batch in one append (commitReady), applying the one rule for a
//     refused or fenced write,
//  2. replies to the request in hand,
//  3. releases the step's effects (release, the only place work starts: a model call, a dry
//     run, a tool run, an answer handed to a waiting tool, a notification),
//  4. runs the step's follow-ups (advance the turn, run an approved call), which may stage and
//     queue more: back to 1 until nothing is left.
//
// So an effect never starts before the record that explains it is durable, and a step whose
// write failed releases nothing: the next owner of the conversation continues from the log.

// ready is what a step of the core asks of the shell (owned by run).
type ready struct {
	batch   store.Batch
	touched []string
	// schedule and steps keep the last word on each call's expiry and each retry step, so a
	// step that schedules then cancels (or the reverse) writes what it ended with.
	failed error // the state refused an entry: the step writes nothing
	// answer: the batch records a complete answer of the model; a failed append counts as a
	// failed attempt of that model call (recover).
	answer  bool
	effects []effect
	follow  []followUp
	// events is how many of the actor's events were published by steps already committed: a
	// step whose write fails takes back the ones after.
	events, statusEvents int
}

func (r *ready) empty() bool {
	b := &r.batch
	return r.failed == nil && len(b.Entries) == 0 && len(b.Schedule) == 0 && len(b.Cancel) == 0 && len(b.Steps) == 0 &&
		len(b.DoneSteps) == 0 && len(b.Audit) == 0 && len(b.Grants) == 0
}

// merge adds b to the step's batch. Expiries and steps keep the last word per call and key.
func (r *ready) merge(b store.Batch, touched []string) {
	m := &r.batch
	m.Entries = append(m.Entries, b.Entries...)
	for _, id := range b.Cancel {
		m.Schedule = slices.DeleteFunc(m.Schedule, func(e store.Expiry) bool { return e.ToolCallID == id })
		if !slices.Contains(m.Cancel, id) {
			m.Cancel = append(m.Cancel, id)
		}
	}
	for _, e := range b.Schedule {
		m.Cancel = slices.DeleteFunc(m.Cancel, func(id string) bool { return id == e.ToolCallID })
		m.Schedule = slices.DeleteFunc(m.Schedule, func(x store.Expiry) bool { return x.ToolCallID == e.ToolCallID })
		m.Schedule = append(m.Schedule, e)
	}
	for _, k := range b.DoneSteps {
		m.Steps = slices.DeleteFunc(m.Steps, func(s store.Step) bool { return s.Key == k })
		if !slices.Contains(m.DoneSteps, k) {
			m.DoneSteps = append(m.DoneSteps, k)
		}
	}
	for _, s := range b.Steps {
		m.DoneSteps = slices.DeleteFunc(m.DoneSteps, func(k string) bool { return k == s.Key })
		m.Steps = slices.DeleteFunc(m.Steps, func(x store.Step) bool { return x.Key == s.Key })
		m.Steps = append(m.Steps, s)
	}
	m.Audit = append(m.Audit, b.Audit...)
	m.Grants = append(m.Grants, b.Grants...)
	m.Urgent = m.Urgent || b.Urgent
	for _, id := range touched {
		if !slices.Contains(r.touched, id) {
			r.touched = append(r.touched, id)
		}
	}
}

// --- effects --------------------------------------------------------------------------------

// effectKind is what an effect does.
type effectKind int

const (
	effectModelCall effectKind = iota // start the turn's next model call (startLLM)
	effectDryRun                      // ask a tool for the plan of a gated call (startDryRun)
	effectToolRun                     // run one attempt of a server call (runTool)
	effectAskReply                    // hand a waiting tool its question's answer, or tell it nobody will answer
	effectNotify                      // tell the Notifier about what the batch announced
	effectTitle                       // name an untitled conversation after its first message
)

// effect is one piece of work the core asks for; release starts it after its batch committed.
type effect struct {
	kind effectKind
	// run is the call as recorded, for a tool run or a dry run.
	run recordedCall
	// dry is the dry run's context (cancelled by a hard stop or a stop of the turn).
	dry context.Context
	// ask: the waiting tool's channel, what it hears, and whether its run is cancelled after.
	ask       chan askReply
	askReply  askReply
	askCancel bool
	notes     []Notification
	text      string // effectTitle: the message
}

// recordedCall is a server call as the log records it when its run is released: the tool, the
// call, the attempt and the arguments that run (validated against the tool's schema and its
// own policy). The run gets exactly these.
type recordedCall struct {
	tool    *tools.Tool
	id      string
	attempt int
	args    map[string]any
	resumed *tools.Resumed
}

// effect queues e for release once the step's batch committed.
func (r *ready) effect(e effect) { r.effects = append(r.effects, e) }

// followKind is a step of the core that runs after the reply (and after the effects released
// before it), so the person's request is answered as soon as its decision is durable.
type followKind int

const (
	followAdvance  followKind = iota // continue the turn (advance)
	followApproved                   // run, show or finish the approved call id
	followRunTool                    // run the call id again (its question's answer carries on from a restart)
)

type followUp struct {
	kind followKind
	id   string
}

// after queues a follow-up of the step.
func (r *ready) after(f followUp) { r.follow = append(r.follow, f) }

// --- the shell ------------------------------------------------------------------------------

// wrote is how a step's commit went.
type wrote struct {
	err error
	// conflict: the append lost the optimistic-concurrency race; the actor is draining with
	// reason conflict and may reload from the log (handle).
	conflict bool
}

// commitReady writes the step's batch in one append: the only caller of Store.Append in the
// actor. On success the step's notifications are queued for release; on failure the actor
// drains (evicted when another process owns the conversation, else write refused or conflict),
// and the step's effects, follow-ups and events are dropped: none of it happened.
func (a *actor) commitReady() wrote {
	r := &a.ready
	if r.empty() {
		// Events that no write explains (a tool's progress) stand whatever a later step does.
		a.announcing = nil
		r.events, r.statusEvents = len(a.events), len(a.statusEvents)
		return wrote{}
	}
	fail := func(err error, why stopReason) wrote {
		a.dropReady()
		a.transition(phaseDraining, why)
		return wrote{err: err, conflict: why == reasonConflict}
	}
	if r.failed != nil {
		if r.answer {
			a.m.noteFailure(a.id, writeFailure{count: a.failures.count + 1, answer: true})
		}
		return fail(r.failed, reasonWriteRefused)
	}
	if a.evicted() {
		// Fenced while handling a message: nothing is written or started from here; the loop
		// stops the actor once the request in hand is answered, and the conversation's next
		// owner continues from the log.
		return fail(errClosed(), reasonEvicted)
	}
	b := r.batch
	after := a.st.lastSeq - int64(len(b.Entries))
	a.st.status = a.st.derivedStatus()
	if a.st.status != a.committedStatus {
		b.Status = a.st.status
	}
	notes := a.announcements() // of the calls as this step leaves them
	a.queueNotifications(&b, notes)
	now := a.now()
	for _, id := range r.touched {
		if c := a.st.calls[id]; c != nil {
			b.Calls = append(b.Calls, a.row(c, now))
		}
	}
	ctx, span := a.observeAppend(&b)
	last, err := a.m.cfg.Store.Append(ctx, a.id, after, b)
	a.observeAppended(span, &b, r.touched, err)
	switch {
	case errors.Is(err, store.ErrNotOwner):
		// Another process took the conversation over since this one claimed it (this one was
		// deemed dead): nothing was written, and nothing more will be from here. The request is
		// refused here so its sender tries again there.
		a.log.Warn("agent: another process owns the conversation now; stopping its actor here", "err", err)
		a.evictNow()
		return fail(errTakenOver(), reasonEvicted)
	case err != nil:
		// Noted now, before this actor leaves the registry: whichever actor serves the
		// conversation next (revived by this one, or started by a request in between) takes it.
		conflict := errors.Is(err, store.ErrConflict)
		a.m.noteFailure(a.id, writeFailure{count: a.failures.count + 1, answer: r.answer && !conflict})
		why := reasonWriteRefused
		if conflict {
			why = reasonConflict
		}
		return fail(a.internalError("append to log", err), why)
	}
	if last != a.st.lastSeq {
		a.log.Error("agent: the log's last sequence is not the one the step expected", "expected", a.st.lastSeq, "got", last)
		a.st.lastSeq = last
	}
	a.failures = writeFailure{}
	for _, e := range b.Entries {
		e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond) // the store's resolution
		a.logged = append(a.logged, e)
	}
	if a.st.status != a.committedStatus {
		a.statusEvents = append(a.statusEvents, Event{ConversationID: a.id, Seq: last, Type: EventStatus, Status: a.st.status})
		a.committedStatus = a.st.status
	}
	if len(notes) > 0 {
		a.ready.effect(effect{kind: effectNotify, notes: notes})
	}
	a.ready.batch, a.ready.touched, a.ready.answer = store.Batch{}, nil, false
	a.ready.events, a.ready.statusEvents = len(a.events), len(a.statusEvents)
	a.tr.before = a.tr.before[:0]
	// Before the caller hears back, so a resolve's reply finds the count already moved.
	a.reportPending()
	return wrote{}
}

// dropReady forgets a step whose write failed: its batch, the work it would have started (run
// slots it reserved are freed), its follow-ups and the events it would have published.
func (a *actor) dropReady() {
	r := &a.ready
	for _, e := range r.effects {
		switch e.kind {
		case effectToolRun:
			if cancel, ok := a.running[e.run.id]; ok && cancel == nil {
				delete(a.running, e.run.id)
			}
		case effectModelCall:
			a.llmBusy = false
		}
	}
	a.events = a.events[:min(r.events, len(a.events))]
	a.statusEvents = a.statusEvents[:min(r.statusEvents, len(a.statusEvents))]
	a.announcing = nil
	a.tr.before = a.tr.before[:0]
	*r = ready{events: len(a.events), statusEvents: len(a.statusEvents)}
}

// releaseReady releases the committed step's effects, in the order the core asked for them.
func (a *actor) releaseReady() {
	effects := a.ready.effects
	a.ready.effects = nil
	for _, e := range effects {
		a.release(e)
	}
}

// settleSteps commits, releases and follows up until the core asks for nothing more: the rest
// of a step after its reply (handle), or a whole step the loop took (a timer, a tool's report).
func (a *actor) settleSteps() wrote {
	var first wrote
	for range 64 { // each round follows up on the last; a turn cannot chain more than a few
		w := a.commitReady()
		if first.err == nil {
			first = w
		}
		if w.err != nil {
			return first
		}
		if a.evicted() {
			// Fenced since the loop last looked (while the append waited, say): what the step
			// wrote stands, but nothing more starts here; the next owner continues from the log.
			a.transition(phaseDraining, reasonEvicted)
		}
		a.releaseReady()
		follow := a.ready.follow
		a.ready.follow = nil
		if len(follow) == 0 && a.ready.empty() && len(a.ready.effects) == 0 {
			return first
		}
		for _, f := range follow {
			a.followUp(f)
		}
	}
	a.log.Error("agent: a step kept asking for more steps; the rest waits for the next message")
	return first
}

// followUp runs one follow-up of a committed step.
func (a *actor) followUp(f followUp) {
	switch f.kind {
	case followAdvance:
		a.advance()
	case followApproved:
		c := a.st.calls[f.id]
		switch {
		case c == nil:
		case c.finished():
			a.advance()
		case c.executor == tools.Client:
			// The browser runs it once it hears of it: the effect gate stands before that.
			if why, reason := a.refusal(c, recordedCall{tool: c.tool, id: c.id}); why != "" {
				a.refuseRun(c, why, reason)
				return
			}
			a.publishClientExec(c)
			a.checkClient(c)
		default:
			a.runTool(c)
		}
	case followRunTool:
		if c := a.st.calls[f.id]; c != nil {
			a.runTool(c)
		}
	}
}

// release starts one effect of a committed step: the one place the actor sets work going. A
// tool run gets the call as recorded (recordedCall); nothing starts once the actor drains.
func (a *actor) release(e effect) {
	switch e.kind {
	case effectNotify:
		a.notifyAll(e.notes)
	case effectTitle:
		a.titleFromFirstMessage(e.text)
	case effectAskReply:
		e.ask <- e.askReply // buffered (size 1), and the actor hands each question one reply
		if e.askCancel {
			if cancel := a.running[e.run.id]; cancel != nil {
				cancel()
			}
		}
	case effectModelCall:
		if !a.lc.mayStart() {
			a.llmBusy = false
			return
		}
		a.startLLM()
	case effectDryRun:
		if !a.lc.recordsResults() {
			return // a graceful drain still plans a complete answer's calls, so it is recorded
		}
		a.startDryRun(e.dry, e.run)
	case effectToolRun:
		if cancel, ok := a.running[e.run.id]; !ok || cancel != nil {
			return // stopped (afterStop freed the slot) or already running
		}
		if !a.lc.mayStart() {
			delete(a.running, e.run.id)
			return
		}
		if why, reason := a.refusal(a.st.calls[e.run.id], e.run); why != "" {
			delete(a.running, e.run.id)
			a.refuseRun(a.st.calls[e.run.id], why, reason)
			return
		}
		a.startTool(e.run)
	}
}
