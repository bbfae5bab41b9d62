package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the actor itself: its state, its goroutine (run) and how it takes messages: the
// requests of callers (handle) and the reports of the work it started (handleInternal). The
// rest of its work is split by concern: turn.go (the turn loop and the model), toolrun.go (server
// calls and dry runs), resolve.go (answers to suspended calls), wake.go (timers and sockets),
// commit.go (staging writes and publishing events), ready.go (the shell: one commit, one place
// that releases effects), lifecycle.go (the phases: running, draining, stopped).

type reqKind int

const (
	reqSend reqKind = iota
	reqResolve
	reqExpire
	reqView
	reqCancel
	reqRename // conversations.go
	reqDelete // conversations.go
)

// request is a message to an actor. Every request is answered exactly once on reply
// (buffered, so the actor never blocks on a caller that gave up).
type request struct {
	kind   reqKind
	by     Principal
	text   string
	callID string
	res    Resolution
	reply  chan response
	origin origin // the caller's span and when the request reached the agent (observe.go)
	// key identifies a message or a resolve across its tries (sent again to another process
	// when the one it went to died before answering): recorded with what it wrote, a key already
	// in the log is answered as done without doing it again.
	key string
}

// response is an actor's answer: the error, and for a view the conversation, for a resolve the
// call as it stands after it (set whenever the caller may see the call, even with an error).
type response struct {
	err      error
	view     View
	resolved *Resolved
	posted   Posted
}

// Messages from the goroutines an actor starts (the LLM stream, tool runs) back to it.
type (
	llmDone struct {
		resp llm.Response
		err  error
	}
	toolDone struct {
		id      string
		attempt int
		out     tools.Outcome
	}
	toolProgress struct {
		id   string
		text string
	}
	planDone struct {
		id   string
		plan tools.Plan
	}
)

// actor owns one conversation. Only its goroutine (run) reads or changes the fields below
// "owned by run"; other goroutines talk to it through mailbox (requests from callers, bounded:
// a caller blocks until its context is done when it is full), internal (results of the work it
// started) and clientsChanged (a coalescing doorbell).
type actor struct {
	m       *Manager
	id      string
	log     *slog.Logger // the manager's logger with conversation_id
	mailbox chan *request
	// announcing are the notifications the next commit makes (notify.go: announce).
	announcing     []announcement
	internal       chan any
	clientsChanged chan struct{}
	// done is closed when the actor stops taking requests (it left running: lifecycle.go); a
	// caller that sees it without a reply retries on a fresh actor.
	done chan struct{}
	// loadErr is set before done closes when the conversation could not be loaded.
	loadErr error
	// evict is closed (once: evictNow) when this process may no longer own the conversation:
	// by Manager.fence, or by commitReady when the store refused an append as another's.
	evict     chan struct{}
	evictOnce sync.Once

	// owned by run
	st         *convState
	wake       clock.Timer
	wakeAt     time.Time
	inflight   int // goroutines started and not yet reported (stream, dry runs and tool runs)
	llmBusy    bool
	llmCancel  context.CancelFunc
	drafting   *draft // a complete answer waiting for its dry runs (turn.go: onLLMResponse)
	stream     streamBuf
	running    map[string]context.CancelFunc
	graceAt    map[string]time.Time
	lastActive time.Time
	events     []Event
	// statusEvents are published after the other events of the same message, so a subscriber
	// that sees "idle" has already seen the message that ended the turn.
	statusEvents []Event
	// logged are the entries committed since the last settle; settle hands them to the first
	// event it publishes (Event.Entries), so event streams need not read them back.
	logged []store.Entry
	// lc is the lifecycle (lifecycle.go): changed only by transition.
	lc lifecycle
	// ready is what the step being handled asks of the shell (ready.go).
	ready ready
	// committedStatus is the conversation's status as the log has it (st.status is the step's).
	committedStatus string
	// failures are the failed appends in a row before this actor started (reset by a commit that
	// goes through).
	failures writeFailure
	// queued are server calls waiting for one of the conversation's MaxToolRuns run slots.
	queued []string
	// pending is the count of awaiting calls by kind last reported to the manager (metrics).
	pending pendingByKind
	cancel  cancelState // cancel.go
	// asks are the running calls waiting for their owner's answer, by call (elicit.go).
	asks map[string]chan askReply
	// abandoned: runs a graceful stop cancelled while their question waited (elicit.go); what
	// they report is dropped, and the revived actor resumes or re-asks from the log.
	abandoned map[string]bool
	tr        traceState // observe.go
}

func newActor(m *Manager, id string) *actor {
	return &actor{
		m:              m,
		id:             id,
		log:            m.cfg.Logger.With("conversation_id", id),
		mailbox:        make(chan *request, m.cfg.MailboxSize),
		internal:       make(chan any, 16),
		clientsChanged: make(chan struct{}, 1),
		done:           make(chan struct{}),
		evict:          make(chan struct{}),
		running:        map[string]context.CancelFunc{},
		graceAt:        map[string]time.Time{},
	}
}

func (a *actor) cfg() *Config { return &a.m.cfg }

func (a *actor) now() time.Time { return a.m.cfg.Clock.Now() }

// run is the actor's goroutine: the shell around the core (ready.go). Each pass of the loop takes
// one message, lets the core handle it, commits what the core staged, replies, and releases the
// effects; then it re-arms the timers and publishes the events.
func (a *actor) run() {
	defer a.m.wg.Done()
	defer a.m.released(a)
	defer a.observeStop()
	st, err := loadState(a.m.base, a.m.cfg.Store, a.m.cfg.Tools, a.id)
	if err != nil {
		a.failLoad(err)
		return
	}
	a.st, a.committedStatus = st, st.status
	if st.lastSeq > 0 {
		metrics.Revivals.Inc()
		a.log.Debug("actor revived", "status", st.status, "last_seq", st.lastSeq)
	}
	a.lastActive = a.now()
	a.wake = a.m.cfg.Clock.NewTimer(time.Hour)
	a.wake.Stop()
	defer func() { a.wake.Stop() }()
	a.failures = a.m.takeFailures(a.id)
	a.recover()
	a.settleSteps()
	a.startQueued()
	a.settleSteps()
	a.settle()

	quit := a.m.quit
	hard := a.m.base.Done()
	evict := a.evict
	for {
		if evict != nil && a.evicted() {
			// Before anything else that is ready: a result that arrived with the fence is
			// dropped, never recorded by a process that may no longer own the conversation.
			evict = nil
			a.transition(phaseDraining, reasonEvicted)
		}
		if a.lc.phase != phaseRunning && a.inflight == 0 {
			break
		}
		select {
		case req := <-a.mailbox:
			a.lastActive = a.now()
			a.handle(req)
		case msg := <-a.internal:
			a.lastActive = a.now()
			a.handleInternal(msg)
			a.settleSteps()
		case <-a.clientsChanged:
			a.onClientsChanged()
		case <-a.wake.C():
			a.wakeAt = time.Time{}
			a.onWake()
			a.settleSteps()
			if a.sleepy() && a.hibernate() {
				return
			}
		case <-quit:
			quit = nil
			a.transition(phaseDraining, reasonGraceful)
		case <-hard:
			hard = nil
			a.transition(phaseDraining, reasonHard)
		case <-evict:
			evict = nil
			a.transition(phaseDraining, reasonEvicted)
		}
		a.startQueued() // a turn that just ended hands over to the messages that wait
		a.settleSteps()
		if a.lc.phase != phaseRunning {
			// After the step's reply: a caller that sees done without a reply tries again.
			a.closeDone()
		}
		a.settle()
	}
	a.transition(phaseStopped, a.lc.reason) // whichever way the loop ended
	// Requests that arrived after done closed are answered by their callers' retry.
	if a.lc.revives() {
		// The failure was noted when it happened (commitReady); the next actor takes it.
		a.m.reviveLater(a.id)
	}
}

// evictNow closes evict (once): this process may no longer own the conversation.
func (a *actor) evictNow() { a.evictOnce.Do(func() { close(a.evict) }) }

// evicted reports whether evict was closed (Manager.fence, or a write refused because
// another process claimed the conversation): this process may no longer own it.
func (a *actor) evicted() bool {
	select {
	case <-a.evict:
		return true
	default:
		return false
	}
}

// internalError logs err with the conversation's id and a reference, and returns the internal
// tool error that carries only the reference.
func (a *actor) internalError(what string, err error) *fault.Error {
	return fault.Internal(a.log, "agent: "+what, err)
}

// --- requests -------------------------------------------------------------------------------

func (a *actor) handle(req *request) {
	if !a.lc.takesRequests() || a.evicted() {
		// Evicted: the select may have taken this request before the eviction. Renames and
		// deletes write outside the log, so they are refused here too.
		req.reply <- response{err: errClosed()}
		return
	}
	if req.kind == reqView {
		if !a.st.maySee(req.by) {
			req.reply <- response{err: errNotFound()}
			return
		}
		req.reply <- response{view: a.view()}
		return
	}
	a.observeRequest(req)
	err := a.dispatchRequest(req)
	w := a.commitReady()
	if w.conflict && a.reloadAfterConflict() {
		// Another writer (another process on the same database) moved the log on: answer from
		// the log as it is now — typically stale for a call it already resolved.
		err = a.dispatchRequest(req)
		w = a.commitReady()
	}
	if w.err != nil {
		err = w.err
	}
	// Reply first (the decision is durable by now), then release and continue.
	resp := response{err: err}
	switch req.kind {
	case reqResolve:
		resp.resolved = a.resolved(req.by, req.callID, err == nil)
		if resp.resolved != nil {
			resp.resolved.Fields = a.st.calls[req.callID].fieldsOf(req.res, err)
		}
	case reqSend:
		resp.posted = a.takePosted()
		if err == nil {
			a.ready.effect(effect{kind: effectTitle, text: req.text}) // after the reply, off the sender's wait
		}
	}
	req.reply <- resp
	a.observedRequest(req, err)
	a.settleSteps()
}

// resolved is the call callID as by may see it after a resolve (nil when by may not see it). A
// decider whose right to read the conversation ended with their own decision (decided: the
// resolve succeeded) gets the call they decided, as the decision left it — the confirmation of
// what they did, before anything ran — and Hidden.
func (a *actor) resolved(by Principal, callID string, decided bool) *Resolved {
	c := a.st.calls[callID]
	switch {
	case c == nil:
		return nil
	case a.st.maySee(by):
		return &Resolved{ConversationID: a.id, OwnerID: a.st.conv.OwnerID, Call: callView(c)}
	case decided && c.decidedBy == by.UserID:
		return &Resolved{ConversationID: a.id, OwnerID: a.st.conv.OwnerID, Call: callView(c), Hidden: true}
	}
	return nil
}

// recover continues a conversation from its log when its actor starts. After appends kept
// failing (MaxWriteFailures in a row) the open turn ends with an error its owner sees and can
// continue from; when the model's answer could not be recorded, that counts as a failed attempt
// of the model call (recorded in the log, so LLMMaxAttempts bounds it across restarts too);
// otherwise the turn resumes.
func (a *actor) recover() {
	f := a.failures
	switch {
	case !a.st.turnOpen || f.count == 0:
	case f.count >= a.cfg().MaxWriteFailures:
		a.endTurn(fault.KindInternal, fmt.Sprintf("the conversation's log refused %d writes in a row, so the turn was ended; send a message to continue", f.count))
		return
	case f.answer:
		a.onLLMError(&llm.Error{Kind: string(fault.KindInternal), Message: "the model's answer could not be recorded", Retryable: true})
	}
	a.resume()
}

func (a *actor) dispatchRequest(req *request) error {
	switch req.kind {
	case reqSend:
		return a.handleSend(req)
	case reqResolve:
		return a.handleResolve(req)
	case reqExpire:
		return a.handleExpire(req)
	case reqCancel:
		return a.handleCancel(req)
	case reqRename:
		return a.handleRename(req)
	case reqDelete:
		return a.handleDelete(req)
	}
	return nil
}

// reloadAfterConflict rebuilds the state from the log after an append lost the optimistic
// concurrency race, and runs again (the lifecycle's one way back from draining). It only does
// so when nothing of this actor is in flight (otherwise the actor stops and is revived from the
// log). The reloaded state is used to answer requests; work the log shows under way is not
// resumed here, since the writer that won owns it.
func (a *actor) reloadAfterConflict() bool {
	if a.inflight > 0 {
		return false
	}
	st, err := loadState(a.m.base, a.m.cfg.Store, a.m.cfg.Tools, a.id)
	if err != nil {
		a.log.Error("agent: reload after a conflict", "err", err)
		return false
	}
	a.st, a.committedStatus = st, st.status
	a.transition(phaseRunning, reasonNone)
	a.events, a.statusEvents, a.logged = a.events[:0], a.statusEvents[:0], nil
	a.ready = ready{}
	a.graceAt = map[string]time.Time{}
	return true
}

// handleInternal takes a report of a goroutine the actor started.
func (a *actor) handleInternal(msg any) {
	switch m := msg.(type) {
	case llmDone:
		a.inflight--
		a.llmBusy = false
		a.llmCancel = nil
		// Tokens the provider reported were paid for, whatever becomes of the answer (dropped
		// by a hard stop, refused by the store): they count against the owner's day now.
		a.recordUsage(m.resp.Usage)
		if !a.lc.recordsResults() || a.droppedLLM() {
			return
		}
		if a.stream.cut() || (m.err == nil && len(m.resp.Text) > a.cfg().MaxAnswerBytes) {
			// The answer passed its bound (the stream was cut there, or a provider handed it
			// whole): what was kept is recorded and the turn ends saying so.
			text := a.stream.String()
			if !a.stream.cut() {
				text = m.resp.Text
			}
			a.cutAnswer(text)
			return
		}
		if m.err != nil {
			// While stopping, a failed (or cancelled) stream is simply retried on revival.
			if a.lc.phase == phaseRunning {
				a.onLLMError(m.err)
			}
			return
		}
		// A complete answer is recorded even while stopping, so it is not paid for twice; its
		// calls are dispatched on revival.
		if m.resp.Text == "" {
			m.resp.Text = a.stream.String()
		}
		a.onLLMResponse(m.resp) // the stream is reset when the answer is recorded
	case planDone:
		a.inflight--
		if !a.lc.recordsResults() {
			return
		}
		a.onPlan(m)
	case toolDone:
		a.inflight--
		delete(a.running, m.id)
		delete(a.asks, m.id)
		if !a.lc.recordsResults() || a.abandoned[m.id] {
			return
		}
		a.onToolDone(m)
		a.runQueued()
	case askMsg:
		a.onAsk(m)
	case toolProgress:
		if c := a.st.calls[m.id]; c != nil && a.lc.recordsResults() {
			c.progress = append(c.progress, m.text)
			a.publish(Event{Type: EventProgress, ToolCallID: m.id, Text: m.text})
		}
	}
}
