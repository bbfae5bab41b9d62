package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/mcpadapter/mcptest"
)

// mcpEnv is newEnv with the test MCP server (a real one, over streamable HTTP) as a tool source
// named "m".
func mcpEnv(t *testing.T, open func(testing.TB, clock.Clock) store.Store, prov *scripted, mod func(*mcpadapter.Config)) *env {
	t.Helper()
	return mcpEnvWith(t, open, prov, mcptest.NewServer(false), nil, mod)
}

// mcpEnvWith is mcpEnv with the server srv served with opts. A stateful handler (nil opts)
// speaks the protocol before 2026-07-28 (the SDK serves 2026-07-28 over HTTP only
// statelessly), where a server's question comes on the session.
func mcpEnvWith(t *testing.T, open func(testing.TB, clock.Clock) store.Store, prov *scripted, srv *mcp.Server, opts *mcp.StreamableHTTPOptions, mod func(*mcpadapter.Config)) *env {
	t.Helper()
	e := newEnv(t, open, prov, emailTools, nil)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, opts))
	t.Cleanup(hs.Close)
	cfg := mcpadapter.Config{Name: "m", Transport: mcpadapter.HTTP, URL: hs.URL, AllowPrivateNetwork: true}
	if mod != nil {
		mod(&cfg)
	}
	m, err := mcpadapter.New([]mcpadapter.Config{cfg}, mcpadapter.Options{Registry: e.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m.Start(ctx)
	t.Cleanup(m.Stop)
	if st := m.Status()[0]; st.State != mcpadapter.StateUp {
		t.Fatalf("mcp server %+v", st)
	}
	return e
}

// waitPending waits until call id is pending with kind.
func (e *env) waitPending(id string, kind tools.PendingKind) CallView {
	e.t.Helper()
	for {
		if p, ok := e.view().Pending()[id]; ok && p.PendingKind == kind {
			return p
		}
		e.waitCall(id, store.CallAwaiting)
	}
}

func approveMCP(e *env, id string) {
	e.t.Helper()
	e.waitPending(id, tools.PendingApproval)
	if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Decision: "approve"}, e.owner); err != nil {
		e.t.Fatalf("approve: %v", err)
	}
}

func TestMCPQuestionMidCall(t *testing.T) {
	cases := []struct {
		name string
		res  Resolution
		want string
	}{
		{"accept", Resolution{Action: "accept", Content: json.RawMessage(`{"name":"Ada"}`)}, "hello Ada"},
		{"decline", Resolution{Action: "decline"}, "no name: decline"},
		{"cancel", Resolution{Action: "cancel"}, "no name: cancel"},
	}
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		for _, tt := range cases {
			t.Run(tt.name, func(t *testing.T) {
				prov := newScripted(callTools(tc{"q1", "m__ask", `{}`}), say("Thanks."))
				e := mcpEnv(t, open, prov, nil)
				e.send("greet me")
				// Not read-only, so gated: it suspends twice, approval then the server's question.
				approveMCP(e, "q1")
				p := e.waitPending("q1", tools.PendingElicitation)
				if p.Prompt == nil || p.Prompt.Message != "What is your name?" || !strings.Contains(string(p.Prompt.Schema), `"name"`) || p.ExpiresAt == nil {
					t.Fatalf("pending %+v", p)
				}
				if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: json.RawMessage(`{"name":3}`)}, e.owner); kindOf(err) != fault.KindInvalidArgs {
					t.Fatalf("an answer off the schema: %v", err)
				}
				if _, err := e.m.Resolve(e.ctx, e.conv, "q1", tt.res, e.other); kindOf(err) != fault.KindNotFound {
					t.Fatalf("another member answered: %v", err)
				}
				if _, err := e.m.Resolve(e.ctx, e.conv, "q1", tt.res, e.owner); err != nil {
					t.Fatalf("answer: %v", err)
				}
				e.waitStatus(store.StatusIdle)
				msg := toolMessages(prov.requests()[1])[0]
				if env := envelope(t, msg.Content); env["ok"] != true || env["result"] != tt.want {
					t.Fatalf("the model got %s", msg.Content)
				}
				if c := e.call("q1"); c.Status != store.CallResolved {
					t.Fatalf("call %+v", c)
				}
				if _, err := e.m.Resolve(e.ctx, e.conv, "q1", tt.res, e.owner); kindOf(err) != fault.KindStale {
					t.Fatalf("a second answer: %v, want stale", err)
				}
			})
		}
	})
}

func TestMCPQuestionTimesOut(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "m__ask", `{}`}), say("You did not answer."))
		e := mcpEnv(t, open, prov, func(c *mcpadapter.Config) { c.Approval = map[string]tools.Approval{"ask": tools.Auto} })
		e.send("greet me")
		e.waitPending("q1", tools.PendingElicitation)
		// The question's own timeout bounds it, not the run timeout (30 s), which is paused.
		e.clk.Advance(time.Minute)
		if got := e.call("q1").Status; got != store.CallAwaiting {
			t.Fatalf("the run timeout ended a question: %s", got)
		}
		// The expiry poller re-arms its timer after each pass, at a moment the test cannot see:
		// one jump of the clock could land before it and never fire it. Time goes on instead.
		stop := e.tick(time.Minute)
		e.waitCall("q1", store.CallExpired)
		stop()
		e.waitStatus(store.StatusIdle)
		msg := toolMessages(prov.requests()[1])[0]
		if env := envelope(t, msg.Content); errKind(t, env) != string(fault.KindTimeout) || !strings.Contains(msg.Content, "did not respond") {
			t.Fatalf("the model got %s", msg.Content)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "decline"}, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("a late answer: %v, want stale", err)
		}
	})
}

func TestMCPQuestionSurvivesARestart(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "m__ask", `{}`}), say("Thanks."))
		e := mcpEnvWith(t, open, prov, mcptest.NewServer(false), &mcp.StreamableHTTPOptions{Stateless: true},
			func(c *mcpadapter.Config) { c.Approval = map[string]tools.Approval{"ask": tools.Auto} })
		e.send("greet me")
		before := e.waitPending("q1", tools.PendingElicitation)
		e.crash()
		e.startManager()
		// Under the 2026-07-28 protocol the server's request state is all it needs to carry on:
		// kept with the question, the question is still pending after the restart (same attempt,
		// same expiry), and its answer resumes the call without the server asking again.
		p := e.waitPending("q1", tools.PendingElicitation)
		if c := e.call("q1"); c.Attempts != 1 || p.Prompt == nil || before.Prompt == nil || p.Prompt.Message != before.Prompt.Message || !p.ExpiresAt.Equal(*before.ExpiresAt) {
			t.Fatalf("after the restart: call %+v, pending %+v (before %+v)", c, p, before)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: json.RawMessage(`{"name":3}`)}, e.owner); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("an answer off the schema: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: json.RawMessage(`{"name":"Ada"}`)}, e.other); kindOf(err) != fault.KindNotFound {
			t.Fatalf("another member answered: %v", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: json.RawMessage(`{"name":"Ada"}`)}, e.owner); err != nil {
			t.Fatalf("answer: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if msg := toolMessages(prov.requests()[1])[0]; !strings.Contains(msg.Content, "hello Ada") {
			t.Fatalf("the model got %s", msg.Content)
		}
		if c := e.call("q1"); c.Attempts != 1 || c.Status != store.CallResolved {
			t.Fatalf("call %+v", c)
		}
	})
}

func TestMCPQuestionLostInARestartIsAskedAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		// A server on an older protocol asks on the session: nothing to keep, the question dies
		// with the connection.
		prov := newScripted(callTools(tc{"q1", "m__ask_named", `{"item":"car"}`}), say("Thanks."))
		e := mcpEnvWith(t, open, prov, mcptest.NewLegacyServer(), nil, func(c *mcpadapter.Config) {
			c.Approval = map[string]tools.Approval{"ask_named": tools.Auto}
		})
		e.send("colour my car")
		e.waitPending("q1", tools.PendingElicitation)
		e.crash()
		e.startManager()
		// The revived actor fails the attempt whose question died and runs the call again (same
		// tool_call_id, so the same idempotency key); the server asks again.
		e.waitPending("q1", tools.PendingElicitation)
		if c := e.call("q1"); c.Attempts != 2 {
			t.Fatalf("attempts %d, want 2", c.Attempts)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "q1", Resolution{Action: "accept", Content: json.RawMessage(`{"colour":"red"}`)}, e.owner); err != nil {
			t.Fatalf("answer: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if msg := toolMessages(prov.requests()[1])[0]; !strings.Contains(msg.Content, "car is red") {
			t.Fatalf("the model got %s", msg.Content)
		}
	})
}

func TestMCPGateReadOnlyAndIdempotencyKey(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"l1", "m__lookup", `{"q":"x"}`}, tc{"w1", "m__write", `{"key":"k"}`}, tc{"p1", "m__progress", `{}`}), say("Done."))
		// The file trusts the server's annotations: its read-only tools run without approval.
		e := mcpEnv(t, open, prov, func(c *mcpadapter.Config) { c.TrustAnnotations = true })
		e.send("look up, write and report progress")
		approveMCP(e, "w1")
		e.waitStatus(store.StatusIdle)
		if c := e.call("l1"); c.Status != store.CallResolved || c.Decision != "" {
			t.Fatalf("read-only call %+v", c)
		}
		// Over HTTP a notification may reach the client after the result it preceded (the SDK
		// handles them apart), so only the first is certain; stdio's order is tested in mcpadapter.
		if c := e.call("p1"); c.Status != store.CallResolved || len(c.Progress) == 0 || c.Progress[0] != "step 1" {
			t.Fatalf("progress call %+v", c)
		}
		msgs := toolMessages(prov.requests()[1])
		key := tools.Call{ConversationID: e.conv, ToolCallID: "w1"}.Key()
		if !strings.Contains(msgs[1].Content, key) {
			t.Fatalf("the write's result %s does not carry its idempotency key %s", msgs[1].Content, key)
		}
	})
}

// TestMCPHostileServerCannotBreakTheConversation: a server that answers a huge result with NUL
// bytes and invalid UTF-8, offers a tool whose schema does not compile, and fails a call leaves
// a conversation that works: what reached the model is bounded, clean text or a typed error,
// every call finished, the next turn runs on the whole history, and the conversation as stored
// is read back the same by a fresh process.
func TestMCPHostileServerCannotBreakTheConversation(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"h1", "m__huge", `{}`}, tc{"b1", "m__bad_schema", `{}`}, tc{"f1", "m__fail", `{}`}), say("Done."))
		e := mcpEnv(t, open, prov, func(c *mcpadapter.Config) { c.DefaultApproval = tools.Auto })
		e.send("misbehave")
		e.waitStatus(store.StatusIdle)
		msgs := toolMessages(prov.requests()[1])
		if len(msgs) != 3 {
			t.Fatalf("the model got %d tool results, want 3", len(msgs))
		}
		if len(msgs[0].Content) > tools.DefaultMaxOutputBytes || !strings.Contains(msgs[0].Content, "truncated") {
			t.Fatalf("huge result of %d bytes reached the model: %.200s", len(msgs[0].Content), msgs[0].Content)
		}
		// NUL (even escaped: PostgreSQL refuses it) and invalid UTF-8 reach neither the model nor the log.
		clean := func(s string) bool {
			return utf8.ValidString(s) && !strings.ContainsRune(s, 0) && !strings.Contains(s, `\u0000`)
		}
		for _, m := range msgs {
			if !clean(m.Content) {
				t.Fatalf("%s: a NUL byte or invalid UTF-8 reached the model: %.200q", m.ToolCallID, m.Content)
			}
			if c := e.call(m.ToolCallID); !clean(string(c.Result)) {
				t.Fatalf("%s: a NUL byte or invalid UTF-8 was recorded: %.200q", m.ToolCallID, c.Result)
			}
		}
		if errKind(t, envelope(t, msgs[1].Content)) != string(fault.KindUnknownTool) {
			t.Fatalf("a tool with an invalid schema: %s", msgs[1].Content)
		}
		if errKind(t, envelope(t, msgs[2].Content)) != string(fault.KindCommandFailed) {
			t.Fatalf("isError: %s", msgs[2].Content)
		}
		for id, want := range map[string]string{"h1": store.CallResolved, "b1": store.CallErrored, "f1": store.CallErrored} {
			if c := e.call(id); c.Status != want {
				t.Fatalf("call %s: %s, want %s", id, c.Status, want)
			}
		}
		if v := e.view(); len(v.Pending()) != 0 || v.LastError != "" {
			t.Fatalf("after the turn: pending %v, last error %q", v.Pending(), v.LastError)
		}

		// Still usable: the next turn runs, and the model gets the whole history.
		prov.add(say("still here"))
		e.send("hello")
		e.waitStatus(store.StatusIdle)
		before := e.view()
		if n := len(before.Messages); n == 0 || before.Messages[n-1].Content != "still here" {
			t.Fatalf("the next turn did not answer: messages %+v", before.Messages)
		}
		reqs := prov.requests()
		if len(reqs) != 3 {
			t.Fatalf("%d model calls, want 3", len(reqs))
		}
		if got := toolMessages(reqs[2]); len(got) != 3 || got[0].Content != msgs[0].Content || got[2].Content != msgs[2].Content {
			t.Fatalf("the next turn's model call lost the first turn's results: %d tool messages", len(got))
		}

		// What the store holds is read back the same by a fresh process.
		e.crash()
		e.startManager()
		after := e.view()
		said := func(v View) (out []string) {
			for _, m := range v.Messages {
				out = append(out, fmt.Sprint(m.Seq, m.Role, m.Content))
			}
			return out
		}
		if after.Status != store.StatusIdle || !reflect.DeepEqual(said(after), said(before)) || len(after.Calls) != len(before.Calls) {
			t.Fatalf("after a restart: status %s, messages %+v, %d calls; before: %+v, %d calls",
				after.Status, after.Messages, len(after.Calls), before.Messages, len(before.Calls))
		}
		for i := range after.Calls {
			if a, b := after.Calls[i], before.Calls[i]; a.ID != b.ID || a.Status != b.Status || !bytes.Equal(a.Result, b.Result) {
				t.Fatalf("call %s after a restart: %s %.200s; before: %s %.200s", b.ID, a.Status, a.Result, b.Status, b.Result)
			}
		}
	})
}

func TestMCPServerThatNeverAnswersTimesOut(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"h1", "m__hang", `{}`}), say("It hung."))
		e := mcpEnv(t, open, prov, func(c *mcpadapter.Config) {
			c.MaxAttempts, c.Approval = 1, map[string]tools.Approval{"hang": tools.Auto}
		})
		e.send("hang")
		e.waitCall("h1", store.CallRunning)
		e.clk.Advance(31 * time.Second)
		e.waitStatus(store.StatusIdle)
		msg := toolMessages(prov.requests()[1])[0]
		if errKind(t, envelope(t, msg.Content)) != string(fault.KindTimeout) {
			t.Fatalf("the model got %s", msg.Content)
		}
	})
}

func TestMCPTwoQuestionsInFlightFromOneServer(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "m__ask", `{}`}, tc{"q2", "m__ask", `{}`}), say("Thanks."))
		e := mcpEnvWith(t, open, prov, mcptest.NewServer(false), &mcp.StreamableHTTPOptions{Stateless: true},
			func(c *mcpadapter.Config) { c.Approval = map[string]tools.Approval{"ask": tools.Auto} })
		e.send("greet us both")
		// Each call has its own pending question at the same time, answered on its own.
		e.waitPending("q1", tools.PendingElicitation)
		e.waitPending("q2", tools.PendingElicitation)
		for id, name := range map[string]string{"q2": "Grace", "q1": "Ada"} {
			if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Action: "accept", Content: json.RawMessage(`{"name":"` + name + `"}`)}, e.owner); err != nil {
				t.Fatalf("answer %s: %v", id, err)
			}
		}
		e.waitStatus(store.StatusIdle)
		got := map[string]string{}
		for _, msg := range toolMessages(prov.requests()[1]) {
			got[msg.ToolCallID] = msg.Content
		}
		if !strings.Contains(got["q1"], "hello Ada") || !strings.Contains(got["q2"], "hello Grace") {
			t.Fatalf("the model got %v", got)
		}
	})
}

func TestMCPURLQuestion(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"u1", "m__ask_url", `{}`}), say("Done."), callTools(tc{"u2", "m__ask_bad_url", `{}`}), say("Refused."))
		e := mcpEnv(t, open, prov, func(c *mcpadapter.Config) {
			c.Approval = map[string]tools.Approval{"ask_url": tools.Auto, "ask_bad_url": tools.Auto}
		})
		e.send("authorize")
		p := e.waitPending("u1", tools.PendingElicitation)
		if p.Prompt == nil || p.Prompt.URL != "https://auth.example.test/authorize?x=1" || !strings.Contains(p.Prompt.Message, "Authorize the test app") {
			t.Fatalf("pending %+v", p)
		}
		// "Done" is an accept with nothing to fill in, through the one Resolve.
		if _, err := e.m.Resolve(e.ctx, e.conv, "u1", Resolution{Action: "accept", Content: json.RawMessage(`{}`)}, e.owner); err != nil {
			t.Fatalf("done: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if msg := toolMessages(prov.requests()[1])[0]; !strings.Contains(msg.Content, "url: accept") {
			t.Fatalf("the model got %s", msg.Content)
		}
		// A link that is not http(s) is never shown: the call ends with a tool error.
		e.send("click this")
		e.waitStatus(store.StatusIdle)
		if c := e.call("u2"); c.Status != store.CallErrored {
			t.Fatalf("call %+v", c)
		}
		msgs := toolMessages(prov.requests()[3])
		msg := msgs[len(msgs)-1]
		if env := envelope(t, msg.Content); errKind(t, env) != string(fault.KindCommandFailed) || !strings.Contains(msg.Content, "not an http(s) URL") {
			t.Fatalf("the model got %s", msg.Content)
		}
	})
}

func TestMCPQuestionKeptAcrossARestartStillExpires(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "m__ask", `{}`}), say("You did not answer."))
		e := mcpEnvWith(t, open, prov, mcptest.NewServer(false), &mcp.StreamableHTTPOptions{Stateless: true},
			func(c *mcpadapter.Config) { c.Approval = map[string]tools.Approval{"ask": tools.Auto} })
		e.send("greet me")
		e.waitPending("q1", tools.PendingElicitation)
		e.crash()
		e.startManager()
		e.waitPending("q1", tools.PendingElicitation)
		e.clk.Advance(11 * time.Minute)
		e.waitCall("q1", store.CallExpired)
		e.waitStatus(store.StatusIdle)
		if msg := toolMessages(prov.requests()[1])[0]; !strings.Contains(msg.Content, "did not respond") {
			t.Fatalf("the model got %s", msg.Content)
		}
	})
}

// TestMCPHostileFormIsNotStored: a server's question whose form exceeds the bounds (here 200
// fields) is refused before it becomes a pending question: nothing awaits, nothing is shown,
// and the model hears why.
func TestMCPHostileFormIsNotStored(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"f1", "m__ask_huge", `{"shape":"fields"}`}), say("Refused."))
		e := mcpEnv(t, open, prov, func(c *mcpadapter.Config) { c.Approval = map[string]tools.Approval{"ask_huge": tools.Auto} })
		e.send("fill in the form")
		e.waitStatus(store.StatusIdle)
		if c := e.call("f1"); c.Status != store.CallErrored || c.Prompt != nil || c.PendingKind != "" {
			t.Fatalf("call %+v", c)
		}
		msg := toolMessages(prov.requests()[1])[0]
		if !strings.Contains(msg.Content, "200 fields (at most 64)") {
			t.Fatalf("the model got %s", msg.Content)
		}
	})
}
