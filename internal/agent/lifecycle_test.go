package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// sideEffectTool writes to the outbox keyed on the tool_call_id, then blocks until released or
// cancelled: a server call that crashes between its side effect and its result.
type sideEffectTool struct {
	started chan string   // each run's tool_call_id
	release chan struct{} // closed to let runs finish
}

func (s *sideEffectTool) tool(t testing.TB, st store.Store) *tools.Tool {
	return mustTool(t, tools.Spec{Name: "notify", Description: "send a notice", Executor: tools.Server,
		Parameters: json.RawMessage(`{"type":"object","properties":{"to":{"type":"string"}}}`),
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			m, err := st.AddOutbox(ctx, store.OutboxMessage{ConversationID: call.ConversationID, ToolCallID: call.ToolCallID, To: fmt.Sprint(args["to"]), Subject: "notice"})
			if err != nil {
				return nil, err
			}
			s.started <- call.ToolCallID
			select {
			case <-s.release:
				return map[string]any{"outbox_id": m.ID}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}})
}

func TestKillAndRevive(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		t.Run("awaiting calls stay awaiting and can be resolved", func(t *testing.T) {
			prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}, tc{"q1", "ask_user", askArgs}), say("Done."))
			e := newEnv(t, open, prov, emailTools, nil)
			e.send("email bob and ask me")
			e.waitStatus(store.StatusAwaiting)
			before := e.view()
			e.crash()

			e.startManager()
			after := e.view()
			if after.Status != store.StatusAwaiting || len(after.Pending()) != 2 {
				t.Fatalf("after revival: status %s, pending %+v", after.Status, after.Pending())
			}
			for id, p := range before.Pending() {
				q := after.Pending()[id]
				if q.PendingKind != p.PendingKind || q.ExpiresAt == nil || !q.ExpiresAt.Equal(*p.ExpiresAt) {
					t.Fatalf("pending %s changed: %+v → %+v", id, p, q)
				}
			}
			if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); err != nil {
				t.Fatalf("approve after revival: %v", err)
			}
			if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: json.RawMessage(`{"city":"Lyon"}`)}, e.owner); err != nil {
				t.Fatalf("answer after revival: %v", err)
			}
			e.waitStatus(store.StatusIdle)
			if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 1 {
				t.Fatalf("outbox %+v", out)
			}
			if n := len(prov.requests()); n != 2 {
				t.Fatalf("%d LLM calls: the completed one was repeated", n)
			}
		})
		t.Run("a started server call is re-dispatched with the same id and its effect happens once", func(t *testing.T) {
			se := &sideEffectTool{started: make(chan string, 4), release: make(chan struct{})}
			prov := newScripted(callTools(tc{"n1", "notify", `{"to":"bob"}`}), say("Notified."))
			e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{se.tool(t, st)} }, nil)
			e.send("notify bob")
			if id := <-se.started; id != "n1" {
				t.Fatalf("first run %s", id)
			}
			e.crash()

			close(se.release)
			e.startManager()
			if id := <-se.started; id != "n1" {
				t.Fatalf("re-dispatched as %s, want the same tool_call_id", id)
			}
			e.waitStatus(store.StatusIdle)
			out, _ := e.st.ListOutbox(e.ctx, e.conv)
			if len(out) != 1 || out[0].ToolCallID != "n1" {
				t.Fatalf("outbox %+v: the side effect did not happen exactly once", out)
			}
			reqs := prov.requests()
			if len(reqs) != 2 || len(toolMessages(reqs[1])) != 1 || toolMessages(reqs[1])[0].ToolCallID != "n1" {
				t.Fatalf("LLM calls %d", len(reqs))
			}
		})
		t.Run("a half-streamed answer is discarded and that step retried", func(t *testing.T) {
			cut := make(chan struct{})
			prov := newScripted(func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
				_ = emit(llm.Event{Type: llm.EventTextDelta, Text: "Half an ans"})
				close(cut)
				<-ctx.Done()
				return llm.Response{}, ctx.Err()
			}, say("A whole answer."))
			e := newEnv(t, open, prov, emailTools, nil)
			e.send("hi")
			<-cut
			e.crash()
			e.startManager() // ListActive finds it generating and retries the step
			e.waitStatus(store.StatusIdle)
			v := e.view()
			if len(v.Messages) != 2 || v.Messages[1].Content != "A whole answer." {
				t.Fatalf("messages %+v", v.Messages)
			}
		})
	})
}

func TestCloseLetsRunningToolsFinishWithinItsContext(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		se := &sideEffectTool{started: make(chan string, 4), release: make(chan struct{})}
		prov := newScripted(callTools(tc{"n1", "notify", `{"to":"bob"}`}), say("Notified."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{se.tool(t, st)} }, nil)
		e.send("notify bob")
		<-se.started
		closed := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			closed <- e.m.Close(ctx)
		}()
		// Close waits for the running call; new requests are refused meanwhile.
		for {
			_, err := e.m.Resolve(e.ctx, e.conv, "nope", Resolution{Decision: "approve"}, e.owner)
			if kindOf(err) == fault.KindServiceUnavailable {
				break
			}
			if kindOf(err) != fault.KindNotFound {
				t.Fatalf("resolve during close: %v", err)
			}
		}
		close(se.release)
		if err := <-closed; err != nil {
			t.Fatalf("close: %v", err)
		}
		c, err := e.st.GetToolCall(e.ctx, e.conv, "n1")
		if err != nil || c.Status != store.CallResolved {
			t.Fatalf("the finished call was not recorded: %+v, %v", c, err)
		}
		// The next LLM step runs after revival.
		e.startManager()
		e.waitStatus(store.StatusIdle)
		if v := e.view(); v.Messages[len(v.Messages)-1].Content != "Notified." {
			t.Fatalf("messages %+v", v.Messages)
		}
	})
}

func TestServerToolTimeoutOnTheClock(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		started := make(chan struct{}, 1)
		slow := mustTool(t, tools.Spec{Name: "slow", Description: "never ends", Executor: tools.Server, Timeout: 3 * time.Second,
			Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
				started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}})
		prov := newScripted(callTools(tc{"s1", "slow", `{}`}), say("It timed out."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{slow} }, nil)
		e.send("go")
		<-started
		e.clk.Advance(3 * time.Second)
		e.waitCall("s1", store.CallErrored)
		e.waitStatus(store.StatusIdle)
		if k := errKind(t, envelope(t, toolMessages(prov.requests()[1])[0].Content)); k != string(fault.KindTimeout) {
			t.Fatalf("kind %s", k)
		}
	})
}

func TestProgressOfAStreamingTool(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		stream := mustTool(t, tools.Spec{Name: "build", Description: "builds", Executor: tools.Server, Streaming: true,
			Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
				call.Progress("compiling")
				call.Progress("linking")
				return "built", nil
			}})
		prov := newScripted(callTools(tc{"b1", "build", `{}`}), say("Built."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{stream} }, nil)
		e.send("build it")
		var lines []string
		for len(lines) < 2 {
			ev := e.next("progress", func(ev Event) bool { return ev.Type == EventProgress && ev.ToolCallID == "b1" })
			lines = append(lines, ev.Text)
		}
		e.waitStatus(store.StatusIdle)
		if strings.Join(lines, ",") != "compiling,linking" || strings.Join(e.call("b1").Progress, ",") != "compiling,linking" {
			t.Fatalf("progress %v / %v", lines, e.call("b1").Progress)
		}
	})
}

func TestSlowSubscriberIsResyncedAndNeverBlocksTheActor(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(say(strings.Repeat("word ", 50)))
		e := newEnv(t, open, prov, emailTools, nil)
		slow := e.m.events.(*Hub).subscribeSize(e.conv, 3) // never read until the turn is over
		defer slow.Close()
		inbox := e.m.events.(*Hub).subscribeSize("", 3) // a global subscriber lags the same way
		defer inbox.Close()
		e.send("talk")
		e.waitStatus(store.StatusIdle) // the actor finished although nobody read slow
		var got []Event
		for ev := range slow.C {
			got = append(got, ev)
		}
		if len(got) != 4 || got[3].Type != EventResync {
			t.Fatalf("slow subscriber got %d events ending %+v; want its 3 buffered then resync", len(got), got[len(got)-1])
		}
		if got[0].Type != EventMessage || got[0].Seq != 1 {
			t.Fatalf("first event %+v", got[0])
		}
		var last Event
		for ev := range inbox.C {
			last = ev
		}
		if last.Type != EventResync || last.ConversationID != e.conv {
			t.Fatalf("the lagging inbox ended with %+v", last)
		}
		if e.m.events.Dropped() < 2 {
			t.Fatalf("dropped %d", e.m.events.Dropped())
		}
	})
}

func TestEventsCarryTheLogSequence(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		inbox := e.m.events.Subscribe("")
		defer inbox.Close()
		e.send("email bob")
		ev := e.waitCall("c1", store.CallAwaiting)
		// user message 1, assistant 2, tool_call 3
		if ev.Seq != 3 || ev.Call == nil || ev.Call.PendingKind != tools.PendingApproval {
			t.Fatalf("pending event %+v", ev)
		}
		for {
			g := <-inbox.C
			if g.Type == EventToolCall && g.ToolCallID == "c1" {
				if g.ConversationID != e.conv || g.Seq != 3 {
					t.Fatalf("inbox event %+v", g)
				}
				break
			}
		}
		deltas, answer := "", int64(0)
		_, _ = e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner)
		for {
			ev := e.next("text", func(ev Event) bool { return ev.Type == EventTextDelta || ev.Type == EventMessage })
			if ev.Type == EventMessage {
				if ev.Text != "Sent." || deltas != "Sent." || ev.Seq <= answer {
					t.Fatalf("message %+v after deltas %q of answer %d", ev, deltas, answer)
				}
				break
			}
			// A delta is not logged: its sequence names its answer, the last entry before it
			// (the call's result), and its offset places it in the answer's text.
			if answer == 0 {
				answer = ev.Seq
			}
			if ev.Seq != answer || ev.Seq <= 3 || ev.Offset != len(deltas) {
				t.Fatalf("text delta %+v after %q of answer %d", ev, deltas, answer)
			}
			deltas += ev.Text
		}
	})
}

func TestHibernationAndRevival(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(say("one"), callTools(tc{"q1", "ask_user", askArgs}), say("two"))
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.IdleTimeout = time.Minute })
		e.send("hi")
		e.waitStatus(store.StatusIdle)
		if e.m.live(e.conv) == nil {
			t.Fatal("not live after a turn")
		}
		e.clk.Advance(time.Minute)
		waitGone(t, e)
		if e.m.hibernations.Load() != 1 {
			t.Fatalf("hibernations %d", e.m.hibernations.Load())
		}
		// The view of a hibernated conversation comes from the store without reviving it.
		if v := e.view(); len(v.Messages) != 2 || e.m.live(e.conv) != nil {
			t.Fatalf("view %+v, live %v", v.Messages, e.m.live(e.conv) != nil)
		}
		e.send("ask me") // revives
		e.waitCall("q1", store.CallAwaiting)
		// An awaiting conversation hibernates too; its answer revives it.
		e.clk.Advance(time.Minute)
		waitGone(t, e)
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "decline"}, e.owner); err != nil {
			t.Fatalf("resolve a hibernated conversation: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if s := e.m.Stats(); s.ActorStarts != 3 || s.Hibernations != 2 || s.LiveActors != 1 {
			t.Fatalf("stats %+v, want 3 starts, 2 hibernations, 1 live", s)
		}
	})
}

// waitGone waits until the conversation's actor left memory. Hibernation follows the wake-up
// the test caused; the actor closes done when it is gone.
func waitGone(t *testing.T, e *env) {
	t.Helper()
	e.m.mu.Lock()
	a := e.m.actors[e.conv]
	e.m.mu.Unlock()
	if a == nil {
		return
	}
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the actor did not hibernate")
	}
}

func TestConcurrentEnsureStartedStartsOneActor(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		e := newEnv(t, open, newScripted(), emailTools, nil)
		var wg sync.WaitGroup
		actors := make([]*actor, 32)
		for i := range actors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := e.m.ensureStarted(e.conv)
				if err != nil {
					t.Error(err)
				}
				actors[i] = a
			}()
		}
		wg.Wait()
		for _, a := range actors {
			if a != actors[0] {
				t.Fatal("two actors for one conversation")
			}
		}
		if got := e.m.starts.Load(); got != 1 {
			t.Fatalf("%d starts", got)
		}
		// And concurrent requests through the public API reach that one actor.
		errs := make(chan error, 16)
		for range 16 {
			go func() {
				_, err := e.m.View(e.ctx, e.conv, System)
				errs <- err
			}()
		}
		for range 16 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if got := e.m.starts.Load(); got != 1 {
			t.Fatalf("%d starts after views", got)
		}
	})
}

// Two managers on one database (two processes) do not corrupt a conversation: the log's
// optimistic concurrency makes the second writer reload and answer from the log.
func TestTwoManagersOnOneStoreStayConsistent(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."), say("Hello again."))
		e := newEnv(t, open, prov, emailTools, nil)
		first := e.m
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)

		e.startManager() // a second process: its Resolve revives the awaiting conversation on demand
		second := e.m
		if _, err := second.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve on the second manager: %v", err)
		}
		e.waitStatus(store.StatusIdle)

		// The first manager's actor still believes the call is pending; the log says otherwise.
		if _, err := first.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "deny"}, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("a second decision through the first manager: %v, want stale", err)
		}
		if err := first.Send(e.ctx, e.conv, e.owner, "hi again"); err != nil {
			t.Fatalf("send through the first manager after it reloaded: %v", err)
		}
		sub := first.events.Subscribe(e.conv)
		defer sub.Close()
		for {
			v, err := first.View(e.ctx, e.conv, System)
			if err != nil {
				t.Fatal(err)
			}
			if v.Status == store.StatusIdle {
				if last := v.Messages[len(v.Messages)-1]; last.Content != "Hello again." {
					t.Fatalf("messages %+v", v.Messages)
				}
				break
			}
			<-sub.C
		}
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 1 {
			t.Fatalf("outbox %+v", out)
		}
		audit, _ := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if len(audit) != 1 || audit[0].Action != "approve" {
			t.Fatalf("audit %+v", audit)
		}
	})
}
