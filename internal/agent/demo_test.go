package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"parley/internal/clock"
	"parley/internal/llm/demo"
	"parley/internal/store"
	"parley/internal/tools"
)

// The demo model drives the demo tools end to end through the loop: a gated send_email, an
// ask_user question and the browser's geolocation.
func TestDemoModelDrivesTheDemoTools(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		e := newEnv(t, open, newScripted(), func(st store.Store) []*tools.Tool {
			return tools.Builtins(tools.BuiltinDeps{Outbox: storeOutbox{st}, TestTools: true})
		}, func(c *Config) { c.Provider = demo.New(demo.Config{Pace: demo.NoPace}) })
		pendingOf := func(kind tools.PendingKind) string {
			t.Helper()
			e.waitStatus(store.StatusAwaiting)
			for id, p := range e.view().Pending() {
				if p.PendingKind == kind {
					return id
				}
			}
			t.Fatalf("no %s pending: %+v", kind, e.view().Pending())
			return ""
		}

		e.send("email bob@example.test about lunch")
		id := pendingOf(tools.PendingApproval)
		if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 1 || out[0].To != "bob@example.test" {
			t.Fatalf("outbox %+v", out)
		}

		e.send("ask me what I want for dinner")
		id = pendingOf(tools.PendingElicitation)
		if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Action: "decline"}, e.owner); err != nil {
			t.Fatalf("decline: %v", err)
		}
		e.waitStatus(store.StatusIdle)

		detach := e.m.AttachClient(e.conv)
		defer detach()
		e.send("where am I?")
		id = pendingOf(tools.PendingClientExec)
		if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Result: json.RawMessage(`{"latitude":48.85,"longitude":2.35,"accuracy":20}`)}, e.owner); err != nil {
			t.Fatalf("client result: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		v := e.view()
		if len(v.Calls) != 3 || v.Calls[0].Status != store.CallResolved || v.Calls[1].Status != store.CallErrored || v.Calls[2].Status != store.CallResolved {
			t.Fatalf("calls %+v", v.Calls)
		}
		if last := v.Messages[len(v.Messages)-1]; last.Role != "assistant" || !strings.Contains(last.Content, "48.85") && last.Content == "" {
			t.Fatalf("last message %+v", last)
		}
	})
}

// The demo's reviewer-gated tool shows a reviewer at work: asked to deploy, the demo model makes
// a deploy call that waits for a reviewer. Its owner cannot approve it and has no inbox to find
// it in; the reviewer's inbox lists it, and the reviewer's approval runs it.
func TestDemoDeployWaitsForAReviewer(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		e := newEnv(t, open, newScripted(), func(st store.Store) []*tools.Tool {
			return tools.Builtins(tools.BuiltinDeps{Outbox: storeOutbox{st}, TestTools: true})
		}, func(c *Config) { c.Provider = demo.New(demo.Config{Pace: demo.NoPace}) })

		e.send("deploy the website to production")
		e.waitStatus(store.StatusAwaiting)
		var id string
		for cid, p := range e.view().Pending() {
			if p.PendingKind == tools.PendingApproval {
				id = cid
			}
		}
		if c := e.call(id); id == "" || c.Name != "deploy" {
			t.Fatalf("no deploy call pending: %+v", e.view().Pending())
		}

		if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Decision: "approve"}, e.owner); err == nil {
			t.Fatal("the owner approved their own deploy: it needs a reviewer")
		}
		if _, err := e.m.PendingApprovals(e.ctx, e.owner); err == nil {
			t.Error("a member has an inbox")
		}
		inbox, err := e.m.PendingApprovals(e.ctx, e.rev)
		if err != nil {
			t.Fatalf("reviewer's inbox: %v", err)
		}
		if len(inbox) != 1 || inbox[0].Call.ID != id || inbox[0].ConversationID != e.conv {
			t.Fatalf("reviewer's inbox %+v, want the deploy call %s", inbox, id)
		}

		if _, err := e.m.Resolve(e.ctx, e.conv, id, Resolution{Decision: "approve"}, e.rev); err != nil {
			t.Fatalf("reviewer approves: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if c := e.call(id); c.Status != store.CallResolved {
			t.Fatalf("deploy call %+v, want resolved", c)
		}
		v := e.view()
		if last := v.Messages[len(v.Messages)-1]; last.Role != "assistant" || !strings.Contains(last.Content, "website is deployed to production") {
			t.Fatalf("last message %+v", last)
		}
	})
}
