package agent

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// previewTools are two gated tools with dry runs of their own: deploy, decided by the owner,
// and release, by a reviewer. A dry run of env "hang" reports on hung and waits for its context;
// one of env "huge" answers a plan far over any bound.
func previewTools(t testing.TB, hung chan<- string) func(store.Store) []*tools.Tool {
	params := json.RawMessage(`{"type":"object","properties":{"env":{"type":"string","minLength":2}},"required":["env"]}`)
	dry := func(ctx context.Context, call tools.Call, args map[string]any) (tools.Plan, error) {
		env := args["env"].(string)
		switch env {
		case "hang":
			hung <- call.ToolCallID
			<-ctx.Done()
			return tools.Plan{}, ctx.Err()
		case "huge":
			return tools.Plan{Summary: strings.Repeat("s", 10_000), Details: map[string]any{"env": strings.Repeat("x", 100_000)}}, nil
		}
		return tools.Plan{Summary: "Would deploy to " + env, Details: map[string]any{"env": env}}, nil
	}
	run := func(ctx context.Context, call tools.Call, args map[string]any) (any, error) { return "done", nil }
	return func(store.Store) []*tools.Tool {
		return []*tools.Tool{
			mustTool(t, tools.Spec{Name: "deploy", Description: "deploy", Executor: tools.Server, Approval: tools.RequiresApproval,
				Parameters: params, Func: run, DryRun: dry}),
			mustTool(t, tools.Spec{Name: "release", Description: "release", Executor: tools.Server, Approval: tools.RequiresApproval,
				Approvers: tools.ByReviewer, Parameters: params, Func: run, DryRun: dry}),
		}
	}
}

// TestPreview: the plan of an awaiting approval with edited arguments is the tool's dry run of
// them, for whoever may decide the call (Resolve's rule: the others get Resolve's answers);
// arguments the schema refuses get Resolve's invalid_args with problems; a dry run that hangs
// gives the default plan when PreviewTimeout runs out on the clock; a plan too large is bounded;
// nothing is written.
func TestPreview(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		hung := make(chan string, 1)
		prov := newScripted(callTools(tc{"d1", "deploy", `{"env":"prod"}`}, tc{"r1", "release", `{"env":"prod"}`}))
		e := newEnv(t, open, prov, previewTools(t, hung), nil)
		e.send("deploy and release")
		e.waitCall("r1", store.CallAwaiting)
		before, err := e.st.Log(e.ctx, e.conv, 0)
		if err != nil {
			t.Fatal(err)
		}
		staging := json.RawMessage(`{"env":"staging"}`)

		// Who may decide the call gets its plan with the new arguments.
		for _, c := range []struct {
			who  string
			by   Principal
			call string
		}{{"the owner", e.owner, "d1"}, {"an admin, as an override", e.admin, "d1"}, {"a reviewer", e.rev, "r1"}} {
			p, err := e.m.Preview(e.ctx, e.conv, c.call, staging, c.by)
			if err != nil || p.Summary != "Would deploy to staging" || p.Details["env"] != "staging" {
				t.Fatalf("%s previews %s: %+v, %v", c.who, c.call, p, err)
			}
		}
		// The others get what Resolve answers them.
		for _, c := range []struct {
			who  string
			by   Principal
			call string
			want fault.Kind
		}{
			{"a stranger", e.other, "d1", fault.KindNotFound},
			{"the owner, on a reviewer's call", e.owner, "r1", fault.KindPermissionDenied},
			{"a reviewer, on the owner's call", e.rev, "d1", fault.KindPermissionDenied},
			{"nobody", Principal{}, "d1", fault.KindNotFound},
		} {
			_, perr := e.m.Preview(e.ctx, e.conv, c.call, staging, c.by)
			_, rerr := e.m.Resolve(e.ctx, e.conv, c.call, Resolution{Decision: "approve", Args: staging}, c.by)
			if kindOf(perr) != c.want || kindOf(rerr) != c.want {
				t.Fatalf("%s previews %s: %v; resolves it: %v; want %s from both", c.who, c.call, perr, rerr, c.want)
			}
		}
		if _, err := e.m.Preview(e.ctx, e.conv, "nope", staging, e.owner); kindOf(err) != fault.KindNotFound {
			t.Fatalf("preview of no such call: %v", err)
		}
		// Arguments the schema refuses: Resolve's invalid_args, with its problems.
		_, perr := e.m.Preview(e.ctx, e.conv, "d1", json.RawMessage(`{"env":"x"}`), e.owner)
		var fe *fault.Error
		if !errors.As(perr, &fe) || fe.Kind != fault.KindInvalidArgs || len(fe.Problems) == 0 {
			t.Fatalf("preview of invalid args: %v, want invalid_args with problems", perr)
		}
		_, rerr := e.m.Resolve(e.ctx, e.conv, "d1", Resolution{Decision: "approve", Args: json.RawMessage(`{"env":"x"}`)}, e.owner)
		if rerr == nil || rerr.Error() != perr.Error() {
			t.Fatalf("resolve of the same invalid args: %v, want %v", rerr, perr)
		}

		// A dry run that hangs: the default plan once PreviewTimeout has passed on the clock.
		type answer struct {
			p   tools.Plan
			err error
		}
		done := make(chan answer, 1)
		go func() {
			p, err := e.m.Preview(e.ctx, e.conv, "d1", json.RawMessage(`{"env":"hang"}`), e.owner)
			done <- answer{p, err}
		}()
		select {
		case <-hung: // the timer is armed before the dry run starts
		case <-time.After(10 * time.Second):
			t.Fatal("the preview's dry run did not start")
		}
		select {
		case a := <-done:
			t.Fatalf("the preview answered before its bound: %+v, %v", a.p, a.err)
		default:
		}
		e.clk.Advance(PreviewTimeout)
		select {
		case a := <-done:
			if a.err != nil || a.p.Summary != "Would run deploy on the server" || a.p.Details["arguments"].(map[string]any)["env"] != "hang" {
				t.Fatalf("the hung preview: %+v, %v, want the default plan of the new arguments", a.p, a.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the hung preview did not answer once its bound passed")
		}

		// A plan too large is bounded.
		p, err := e.m.Preview(e.ctx, e.conv, "d1", json.RawMessage(`{"env":"huge"}`), e.owner)
		if err != nil || len(p.Summary) > maxPlanSummaryBytes || p.Details["truncated"] != true {
			t.Fatalf("the huge plan: %d bytes of summary, details truncated %v, %v", len(p.Summary), p.Details["truncated"], err)
		}
		if b, _ := json.Marshal(p.Details); len(b) > tools.DefaultMaxOutputBytes+100 {
			t.Fatalf("the huge plan's details are %d bytes", len(b))
		}

		// Nothing was written, and the card still shows the suspension's plan and arguments.
		after, err := e.st.Log(e.ctx, e.conv, 0)
		if err != nil || len(after) != len(before) {
			t.Fatalf("log: %d entries before the previews, %d after (%v)", len(before), len(after), err)
		}
		if c := e.call("d1"); c.Status != store.CallAwaiting || string(c.Args) != `{"env":"prod"}` || c.Plan == nil || c.Plan.Summary != "Would deploy to prod" {
			t.Fatalf("the call after the previews: %s %s %+v", c.Status, c.Args, c.Plan)
		}

		// A call decided is stale to a preview, as to Resolve.
		if _, err := e.m.Resolve(e.ctx, e.conv, "d1", Resolution{Decision: "deny"}, e.owner); err != nil {
			t.Fatal(err)
		}
		if _, err := e.m.Preview(e.ctx, e.conv, "d1", staging, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("preview of a decided call: %v, want stale", err)
		}
	})
}
