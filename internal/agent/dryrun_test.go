package agent

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/tools"
)

// deployTool is a gated server tool whose dry run reports on started and then waits for release
// (or its context); runs records the calls that ran.
func deployTool(t testing.TB, started chan<- string, release <-chan struct{}, runs *counter) *tools.Tool {
	return mustTool(t, tools.Spec{
		Name: "deploy", Description: "deploy the app", Executor: tools.Server, Approval: tools.RequiresApproval,
		Parameters: json.RawMessage(`{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]}`),
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			runs.add(call.ToolCallID)
			return map[string]any{"deployed": args["env"]}, nil
		},
		DryRun: func(ctx context.Context, call tools.Call, args map[string]any) (tools.Plan, error) {
			started <- call.ToolCallID
			select {
			case <-release:
				return tools.Plan{Summary: "Would deploy to " + args["env"].(string)}, nil
			case <-ctx.Done():
				return tools.Plan{}, ctx.Err()
			}
		},
	})
}

// deployStep answers with some text and one deploy call.
func deployStep(text string) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		if err := emit(llm.Event{Type: llm.EventTextDelta, Text: text}); err != nil {
			return llm.Response{}, err
		}
		return llm.Response{Text: text, StopReason: "tool_calls",
			ToolCalls: []llm.ToolCall{{ID: "d1", Name: "deploy", Args: json.RawMessage(`{"env":"prod"}`)}}}, nil
	}
}

// waitStarted waits for a dry run to begin.
func waitStarted(t *testing.T, started <-chan string) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the dry run did not start")
	}
}

// TestSlowDryRunDoesNotBlockTheConversation: a gated call's dry run runs beside the actor, not
// on it. While the dry run blocks, the conversation answers View, Resolve and Send at once; the
// answer and its call are recorded when the plan is back, and the suspension shows the plan
// everywhere (the view, the tool_calls row's prompt, the inbox).
func TestSlowDryRunDoesNotBlockTheConversation(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		started, release, runs := make(chan string, 2), make(chan struct{}), &counter{}
		prov := newScripted(deployStep("Deploying to prod."), say("Deployed."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{deployTool(t, started, release, runs)} }, nil)
		e.send("deploy")
		waitStarted(t, started)

		// Each answer must come while the dry run still blocks: a blocked actor would run these
		// contexts out.
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		v, err := e.m.View(ctx, e.conv, e.owner)
		if err != nil {
			t.Fatalf("view while the dry run blocks: %v", err)
		}
		if v.Status != store.StatusGenerating || v.Streaming != "Deploying to prod." || len(v.Calls) != 0 || len(v.Pending()) != 0 {
			t.Fatalf("view while the dry run blocks: status %q, streaming %q, calls %+v, pending %+v", v.Status, v.Streaming, v.Calls, v.Pending())
		}
		// Nobody has heard of the call yet: it is recorded with its plan, not before.
		if _, err := e.m.Resolve(ctx, e.conv, "d1", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindNotFound {
			t.Fatalf("resolve while the dry run blocks: %v, want not_found", err)
		}
		if got, err := e.m.Post(ctx, e.conv, e.owner, "and staging"); err != nil || !got.Queued {
			t.Fatalf("send while the dry run blocks: %+v, %v, want queued", got, err)
		}
		if log, err := e.st.Log(ctx, e.conv, 0); err != nil || len(log) != 2 || log[1].Type != store.EntryQueuedMessage {
			t.Fatalf("log while the dry run blocks: %v, %d entries, want the user message and the queued one only", err, len(log))
		}

		close(release)
		e.waitCall("d1", store.CallAwaiting)
		const want = "Would deploy to prod"
		if c := e.call("d1"); c.Plan == nil || c.Plan.Summary != want {
			t.Fatalf("the approval card's plan %+v, want %q", c.Plan, want)
		}
		if row, err := e.st.GetToolCall(e.ctx, e.conv, "d1"); err != nil || !strings.Contains(string(row.Prompt), want) {
			t.Fatalf("the tool_calls row's prompt %s, %v: want the plan", row.Prompt, err)
		}
		if pa, err := e.m.PendingApprovals(e.ctx, System); err != nil || len(pa) != 1 || pa[0].Call.Plan == nil || pa[0].Call.Plan.Summary != want {
			t.Fatalf("the inbox %+v, %v: want the call with its plan", pa, err)
		}
		if m := e.view().Messages; len(m) != 2 || m[1].Content != "Deploying to prod." {
			t.Fatalf("messages %+v", m)
		}

		if _, err := e.m.Resolve(e.ctx, e.conv, "d1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 1 || got[0] != "d1" {
			t.Fatalf("runs %v", got)
		}
	})
}

// TestDryRunTimesOutOnTheClock: a dry run that outlives the tool's run timeout is cancelled and
// the approver sees the default plan.
func TestDryRunTimesOutOnTheClock(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		started, runs := make(chan string, 2), &counter{}
		prov := newScripted(deployStep("Deploying."), say("Deployed."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{deployTool(t, started, nil, runs)} },
			func(c *Config) { c.ToolTimeout = 3 * time.Second })
		e.send("deploy")
		waitStarted(t, started)
		e.clk.Advance(3 * time.Second)
		e.waitCall("d1", store.CallAwaiting)
		if c := e.call("d1"); c.Plan == nil || c.Plan.Summary != "Would run deploy on the server" {
			t.Fatalf("plan %+v, want the default plan", c.Plan)
		}
	})
}

// TestHardStopDuringADryRun: a hard stop cancels the dry run and drops the answer that waited
// for it; on revival the model is asked again and the call suspends with its plan.
func TestHardStopDuringADryRun(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		started, release, runs := make(chan string, 2), make(chan struct{}), &counter{}
		prov := newScripted(deployStep("Deploying."), deployStep("Deploying again."), say("Deployed."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{deployTool(t, started, release, runs)} }, nil)
		e.send("deploy")
		waitStarted(t, started)
		e.crash() // returns once the cancelled dry run has returned
		if log, err := e.st.Log(e.ctx, e.conv, 0); err != nil || len(log) != 1 {
			t.Fatalf("log after the crash: %v, %d entries, want the user message only", err, len(log))
		}

		e.startManager()
		waitStarted(t, started)
		close(release)
		e.waitCall("d1", store.CallAwaiting)
		if c := e.call("d1"); c.Plan == nil || c.Plan.Summary != "Would deploy to prod" {
			t.Fatalf("plan %+v", c.Plan)
		}
		if n := len(prov.requests()); n != 2 {
			t.Fatalf("%d LLM calls, want 2 (the dropped answer asked for again)", n)
		}
		if m := e.view().Messages; len(m) != 2 || m[1].Content != "Deploying again." {
			t.Fatalf("messages %+v", m)
		}
	})
}
