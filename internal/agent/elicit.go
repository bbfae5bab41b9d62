package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"
	"unicode"
	"unicode/utf8"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"

	"golang.org/x/net/idna"
)

// This file lets a running server call ask its owner a question (an MCP server's elicitation,
// tools.Call.Ask): the call suspends with kind elicitation (same tool_call_id, the server's
// form), the answer comes through the one Resolve path, and it goes back to the waiting tool
// goroutine, which carries on. While it waits, the call's run timer is paused and the question's
// own durable expiry bounds it instead.
//
// The waiting lives in the tool goroutine. A question that carries its tool's resume state
// (tools.Question.Resume: an MCP server's request state under the 2026-07-28 protocol) is kept
// with the question in the log, so it survives a restart: the revived conversation shows it
// still pending, and its answer starts a run of the call that carries on from there
// (tools.Call.Resumed) instead of asking again. A question without one cannot be answered after
// a restart (the server's request died with the connection): the revived actor fails that
// attempt with a clear error and runs the call again with the same idempotency key (askLost);
// the server asks again.

// Entry types of a question mid-call; their payloads are questionData and answerData.
const (
	entryQuestion store.EntryType = "question" // a running server call asks its owner
	entryAnswer   store.EntryType = "answer"   // the answer, or why the question ended unanswered
)

type questionData struct {
	Prompt    promptData      `json:"prompt"`
	Attempt   int             `json:"attempt"`
	ExpiresAt time.Time       `json:"expires_at"`
	Resume    json.RawMessage `json:"resume,omitempty"` // the tool's state to carry on from the answer (tools.Question.Resume)
}

// maxResumeBytes bounds a question's resume state; a larger one is not kept (the question then
// cannot survive a restart).
const maxResumeBytes = 128 << 10

// resumeOf is the resume state of q as it can be kept: opaque, so one that a store could not
// keep byte for byte (invalid JSON, NUL bytes, invalid UTF-8) or that is too large is dropped
// rather than altered.
func resumeOf(q tools.Question) json.RawMessage {
	r := q.Resume
	if len(r) == 0 || len(r) > maxResumeBytes || !json.Valid(r) || !bytes.Equal(storableJSON(r), r) {
		return nil
	}
	return r
}

type answerData struct {
	Action  string         `json:"action"` // accept, decline, cancel; lost after a restart
	By      string         `json:"by"`
	Key     string         `json:"key,omitempty"` // the resolve's key (request.key)
	Content map[string]any `json:"content,omitempty"`
}

// askMsg is a tool goroutine's question to its actor; reply (buffered, size 1) gets the answer
// once, so the actor never blocks on a goroutine that gave up.
type askMsg struct {
	id      string
	attempt int
	q       tools.Question
	reply   chan askReply
}

type askReply struct {
	ans tools.Answer
	err error
}

// asker is the Ask of one attempt of a server call. pause stops the run timer while the
// question waits (true) and starts it again afterwards (false).
func (a *actor) asker(id string, attempt int, pause func(bool)) tools.AskFunc {
	return func(ctx context.Context, q tools.Question) (tools.Answer, error) {
		reply := make(chan askReply, 1)
		select {
		case a.internal <- askMsg{id: id, attempt: attempt, q: q, reply: reply}:
		case <-ctx.Done():
			return tools.Answer{}, ctx.Err()
		}
		pause(true)
		defer pause(false)
		select {
		case r := <-reply:
			return r.ans, r.err
		case <-ctx.Done():
			return tools.Answer{}, ctx.Err()
		}
	}
}

// onAsk suspends a running call with the question: recorded with its expiry, then shown.
func (a *actor) onAsk(m askMsg) {
	c := a.st.calls[m.id]
	if !a.lc.mayStart() || c == nil || c.finished() || c.status != store.CallRunning || c.attempts != m.attempt {
		m.reply <- askReply{err: fault.New(fault.KindStale, "the call is no longer running", nil)}
		return
	}
	if a.asks[c.id] != nil {
		m.reply <- askReply{err: fault.New(fault.KindConflict, "the tool asked a second question before the first was answered", nil)}
		return
	}
	p, ferr := promptOf(c.name, m.q)
	if ferr != nil {
		m.reply <- askReply{err: ferr}
		return
	}
	exp := a.now().Add(a.cfg().suspensionTimeout(c.tool))
	d := questionData{Prompt: *promptDataOf(&p), Attempt: m.attempt, ExpiresAt: exp, Resume: resumeOf(m.q)}
	// Should the write fail, the actor drains hard and cancels the run, which stops waiting.
	a.stage(store.Batch{
		Entries:  []store.Entry{{Type: entryQuestion, ToolCallID: c.id, Actor: "system", Data: mustJSON(d)}},
		Schedule: []store.Expiry{{ConversationID: a.id, ToolCallID: c.id, At: exp}},
	}, []string{c.id})
	if a.asks == nil {
		a.asks = map[string]chan askReply{}
	}
	a.asks[c.id] = m.reply
	a.publishCall(c)
}

// plainLink reports whether a link holds no control, format or space characters: a
// right-to-left override (U+202E) or a zero-width character would make the card show another
// address than the one the link opens.
func plainLink(s string) bool {
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// emptyForm is the form of a URL question: nothing to fill in, only accept (done), decline or
// cancel.
var emptyForm = json.RawMessage(`{"type":"object","properties":{}}`)

// promptOf checks a tool's question as the page will show it: a form within the restricted
// elicitation subset, or an http(s) link (shown as text with its host and opened only by the
// person: Parley never fetches or follows it).
func promptOf(tool string, q tools.Question) (tools.Prompt, *fault.Error) {
	msg := bounded(q.Message, 4000)
	if q.URL != "" {
		u, err := url.Parse(q.URL)
		if err != nil || len(q.URL) > 2048 || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
			!utf8.ValidString(q.URL) || !plainLink(q.URL) {
			return tools.Prompt{}, fault.New(fault.KindInvalidArgs, "the tool asked the user to open a link that is not a plain http(s) URL", nil)
		}
		if _, err := idna.Lookup.ToASCII(u.Hostname()); err != nil {
			// The card shows the host as the address bar will (punycode): it must have one.
			return tools.Prompt{}, fault.New(fault.KindInvalidArgs, "the tool asked the user to open a link whose host is not a valid name", nil)
		}
		if msg == "" {
			msg = "The tool asks you to open a page."
		}
		return tools.Prompt{Message: msg, Schema: emptyForm, URL: q.URL}, nil
	}
	schema := storableJSON(q.Schema)
	if len(schema) == 0 {
		schema = emptyForm
	}
	if e := tools.CheckElicitationSchema(schema); e != nil {
		return tools.Prompt{}, fault.New(fault.KindInvalidArgs, "the tool's question cannot be shown as a form: "+e.Message, e.Details)
	}
	if _, err := tools.CompileSchema(tool, schema); err != nil {
		return tools.Prompt{}, fault.Errorf(fault.KindInvalidArgs, "the tool's form does not compile: %v", err)
	}
	return tools.Prompt{Message: msg, Schema: schema}, nil
}

// resolveAsk takes the owner's answer to a running call's question and hands it to the tool.
func (a *actor) resolveAsk(c *call, r Resolution, by Principal, key string) error {
	if !MayAnswer(by, a.st.conv.OwnerID) {
		return permissionDenied("only the conversation's owner answers its questions")
	}
	reply := a.asks[c.id]
	if reply == nil && c.resume == nil {
		return errStale(c.id)
	}
	content, err := c.answerContent(r)
	if err != nil {
		return err
	}
	ans := tools.Answer{Action: r.Action}
	ans.Content, _ = content.(map[string]any)
	now := a.now()
	a.stage(store.Batch{
		Entries: []store.Entry{{Type: entryAnswer, ToolCallID: c.id, Actor: by.UserID,
			Data: mustJSON(answerData{Action: r.Action, By: by.UserID, Content: ans.Content, Key: key})}},
		Cancel: []string{c.id},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID,
			Action: r.Action, ArgsHash: canonicalHash(c.effectiveArgs()), At: now}},
		Urgent: true, // the person's request waits for it
	}, []string{c.id})
	a.publishCall(c)
	if reply == nil {
		// The run that asked was lost in a restart; the answer (now c.resumed) starts one
		// that carries on from it.
		a.ready.after(followUp{kind: followRunTool, id: c.id})
		return nil
	}
	delete(a.asks, c.id)
	a.ready.effect(effect{kind: effectAskReply, ask: reply, askReply: askReply{ans: ans}})
	return nil
}

// dropAsk ends the question of a call that was closed another way (its expiry, the turn
// stopped, the person moved on): the tool hears that nobody will answer, and its run, which
// can no longer matter, is cancelled.
func (a *actor) dropAsk(c *call) {
	reply := a.asks[c.id]
	if reply == nil {
		return
	}
	delete(a.asks, c.id)
	a.ready.effect(effect{kind: effectAskReply, ask: reply, askCancel: true, run: recordedCall{id: c.id},
		askReply: askReply{err: fault.New(fault.KindDeclined, "the question was closed without an answer", nil)}})
}

// askAbandon cancels, for a stop, the runs whose question waits, and drops what they report:
// the question stays in the log as it is, and the revived actor (here or in another process)
// keeps it pending when it can be resumed, or fails that attempt and runs the call again
// (askLost).
func (a *actor) askAbandon() {
	for id := range a.asks {
		if cancel := a.running[id]; cancel != nil {
			if a.abandoned == nil {
				a.abandoned = map[string]bool{}
			}
			a.abandoned[id] = true
			cancel()
		}
	}
}

// askLost handles, on revival, a call whose question died with the previous process: that
// attempt fails with a clear error and the call runs again (same tool_call_id, so the same
// idempotency key) when it has attempts left; else it ends with that error.
func (a *actor) askLost(c *call) {
	msg := "the MCP server's question was lost when Parley restarted"
	if c.tool == nil || c.attempts >= c.tool.MaxAttempts() {
		a.closeCall(c, closing{
			before:   []store.Entry{{Type: entryAnswer, Data: mustJSON(answerData{Action: "lost", By: System.UserID})}},
			envelope: tools.ErrorEnvelope(fault.New(fault.KindServiceUnavailable, msg+", and the call has no attempts left", nil)),
			status:   store.CallErrored,
			decision: "lost",
			by:       System.UserID,
		})
		return
	}
	now := a.now()
	e := fault.New(fault.KindServiceUnavailable, msg+"; the call is tried again with the same idempotency key", nil)
	e.Retryable = true
	key := "tool:" + c.id
	a.stage(store.Batch{
		Entries: []store.Entry{
			{Type: entryAnswer, ToolCallID: c.id, Actor: "system", Data: mustJSON(answerData{Action: "lost", By: System.UserID})},
			{Type: store.EntryAttemptFailed, ToolCallID: c.id, Actor: "system",
				Data: mustJSON(attemptData{Step: key, Attempt: c.attempts, Error: e.Map(), NextAttemptAt: &now})},
		},
		Steps:  []store.Step{{ConversationID: a.id, Key: key, Attempts: c.attempts, NextAttemptAt: &now, LastError: e.Message, UpdatedAt: now}},
		Cancel: []string{c.id},
	}, []string{c.id})
	a.log.Warn("a question mid-call was lost in a restart; retrying the call", "tool_call_id", c.id, "tool", c.name)
	a.publishCall(c)
}

// applyAsk folds a question or an answer into the call.
func (s *convState) applyAsk(e store.Entry) error {
	c := s.calls[e.ToolCallID]
	if c == nil {
		return fmt.Errorf("%s for unknown call %s", e.Type, e.ToolCallID)
	}
	switch e.Type {
	case entryQuestion:
		var d questionData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		exp := d.ExpiresAt
		c.status, c.kind, c.prompt, c.expiresAt = store.CallAwaiting, tools.PendingElicitation, d.Prompt.prompt(), &exp
		c.resume, c.resumed = d.Resume, nil
	case entryAnswer:
		var d answerData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return err
		}
		s.noteKey(d.Key)
		c.status, c.kind, c.expiresAt = store.CallRunning, "", nil
		c.decision, c.decidedBy = d.Action, d.By
		// An answer to a question with resume state lets any later run of this attempt (after
		// a restart, or a retry) carry on from it rather than be asked again.
		if c.resume != nil && d.Action != "lost" {
			c.resumed = &tools.Resumed{State: c.resume, Answer: tools.Answer{Action: d.Action, Content: d.Content}}
		}
		c.resume = nil
	}
	return nil
}

// askedMidCall reports whether c's suspension is a running server call's question.
func (c *call) askedMidCall() bool {
	return c.executor == tools.Server && c.kind == tools.PendingElicitation && c.status == store.CallAwaiting
}
