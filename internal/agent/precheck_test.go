package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// guardedTool is a server tool whose precheck refuses once refuse is set, and whose run fails
// with a retryable error the first `failures` times (MaxAttempts 3).
func guardedTool(t testing.TB, refuse *atomic.Bool, failures int, runs *counter) *tools.Tool {
	var n atomic.Int32
	return mustTool(t, tools.Spec{Name: "guarded", Description: "prechecked", Executor: tools.Server, MaxAttempts: 3,
		Precheck: func(ctx context.Context, args map[string]any) error {
			if refuse.Load() {
				return fault.Errorf(fault.KindBlockedHost, "host %q is not in allowed_hosts", "example.org")
			}
			return nil
		},
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			runs.add(call.ToolCallID)
			if int(n.Add(1)) <= failures {
				e := fault.Errorf(fault.KindHTTPError, "upstream 503")
				e.Retryable = true
				return nil, e
			}
			return map[string]any{"ok": true}, nil
		}})
}

// attemptEntries counts the log's attempt_started entries of a call.
func attemptEntries(t *testing.T, e *env, id string) int {
	t.Helper()
	log, err := e.st.Log(e.ctx, e.conv, 0)
	if err != nil {
		t.Fatalf("log: %v", err)
	}
	n := 0
	for _, en := range log {
		if en.ToolCallID == id && en.Type == store.EntryAttemptStarted {
			n++
		}
	}
	return n
}

// TestPrecheckRefusesBeforeTheFirstAttempt: a precheck error is the call's tool error, the model
// reads its kind, and the tool never runs.
func TestPrecheckRefusesBeforeTheFirstAttempt(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		var refuse atomic.Bool
		refuse.Store(true)
		prov := newScripted(callTools(tc{"g1", "guarded", `{}`}), say("That host is not allowed."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{guardedTool(t, &refuse, 0, runs)} }, nil)
		e.send("go")
		e.waitCall("g1", store.CallErrored)
		e.waitStatus(store.StatusIdle)
		if n := len(runs.list()); n != 0 {
			t.Fatalf("the tool ran %d times after its precheck refused", n)
		}
		if k := errKind(t, envelope(t, toolMessages(prov.requests()[1])[0].Content)); k != string(fault.KindBlockedHost) {
			t.Fatalf("the model got kind %s, want blocked_host", k)
		}
	})
}

// TestPrecheckRunsAgainBeforeARetry: the first attempt passes the precheck and fails retryably;
// the policy then changes, so the retry is refused before it is recorded: no attempt_started
// entry, no second run, no step left behind, and the model gets the precheck's error.
func TestPrecheckRunsAgainBeforeARetry(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		var refuse atomic.Bool
		prov := newScripted(callTools(tc{"g1", "guarded", `{}`}), say("Blocked now."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{guardedTool(t, &refuse, 5, runs)} },
			func(c *Config) { c.RetryBase = time.Second; c.RetryMax = time.Minute })
		e.send("go")
		e.next("first failure", func(ev Event) bool {
			return ev.Type == EventToolCall && ev.ToolCallID == "g1" && ev.Call != nil && ev.Call.NextAttempt != nil
		})
		refuse.Store(true)
		e.clk.Advance(time.Second)
		e.waitCall("g1", store.CallErrored)
		e.waitStatus(store.StatusIdle)
		if n := len(runs.list()); n != 1 {
			t.Fatalf("%d runs, want 1 (the retry must be refused by the precheck)", n)
		}
		if n := attemptEntries(t, e, "g1"); n != 0 {
			t.Fatalf("%d attempt_started entries recorded for a refused retry", n)
		}
		if steps, _ := e.st.Steps(e.ctx, e.conv); len(steps) != 0 {
			t.Fatalf("steps left behind: %+v", steps)
		}
		if k := errKind(t, envelope(t, toolMessages(prov.requests()[1])[0].Content)); k != string(fault.KindBlockedHost) {
			t.Fatalf("the model got kind %s, want blocked_host", k)
		}
	})
}

// TestPrecheckPassingLetsRetriesRun: with a precheck that passes, retries are recorded and run
// as before (the check does not swallow attempts).
func TestPrecheckPassingLetsRetriesRun(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		var refuse atomic.Bool
		prov := newScripted(callTools(tc{"g1", "guarded", `{}`}), say("Worked."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{guardedTool(t, &refuse, 1, runs)} },
			func(c *Config) { c.RetryBase = time.Second; c.RetryMax = time.Minute })
		e.send("go")
		e.next("first failure", func(ev Event) bool {
			return ev.Type == EventToolCall && ev.ToolCallID == "g1" && ev.Call != nil && ev.Call.NextAttempt != nil
		})
		e.clk.Advance(time.Second)
		e.waitCall("g1", store.CallResolved)
		e.waitStatus(store.StatusIdle)
		if n := len(runs.list()); n != 2 {
			t.Fatalf("%d runs, want 2", n)
		}
		if n := attemptEntries(t, e, "g1"); n != 1 {
			t.Fatalf("%d attempt_started entries, want 1", n)
		}
	})
}
