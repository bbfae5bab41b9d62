package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// hang streams text, signals, then waits for its context (a model call the owner stops).
func hang(text string, streamed chan<- struct{}) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		_ = emit(llm.Event{Type: llm.EventTextDelta, Text: text})
		close(streamed)
		<-ctx.Done()
		return llm.Response{}, ctx.Err()
	}
}

// lastToolError is the kind and message of the envelope the model got for call id in req.
func lastToolError(t *testing.T, req llm.Request, id string) (fault.Kind, string) {
	t.Helper()
	for _, m := range toolMessages(req) {
		if m.ToolCallID == id {
			env := envelope(t, m.Content)
			e, _ := env["error"].(map[string]any)
			msg, _ := e["message"].(string)
			return fault.Kind(errKind(t, env)), msg
		}
	}
	t.Fatalf("the request has no result for %s: %+v", id, toolMessages(req))
	return "", ""
}

func TestStopMidStreamKeepsTheTextAndStartsNoModelCall(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		streamed := make(chan struct{})
		prov := newScripted(hang("Once upon a ", streamed), say("Sure."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("tell me a story")
		<-streamed
		if err := e.m.Cancel(e.ctx, e.conv, e.other); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a stranger's stop: %v, want not_found", err)
		}
		if err := e.m.Cancel(e.ctx, e.conv, e.owner); err != nil {
			t.Fatalf("stop: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		v := e.view()
		roles := []string{}
		for _, m := range v.Messages {
			roles = append(roles, m.Role)
		}
		if strings.Join(roles, ",") != "user,assistant,stopped" || v.Messages[1].Content != "Once upon a " || v.Streaming != "" {
			t.Fatalf("messages %+v, streaming %q", v.Messages, v.Streaming)
		}
		if err := e.m.Cancel(e.ctx, e.conv, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("a second stop: %v, want stale", err)
		}
		if n := len(prov.requests()); n != 1 {
			t.Fatalf("%d model calls after the stop, want 1", n)
		}
		e.send("go on")
		e.waitStatus(store.StatusIdle)
		reqs := prov.requests()
		last := reqs[len(reqs)-1].Messages
		if len(last) != 3 || last[1].Role != llm.RoleAssistant || last[1].Content != "Once upon a " || last[2].Content != "go on" {
			t.Fatalf("the next request does not carry what was said: %+v", last)
		}
	})
}

func TestStopCancelsRunningCallsThroughTheirContext(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		se := &sideEffectTool{started: make(chan string, 4), release: make(chan struct{})}
		prov := newScripted(callTools(tc{"n1", "notify", `{"to":"bob"}`}), say("Stopped, as you asked."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{se.tool(t, st)} }, nil)
		e.send("notify bob")
		<-se.started
		if err := e.m.Cancel(e.ctx, e.conv, e.owner); err != nil {
			t.Fatalf("stop: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if c := e.call("n1"); c.Status != store.CallCancelled {
			t.Fatalf("call %+v, want cancelled", c)
		}
		row, err := e.st.GetToolCall(e.ctx, e.conv, "n1")
		if err != nil || row.Status != store.CallCancelled {
			t.Fatalf("the index row %+v, %v", row, err)
		}
		if n := len(prov.requests()); n != 1 {
			t.Fatalf("the stop started a model call: %d calls", n)
		}
		e.send("ok")
		e.waitStatus(store.StatusIdle)
		reqs := prov.requests()
		if kind, msg := lastToolError(t, reqs[len(reqs)-1], "n1"); kind != fault.KindCancelled || !strings.Contains(msg, "stopped") {
			t.Fatalf("the model read %s: %s", kind, msg)
		}
		// The late report of the cancelled run changes nothing.
		if c := e.call("n1"); c.Status != store.CallCancelled {
			t.Fatalf("call after its run reported: %+v", c)
		}
	})
}

func TestStopWhileAwaitingClosesTheApprovalDurably(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Fine."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		if err := e.m.Cancel(e.ctx, e.conv, e.owner); err != nil {
			t.Fatalf("stop: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("approving a stopped call: %v, want stale", err)
		}
		audit, err := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if err != nil || len(audit) != 1 || audit[0].Action != "cancel" {
			t.Fatalf("audit %+v, %v", audit, err)
		}
		if due, err := e.st.ClaimDueExpiries(e.ctx, t0.Add(24*time.Hour), time.Minute, 10); err != nil || len(due) != 0 {
			t.Fatalf("the expiry of the stopped approval is still scheduled: %+v, %v", due, err)
		}
		// The log is the truth: a revived conversation is idle with the call cancelled.
		e.crash()
		e.startManager()
		if v := e.view(); v.Status != store.StatusIdle || e.call("c1").Status != store.CallCancelled || len(v.Pending()) != 0 {
			t.Fatalf("after revival: %+v", v)
		}
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 0 {
			t.Fatalf("the stopped email was sent: %+v", out)
		}
	})
}

func TestAMessageWhileAwaitingMovesOn(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}, tc{"c1", "send_email", emailArgs}), say("Paris it is."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("ask me and email bob")
		e.waitStatus(store.StatusAwaiting)
		got, err := e.m.Post(e.ctx, e.conv, e.owner, "never mind, Paris")
		if err != nil || !got.MovedOn || got.Queued {
			t.Fatalf("post while awaiting: %+v, %v", got, err)
		}
		e.waitStatus(store.StatusIdle)
		for _, id := range []string{"q1", "c1"} {
			if c := e.call(id); c.Status != store.CallCancelled || c.Decision != "moved_on" {
				t.Fatalf("call %s: %+v", id, c)
			}
		}
		reqs := prov.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d model calls, want 2", len(reqs))
		}
		if kind, msg := lastToolError(t, reqs[1], "q1"); kind != fault.KindCancelled || !strings.Contains(msg, "moved on") {
			t.Fatalf("the model read %s: %s", kind, msg)
		}
		msgs := reqs[1].Messages
		if m := msgs[len(msgs)-1]; m.Role != llm.RoleUser || m.Content != "never mind, Paris" {
			t.Fatalf("the new message is not the last of the request: %+v", msgs)
		}
		if v := e.view(); v.Messages[len(v.Messages)-1].Content != "Paris it is." {
			t.Fatalf("messages %+v", v.Messages)
		}
	})
}

func TestAMessageWhileGeneratingIsQueuedBoundedAndDurable(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		streamed := make(chan struct{})
		prov := newScripted(hang("Thinking", streamed), say("First answered."), say("Both answered."))
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.MaxQueuedMessages = 2 })
		e.send("first")
		<-streamed
		for _, text := range []string{"second", "third"} {
			got, err := e.m.Post(e.ctx, e.conv, e.owner, text)
			if err != nil || !got.Queued {
				t.Fatalf("post %q while generating: %+v, %v", text, got, err)
			}
		}
		if _, err := e.m.Post(e.ctx, e.conv, e.owner, "fourth"); kindOf(err) != fault.KindRateLimited {
			t.Fatalf("past the queue's bound: %v, want rate_limited", err)
		}
		if v := e.view(); len(v.Queued) != 2 || v.Queued[0].Content != "second" || v.Status != store.StatusGenerating {
			t.Fatalf("view while queued: status %s, queued %+v", v.Status, v.Queued)
		}
		// Acknowledged means durable: a kill now loses neither message, and the revived
		// conversation starts their turn once the interrupted one is done.
		e.crash()
		e.startManager()
		e.waitStatus(store.StatusIdle)
		reqs := prov.requests()
		last := reqs[len(reqs)-1].Messages
		var users []string
		for _, m := range last {
			if m.Role == llm.RoleUser {
				users = append(users, m.Content)
			}
		}
		if strings.Join(users, "|") != "first|second|third" {
			t.Fatalf("the model saw the user messages %q", users)
		}
		v := e.view()
		if len(v.Queued) != 0 || v.Messages[len(v.Messages)-1].Content != "Both answered." {
			t.Fatalf("after the queue ran: %+v", v)
		}
	})
}

func TestStopHandsOverToTheQueue(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		streamed := make(chan struct{})
		prov := newScripted(hang("Long answer", streamed), say("Short answer."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("long question")
		<-streamed
		if got, err := e.m.Post(e.ctx, e.conv, e.owner, "actually, short please"); err != nil || !got.Queued {
			t.Fatalf("queue: %+v, %v", got, err)
		}
		if err := e.m.Cancel(e.ctx, e.conv, e.owner); err != nil {
			t.Fatalf("stop: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		v := e.view()
		if got := v.Messages[len(v.Messages)-1]; got.Content != "Short answer." {
			t.Fatalf("messages %+v", v.Messages)
		}
		if n := len(prov.requests()); n != 2 {
			t.Fatalf("%d model calls, want 2 (the stopped one, the queued message's)", n)
		}
	})
}
