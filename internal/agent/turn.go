package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the turn loop: a user's message opens a turn, the model is called, its answer and
// calls are recorded and dispatched, and the loop advances once every call has a result.

// streamBuf is the text streamed so far by the LLM call in flight. The stream goroutine writes
// it; the actor reads it for View. It is the only state the two share, hence the mutex.
type streamBuf struct {
	mu   sync.Mutex
	seq  int64 // the log sequence the call started after: its deltas' Event.Seq; 0 for none
	text []byte
	full bool // the text reached its bound: the rest of the call's text is refused
}

// add appends s, up to limit bytes of text in all. What does not fit is refused (s is cut on a
// rune boundary) and from then on full is true and nothing more is taken. It returns the part
// of s kept, the call's seq and the offset in the text where the part kept starts.
func (b *streamBuf) add(s string, limit int) (kept string, seq int64, offset int, full bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.full {
		return "", b.seq, len(b.text), true
	}
	if room := max(limit-len(b.text), 0); len(s) > room {
		s, b.full = tools.CutRunes(s, room), true
	}
	offset = len(b.text)
	b.text = append(b.text, s...)
	return s, b.seq, offset, b.full
}

func (b *streamBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.text)
}

// snapshot is the text so far with the seq of its call.
func (b *streamBuf) snapshot() (seq int64, text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seq, string(b.text)
}

// cut reports whether the call's text reached its bound.
func (b *streamBuf) cut() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.full
}

// start empties the buffer for a call that starts after the log entry seq.
func (b *streamBuf) start(seq int64) {
	b.mu.Lock()
	b.seq, b.text, b.full = seq, nil, false
	b.mu.Unlock()
}

// reset empties the buffer: no call streams.
func (b *streamBuf) reset() { b.start(0) }

// errAnswerTooLong ends a model call whose text reached MaxAnswerBytes (the stream's callback
// returns it, so the provider stops reading).
var errAnswerTooLong = errors.New("the answer reached its bound")

func (a *actor) handleSend(req *request) error {
	by := req.by
	if !MaySend(by, a.st.conv.OwnerID) {
		if a.st.maySee(by) {
			return fault.New(fault.KindPermissionDenied, "only the conversation's owner may send messages", nil)
		}
		return errNotFound()
	}
	if trimmed := trimSpace(req.text); trimmed == "" {
		return fault.InvalidAt("the message is empty", "/text", "must not be empty")
	}
	if a.st.hasKey(req.key) {
		// Posted already: by the process this message went to first, which died before its
		// answer reached the sender (the sender sent it again here).
		return nil
	}
	if a.st.turnOpen || len(a.st.queue) > 0 {
		return a.sendDuringTurn(req) // cancel.go: move on, or queue
	}
	d, _ := json.Marshal(userMessageData{Text: req.text, Key: req.key})
	a.stage(store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: by.UserID, Data: d}}, Urgent: true}, nil)
	a.publish(Event{Seq: a.st.lastSeq, Type: EventMessage, Text: req.text, Data: roleData("user")})
	a.ready.after(followUp{kind: followAdvance})
	return nil
}

// --- the turn loop --------------------------------------------------------------------------

// resume continues whatever the log says was under way: awaiting calls stay awaiting (their
// expiries are in the store; a question a server call asked stays when it can be resumed, see
// elicit.go), server calls that started without a result are re-dispatched with
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
		case c.askedMidCall() && a.asks[c.id] == nil && c.resume == nil:
			a.askLost(c)
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
	if !a.lc.mayStart() || !st.turnOpen || a.llmBusy || a.drafting != nil || st.llmNext != nil {
		return
	}
	for _, c := range st.currentCalls() {
		if !c.finished() {
			return
		}
	}
	if st.llmCalls >= a.cfg().MaxIterations {
		a.endTurn(fault.KindIterationCap, fmt.Sprintf("the turn stopped after %d model calls (the iteration cap)", st.llmCalls))
		return
	}
	if spent := a.budgetSpent(); spent != "" {
		a.endTurn(fault.KindUsageLimitReached, spent)
		return
	}
	a.llmBusy = true // the call is under way from here; release starts it (startLLM)
	a.ready.effect(effect{kind: effectModelCall})
}

// startLLM starts the turn's next model call, streaming in a goroutine of the actor's; the
// answer comes back through internal. Only release calls it.
func (a *actor) startLLM() {
	// Text deltas go straight to the hub from the stream; publish what came before them first.
	a.settle()
	req := a.buildRequest()
	ctx, cancel := context.WithCancel(a.m.base)
	ctx, span := a.observeChat(ctx, req.MaxTokens)
	a.llmCancel = cancel
	a.inflight++
	// The call's deltas carry the sequence it starts after, which no other call of the
	// conversation shares (every call's end is logged before the next starts; only a call that
	// a crash cut is tried again after the same entry), and their offset in its text: a
	// follower that has some of the text skips what it has (web: sharedStream.feed).
	a.stream.start(a.st.lastSeq)
	provider := a.cfg().Provider
	events := a.m.events
	id := a.id
	clk := a.cfg().Clock
	slots := a.m.modelSlots
	limit := a.cfg().MaxAnswerBytes
	go func() {
		// Wait for room among the process's model calls (MaxModelCalls); a stop ends the wait.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			cancel()
			endChat(span, llm.Response{}, ctx.Err())
			a.internal <- llmDone{err: ctx.Err()}
			return
		}
		began := clk.Now()
		resp, err := provider.Stream(ctx, req, func(e llm.Event) error {
			if ctx.Err() != nil {
				return ctx.Err() // stopped (cancel.go): nothing more reaches the page
			}
			if e.Type == llm.EventTextDelta && e.Text != "" {
				kept, seq, offset, full := a.stream.add(e.Text, limit)
				if kept != "" {
					events.Publish(Event{ConversationID: id, Seq: seq, Type: EventTextDelta, Text: kept, Offset: offset})
				}
				if full {
					return errAnswerTooLong // the actor records what was kept (cutAnswer)
				}
			}
			return nil
		})
		<-slots
		observeLLM(provider.Name(), clk.Now().Sub(began), resp.Usage, err)
		endChat(span, resp, err)
		cancel()
		a.internal <- llmDone{resp: resp, err: err}
	}()
}

func (a *actor) onLLMError(err error) {
	st := a.st
	a.stream.reset()
	retry, after := llm.IsRetryable(err)
	attempt := st.llmFailed + 1
	step := st.llmStep()
	kind, msg := fault.KindInternal, "the model call failed"
	var le *llm.Error
	if errors.As(err, &le) {
		kind, msg = fault.Kind(le.Kind), le.Error()
	} else {
		msg = a.internalError("model call", err).Message
	}
	if retry && attempt < a.cfg().LLMMaxAttempts {
		next := a.now().Add(a.m.backoff(attempt, after))
		metrics.Retries.WithLabelValues("llm").Inc()
		a.log.Warn("model call failed; retrying", "step", step, "attempt", attempt, "next_attempt_at", next, "err", msg)
		d, _ := json.Marshal(attemptData{Step: step, Attempt: attempt, Error: map[string]any{"kind": string(kind), "message": msg}, NextAttemptAt: &next})
		a.stage(store.Batch{
			Entries: []store.Entry{{Type: store.EntryAttemptFailed, Actor: "system", Data: d}},
			Steps:   []store.Step{{ConversationID: a.id, Key: step, Attempts: attempt, NextAttemptAt: &next, LastError: msg, UpdatedAt: a.now()}},
		}, nil)
		// The page can say "retrying"; the status itself stays generating.
		a.publish(Event{Seq: a.st.lastSeq, Type: EventStatus, Status: a.st.status,
			Data: mustJSON(map[string]any{"retry_at": next, "attempt": attempt, "error": msg})})
		return
	}
	a.endTurn(kind, msg)
}

// cutAnswer records an answer whose text passed MaxAnswerBytes: the model call was cut there,
// so whatever it would have said after (tool calls included) is unknown. The text kept, as the
// page showed it, is the assistant's message, and the turn ends with a too_large error that
// says so, in the same append: a model that runs away gets no further call in this turn, and
// the person sees where and why the answer stopped and can ask it to go on.
func (a *actor) cutAnswer(text string) {
	limit := a.cfg().MaxAnswerBytes
	text = bounded(text, limit)
	step := a.st.llmStep()
	msg := fmt.Sprintf("the answer was cut off here: it passed %s, the most one answer may hold; ask for the rest, or for something shorter", sizeText(limit))
	a.log.Warn("model answer cut at its bound", "bytes", limit, "step", step)
	b := store.Batch{Entries: []store.Entry{
		{Type: store.EntryAssistantMessage, Actor: "model", Data: mustJSON(assistantMessageData{Text: text, Step: step})},
		{Type: store.EntryTurnError, Actor: "system", Data: mustJSON(turnErrorData{Kind: string(fault.KindTooLarge), Message: msg})},
	}}
	if a.st.llmFailed > 0 {
		b.DoneSteps = []string{step}
	}
	a.stream.reset()
	a.stage(b, nil)
	a.ready.answer = true
	if text != "" {
		a.publish(Event{Seq: a.st.items[a.st.current].seq, Type: EventMessage, Text: text, Data: roleData("assistant")})
	}
	a.publish(Event{Seq: a.st.lastSeq, Type: EventError, Text: msg, Data: mustJSON(map[string]string{"kind": string(fault.KindTooLarge)})})
}

// sizeText says n bytes for a person: "128 KiB", "1.5 MiB", "900 bytes".
func sizeText(n int) string {
	unit := func(d float64, name string) string {
		return strings.TrimSuffix(strconv.FormatFloat(float64(n)/d, 'f', 1, 64), ".0") + " " + name
	}
	switch {
	case n >= 1<<20:
		return unit(1<<20, "MiB")
	case n >= 1<<10:
		return unit(1<<10, "KiB")
	}
	return strconv.Itoa(n) + " bytes"
}

// endTurn closes the open turn with an error the user sees.
func (a *actor) endTurn(kind fault.Kind, msg string) {
	a.log.Warn("turn ended with an error", "kind", string(kind), "message", msg)
	d, _ := json.Marshal(turnErrorData{Kind: string(kind), Message: msg})
	b := store.Batch{Entries: []store.Entry{{Type: store.EntryTurnError, Actor: "system", Data: d}}}
	if a.st.llmFailed > 0 {
		b.DoneSteps = []string{a.st.llmStep()}
	}
	a.stage(b, nil)
	a.publish(Event{Seq: a.st.lastSeq, Type: EventError, Text: msg, Data: mustJSON(map[string]string{"kind": string(kind)})})
}

// draft is a complete answer of the model that waits for the dry runs of its gated calls before
// it is recorded (see onLLMResponse).
type draft struct {
	resp    llm.Response
	ids     []string              // the id of each of resp.ToolCalls: the model's, or a fresh one
	over    []bool                // each of resp.ToolCalls past MaxCallsPerAnswer (it does not run)
	plans   map[string]tools.Plan // the plans reported so far, by call id
	gates   map[string]callGate   // how each valid call of a known tool is gated (gate.go)
	waiting int                   // dry runs not reported yet
	cancel  context.CancelFunc    // cancels the dry runs (a hard stop)
}

// onLLMResponse takes a complete answer: it is recorded with its calls in one batch, then the
// calls are dispatched (recordResponse). A call that suspends for an approval shows the
// approver its tool's dry run, so the answer waits for the plans first: the dry runs run in
// goroutines of the actor (startDryRun, counted in inflight) and report back through internal;
// the last plan to arrive records the answer. Meanwhile the actor goes on answering View and
// Resolve: a slow dry run no longer stalls the conversation.
//
// Why record after the plans rather than record the calls at once and append each plan when it
// comes: the plan stays in the tool_call entry, so the log keeps its shape and replaying it
// (state.go apply) gives every approval its plan from the moment it exists. No approval card,
// inbox row (the tool_calls row's prompt, written with the entry) or Resolve ever sees an
// approval without its plan, and there is no half-described call to handle on revival. Until
// the answer is recorded nobody has heard of its calls (there is nothing to resolve), and View
// shows the turn generating with the answer's text as streamed. A crash in between loses the
// answer as one during the stream would: the step is retried on revival. The expiry of a
// suspension starts when the answer is recorded, when the approver can first see it.
func (a *actor) onLLMResponse(resp llm.Response) {
	st := a.st
	resp = cleanResponse(resp)
	dr := &draft{resp: resp, ids: make([]string, len(resp.ToolCalls)), over: make([]bool, len(resp.ToolCalls)), plans: map[string]tools.Plan{},
		gates: map[string]callGate{}}
	local := 0 // calls that run here (provider calls ran at the provider)
	for i, tc := range resp.ToolCalls {
		if !tc.Provider {
			dr.over[i] = local >= a.cfg().MaxCallsPerAnswer
			local++
		}
	}
	var ctx context.Context // the dry runs', created with the first
	seen := map[string]bool{}
	for i, tc := range resp.ToolCalls {
		id := tc.ID
		if !usableID(id) || seen[id] || st.calls[id] != nil {
			id = newCallID() // the model's id is mapped back when the request is built (ModelID)
		}
		seen[id] = true
		dr.ids[i] = id
		if tc.Provider || dr.over[i] {
			continue
		}
		// recordResponse's tests for a plan: a known local tool, an approval, valid arguments.
		t, ok := a.cfg().Tools.Get(tc.Name)
		if !ok || t.Executor() == tools.Provider {
			continue
		}
		parsed, verr := t.ValidateArgs(normalizeArgs(tc.Args))
		if verr != nil {
			continue
		}
		g := a.gateFor(t, normalizeArgs(tc.Args))
		dr.gates[id] = g
		if !g.gated() || g.denied {
			continue
		}
		if ctx == nil {
			ctx, dr.cancel = context.WithCancel(a.m.base)
		}
		a.ready.effect(effect{kind: effectDryRun, dry: ctx, run: recordedCall{tool: t, id: id, args: parsed}})
		dr.waiting++
	}
	if dr.waiting > 0 {
		a.drafting = dr
		return
	}
	a.recordResponse(dr)
}

// budgetSpent says why the owner may not make another model call today ("" when they may): their
// DailyTokens are used up. A failed read of the count lets the call go: the budget is a bound on
// cost, not a lock.
func (a *actor) budgetSpent() string {
	budget := a.cfg().DailyTokens
	if budget <= 0 {
		return ""
	}
	used, err := a.cfg().Store.UsageOn(a.m.base, a.st.conv.OwnerID, a.now())
	if err != nil {
		a.log.Warn("read the owner's token usage", "err", err)
		return ""
	}
	if used < budget {
		return ""
	}
	return fmt.Sprintf("you have used your %d model tokens for today (UTC); the budget renews at midnight UTC", budget)
}

// recordUsage adds an answer's reported tokens to its owner's day (DailyTokens).
func (a *actor) recordUsage(u llm.Usage) {
	n := int64(u.InputTokens + u.OutputTokens)
	if a.cfg().DailyTokens <= 0 || n <= 0 {
		return
	}
	if err := a.cfg().Store.AddUsage(a.m.base, a.st.conv.OwnerID, a.now(), n); err != nil {
		a.log.Warn("record the owner's token usage", "err", err)
	}
}

// cleanResponse makes a model answer storable (storable.go): its text, and each call's name,
// arguments and id (the model's id, kept to map back, is storable too; an unusable one is
// replaced by the caller).
func cleanResponse(resp llm.Response) llm.Response {
	resp.Text = storable(resp.Text)
	calls := make([]llm.ToolCall, len(resp.ToolCalls))
	for i, tc := range resp.ToolCalls {
		tc.ID = bounded(tc.ID, 1024)
		tc.Name = bounded(tc.Name, maxNameBytes)
		tc.Args = storableJSON(normalizeArgs(tc.Args))
		if tc.Provider {
			tc.Result = storableJSON(normalizeArgs(tc.Result))
		}
		calls[i] = tc
	}
	resp.ToolCalls = calls
	return resp
}

// onPlan takes a dry run's plan; the last plan of the answer records it.
func (a *actor) onPlan(m planDone) {
	dr := a.drafting
	if dr == nil {
		return
	}
	dr.plans[m.id] = m.plan
	dr.waiting--
	if dr.waiting > 0 {
		return
	}
	a.drafting = nil
	dr.cancel()
	a.recordResponse(dr)
}

// recordResponse records the answer and its calls in one batch, then dispatches the calls.
func (a *actor) recordResponse(dr *draft) {
	resp := dr.resp
	a.stream.reset()
	st := a.st
	now := a.now()
	step := st.llmStep()
	ad := assistantMessageData{Text: resp.Text, Step: step, Usage: resp.Usage}
	var (
		callEntries []store.Entry
		touched     []string
		schedule    []store.Expiry
		audit       []store.AuditRecord
	)
	for i, tc := range resp.ToolCalls {
		id := dr.ids[i]
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
		var immediate *fault.Error
		immediateStatus := store.CallErrored
		t, ok := a.cfg().Tools.Get(tc.Name)
		if dr.over[i] {
			immediate = fault.Errorf(fault.KindTooManyCalls, "this answer held more than %d tool calls; this one did not run: ask for fewer at a time", a.cfg().MaxCallsPerAnswer)
		} else if !ok || t.Executor() == tools.Provider {
			immediate = fault.Errorf(fault.KindUnknownTool, "there is no tool named %q", tc.Name)
		} else {
			d.Executor, d.Approval, d.Approvers = string(t.Executor()), string(t.Approval()), string(t.Approvers())
			parsed, verr := t.ValidateArgs(args)
			g, decided := dr.gates[id]
			if verr == nil && !decided { // onLLMResponse gates every valid call; never leave one ungated
				g = a.gateFor(t, args)
			}
			switch {
			case verr != nil:
				immediate = verr
			case g.denied:
				d.Rule = g.rule
				immediate, immediateStatus = deniedByRule(g), store.CallDenied
				audit = append(audit, a.gateAudit(id, tc.Name, args, g, now)...)
			default:
				d.Approval, d.Approvers, d.Rule, d.Grant = string(g.approval), string(g.approvers), g.rule, g.grant
				if g.gated() && g.needed > 1 {
					d.Needed = g.needed
				}
				audit = append(audit, a.gateAudit(id, tc.Name, args, g, now)...)
				kind := pendingKindFor(t, g.gated())
				switch kind {
				case tools.PendingApproval:
					plan, ok := dr.plans[id]
					if !ok { // onLLMResponse plans every approval; never leave one without a plan
						plan = tools.DefaultPlan(t, parsed)
					}
					d.Plan = planDataOf(&plan)
				case tools.PendingElicitation:
					p, perr := t.Elicitation(parsed)
					if perr != nil {
						immediate = perr
					} else {
						d.Prompt = promptDataOf(&p)
					}
				}
				if immediate == nil && kind != "" {
					timeout := a.cfg().suspensionTimeout(t)
					if kind == tools.PendingApproval {
						timeout = a.cfg().approvalTimeout(t)
					}
					exp := now.Add(timeout)
					d.Pending, d.ExpiresAt = string(kind), &exp
					schedule = append(schedule, store.Expiry{ConversationID: a.id, ToolCallID: id, At: exp})
				}
			}
		}
		callEntries = append(callEntries, store.Entry{Type: store.EntryToolCall, ToolCallID: id, Actor: "model", Data: mustJSON(d)})
		if immediate != nil {
			rd := resultData{Envelope: tools.ErrorEnvelope(immediate), Status: immediateStatus}
			callEntries = append(callEntries, store.Entry{Type: store.EntryToolError, ToolCallID: id, Actor: "system", Data: mustJSON(rd)})
		}
		touched = append(touched, id)
	}
	b := store.Batch{
		Entries:  append([]store.Entry{{Type: store.EntryAssistantMessage, Actor: "model", Data: mustJSON(ad)}}, callEntries...),
		Schedule: schedule,
		Audit:    audit,
	}
	if st.llmFailed > 0 {
		b.DoneSteps = []string{step}
	}
	for _, id := range touched {
		a.announceIfAsks(id)
	}
	a.stage(b, touched)
	a.ready.answer = true
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
