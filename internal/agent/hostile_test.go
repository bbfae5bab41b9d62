package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// The hostile-model suite: the model and what tools return are untrusted input. Each test pins
// one way a model (or a tool) misbehaving used to break the conversation or another user's.

func hostileTools(st store.Store) []*tools.Tool {
	return tools.Builtins(tools.BuiltinDeps{Outbox: storeOutbox{st}, TestTools: true})
}

// answer is a step that answers with resp as it is.
func answer(resp llm.Response) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		return resp, nil
	}
}

// waitFor polls the conversation's view as the system sees it until ok, or fails after 20 s.
func (e *env) waitFor(conv, what string, ok func(View) bool) View {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := e.m.View(e.ctx, conv, System)
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s: %v %+v", what, err, v)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// storedText asserts that everything the conversation logged is storable text.
func storedText(t *testing.T, st store.Store, conv string) []store.Entry {
	t.Helper()
	entries, err := st.Log(context.Background(), conv, 0)
	if err != nil {
		t.Fatalf("read the log: %v", err)
	}
	for _, e := range entries {
		var data any
		if len(e.Data) > 0 {
			if err := json.Unmarshal(e.Data, &data); err != nil {
				t.Fatalf("entry %d: %v", e.Seq, err)
			}
		}
		for _, s := range append([]string{e.ToolCallID, e.Actor, string(e.Data)}, stringsIn(data)...) {
			if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
				t.Fatalf("entry %d holds unstorable text: %q", e.Seq, s)
			}
		}
	}
	return entries
}

// TestHostileContentIsStored: NUL bytes and invalid UTF-8 in the answer's text, tool names,
// ids and arguments, ids that would not route (/ ? #), ids too long and ids repeated: the
// answer is recorded cleaned, every call gets a result, and the turn ends after exactly two
// model calls (it used to fail the append and loop).
func TestHostileContentIsStored(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		bad := llm.Response{Text: "hi\x00 there \xff", StopReason: "tool_calls", ToolCalls: []llm.ToolCall{
			{ID: "a\x00b", Name: "ech\x00o", Args: json.RawMessage(`{"text":"x"}`)},
			{ID: "c/../d?e#f", Name: "echo", Args: json.RawMessage("{\"text\":\"nul \\u0000 and \xff here\"}")},
			{ID: strings.Repeat("x", 300), Name: "get_current_time", Args: json.RawMessage(`{}`)},
			{ID: "call_0", Name: "echo", Args: json.RawMessage(`{"text":"first"}`)},
			{ID: "call_0", Name: "echo", Args: json.RawMessage(`{"text":"again"}`)},
			{ID: "", Name: strings.Repeat("n", 5000), Args: json.RawMessage(`{}`)},
		}}
		prov := newScripted(answer(bad), say("Done."))
		e := newEnv(t, open, prov, hostileTools, nil)
		e.send("go")
		e.waitStatus(store.StatusIdle)
		v := e.view()
		if len(v.Calls) != 6 {
			t.Fatalf("calls %d, want 6", len(v.Calls))
		}
		ids := map[string]bool{}
		for _, c := range v.Calls {
			if !usableID(c.ID) || ids[c.ID] {
				t.Errorf("call id %q: unusable or repeated", c.ID)
			}
			ids[c.ID] = true
			if c.Result == nil || !utf8.ValidString(c.Name) || strings.ContainsRune(c.Name, 0) || len(c.Name) > maxNameBytes {
				t.Errorf("call %q (%q): result %s", c.ID, c.Name, c.Result)
			}
		}
		if !ids["call_0"] {
			t.Error("a usable id was replaced")
		}
		if kind := envelopeKind(v.Calls[0].Result); kind != string(fault.KindUnknownTool) {
			t.Errorf("a name with NUL: %s, want unknown_tool", v.Calls[0].Result)
		}
		if v.Calls[1].Status != store.CallResolved {
			t.Errorf("echo with a NUL in its arguments: %s %s", v.Calls[1].Status, v.Calls[1].Result)
		}
		if prov.calls() != 2 {
			t.Errorf("model calls %d, want 2", prov.calls())
		}
		storedText(t, e.st, e.conv)
		// The next request carries each result under the id its call has, so the provider sees
		// a consistent history.
		req := prov.requests()[1]
		results := map[string]bool{}
		for _, m := range req.Messages {
			if m.Role == llm.RoleTool {
				results[m.ToolCallID] = true
			}
		}
		for id := range ids {
			if !results[id] {
				t.Errorf("no result for %q in the next request", id)
			}
		}
	})
}

func envelopeKind(raw json.RawMessage) string {
	var env struct {
		Error struct {
			Kind string `json:"kind"`
		} `json:"error"`
	}
	_ = json.Unmarshal(raw, &env)
	return env.Error.Kind
}

// TestTooManyCallsInOneAnswer: 200 calls in one answer: the first MaxCallsPerAnswer run, every
// other gets a too_many_calls result, and the model reads a result for each.
func TestTooManyCallsInOneAnswer(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		var calls []tc
		for i := range 200 {
			calls = append(calls, tc{fmt.Sprintf("t%d", i), "get_current_time", `{}`})
		}
		prov := newScripted(callTools(calls...), say("That is the time."))
		e := newEnv(t, open, prov, hostileTools, nil)
		e.send("what time is it, 200 times")
		e.waitStatus(store.StatusIdle)
		ran, refused := 0, 0
		for _, c := range e.view().Calls {
			switch {
			case c.Status == store.CallResolved:
				ran++
			case envelopeKind(c.Result) == string(fault.KindTooManyCalls):
				refused++
			default:
				t.Fatalf("call %s: %s %s", c.ID, c.Status, c.Result)
			}
		}
		if ran != 16 || refused != 184 {
			t.Fatalf("ran %d, refused %d: want 16 and 184", ran, refused)
		}
		n := 0
		for _, m := range prov.requests()[1].Messages {
			if m.Role == llm.RoleTool {
				n++
			}
		}
		if n != 200 {
			t.Fatalf("the model read %d results, want 200", n)
		}
	})
}

// emailOnce answers an "email" message with a send_email call numbered call_0 (as
// OpenAI-compatible servers number calls in every conversation), and anything else with text.
func emailOnce(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == llm.RoleUser {
		return llm.Response{StopReason: "tool_calls", ToolCalls: []llm.ToolCall{{ID: "call_0", Name: "send_email",
			Args: json.RawMessage(`{"to":"` + strings.Fields(last.Content)[1] + `","subject":"Hi","body":"Lunch?"}`)}}}, nil
	}
	return llm.Response{Text: "Sent.", StopReason: "stop"}, nil
}

// TestSameIDsInTwoConversations: Ann's and Bob's models both name their send_email call_0;
// both are approved; each gets its own outbox row and its own idempotency key (the
// conversation's result never names the other's message).
func TestSameIDsInTwoConversations(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(emailOnce, emailOnce, emailOnce, emailOnce)
		e := newEnv(t, open, prov, hostileTools, nil)
		bob, err := e.m.Create(e.ctx, e.other, "Bob's")
		if err != nil {
			t.Fatal(err)
		}
		e.send("email ann@example.test")
		if err := e.m.Send(e.ctx, bob.ID, e.other, "email bob@example.test"); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			conv string
			by   Principal
		}{{e.conv, e.owner}, {bob.ID, e.other}} {
			e.waitFor(c.conv, "call_0 awaiting", func(v View) bool { return v.Pending()["call_0"].PendingKind == tools.PendingApproval })
			if _, err := e.m.Resolve(e.ctx, c.conv, "call_0", Resolution{Decision: "approve"}, c.by); err != nil {
				t.Fatalf("approve in %s: %v", c.conv, err)
			}
		}
		results := map[string]string{}
		for _, conv := range []string{e.conv, bob.ID} {
			v := e.waitFor(conv, "idle", func(v View) bool {
				return v.Status == store.StatusIdle && len(v.Calls) == 1 && v.Calls[0].Result != nil
			})
			results[conv] = string(v.Calls[0].Result)
		}
		rows, err := e.st.ListOutbox(e.ctx, "")
		if err != nil || len(rows) != 2 || rows[0].ConversationID == rows[1].ConversationID || rows[0].To == rows[1].To {
			t.Fatalf("outbox %v %+v: want one row per conversation", err, rows)
		}
		if results[e.conv] == results[bob.ID] {
			t.Fatalf("both conversations were told the same result: %s", results[e.conv])
		}
		if (tools.Call{ConversationID: e.conv, ToolCallID: "call_0"}).Key() == (tools.Call{ConversationID: bob.ID, ToolCallID: "call_0"}).Key() {
			t.Fatal("the two calls share an idempotency key")
		}
	})
}

// poisonStore refuses every append of a model answer holding "POISON", as a store refuses a
// write whatever the number of tries (the NUL byte of old, a constraint a model can break).
type poisonStore struct {
	store.Store
}

func (p poisonStore) Append(ctx context.Context, conv string, after int64, b store.Batch) (int64, error) {
	for _, e := range b.Entries {
		if e.Type == store.EntryAssistantMessage && strings.Contains(string(e.Data), "POISON") {
			return 0, errors.New("poison: the store refuses this answer")
		}
	}
	return p.Store.Append(ctx, conv, after, b)
}

// TestAWriteThatAlwaysFailsEnds: a model answer the store always refuses is tried a bounded
// number of times (LLMMaxAttempts model calls, recorded in the log as failed attempts), also
// across a restart, and then the turn ends with an error its owner sees and can continue from.
func TestAWriteThatAlwaysFailsEnds(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		var steps []step
		for range 20 {
			steps = append(steps, say("POISON"))
		}
		prov := newScripted(steps...)
		wrap := func(tb testing.TB, clk clock.Clock) store.Store { return poisonStore{open(tb, clk)} }
		e := newEnv(t, wrap, prov, hostileTools, nil)
		e.send("hello")
		// Drive the clock until two model calls were made, then restart the process.
		drive := func(until func() bool) {
			t.Helper()
			deadline := time.Now().Add(20 * time.Second)
			for !until() {
				if time.Now().After(deadline) {
					t.Fatalf("not reached: %d model calls, view %+v", prov.calls(), e.view())
				}
				e.clk.Advance(e.m.cfg.RetryMax)
				time.Sleep(2 * time.Millisecond)
			}
		}
		drive(func() bool { return prov.calls() >= 2 })
		e.crash()
		e.startManager()
		drive(func() bool { v := e.view(); return v.Status == store.StatusIdle && v.LastError != "" })
		// A failed attempt is recorded after it failed, so the crash may lose up to two: the one
		// whose failure was not recorded yet and one in flight. Each restart can add that much;
		// without the record the loop never ended.
		if n := prov.calls(); n > e.m.cfg.LLMMaxAttempts+2 {
			t.Fatalf("%d model calls for one message: want at most %d", n, e.m.cfg.LLMMaxAttempts+2)
		}
		// The owner can continue.
		if err := e.m.Send(e.ctx, e.conv, e.owner, "again"); err != nil {
			t.Fatalf("send after the failed turn: %v", err)
		}
	})
}

// TestContextBudget: a 500-turn conversation's request stays within the budget: the oldest
// turns are left out, whole, the newest is always there, and the system prompt says so.
func TestContextBudget(t *testing.T) {
	var msgs []llm.Message
	for i := range 500 {
		msgs = append(msgs,
			llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("turn %d: %s", i, strings.Repeat("words ", 50))},
			llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: fmt.Sprintf("c%d", i), Name: "echo", Args: json.RawMessage(`{"text":"x"}`)}}},
			llm.Message{Role: llm.RoleTool, ToolCallID: fmt.Sprintf("c%d", i), Content: `{"ok":true,"result":{"text":"` + strings.Repeat("y", 400) + `"}}`},
			llm.Message{Role: llm.RoleAssistant, Content: strings.Repeat("answer ", 40)})
	}
	req := llm.Request{Messages: msgs}
	const budget = 20_000
	dropped := fitBudget(&req, budget)
	total := 0
	for _, m := range req.Messages {
		total += estimateTokens(m)
	}
	if dropped == 0 || total > budget || req.Messages[0].Role != llm.RoleUser || !strings.HasPrefix(req.Messages[len(req.Messages)-4].Content, "turn 499") {
		t.Fatalf("dropped %d, %d tokens left (budget %d), first %q", dropped, total, budget, req.Messages[0].Role)
	}
	// Calls keep their results: every tool message follows its call.
	open := map[string]bool{}
	for _, m := range req.Messages {
		for _, c := range m.ToolCalls {
			open[c.ID] = true
		}
		if m.Role == llm.RoleTool && !open[m.ToolCallID] {
			t.Fatalf("result %s without its call", m.ToolCallID)
		}
	}
	// A request within the budget is left alone.
	small := llm.Request{Messages: msgs[:8]}
	if fitBudget(&small, budget) != 0 || len(small.Messages) != 8 {
		t.Fatal("a small request was cut")
	}
}

// TestContextBudgetCountsToolDefinitions: the tool definitions sent with a request come out of
// the context budget: the conversation gets what they leave.
func TestContextBudgetCountsToolDefinitions(t *testing.T) {
	var msgs []llm.Message
	for i := range 40 {
		msgs = append(msgs, llm.Message{Role: llm.RoleUser, Content: fmt.Sprintf("turn %d %s", i, strings.Repeat("w", 1200))})
	}
	var defs []json.RawMessage
	for i := range 20 {
		defs = append(defs, json.RawMessage(fmt.Sprintf(`{"name":"t%d","description":%q}`, i, strings.Repeat("d", 1600))))
	}
	req := llm.Request{Messages: msgs, Tools: defs}
	const budget = 15_000 // the messages alone (~12,000) fit; with the definitions (~8,000) they do not
	if fitBudget(&req, budget) == 0 {
		t.Fatal("nothing was left out: the definitions were not counted")
	}
	total := toolTokens(req.Tools)
	for _, m := range req.Messages {
		total += estimateTokens(m)
	}
	if total > budget || len(req.Tools) != 20 {
		t.Fatalf("%d tokens with %d definitions, budget %d", total, len(req.Tools), budget)
	}
}

// TestContextBudgetInTheLoop: the actor applies the budget to what it sends.
func TestContextBudgetInTheLoop(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		var steps []step
		for range 30 {
			steps = append(steps, say(strings.Repeat("a long answer ", 30)))
		}
		prov := newScripted(steps...)
		e := newEnv(t, open, prov, hostileTools, func(c *Config) { c.ContextBudget = 1000 })
		for i := range 30 {
			e.send(fmt.Sprintf("message %d %s", i, strings.Repeat("padding ", 20)))
			e.waitStatus(store.StatusIdle)
		}
		reqs := prov.requests()
		last := reqs[len(reqs)-1]
		total := 0
		for _, m := range last.Messages {
			total += estimateTokens(m)
		}
		if total > 1000 || !strings.Contains(last.System, "left out") || !strings.HasPrefix(last.Messages[len(last.Messages)-1].Content, "message 29") {
			t.Fatalf("last request: %d tokens, system %q", total, last.System)
		}
	})
}

// calls is the number of model calls made so far.
func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// stringsIn lists every string and key of a decoded JSON value.
func stringsIn(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case map[string]any:
		var out []string
		for k, e := range x {
			out = append(out, k)
			out = append(out, stringsIn(e)...)
		}
		return out
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, stringsIn(e)...)
		}
		return out
	}
	return nil
}

// TestToolRunsPerConversationAreBounded: ten calls of one answer run at most MaxToolRuns at a
// time; the others wait their turn and all finish.
func TestToolRunsPerConversationAreBounded(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		var mu sync.Mutex
		running, most := 0, 0
		release := make(chan struct{})
		slow := func(st store.Store) []*tools.Tool {
			return []*tools.Tool{mustTool(t, tools.Spec{Name: "slow", Description: "waits", Executor: tools.Server,
				Parameters: json.RawMessage(`{"type":"object"}`),
				Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
					mu.Lock()
					running++
					most = max(most, running)
					mu.Unlock()
					defer func() { mu.Lock(); running--; mu.Unlock() }()
					select {
					case <-release:
					case <-ctx.Done():
						return nil, ctx.Err()
					}
					return map[string]any{"ok": true}, nil
				}})}
		}
		var calls []tc
		for i := range 10 {
			calls = append(calls, tc{fmt.Sprintf("s%d", i), "slow", `{}`})
		}
		prov := newScripted(callTools(calls...), say("All done."))
		e := newEnv(t, open, prov, slow, func(c *Config) { c.MaxToolRuns = 3 })
		e.send("run them")
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			r := running
			mu.Unlock()
			if r == 3 || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		close(release)
		e.waitStatus(store.StatusIdle)
		for _, c := range e.view().Calls {
			if c.Status != store.CallResolved {
				t.Fatalf("call %s: %s %s", c.ID, c.Status, c.Result)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if most != 3 {
			t.Fatalf("at most %d ran at once, want 3", most)
		}
	})
}

// TestDailyTokenBudget: the usage the model reports counts against its owner's day; once the
// budget is spent the next turn ends with usage_limit_reached before any model call, and the
// next day starts afresh.
func TestDailyTokenBudget(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		costly := func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
			return llm.Response{Text: "ok", StopReason: "stop", Usage: llm.Usage{InputTokens: 50, OutputTokens: 10}}, nil
		}
		prov := newScripted(costly, costly, costly, costly)
		e := newEnv(t, open, prov, hostileTools, func(c *Config) { c.DailyTokens = 100 })
		for range 2 {
			e.send("hi")
			e.waitStatus(store.StatusIdle)
		}
		if n, err := e.st.UsageOn(e.ctx, e.owner.UserID, e.clk.Now()); err != nil || n != 120 {
			t.Fatalf("usage %d %v, want 120", n, err)
		}
		e.send("once more")
		e.waitStatus(store.StatusIdle)
		if v := e.view(); !strings.Contains(v.LastError, "tokens for today") || prov.calls() != 2 {
			t.Fatalf("spent budget: last error %q, model calls %d", v.LastError, prov.calls())
		}
		e.clk.Advance(24 * time.Hour)
		e.send("a new day")
		e.waitStatus(store.StatusIdle)
		if prov.calls() != 3 {
			t.Fatalf("model calls %d on the next day, want 3", prov.calls())
		}
	})
}

// TestHostileToolOutputIsStored: a tool whose result and whose retryable error message hold NUL
// bytes and invalid UTF-8: the failure is recorded (and retried), the result is stored cleaned,
// and the turn ends normally (a failed write used to loop).
func TestHostileToolOutputIsStored(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		tries := 0
		dirty := func(st store.Store) []*tools.Tool {
			return []*tools.Tool{mustTool(t, tools.Spec{Name: "dirty", Description: "returns bytes", Executor: tools.Server, MaxAttempts: 3,
				Parameters: json.RawMessage(`{"type":"object"}`),
				Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
					tries++
					if tries == 1 {
						e := fault.New(fault.KindNetwork, "reset by \x00peer \xff", nil)
						e.Retryable = true
						return nil, e
					}
					return map[string]any{"text": "a\x00b\xffc", "k\x00ey": 1}, nil
				}})}
		}
		prov := newScripted(callTools(tc{"d1", "dirty", `{}`}), say("Done."))
		e := newEnv(t, open, prov, dirty, nil)
		e.send("go")
		e.waitCall("d1", store.CallRunning) // the first attempt failed: a retry is scheduled
		deadline := time.Now().Add(10 * time.Second)
		for e.view().Status != store.StatusIdle {
			if time.Now().After(deadline) {
				t.Fatalf("the turn did not end: %+v", e.view())
			}
			e.clk.Advance(e.m.cfg.RetryMax)
			time.Sleep(2 * time.Millisecond)
		}
		c := e.call("d1")
		if c.Status != store.CallResolved || strings.ContainsRune(string(c.Result), 0) || !utf8.Valid(c.Result) {
			t.Fatalf("the result %s %q", c.Status, c.Result)
		}
		storedText(t, e.st, e.conv)
		steps, err := e.st.Steps(e.ctx, e.conv)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range steps {
			if strings.ContainsRune(s.LastError, 0) || !utf8.ValidString(s.LastError) {
				t.Fatalf("step error %q", s.LastError)
			}
		}
	})
}

// takenOverStore refuses every append once taken is set, as PostgreSQL does once another
// process claimed the conversation (migration 016).
type takenOverStore struct {
	store.Store
	taken *atomic.Bool
}

func (s takenOverStore) Append(ctx context.Context, conv string, after int64, b store.Batch) (int64, error) {
	if s.taken.Load() {
		return 0, fmt.Errorf("append: %w", store.ErrNotOwner)
	}
	return s.Store.Append(ctx, conv, after, b)
}

// TestNothingStartsAfterTheConversationMoved: once an append is refused because another process
// took the conversation over, the actor starts nothing more — not the tool call waiting for a
// run slot, not the model's next call — the new owner resumes them from the log (found by a
// review: the queued call ran on both processes).
func TestNothingStartsAfterTheConversationMoved(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		var taken atomic.Bool
		var mu sync.Mutex
		var ran []string
		release := make(chan struct{})
		slow := func(store.Store) []*tools.Tool {
			return []*tools.Tool{mustTool(t, tools.Spec{Name: "slow", Description: "waits", Executor: tools.Server,
				Parameters: json.RawMessage(`{"type":"object"}`),
				Func: func(ctx context.Context, call tools.Call, _ map[string]any) (any, error) {
					mu.Lock()
					ran = append(ran, call.ToolCallID)
					mu.Unlock()
					if call.ToolCallID == "s0" {
						<-release
					}
					return map[string]any{"ok": true}, nil
				}})}
		}
		prov := newScripted(callTools(tc{"s0", "slow", `{}`}, tc{"s1", "slow", `{}`}), say("done"))
		e := newEnv(t, func(tb testing.TB, c clock.Clock) store.Store { return takenOverStore{open(tb, c), &taken} },
			prov, slow, func(c *Config) { c.MaxToolRuns = 1 })
		e.send("go")
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			n := len(ran)
			mu.Unlock()
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("s0 did not start within 10 s (ran %d)", n)
			}
			time.Sleep(2 * time.Millisecond)
		}
		taken.Store(true)
		close(release)
		// s0's result is refused and the actor stops. It stops only once every run and model
		// call it started reported back, and no other actor starts: after this, whatever it
		// started after the move has run.
		deadline = time.Now().Add(10 * time.Second)
		for e.m.Stats().LiveActors != 0 {
			if time.Now().After(deadline) {
				t.Fatal("the actor did not stop within 10 s after its append was refused")
			}
			time.Sleep(2 * time.Millisecond)
		}
		if n := e.m.Stats().ActorStarts; n != 1 {
			t.Fatalf("%d actors started, want 1 (none after the conversation moved)", n)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 1 {
			t.Fatalf("tools run after the conversation moved: %v", ran)
		}
		if n := len(prov.requests()); n != 1 {
			t.Fatalf("%d model calls, want 1 (none after the conversation moved)", n)
		}
	})
}

// TestHintsOfADepartedOwner: when a process leaves, the hints naming it learned until then are
// void at once, at a cost that does not grow with the hints (it says "left" once per
// conversation it releases); hints learned after (it re-joined) stand.
func TestHintsOfADepartedOwner(t *testing.T) {
	m := &Manager{hints: map[string]hintOf{}, left: map[string]uint64{}}
	m.setHint("c1", "x")
	m.setHint("c2", "y")
	m.dropHintsOf("x")
	m.dropHintsOf("x")
	if got := m.hint("c1"); got != "" {
		t.Fatalf("c1's hint after x left = %q, want none", got)
	}
	if got := m.hint("c2"); got != "y" {
		t.Fatalf("c2's hint (y stayed) = %q", got)
	}
	m.setHint("c3", "x") // learned after x came back
	if got := m.hint("c3"); got != "x" {
		t.Fatalf("c3's hint learned after x re-joined = %q, want x", got)
	}
	if _, ok := m.hints["c1"]; ok {
		t.Fatal("the void hint was kept after it was read")
	}
	// Past maxLeft departures, forgetting them forgets the hints too: none comes back.
	m.setHint("c4", "x")
	m.dropHintsOf("x")
	for i := range maxLeft {
		m.dropHintsOf(fmt.Sprint("gone-", i))
	}
	if got := m.hint("c4"); got != "" {
		t.Fatalf("c4's void hint came back as %q once the departures were forgotten", got)
	}
}

// refuseOnce refuses the next append once armed, as PostgreSQL does once another process
// claimed the conversation, and takes the rest.
type refuseOnce struct {
	store.Store
	armed *atomic.Bool
}

func (s refuseOnce) Append(ctx context.Context, conv string, after int64, b store.Batch) (int64, error) {
	if s.armed.CompareAndSwap(true, false) {
		return 0, fmt.Errorf("append: %w", store.ErrNotOwner)
	}
	return s.Store.Append(ctx, conv, after, b)
}

// TestRefusedWriteIsAnsweredNotWritten: a request whose write was refused is answered so
// (nothing written) before its actor stops, never read by its caller as "not taken" — which
// would try it again on a new actor and then read the old answer: "not written" for a message
// that was posted (found by a review: 32 of 300 runs).
func TestRefusedWriteIsAnsweredNotWritten(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		for range 12 {
			var armed atomic.Bool
			e := newEnv(t, func(tb testing.TB, c clock.Clock) store.Store { return refuseOnce{open(tb, c), &armed} },
				newScripted(say("hi")), func(store.Store) []*tools.Tool { return nil }, nil)
			armed.Store(true)
			err := e.m.Send(e.ctx, e.conv, e.owner, "hello")
			if err == nil {
				e.waitStatus(store.StatusIdle)
			}
			posted := false
			for _, m := range e.view().Messages {
				if m.Content == "hello" {
					posted = true
				}
			}
			if (err == nil) != posted {
				t.Fatalf("Send = %v, and the message posted: %v", err, posted)
			}
		}
	})
}
