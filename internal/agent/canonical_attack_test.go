package agent

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// Arguments that canonicalization could treat as one thing while the tool reads another: a
// duplicate key (the last wins everywhere: JSON decoding, the rules, the tool), number forms
// (1e1 is 10 for the rules, the hash and the tool), written for an edit and for a grant.
func TestCanonicalTwinsAreJudgedAsTheToolReadsThem(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		var mu sync.Mutex
		var ran []map[string]any
		capture := func(s *tools.Spec) {
			transferRules(s)
			s.Func = func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
				mu.Lock()
				ran = append(ran, args)
				mu.Unlock()
				runs.add(call.ToolCallID)
				return map[string]any{"paid": true}, nil
			}
		}
		prov := newScripted(callTools(tc{"p1", "pay", `{"amount": 10, "to": "x@ok.test"}`}), say("Done."),
			// The model's own duplicate key: the rules read the last "to", as the tool would.
			callTools(tc{"p2", "pay", `{"amount": 10, "to": "x@ok.test", "to": "boss@evil.test"}`}), say("Denied."),
			// A duplicate amount past the grant the owner made for 10.
			callTools(tc{"p3", "pay", `{"amount": 10, "to": "x@ok.test", "amount": 90}`}), say("Waiting."))
		e := newEnv(t, open, prov, func(store.Store) []*tools.Tool { return []*tools.Tool{payTool(t, runs, capture)} }, nil)
		e.send("pay")
		e.waitCall("p1", store.CallAwaiting)
		for _, edit := range []string{
			`{"amount": 10, "to": "x@ok.test", "to": "boss@evil.test"}`,
			`{"to": "x@ok.test", "amount": 10, "to": "x@ok.test", "to": "boss@evil.test"}`,
		} {
			// The last "to" is what the tool would read, and what the rules judge.
			_, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(edit)}, e.owner)
			if kindOf(err) != fault.KindDenied {
				t.Fatalf("a duplicate-key edit %s: %v", edit, err)
			}
			if c := e.call("p1"); c.Status != store.CallAwaiting || canonicalHash(c.Args) != canonicalHash(json.RawMessage(`{"amount":10,"to":"x@ok.test"}`)) {
				t.Fatalf("a duplicate-key edit changed the call: %+v", c)
			}
		}
		// 1e1 is 10: no edit, a plain approval, and a grant of exactly these arguments.
		if _, err := e.m.Resolve(e.ctx, e.conv, "p1", Resolution{Decision: "approve", Args: json.RawMessage(`{"to":"x@ok.test","amount":1e1}`),
			Remember: rememberExact}, e.owner); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(store.StatusIdle)
		if c := e.call("p1"); c.Decision != "approve" {
			t.Fatalf("an equal number form counted as an edit: %+v", c)
		}
		e.send("again")
		e.waitStatus(store.StatusIdle)
		if c := e.call("p2"); c.Status != store.CallDenied {
			t.Fatalf("the model's duplicate key past the deny rule: %+v", c)
		}
		e.send("more")
		e.waitCall("p3", store.CallAwaiting)
		if c := e.call("p3"); c.Grant != "" {
			t.Fatalf("a grant for 10 covered a duplicate amount of 90: %+v", c)
		}
		if got := runs.list(); !slices.Equal(got, []string{"p1"}) {
			t.Fatalf("ran %v", got)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ran) != 1 || ran[0]["to"] != "x@ok.test" || ran[0]["amount"] != int64(10) {
			t.Fatalf("the tool read %v", ran)
		}
	})
}
