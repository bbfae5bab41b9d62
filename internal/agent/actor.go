package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"parley/internal/clock"
	"parley/internal/llm"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

type reqKind int

const (
	reqSend reqKind = iota
	reqResolve
	reqExpire
	reqView
)

// request is a message to an actor. Every request is answered exactly once on reply
// (buffered, so the actor never blocks on a caller that gave up).
type request struct {
	kind   reqKind
	by     Principal
	text   string
	callID string
	res    Resolution
	check  Check // the caller's own rule, run first (nil: none)
	reply  chan response
}

type response struct {
	err  error
	view View
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
)

// streamBuf is the text streamed so far by the LLM call in flight. The stream goroutine writes
// it; the actor reads it for View. It is the only state the two share, hence the mutex.
type streamBuf struct {
	mu   sync.Mutex
	text []byte
}

func (b *streamBuf) add(s string) {
	b.mu.Lock()
	b.text = append(b.text, s...)
	b.mu.Unlock()
}

func (b *streamBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.text)
}

func (b *streamBuf) reset() {
	b.mu.Lock()
	b.text = nil
	b.mu.Unlock()
}

// actor owns one conversation. Only its goroutine (run) reads or changes the fields below
// "owned by run"; other goroutines talk to it through mailbox (requests from callers, bounded:
// a caller blocks until its context is done when it is full), internal (results of the work it
// started) and clientsChanged (a coalescing doorbell).
type actor struct {
	m              *Manager
	id             string
	log            *slog.Logger // the manager's logger with conversation_id
	mailbox        chan *request
	internal       chan any
	clientsChanged chan struct{}
	// done is closed when the actor stops taking requests (hibernation, shutdown, a failed
	// load); a caller that sees it without a reply retries on a fresh actor.
	done chan struct{}
	// loadErr is set before done closes when the conversation could not be loaded.
	loadErr error

	// owned by run
	st         *convState
	wake       clock.Timer
	wakeAt     time.Time
	inflight   int // goroutines started and not yet reported (stream and tool runs)
	llmBusy    bool
	llmCancel  context.CancelFunc
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
	logged     []store.Entry
	stopping   bool // no new work; exit when inflight reaches 0
	discard    bool // results of in-flight work are dropped (hard stop, a failed write)
	broken     bool // a write failed: the actor exits and is revived from the log
	conflicted bool // the failed write lost the optimistic-concurrency race
	doneClosed bool
	// pending is the count of awaiting calls by kind last reported to the manager (metrics).
	pending map[string]int
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
		running:        map[string]context.CancelFunc{},
		graceAt:        map[string]time.Time{},
	}
}

func (a *actor) cfg() *Config { return &a.m.cfg }

func (a *actor) now() time.Time { return a.m.cfg.Clock.Now() }

// run is the actor's goroutine.
func (a *actor) run() {
	defer a.m.wg.Done()
	st, err := loadState(a.m.base, a.m.cfg.Store, a.m.cfg.Tools, a.id)
	if err != nil {
		a.failLoad(err)
		return
	}
	a.st = st
	if st.lastSeq > 0 {
		metrics.Revivals.Inc()
		a.log.Debug("actor revived", "status", st.status, "last_seq", st.lastSeq)
	}
	a.lastActive = a.now()
	a.wake = a.m.cfg.Clock.NewTimer(time.Hour)
	a.wake.Stop()
	defer func() { a.wake.Stop() }()
	a.resume()
	a.settle()

	quit := a.m.quit
	hard := a.m.base.Done()
	for {
		if a.stopping && a.inflight == 0 {
			break
		}
		select {
		case req := <-a.mailbox:
			a.lastActive = a.now()
			a.handle(req)
		case msg := <-a.internal:
			a.lastActive = a.now()
			a.handleInternal(msg)
		case <-a.clientsChanged:
			a.onClientsChanged()
		case <-a.wake.C():
			a.wakeAt = time.Time{}
			if a.onWake() {
				return
			}
		case <-quit:
			quit = nil
			a.beginStop(false)
		case <-hard:
			hard = nil
			a.beginStop(true)
		}
		if a.broken && !a.stopping {
			a.beginStop(true)
		}
		a.settle()
	}
	// Requests that arrived after done closed are answered by their callers' retry.
	if a.broken {
		a.m.reviveLater(a.id)
	}
}

func (a *actor) failLoad(err error) {
	if errors.Is(err, store.ErrNotFound) {
		a.loadErr = errNotFound()
	} else {
		a.loadErr = a.internalError("load conversation", err)
	}
	a.m.mu.Lock()
	if a.m.actors[a.id] == a {
		delete(a.m.actors, a.id)
	}
	close(a.done)
	a.m.mu.Unlock()
}

// closeDone takes the actor out of the registry and closes done, so callers go elsewhere.
func (a *actor) closeDone() {
	if a.doneClosed {
		return
	}
	a.m.mu.Lock()
	if a.m.actors[a.id] == a {
		delete(a.m.actors, a.id)
	}
	close(a.done)
	a.doneClosed = true
	a.m.mu.Unlock()
}

// beginStop stops taking requests. A graceful stop cancels the LLM stream (its partial answer is
// discarded and the step retried on revival) and lets running tools finish and record their
// results; a hard stop cancels them too and drops whatever they report: they are re-dispatched
// with the same tool_call_id on revival.
func (a *actor) beginStop(hard bool) {
	a.stopping = true
	a.closeDone()
	if a.llmCancel != nil {
		a.llmCancel()
	}
	if hard {
		a.discard = true
		for _, cancel := range a.running {
			cancel()
		}
	}
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
		a.m.hub.publish(e)
	}
	for _, e := range a.statusEvents {
		a.m.hub.publish(e)
	}
	a.events = a.events[:0]
	a.statusEvents = a.statusEvents[:0]
}

// reportPending tells the manager how many calls of this conversation await an answer, by
// kind, when that changed. The count is recomputed from the state (not moved by deltas), so it
// cannot drift; it stays with the manager while the actor hibernates, since the calls are still
// pending in the store.
func (a *actor) reportPending() {
	var now map[string]int
	for _, c := range a.st.currentCalls() {
		if c.status == store.CallAwaiting && c.kind != "" {
			if now == nil {
				now = map[string]int{}
			}
			now[string(c.kind)]++
		}
	}
	if maps.Equal(now, a.pending) {
		return
	}
	a.pending = now
	a.m.setPending(a.id, now)
}

// internalError logs err with the conversation's id and a reference, and returns the internal
// tool error that carries only the reference.
func (a *actor) internalError(what string, err error) *tools.Error {
	return internalErrorTo(a.log, what, err)
}

func (a *actor) publish(e Event) {
	e.ConversationID = a.id
	a.events = append(a.events, e)
}

// --- requests -------------------------------------------------------------------------------

func (a *actor) handle(req *request) {
	if a.stopping {
		req.reply <- response{err: errClosed()}
		return
	}
	if req.kind == reqView {
		req.reply <- response{view: a.view()}
		return
	}
	err, cont := a.dispatchRequest(req)
	if a.conflicted && a.reloadAfterConflict() {
		// Another writer (another process on the same database) moved the log on: answer from
		// the log as it is now — typically stale for a call it already resolved.
		err, cont = a.dispatchRequest(req)
	}
	// Reply first (the decision is durable by now), then continue the loop.
	req.reply <- response{err: err}
	if cont != nil && !a.broken {
		cont()
	}
}

func (a *actor) dispatchRequest(req *request) (error, func()) {
	if req.check != nil {
		if err := req.check(a.facts(req.callID)); err != nil {
			return err, nil
		}
	}
	switch req.kind {
	case reqSend:
		return a.handleSend(req)
	case reqResolve:
		return a.handleResolve(req)
	case reqExpire:
		return a.handleExpire(req)
	}
	return nil, nil
}

// reloadAfterConflict rebuilds the state from the log after an append lost the optimistic
// concurrency race. It only does so when nothing of this actor is in flight (otherwise the
// actor stops and is revived from the log). The reloaded state is used to answer requests; work
// the log shows under way is not resumed here, since the writer that won owns it.
func (a *actor) reloadAfterConflict() bool {
	a.conflicted = false
	if a.inflight > 0 {
		return false
	}
	st, err := loadState(a.m.base, a.m.cfg.Store, a.m.cfg.Tools, a.id)
	if err != nil {
		a.log.Error("agent: reload after a conflict", "err", err)
		return false
	}
	a.st, a.broken = st, false
	a.events, a.statusEvents, a.logged = a.events[:0], a.statusEvents[:0], nil
	a.graceAt = map[string]time.Time{}
	return true
}

// facts are what a caller's Check decides from.
func (a *actor) facts(callID string) Facts {
	f := Facts{OwnerID: a.st.conv.OwnerID}
	if c := a.st.calls[callID]; callID != "" && c != nil {
		f.Found, f.Approval, f.Approvers, f.Status, f.PendingKind = true, c.approval, c.approvers, c.status, c.kind
	}
	return f
}

func (a *actor) visible(by Principal) bool {
	return by.Via == "system" || by.UserID == a.st.conv.OwnerID || by.Role == store.RoleReviewer || by.Role == store.RoleAdmin
}

func (a *actor) handleSend(req *request) (error, func()) {
	by := req.by
	if by.UserID != a.st.conv.OwnerID {
		if a.visible(by) {
			return tools.NewError(tools.KindPermissionDenied, "only the conversation's owner may send messages", nil), nil
		}
		return errNotFound(), nil
	}
	if trimmed := trimSpace(req.text); trimmed == "" {
		return invalidArgs("the message is empty", "/text", "must not be empty"), nil
	}
	if a.st.turnOpen {
		return tools.NewError(tools.KindConflict, "a turn is in progress; wait until it ends", map[string]any{"status": a.st.status}), nil
	}
	d, _ := json.Marshal(userMessageData{Text: req.text})
	if err := a.commit(store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: by.UserID, Data: d}}, Urgent: true}, nil); err != nil {
		return err, nil
	}
	a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Text: req.text, Data: roleData("user")})
	return nil, a.advance
}

// --- committing -----------------------------------------------------------------------------

// commit appends b after the actor's last sequence. The entries are folded into the state first
// (so the batch can carry the resulting status and tool_calls rows); if the append fails the
// actor is marked broken: it stops and is revived from the log, which is still the truth.
func (a *actor) commit(b store.Batch, touched []string) error {
	now := a.now()
	prevStatus := a.st.status
	after := a.st.lastSeq
	for i := range b.Entries {
		b.Entries[i].Seq = after + int64(i) + 1
		b.Entries[i].CreatedAt = now
		if err := a.st.apply(b.Entries[i], a.m.cfg.Tools); err != nil {
			a.broken = true
			return a.internalError("apply entry", err)
		}
	}
	a.st.status = a.st.derivedStatus()
	if a.st.status != prevStatus {
		b.Status = a.st.status
	}
	for _, id := range touched {
		if c := a.st.calls[id]; c != nil {
			b.Calls = append(b.Calls, a.row(c, now))
		}
	}
	last, err := a.m.cfg.Store.Append(a.m.base, a.id, after, b)
	if err != nil {
		a.broken = true
		a.conflicted = errors.Is(err, store.ErrConflict)
		return a.internalError("append to log", err)
	}
	a.st.lastSeq = last
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

// --- the turn loop --------------------------------------------------------------------------

// resume continues whatever the log says was under way: awaiting calls stay awaiting (their
// expiries are in the store), server calls that started without a result are re-dispatched with
// the same tool_call_id, a client call with no socket gets a fresh grace, and a turn whose LLM
// step has no assistant message yet retries that step.
func (a *actor) resume() {
	if !a.st.turnOpen {
		return
	}
	for _, c := range a.st.currentCalls() {
		if c.finished() {
			continue
		}
		switch {
		case c.status == store.CallAwaiting && c.kind == tools.PendingClientExec:
			a.checkClient(c)
		case c.status == store.CallRunning && c.nextAttempt == nil:
			a.runTool(c)
		}
	}
	a.advance()
}

// advance starts the next LLM call when the turn is open and every call of the newest response
// has a result.
func (a *actor) advance() {
	st := a.st
	if a.stopping || a.broken || !st.turnOpen || a.llmBusy || st.llmNext != nil {
		return
	}
	for _, c := range st.currentCalls() {
		if !c.finished() {
			return
		}
	}
	if st.llmCalls >= a.cfg().MaxIterations {
		a.endTurn(tools.KindIterationCap, fmt.Sprintf("the turn stopped after %d model calls (the iteration cap)", st.llmCalls))
		return
	}
	a.startLLM()
}

func (a *actor) startLLM() {
	// Text deltas go straight to the hub from the stream; publish what came before them first.
	a.settle()
	req := a.buildRequest()
	ctx, cancel := context.WithCancel(a.m.base)
	a.llmBusy, a.llmCancel = true, cancel
	a.inflight++
	a.stream.reset()
	provider := a.cfg().Provider
	hub := a.m.hub
	id := a.id
	clk := a.cfg().Clock
	go func() {
		began := clk.Now()
		resp, err := provider.Stream(ctx, req, func(e llm.Event) error {
			if e.Type == llm.EventTextDelta && e.Text != "" {
				a.stream.add(e.Text)
				hub.publish(Event{ConversationID: id, Type: EventTextDelta, Text: e.Text})
			}
			return nil
		})
		observeLLM(provider.Name(), clk.Now().Sub(began), resp.Usage, err)
		cancel()
		a.internal <- llmDone{resp: resp, err: err}
	}()
}

func (a *actor) handleInternal(msg any) {
	switch m := msg.(type) {
	case llmDone:
		a.inflight--
		a.llmBusy = false
		a.llmCancel = nil
		if a.discard {
			return
		}
		if m.err != nil {
			// While stopping, a failed (or cancelled) stream is simply retried on revival.
			if !a.stopping {
				a.onLLMError(m.err)
			}
			return
		}
		// A complete answer is recorded even while stopping, so it is not paid for twice; its
		// calls are dispatched on revival.
		if m.resp.Text == "" {
			m.resp.Text = a.stream.String()
		}
		a.stream.reset()
		a.onLLMResponse(m.resp)
	case toolDone:
		a.inflight--
		delete(a.running, m.id)
		if a.discard {
			return
		}
		a.onToolDone(m)
	case toolProgress:
		if c := a.st.calls[m.id]; c != nil && !a.discard {
			c.progress = append(c.progress, m.text)
			a.publish(Event{Type: EventProgress, ToolCallID: m.id, Text: m.text})
		}
	}
}

func (a *actor) onLLMError(err error) {
	st := a.st
	a.stream.reset()
	retry, after := llm.IsRetryable(err)
	attempt := st.llmFailed + 1
	step := st.llmStep()
	kind, msg := tools.KindInternal, "the model call failed"
	var le *llm.Error
	if errors.As(err, &le) {
		kind, msg = tools.Kind(le.Kind), le.Error()
	} else {
		msg = a.internalError("model call", err).Message
	}
	if retry && attempt < a.cfg().LLMMaxAttempts {
		next := a.now().Add(a.m.backoff(attempt, after))
		metrics.Retries.WithLabelValues("llm").Inc()
		a.log.Warn("model call failed; retrying", "step", step, "attempt", attempt, "next_attempt_at", next, "err", msg)
		d, _ := json.Marshal(attemptData{Step: step, Attempt: attempt, Error: map[string]any{"kind": string(kind), "message": msg}, NextAttemptAt: &next})
		if a.commit(store.Batch{
			Entries: []store.Entry{{Type: store.EntryAttemptFailed, Actor: "system", Data: d}},
			Steps:   []store.Step{{ConversationID: a.id, Key: step, Attempts: attempt, NextAttemptAt: &next, LastError: msg, UpdatedAt: a.now()}},
		}, nil) == nil {
			// The page can say "retrying"; the status itself stays generating.
			a.publish(Event{Seq: a.st.lastSeq, Type: EventStatus, Status: a.st.status,
				Data: mustJSON(map[string]any{"retry_at": next, "attempt": attempt, "error": msg})})
		}
		return
	}
	a.endTurn(kind, msg)
}

// endTurn closes the open turn with an error the user sees.
func (a *actor) endTurn(kind tools.Kind, msg string) {
	a.log.Warn("turn ended with an error", "kind", string(kind), "message", msg)
	d, _ := json.Marshal(turnErrorData{Kind: string(kind), Message: msg})
	b := store.Batch{Entries: []store.Entry{{Type: store.EntryTurnError, Actor: "system", Data: d}}}
	if a.st.llmFailed > 0 {
		b.DoneSteps = []string{a.st.llmStep()}
	}
	if a.commit(b, nil) == nil {
		a.publish(Event{Seq: a.st.lastSeq, Type: EventError, Text: msg, Data: mustJSON(map[string]string{"kind": string(kind)})})
	}
}

// onLLMResponse records the answer and its calls in one batch, then dispatches the calls.
func (a *actor) onLLMResponse(resp llm.Response) {
	st := a.st
	now := a.now()
	step := st.llmStep()
	ad := assistantMessageData{Text: resp.Text, Step: step, Usage: resp.Usage}
	var (
		callEntries []store.Entry
		touched     []string
		schedule    []store.Expiry
	)
	seen := map[string]bool{}
	for _, tc := range resp.ToolCalls {
		id := tc.ID
		if id == "" || seen[id] || st.calls[id] != nil {
			id = newCallID()
		}
		seen[id] = true
		args := normalizeArgs(tc.Args)
		if tc.Provider {
			ad.ToolCalls = append(ad.ToolCalls, assistantCallData{ID: id, Name: tc.Name, Args: args, Provider: true, Result: normalizeArgs(tc.Result)})
			continue
		}
		ad.ToolCalls = append(ad.ToolCalls, assistantCallData{ID: id, Name: tc.Name, Args: args})
		d := toolCallData{Name: tc.Name, Args: args, Turn: st.turn, Executor: string(tools.Server)}
		if id != tc.ID {
			d.ModelID = tc.ID
		}
		var immediate *tools.Error
		t, ok := a.cfg().Tools.Get(tc.Name)
		if !ok || t.Executor() == tools.Provider {
			immediate = tools.Errorf(tools.KindUnknownTool, "there is no tool named %q", tc.Name)
		} else {
			d.Executor, d.Approval, d.Approvers = string(t.Executor()), string(t.Approval()), string(t.Approvers())
			parsed, verr := t.ValidateArgs(args)
			switch {
			case verr != nil:
				immediate = verr
			default:
				kind := t.PendingKind(false)
				switch kind {
				case tools.PendingApproval:
					plan := a.dryRun(t, id, parsed)
					d.Plan = &plan
				case tools.PendingElicitation:
					p, perr := t.Elicitation(parsed)
					if perr != nil {
						immediate = perr
					} else {
						d.Prompt = &p
					}
				}
				if immediate == nil && kind != "" {
					exp := now.Add(a.suspensionTimeout(t))
					d.Pending, d.ExpiresAt = string(kind), &exp
					schedule = append(schedule, store.Expiry{ConversationID: a.id, ToolCallID: id, At: exp})
				}
			}
		}
		callEntries = append(callEntries, store.Entry{Type: store.EntryToolCall, ToolCallID: id, Actor: "model", Data: mustJSON(d)})
		if immediate != nil {
			rd := resultData{Envelope: tools.ErrorEnvelope(immediate), Status: store.CallErrored}
			callEntries = append(callEntries, store.Entry{Type: store.EntryToolError, ToolCallID: id, Actor: "system", Data: mustJSON(rd)})
		}
		touched = append(touched, id)
	}
	b := store.Batch{
		Entries:  append([]store.Entry{{Type: store.EntryAssistantMessage, Actor: "model", Data: mustJSON(ad)}}, callEntries...),
		Schedule: schedule,
	}
	if st.llmFailed > 0 {
		b.DoneSteps = []string{step}
	}
	if err := a.commit(b, touched); err != nil {
		return
	}
	assistantSeq := a.st.items[a.st.current].seq
	if resp.Text != "" {
		a.publish(Event{Seq: assistantSeq, Type: EventMessage, Text: resp.Text, Data: roleData("assistant")})
	}
	for _, id := range a.st.items[a.st.current].callIDs {
		c := a.st.calls[id]
		a.publishCall(c)
		switch {
		case c.finished():
		case c.status == store.CallRunning:
			a.runTool(c)
		case c.kind == tools.PendingClientExec:
			a.publishClientExec(c)
			a.checkClient(c)
		}
	}
	a.advance()
}

func (a *actor) suspensionTimeout(t *tools.Tool) time.Duration {
	if t != nil && t.Timeout() > 0 {
		return t.Timeout()
	}
	return a.cfg().DefaultTimeout
}

func (a *actor) runTimeout(t *tools.Tool) time.Duration {
	if t != nil && t.Timeout() > 0 {
		return t.Timeout()
	}
	return a.cfg().ToolTimeout
}

// dryRun asks the tool for its plan, bounded by the tool's run timeout. A failing dry run falls
// back to the default plan: the approver still sees the tool and its arguments.
func (a *actor) dryRun(t *tools.Tool, id string, args map[string]any) tools.Plan {
	ctx, cancel := context.WithCancel(a.m.base)
	defer cancel()
	timer := a.cfg().Clock.NewTimer(a.runTimeout(t))
	defer timer.Stop()
	type res struct {
		p   tools.Plan
		err error
	}
	ch := make(chan res, 1)
	go func() {
		p, err := t.DryRun(ctx, tools.Call{ConversationID: a.id, ToolCallID: id, UserID: a.st.conv.OwnerID, Logger: a.log.With("tool_call_id", id)}, args)
		ch <- res{p, err}
	}()
	select {
	case r := <-ch:
		if r.err == nil {
			return r.p
		}
		a.log.Warn("dry run failed", "tool_call_id", id, "tool", t.Name(), "err", r.err)
	case <-timer.C():
		cancel()
		<-ch
		a.log.Warn("dry run timed out", "tool_call_id", id, "tool", t.Name())
	}
	return tools.DefaultPlan(t, args)
}

// runTool starts one attempt of a server call in its own goroutine, bounded by the tool's
// timeout on the manager's clock. Its result comes back through internal.
func (a *actor) runTool(c *call) {
	if a.stopping || a.broken {
		return
	}
	if _, busy := a.running[c.id]; busy {
		return
	}
	if c.tool == nil || c.tool.Executor() != tools.Server {
		a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: tools.Errorf(tools.KindUnknownTool, "there is no server tool named %q", c.name)}, "system", "")
		return
	}
	args, perr := a.precheck(c)
	if perr != nil {
		a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: perr}, "system", "")
		// The call is finished without running: the turn may be able to continue (an approval's
		// continuation calls runTool alone).
		a.advance()
		return
	}
	if c.attempts < 1 {
		c.attempts = 1
	}
	attempt := c.attempts
	ctx, cancel := context.WithCancel(a.m.base)
	a.running[c.id] = cancel
	a.inflight++
	t := c.tool
	timeout := a.runTimeout(t)
	clk := a.cfg().Clock
	call := tools.Call{
		ConversationID: a.id, ToolCallID: c.id, UserID: a.st.conv.OwnerID, Attempt: attempt, Logger: a.log.With("tool_call_id", c.id),
		Progress: func(msg string) {
			select {
			case a.internal <- toolProgress{id: c.id, text: msg}:
			case <-ctx.Done():
			}
		},
	}
	// The timer is armed here, in the actor, so it is running before anyone hears of the call.
	timer := clk.NewTimer(timeout)
	go func() {
		timedOut := make(chan bool, 1)
		stop := make(chan struct{})
		go func() {
			select {
			case <-timer.C():
				timedOut <- true
				cancel()
			case <-stop:
				timer.Stop()
				timedOut <- false
			}
		}()
		began := clk.Now()
		out := t.Execute(ctx, call, args)
		close(stop)
		if <-timedOut && out.Status != tools.OK {
			e := tools.Errorf(tools.KindTimeout, "tool %s did not finish within %s", t.Name(), timeout)
			e.Retryable = true
			out = tools.Outcome{Status: tools.ToolError, Err: e}
		}
		metrics.ToolSeconds.WithLabelValues(t.Name(), string(out.Status)).Observe(clk.Now().Sub(began).Seconds())
		cancel()
		a.internal <- toolDone{id: c.id, attempt: attempt, out: out}
	}()
}

// precheck validates a server call before an attempt of it is recorded or made: the arguments
// against the tool's schema, then the tool's own policy (Tool.Precheck; for an http.request tool
// the host policy and the expanded request). Either failure is the call's tool error.
func (a *actor) precheck(c *call) (map[string]any, *tools.Error) {
	args, verr := c.tool.ValidateArgs(c.effectiveArgs())
	if verr != nil {
		return nil, verr
	}
	if perr := c.tool.Precheck(a.m.base, args); perr != nil {
		return nil, perr
	}
	return args, nil
}

func (a *actor) onToolDone(m toolDone) {
	c := a.st.calls[m.id]
	if c == nil || c.finished() || c.status != store.CallRunning {
		return
	}
	if m.out.Retryable() && m.attempt < c.tool.MaxAttempts() {
		next := a.now().Add(a.m.backoff(m.attempt, m.out.Err.RetryAfter))
		metrics.Retries.WithLabelValues("tool").Inc()
		a.log.Warn("tool call failed; retrying", "tool_call_id", c.id, "tool", c.name, "attempt", m.attempt,
			"next_attempt_at", next, "kind", string(m.out.Err.Kind))
		key := "tool:" + c.id
		d := attemptData{Step: key, Attempt: m.attempt, Error: m.out.Err.Map(), NextAttemptAt: &next}
		if err := a.commit(store.Batch{
			Entries: []store.Entry{{Type: store.EntryAttemptFailed, ToolCallID: c.id, Actor: "system", Data: mustJSON(d)}},
			Steps:   []store.Step{{ConversationID: a.id, Key: key, Attempts: m.attempt, NextAttemptAt: &next, LastError: m.out.Err.Message, UpdatedAt: a.now()}},
		}, []string{c.id}); err != nil {
			return
		}
		a.publishCall(c)
		return
	}
	a.finishCall(c, m.out, "system", "")
	a.advance()
}

// finishCall records a server call's final outcome.
func (a *actor) finishCall(c *call, out tools.Outcome, actor, decision string) {
	env := out.Envelope(a.maxBytes(c.tool))
	if c.runArgs != nil {
		env = withEditedArgs(env, c.runArgs, a.maxBytes(c.tool))
	}
	typ, status := store.EntryToolResult, store.CallResolved
	if out.Status != tools.OK {
		typ, status = store.EntryToolError, store.CallErrored
	}
	rd := resultData{Envelope: env, Status: status, Decision: decision, Attempt: c.attempts}
	attrs := []any{"tool_call_id", c.id, "tool", c.name, "status", status, "attempts", c.attempts}
	if out.Err != nil {
		attrs = append(attrs, "kind", string(out.Err.Kind))
	}
	a.log.Info("tool call finished", attrs...)
	b := store.Batch{Entries: []store.Entry{{Type: typ, ToolCallID: c.id, Actor: actor, Data: mustJSON(rd)}}}
	if c.attempts > 1 || c.nextAttempt != nil {
		b.DoneSteps = []string{"tool:" + c.id}
	}
	if a.commit(b, []string{c.id}) == nil {
		a.publishCall(c)
	}
}

// maxBytes is the bound of a call's envelope: the tool's own when it set one, else the app's.
func (a *actor) maxBytes(t *tools.Tool) int {
	if t != nil && t.MaxOutputBytes() != tools.DefaultMaxOutputBytes {
		return t.MaxOutputBytes()
	}
	return a.cfg().MaxOutputBytes
}

// --- clients --------------------------------------------------------------------------------

// checkClient starts the no-client grace of an awaiting client call when no socket is attached.
func (a *actor) checkClient(c *call) {
	if a.m.clientCount(a.id) > 0 {
		delete(a.graceAt, c.id)
		return
	}
	if _, ok := a.graceAt[c.id]; !ok {
		a.graceAt[c.id] = a.now().Add(a.cfg().ClientGrace)
	}
}

func (a *actor) onClientsChanged() {
	if a.stopping || !a.st.turnOpen {
		return
	}
	for _, c := range a.st.currentCalls() {
		if c.status == store.CallAwaiting && c.kind == tools.PendingClientExec {
			a.checkClient(c)
		}
	}
}

// --- timers ---------------------------------------------------------------------------------

// quiescent reports whether nothing is under way that only this actor would pick up again:
// then it may hibernate, and the next request or a durable expiry revives it.
func (a *actor) quiescent() bool {
	if a.inflight > 0 || a.llmBusy || len(a.graceAt) > 0 || a.st.llmNext != nil {
		return false
	}
	if a.st.status != store.StatusIdle && a.st.status != store.StatusAwaiting {
		return false
	}
	for _, c := range a.st.currentCalls() {
		if c.nextAttempt != nil {
			return false
		}
	}
	return true
}

// nextWake is the earliest time something is due: a retry, a client grace, hibernation.
func (a *actor) nextWake() time.Time {
	var at time.Time
	consider := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if a.stopping {
		return at
	}
	if a.st.turnOpen && !a.llmBusy && a.st.llmNext != nil {
		consider(*a.st.llmNext)
	}
	if a.st.turnOpen {
		for _, c := range a.st.currentCalls() {
			if c.nextAttempt != nil && c.status == store.CallRunning {
				consider(*c.nextAttempt)
			}
		}
	}
	for _, t := range a.graceAt {
		consider(t)
	}
	if a.quiescent() {
		consider(a.lastActive.Add(a.cfg().IdleTimeout))
	}
	return at
}

func (a *actor) rearm() {
	if a.wake == nil {
		return
	}
	at := a.nextWake()
	if at.Equal(a.wakeAt) {
		return
	}
	a.wakeAt = at
	if at.IsZero() {
		a.wake.Stop()
		return
	}
	d := at.Sub(a.now())
	if d < 0 {
		d = 0
	}
	a.wake.Reset(d)
}

// onWake runs what came due. It returns true when the actor hibernated.
func (a *actor) onWake() bool {
	if a.stopping {
		return false
	}
	now := a.now()
	st := a.st
	if st.turnOpen && !a.llmBusy && st.llmNext != nil && !st.llmNext.After(now) {
		d := attemptData{Step: st.llmStep(), Attempt: st.llmFailed + 1}
		if a.commit(store.Batch{
			Entries: []store.Entry{{Type: store.EntryAttemptStarted, Actor: "system", Data: mustJSON(d)}},
			Steps:   []store.Step{{ConversationID: a.id, Key: d.Step, Attempts: st.llmFailed, UpdatedAt: now}},
		}, nil) == nil {
			a.advance()
		}
	}
	if st.turnOpen {
		for _, c := range st.currentCalls() {
			if c.status != store.CallRunning || c.nextAttempt == nil || c.nextAttempt.After(now) || a.broken {
				continue
			}
			if c.tool != nil && c.tool.Executor() == tools.Server {
				if _, perr := a.precheck(c); perr != nil {
					// Refused before the retry is recorded: no attempt, the call ends with the error.
					a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: perr}, "system", "")
					a.advance()
					continue
				}
			}
			d := attemptData{Step: "tool:" + c.id, Attempt: c.attempts + 1}
			if a.commit(store.Batch{
				Entries: []store.Entry{{Type: store.EntryAttemptStarted, ToolCallID: c.id, Actor: "system", Data: mustJSON(d)}},
				Steps:   []store.Step{{ConversationID: a.id, Key: d.Step, Attempts: c.attempts, UpdatedAt: now}},
			}, []string{c.id}) == nil {
				a.publishCall(c)
				a.runTool(c)
			}
		}
	}
	for id, at := range a.graceAt {
		if at.After(now) || a.broken {
			continue
		}
		delete(a.graceAt, id)
		c := st.calls[id]
		if c == nil || c.status != store.CallAwaiting || c.kind != tools.PendingClientExec {
			continue
		}
		if a.m.clientCount(a.id) > 0 {
			continue
		}
		a.resolveNoClient(c)
	}
	if a.quiescent() && !a.lastActive.Add(a.cfg().IdleTimeout).After(now) {
		return a.hibernate()
	}
	return false
}

// hibernate leaves memory when no request is queued. Callers that raced with it see done and
// retry on a fresh actor, which rebuilds the same state from the log.
func (a *actor) hibernate() bool {
	a.m.mu.Lock()
	defer a.m.mu.Unlock()
	if len(a.mailbox) > 0 || len(a.internal) > 0 || len(a.clientsChanged) > 0 {
		return false
	}
	if a.m.actors[a.id] == a {
		delete(a.m.actors, a.id)
	}
	a.settle()
	a.m.hibernations.Add(1)
	close(a.done)
	a.doneClosed = true
	return true
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
		Data: mustJSON(map[string]any{"tool": c.name, "args": c.effectiveArgs()})})
}

// --- helpers --------------------------------------------------------------------------------

func newCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// normalizeArgs makes the model's arguments storable JSON: empty becomes {}, and text that is
// not JSON is kept as a JSON string (validation then reports it to the model).
func normalizeArgs(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 || len(trimSpace(string(raw))) == 0 {
		return json.RawMessage(`{}`)
	}
	if !json.Valid(raw) {
		b, _ := json.Marshal(string(raw))
		return b
	}
	return raw
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("agent: encode %T: %v", v, err))
	}
	return b
}

func roleData(role string) json.RawMessage { return mustJSON(map[string]string{"role": role}) }

func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\n' || s[j-1] == '\t' || s[j-1] == '\r') {
		j--
	}
	return s[i:j]
}

// withEditedArgs adds the arguments that actually ran to a result envelope, so the model knows
// the approver changed what it asked for.
func withEditedArgs(env json.RawMessage, args json.RawMessage, max int) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(env, &m); err != nil {
		return env
	}
	m["edited_args"] = args
	m["note"] = mustJSON("an approver edited the arguments before the call ran; edited_args are the arguments that ran")
	b, err := json.Marshal(m)
	if err != nil {
		return env
	}
	return tools.BoundEnvelope(b, max)
}

// observeLLM records one model call's latency (outcome ok, error or cancelled) and, for a
// complete answer, its tokens.
func observeLLM(provider string, took time.Duration, u llm.Usage, err error) {
	outcome := "ok"
	switch {
	case errors.Is(err, context.Canceled):
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
	}
	metrics.LLMSeconds.WithLabelValues(provider, outcome).Observe(took.Seconds())
	if err == nil {
		metrics.LLMTokens.WithLabelValues(provider, "input").Add(float64(u.InputTokens))
		metrics.LLMTokens.WithLabelValues(provider, "output").Add(float64(u.OutputTokens))
	}
}
