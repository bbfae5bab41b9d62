package agent

import (
	"context"
	"encoding/json"
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

func TestMixedTurnWaitsForEveryCallAndSendsResultsInCallOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(
			callTools(tc{"a", "lookup", `{"n":1}`}, tc{"q", "ask_user", askArgs}, tc{"b", "lookup", `{"n":2}`}),
			say("All done."),
		)
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool {
			return []*tools.Tool{lookupTool(t, runs), tools.AskUser()}
		}, nil)
		e.send("go")
		// Both server calls finish while the question waits.
		done := map[string]bool{}
		for len(done) < 2 {
			ev := e.waitCall("", store.CallResolved)
			done[ev.ToolCallID] = true
		}
		if !done["a"] || !done["b"] {
			t.Fatalf("resolved %v", done)
		}
		e.waitStatus(store.StatusAwaiting)
		if n := len(prov.requests()); n != 1 {
			t.Fatalf("%d LLM calls while a call of the turn is pending, want 1", n)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q", Resolution{Action: "accept", Content: json.RawMessage(`{"city":"Lyon"}`)}, e.owner); err != nil {
			t.Fatalf("answer: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		reqs := prov.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d LLM calls, want 2", len(reqs))
		}
		tm := toolMessages(reqs[1])
		var ids []string
		for _, m := range tm {
			ids = append(ids, m.ToolCallID)
		}
		if strings.Join(ids, ",") != "a,q,b" {
			t.Fatalf("results in order %v, want a,q,b", ids)
		}
		if !strings.Contains(tm[0].Content, `"n":1`) || !strings.Contains(tm[2].Content, `"n":2`) || !strings.Contains(tm[1].Content, "Lyon") {
			t.Fatalf("results %+v", tm)
		}
		// The assistant message carries its calls with the same ids, in order.
		var asst llm.Message
		for _, m := range reqs[1].Messages {
			if m.Role == llm.RoleAssistant {
				asst = m
			}
		}
		if len(asst.ToolCalls) != 3 || asst.ToolCalls[0].ID != "a" || asst.ToolCalls[1].ID != "q" || asst.ToolCalls[2].ID != "b" {
			t.Fatalf("assistant calls %+v", asst.ToolCalls)
		}
	})
}

func TestInvalidArgsUnknownToolAndDuplicateIDsReachTheModel(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(
			callTools(tc{"x", "lookup", `{"n":"one"}`}, tc{"x", "nope", `{}`}, tc{"", "lookup", `not json`}),
			say("I will fix that."),
		)
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{lookupTool(t, runs)} }, nil)
		e.send("go")
		e.waitStatus(store.StatusIdle)
		if len(runs.list()) != 0 {
			t.Fatal("a call with invalid arguments ran")
		}
		tm := toolMessages(prov.requests()[1])
		if len(tm) != 3 {
			t.Fatalf("tool messages %+v", tm)
		}
		kinds := []string{errKind(t, envelope(t, tm[0].Content)), errKind(t, envelope(t, tm[1].Content)), errKind(t, envelope(t, tm[2].Content))}
		if kinds[0] != "invalid_args" || kinds[1] != "unknown_tool" || kinds[2] != "invalid_args" {
			t.Fatalf("kinds %v", kinds)
		}
		if tm[0].ToolCallID != "x" || tm[1].ToolCallID == "x" || tm[1].ToolCallID == "" || tm[2].ToolCallID == "" {
			t.Fatalf("ids %q %q %q: a repeated or missing id must get a fresh one", tm[0].ToolCallID, tm[1].ToolCallID, tm[2].ToolCallID)
		}
	})
}

func TestProviderCallsAreRecordedNotDispatched(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
			return llm.Response{Text: "Paris is sunny.", ToolCalls: []llm.ToolCall{{ID: "ws1", Name: "web_search", Args: json.RawMessage(`{"query":"paris weather"}`),
				Provider: true, Result: json.RawMessage(`{"type":"web_search_tool_result","content":[]}`)}}}, nil
		}, say("again"))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{tools.WebSearch()} }, nil)
		e.send("weather?")
		e.waitStatus(store.StatusIdle)
		c := e.call("ws1")
		if c.Executor != tools.Provider || c.Status != store.CallResolved || !strings.Contains(string(c.Result), "web_search_tool_result") {
			t.Fatalf("call %+v", c)
		}
		if n := len(prov.requests()); n != 1 {
			t.Fatalf("%d LLM calls: a provider call must not start another", n)
		}
		e.send("more")
		e.waitStatus(store.StatusIdle)
		req := prov.requests()[1]
		if len(toolMessages(req)) != 0 || !req.Messages[1].ToolCalls[0].Provider {
			t.Fatalf("replayed %+v", req.Messages)
		}
	})
}

func TestSuspensionTimesOutThroughTheDurableExpiry(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}), say("You did not answer."))
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.DefaultTimeout = 10 * time.Minute })
		e.send("ask me")
		e.waitCall("q1", store.CallAwaiting)
		e.clk.Advance(9 * time.Minute)
		if got := e.call("q1").Status; got != store.CallAwaiting {
			t.Fatalf("expired early: %s", got)
		}
		e.clk.Advance(time.Minute + time.Second)
		e.waitCall("q1", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		env := envelope(t, toolMessages(prov.requests()[1])[0].Content)
		if errKind(t, env) != string(fault.KindTimeout) || !strings.Contains(env["error"].(map[string]any)["message"].(string), "did not respond") {
			t.Fatalf("the model got %v", env)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "decline"}, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("a late answer: %v, want stale", err)
		}
		audit, _ := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if len(audit) != 1 || audit[0].Action != "expire" || audit[0].ActorID != System.UserID {
			t.Fatalf("audit %+v", audit)
		}
	})
}

func TestExpiryIsDurableAcrossARestart(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}), say("Too late."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("ask me")
		e.waitCall("q1", store.CallAwaiting)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.m.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		// Time passes while nothing runs.
		e.clk.Advance(11 * time.Minute)
		e.startManager()
		e.waitCall("q1", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		if n := len(prov.requests()); n != 2 {
			t.Fatalf("%d LLM calls, want 2", n)
		}
	})
}

func TestClientCalls(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		t.Run("no socket fails fast after the grace", func(t *testing.T) {
			prov := newScripted(callTools(tc{"g1", "geolocation", `{}`}), say("I cannot see where you are."))
			e := newEnv(t, open, prov, emailTools, func(c *Config) { c.ClientGrace = 5 * time.Second })
			e.send("where am I")
			e.next("client_exec", func(ev Event) bool { return ev.Type == EventClientExec && ev.ToolCallID == "g1" })
			e.clk.Advance(4 * time.Second)
			if got := e.call("g1").Status; got != store.CallAwaiting {
				t.Fatalf("failed before the grace ran out: %s", got)
			}
			e.clk.Advance(time.Second)
			e.waitCall("g1", store.CallErrored)
			e.waitStatus(store.StatusIdle)
			if k := errKind(t, envelope(t, toolMessages(prov.requests()[1])[0].Content)); k != string(fault.KindNoClient) {
				t.Fatalf("kind %s, want no_client", k)
			}
		})
		t.Run("a socket runs it and the result is validated", func(t *testing.T) {
			prov := newScripted(callTools(tc{"g1", "geolocation", `{"high_accuracy":true}`}), say("You are in Lyon."))
			e := newEnv(t, open, prov, emailTools, nil)
			detach := e.m.AttachClient(e.conv)
			defer detach()
			e.send("where am I")
			ev := e.next("client_exec", func(ev Event) bool { return ev.Type == EventClientExec && ev.ToolCallID == "g1" })
			if ev.Call == nil || ev.Call.Name != "geolocation" || !strings.Contains(string(ev.Call.Args), "high_accuracy") {
				t.Fatalf("client_exec call %+v", ev.Call)
			}
			e.clk.Advance(time.Minute) // far past the grace: a socket is attached
			if p := e.view().Pending()["g1"]; p.PendingKind != tools.PendingClientExec {
				t.Fatalf("pending %+v", e.view().Pending())
			}
			if _, err := e.m.Resolve(e.ctx, e.conv, "g1", Resolution{Result: json.RawMessage(`{"latitude":45.7,"longitude":4.8,"accuracy":10}`)}, e.rev); kindOf(err) != fault.KindNotFound {
				// A reviewer with no call of theirs in the conversation learns nothing of it.
				t.Fatalf("a reviewer's browser result: %v, want not_found", err)
			}
			if _, err := e.m.Resolve(e.ctx, e.conv, "g1", Resolution{Result: json.RawMessage(`{"latitude":145,"longitude":4.8}`)}, e.owner); kindOf(err) != fault.KindInvalidArgs {
				t.Fatalf("an invalid result: %v", err)
			}
			if _, err := e.m.Resolve(e.ctx, e.conv, "g1", Resolution{Result: json.RawMessage(`{"latitude":45.7,"longitude":4.8,"accuracy":10}`)}, e.owner); err != nil {
				t.Fatalf("result: %v", err)
			}
			e.waitStatus(store.StatusIdle)
			if c := e.call("g1"); c.Status != store.CallResolved || !strings.Contains(string(c.Result), "45.7") {
				t.Fatalf("call %+v", c)
			}
		})
		t.Run("a client error reaches the model", func(t *testing.T) {
			prov := newScripted(callTools(tc{"g1", "geolocation", `{}`}), say("Permission was refused."))
			e := newEnv(t, open, prov, emailTools, nil)
			detach := e.m.AttachClient(e.conv)
			defer detach()
			e.send("where am I")
			e.waitCall("g1", store.CallAwaiting)
			if _, err := e.m.Resolve(e.ctx, e.conv, "g1", Resolution{Error: &ClientError{Message: "User denied Geolocation"}}, e.owner); err != nil {
				t.Fatalf("client error: %v", err)
			}
			e.waitStatus(store.StatusIdle)
			msg := toolMessages(prov.requests()[1])[0].Content
			if errKind(t, envelope(t, msg)) != string(fault.KindClientError) || !strings.Contains(msg, "User denied") {
				t.Fatalf("the model got %s", msg)
			}
		})
	})
}

// gatedClient is a client tool behind an approval: it suspends twice.
func gatedClient(t testing.TB) *tools.Tool {
	return mustTool(t, tools.Spec{Name: "pick_file", Description: "pick a file", Executor: tools.Client, Approval: tools.RequiresApproval,
		Parameters: json.RawMessage(`{"type":"object","properties":{"accept":{"type":"string"}}}`)})
}

func TestGatedClientCallSuspendsTwice(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"p1", "pick_file", `{"accept":".txt"}`}), say("Got it."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{gatedClient(t)} }, nil)
		detach := e.m.AttachClient(e.conv)
		defer detach()
		e.send("pick")
		e.waitCall("p1", store.CallAwaiting)
		if k := e.view().Pending()["p1"].PendingKind; k != tools.PendingApproval {
			t.Fatalf("first suspension %s", k)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Result: json.RawMessage(`{}`)}, e.owner); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("a client result while awaiting approval: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.next("client_exec", func(ev Event) bool { return ev.Type == EventClientExec && ev.ToolCallID == "p1" })
		if p := e.view().Pending()["p1"]; p.PendingKind != tools.PendingClientExec || p.ExpiresAt == nil {
			t.Fatalf("second suspension %+v", p)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Result: json.RawMessage(`{"name":"a.txt"}`)}, e.owner); err != nil {
			t.Fatalf("result: %v", err)
		}
		e.waitStatus(store.StatusIdle)

		// The second suspension has a durable timer of its own.
		prov.add(callTools(tc{"p2", "pick_file", `{}`}), say("Nobody picked."))
		e.send("pick again")
		e.waitCall("p2", store.CallAwaiting)
		if _, err := e.m.Resolve(e.ctx, e.conv, "p2", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.next("client_exec", func(ev Event) bool { return ev.Type == EventClientExec && ev.ToolCallID == "p2" })
		e.clk.Advance(e.m.cfg.DefaultTimeout)
		e.waitCall("p2", store.CallExpired)
		e.waitStatus(store.StatusIdle)
	})
}

func TestIterationCapEndsARunawayTurn(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		var steps []step
		for i := range 20 {
			steps = append(steps, callTools(tc{"", "lookup", `{"n":` + string(rune('0'+i%10)) + `}`}))
		}
		prov := newScripted(steps...)
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{lookupTool(t, nil)} },
			func(c *Config) { c.MaxIterations = 4 })
		e.send("loop")
		ev := e.next("turn error", func(ev Event) bool { return ev.Type == EventError })
		if !strings.Contains(string(ev.Data), "iteration_cap") {
			t.Fatalf("turn error %+v", ev)
		}
		e.waitStatus(store.StatusIdle)
		if n := len(prov.requests()); n != 4 {
			t.Fatalf("%d LLM calls, want the cap of 4", n)
		}
		v := e.view()
		if v.LastError == "" || v.Messages[len(v.Messages)-1].Role != "error" {
			t.Fatalf("the user does not see the cap: %+v", v.Messages)
		}
		// The conversation is usable again.
		prov.mu.Lock()
		prov.steps = append(prov.steps[:4], say("fine"))
		prov.mu.Unlock()
		e.send("stop it")
		e.waitStatus(store.StatusIdle)
		if v := e.view(); v.LastError != "" || v.Messages[len(v.Messages)-1].Content != "fine" {
			t.Fatalf("after the cap: %+v", v)
		}
	})
}

func TestEmptyMessageDuringATurnIsRefused(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("ask me")
		e.waitCall("q1", store.CallAwaiting)
		// A message while a turn runs is taken (cancel_test.go); an empty one never is.
		if err := e.m.Send(e.ctx, e.conv, e.owner, "  "); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("empty message: %v", err)
		}
	})
}

// flakyTool fails with a retryable error until it has failed `failures` times.
func flakyTool(t testing.TB, failures int, retryAfter time.Duration, runs *counter) *tools.Tool {
	var mu sync.Mutex
	n := 0
	return mustTool(t, tools.Spec{Name: "flaky", Description: "fails first", Executor: tools.Server, MaxAttempts: 3,
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			runs.add(call.ToolCallID)
			mu.Lock()
			defer mu.Unlock()
			n++
			if n <= failures {
				e := fault.Errorf(fault.KindHTTPError, "upstream 503 (attempt %d)", call.Attempt)
				e.Retryable, e.RetryAfter = true, retryAfter
				return nil, e
			}
			return map[string]any{"attempt": call.Attempt}, nil
		}})
}

func TestToolRetryWithDurableBackoff(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"f1", "flaky", `{}`}), say("Worked on the third try."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{flakyTool(t, 2, 0, runs)} },
			func(c *Config) { c.RetryBase = time.Second; c.RetryMax = time.Minute })
		e.send("go")
		ev := e.next("first failure", func(ev Event) bool {
			return ev.Type == EventToolCall && ev.ToolCallID == "f1" && ev.Call != nil && ev.Call.NextAttempt != nil
		})
		_ = ev
		steps, err := e.st.Steps(e.ctx, e.conv)
		if err != nil || len(steps) != 1 || steps[0].Key != "tool:f1" || steps[0].Attempts != 1 || steps[0].NextAttemptAt == nil {
			t.Fatalf("steps %+v, %v", steps, err)
		}
		wait := steps[0].NextAttemptAt.Sub(e.clk.Now())
		if wait < 500*time.Millisecond || wait > time.Second {
			t.Fatalf("first backoff %s, want within [0.5s, 1s]", wait)
		}
		if c := e.call("f1"); c.NextAttempt == nil || c.Attempts != 1 {
			t.Fatalf("view %+v", c)
		}
		if n := len(runs.list()); n != 1 {
			t.Fatalf("retried before the backoff: %d runs", n)
		}
		e.clk.Advance(time.Second)
		e.next("second failure", func(ev Event) bool {
			return ev.Type == EventToolCall && ev.ToolCallID == "f1" && ev.Call != nil && ev.Call.Attempts == 2 && ev.Call.NextAttempt != nil
		})
		e.clk.Advance(2 * time.Second)
		e.waitCall("f1", store.CallResolved)
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 3 || got[0] != "f1" || got[2] != "f1" {
			t.Fatalf("runs %v", got)
		}
		if n := len(prov.requests()); n != 2 {
			t.Fatalf("%d LLM calls: a tool retry must not re-run the LLM call", n)
		}
		if steps, _ := e.st.Steps(e.ctx, e.conv); len(steps) != 0 {
			t.Fatalf("steps left behind: %+v", steps)
		}
		if !strings.Contains(toolMessages(prov.requests()[1])[0].Content, `"attempt":3`) {
			t.Fatalf("result %s", toolMessages(prov.requests()[1])[0].Content)
		}
	})
}

func TestToolRetriesRunOutIntoAToolError(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"f1", "flaky", `{}`}), say("It keeps failing."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{flakyTool(t, 10, 7*time.Second, runs)} },
			func(c *Config) { c.RetryBase = time.Second })
		e.send("go")
		for attempt := 1; attempt <= 2; attempt++ {
			e.next("failure", func(ev Event) bool {
				return ev.Type == EventToolCall && ev.ToolCallID == "f1" && ev.Call != nil && ev.Call.NextAttempt != nil
			})
			steps, _ := e.st.Steps(e.ctx, e.conv)
			if len(steps) != 1 || steps[0].NextAttemptAt.Sub(e.clk.Now()) != 7*time.Second {
				t.Fatalf("Retry-After was not honoured: %+v", steps)
			}
			e.clk.Advance(7 * time.Second)
		}
		e.waitCall("f1", store.CallErrored)
		e.waitStatus(store.StatusIdle)
		if n := len(runs.list()); n != 3 {
			t.Fatalf("%d runs, want MaxAttempts 3", n)
		}
		if k := errKind(t, envelope(t, toolMessages(prov.requests()[1])[0].Content)); k != string(fault.KindHTTPError) {
			t.Fatalf("kind %s", k)
		}
	})
}

func TestModelRetryOnTransientErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		rateLimited := &llm.Error{Status: 429, Kind: string(fault.KindRateLimited), Message: "slow down", Retryable: true, RetryAfter: 3 * time.Second}
		prov := newScripted(
			func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
				// A stream cut mid-way: the partial text must be discarded.
				_ = emit(llm.Event{Type: llm.EventTextDelta, Text: "Hel"})
				return llm.Response{}, &llm.Error{Kind: string(fault.KindNetwork), Message: "connection reset", Retryable: true}
			},
			failWith(rateLimited),
			say("Hello!"),
		)
		e := newEnv(t, open, prov, emailTools, func(c *Config) { c.RetryBase = time.Second })
		e.send("hi")
		waitSteps := func(attempts int) store.Step {
			t.Helper()
			e.next("llm retry", func(ev Event) bool { return ev.Type == EventStatus && strings.Contains(string(ev.Data), "retry_at") })
			steps, err := e.st.Steps(e.ctx, e.conv)
			if err != nil || len(steps) != 1 || steps[0].Attempts != attempts || steps[0].NextAttemptAt == nil {
				t.Fatalf("steps %+v, %v: want one with %d attempts", steps, err, attempts)
			}
			if v := e.view(); v.Streaming != "" {
				t.Fatalf("partial text kept: %q", v.Streaming)
			}
			return steps[0]
		}
		s1 := waitSteps(1)
		if s1.Key != "llm:1:1" {
			t.Fatalf("step %+v", s1)
		}
		e.clk.Advance(time.Second)
		s2 := waitSteps(2)
		if d := s2.NextAttemptAt.Sub(e.clk.Now()); d != 3*time.Second {
			t.Fatalf("Retry-After 3s not honoured: %s", d)
		}
		e.clk.Advance(3 * time.Second)
		e.waitStatus(store.StatusIdle)
		v := e.view()
		if got := v.Messages[len(v.Messages)-1]; got.Role != "assistant" || got.Content != "Hello!" {
			t.Fatalf("messages %+v", v.Messages)
		}
		if steps, _ := e.st.Steps(e.ctx, e.conv); len(steps) != 0 {
			t.Fatalf("steps left %+v", steps)
		}
	})
}

func TestModelErrorThatIsNotRetryableEndsTheTurn(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(failWith(&llm.Error{Status: 401, Kind: string(fault.KindNotAuthenticated), Message: "bad key"}))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("hi")
		ev := e.next("turn error", func(ev Event) bool { return ev.Type == EventError })
		if !strings.Contains(ev.Text, "bad key") {
			t.Fatalf("turn error %+v", ev)
		}
		e.waitStatus(store.StatusIdle)
		if n := len(prov.requests()); n != 1 {
			t.Fatalf("%d calls", n)
		}
	})
}

func TestCompactionReplacesOldResultsInTheContextOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		byCount := mustTool(t, tools.Spec{Name: "recent", Description: "keeps one", Executor: tools.Server, Retention: tools.Retention{MaxCount: 1},
			Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
				return map[string]any{"id": call.ToolCallID}, nil
			}})
		byAge := mustTool(t, tools.Spec{Name: "young", Description: "one turn", Executor: tools.Server, Retention: tools.Retention{MaxAgeTurns: 1},
			Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
				return map[string]any{"id": call.ToolCallID}, nil
			}})
		forever := mustTool(t, tools.Spec{Name: "keep", Description: "never evicts", Executor: tools.Server, Retention: tools.Retention{MaxCount: 1, MaxAgeTurns: 1, NeverEvict: true},
			Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
				return map[string]any{"id": call.ToolCallID}, nil
			}})
		prov := newScripted(
			callTools(tc{"r1", "recent", `{}`}, tc{"y1", "young", `{}`}, tc{"k1", "keep", `{}`}),
			say("one"),
			callTools(tc{"r2", "recent", `{}`}, tc{"k2", "keep", `{}`}),
			say("two"),
		)
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{byCount, byAge, forever} }, nil)
		e.send("first")
		e.waitStatus(store.StatusIdle)
		e.send("second")
		e.waitStatus(store.StatusIdle)
		reqs := prov.requests()
		// Within the first turn nothing is evicted.
		for _, m := range toolMessages(reqs[1]) {
			if strings.Contains(m.Content, "compacted") {
				t.Fatalf("evicted in its own turn: %+v", m)
			}
		}
		got := map[string]bool{}
		for _, m := range toolMessages(reqs[3]) {
			got[m.ToolCallID] = strings.Contains(m.Content, `"compacted":true`)
		}
		want := map[string]bool{"r1": true, "y1": true, "k1": false, "r2": false, "k2": false}
		for id, compacted := range want {
			if c, ok := got[id]; !ok || c != compacted {
				t.Fatalf("call %s compacted=%v (present %v), want %v; all %v", id, c, ok, compacted, got)
			}
		}
		// The log keeps the whole result.
		if c := e.call("r1"); !strings.Contains(string(c.Result), `"id":"r1"`) {
			t.Fatalf("the log lost the result: %s", c.Result)
		}
	})
}
