package agent

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

const emailArgs = `{"to":"bob@example.test","subject":"Hi","body":"Lunch?"}`

func emailTools(st store.Store) []*tools.Tool {
	return []*tools.Tool{tools.SendEmail(storeOutbox{st}), tools.AskUser(), tools.Geolocation()}
}

func TestApproveRunsTheToolOnceAndTheModelGetsItsResult(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)

		v := e.view()
		if v.Status != store.StatusAwaiting {
			t.Fatalf("status %q, want awaiting", v.Status)
		}
		p, ok := v.Pending()["c1"]
		if !ok || p.PendingKind != tools.PendingApproval || p.Executor != tools.Server || p.ExpiresAt == nil {
			t.Fatalf("pending %+v", v.Pending())
		}
		if c := e.call("c1"); c.Plan == nil || !strings.Contains(c.Plan.Summary, "bob@example.test") {
			t.Fatalf("the approval card has no dry-run plan naming the recipient: %+v", c.Plan)
		}
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 0 {
			t.Fatalf("the email was sent before approval: %+v", out)
		}

		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)

		out, err := e.st.ListOutbox(e.ctx, e.conv)
		if err != nil || len(out) != 1 || out[0].ToolCallID != "c1" || out[0].To != "bob@example.test" {
			t.Fatalf("outbox %+v, %v", out, err)
		}
		reqs := prov.requests()
		if len(reqs) != 2 {
			t.Fatalf("%d LLM calls, want 2", len(reqs))
		}
		tm := toolMessages(reqs[1])
		if len(tm) != 1 || tm[0].ToolCallID != "c1" || envelope(t, tm[0].Content)["ok"] != true {
			t.Fatalf("tool messages %+v", tm)
		}
		c := e.call("c1")
		if c.Status != store.CallResolved || c.Decision != "approve" || c.DecidedBy != e.owner.UserID {
			t.Fatalf("call %+v", c)
		}
		audit, err := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if err != nil || len(audit) != 1 || audit[0].Action != "approve" || audit[0].ArgsHash != canonicalHash(json.RawMessage(emailArgs)) {
			t.Fatalf("audit %+v, %v", audit, err)
		}
		if got := e.view().Messages; len(got) != 2 || got[1].Content != "Sent." {
			t.Fatalf("messages %+v", got)
		}
	})
}

func TestDenyNeverRunsTheToolAndTellsTheModelWhy(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("OK, not sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "deny", Reason: "not on a Sunday"}, e.owner); err != nil {
			t.Fatalf("deny: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 0 {
			t.Fatalf("a denied call ran: %+v", out)
		}
		tm := toolMessages(prov.requests()[1])
		env := envelope(t, tm[0].Content)
		if env["ok"] != false || errKind(t, env) != string(fault.KindDenied) || !strings.Contains(tm[0].Content, "not on a Sunday") {
			t.Fatalf("the model got %s", tm[0].Content)
		}
		if c := e.call("c1"); c.Status != store.CallDenied || c.Reason != "not on a Sunday" {
			t.Fatalf("call %+v", c)
		}
		audit, _ := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if len(audit) != 1 || audit[0].Action != "deny" || audit[0].Reason != "not on a Sunday" {
			t.Fatalf("audit %+v", audit)
		}
	})
}

func TestEditedArgsAreValidatedAndTheModelIsToldWhatRan(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent to carol."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)

		_, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Args: json.RawMessage(`{"to":"not an address","subject":"Hi"}`)}, e.owner)
		if kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("bad edit: %v, want invalid_args", err)
		}
		te := err.(*fault.Error)
		if len(te.Problems) < 2 {
			t.Fatalf("problems %+v: want the bad address and the missing body", te.Details)
		}
		if e.call("c1").Status != store.CallAwaiting {
			t.Fatal("a refused edit changed the call")
		}

		edited := `{"to":"carol@example.test","subject":"Hi","body":"Lunch?"}`
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve", Args: json.RawMessage(edited)}, e.owner); err != nil {
			t.Fatalf("approve edited: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		out, _ := e.st.ListOutbox(e.ctx, e.conv)
		if len(out) != 1 || out[0].To != "carol@example.test" {
			t.Fatalf("outbox %+v: the edited arguments did not run", out)
		}
		env := envelope(t, toolMessages(prov.requests()[1])[0].Content)
		ea, _ := env["edited_args"].(map[string]any)
		if env["ok"] != true || ea["to"] != "carol@example.test" {
			t.Fatalf("the model was not told the arguments that ran: %v", env)
		}
		c := e.call("c1")
		if c.Decision != "approve_edited" || !strings.Contains(string(c.Args), "carol") {
			t.Fatalf("call %+v", c)
		}
		audit, _ := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if len(audit) != 1 || audit[0].ArgsHash != canonicalHash(json.RawMessage(edited)) {
			t.Fatalf("audit hash is not of the arguments that ran: %+v", audit)
		}
	})
}

const askArgs = `{"message":"Which city?","schema":{"type":"object","properties":{"city":{"type":"string","minLength":2}},"required":["city"]}}`

func TestElicitation(t *testing.T) {
	cases := []struct {
		name       string
		res        Resolution
		wantStatus string
		wantOK     bool
		wantKind   fault.Kind
		wantInText string
	}{
		{"accept", Resolution{Action: "accept", Content: json.RawMessage(`{"city":"Lyon"}`)}, store.CallResolved, true, "", "Lyon"},
		{"decline", Resolution{Action: "decline"}, store.CallErrored, false, fault.KindDeclined, "declined"},
		{"cancel", Resolution{Action: "cancel"}, store.CallErrored, false, fault.KindDeclined, "cancelled"},
	}
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		for _, tt := range cases {
			t.Run(tt.name, func(t *testing.T) {
				prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}), say("Thanks."))
				e := newEnv(t, open, prov, emailTools, nil)
				e.send("ask me where")
				e.waitCall("q1", store.CallAwaiting)
				p := e.view().Pending()["q1"]
				if p.PendingKind != tools.PendingElicitation || p.Prompt == nil || p.Prompt.Message != "Which city?" || !strings.Contains(string(p.Prompt.Schema), "city") {
					t.Fatalf("pending %+v", p)
				}
				// Invalid answers first: each is refused with its problems and changes nothing.
				for _, bad := range []Resolution{
					{Action: "accept", Content: json.RawMessage(`{"city":"L"}`)},
					{Action: "accept", Content: json.RawMessage(`{}`)},
					{Action: "maybe"},
				} {
					_, err := e.m.Resolve(e.ctx, e.conv, "q1", bad, e.owner)
					if kindOf(err) != fault.KindInvalidArgs {
						t.Fatalf("answer %+v: %v, want invalid_args", bad, err)
					}
					if len(err.(*fault.Error).Problems) == 0 {
						t.Fatalf("answer %+v: no problems in %v", bad, err)
					}
				}
				if _, err := e.m.Resolve(e.ctx, e.conv, "q1", tt.res, e.rev); kindOf(err) != fault.KindNotFound {
					// A reviewer with no call of theirs in the conversation learns nothing of it.
					t.Fatalf("a reviewer answered the owner's question: %v, want not_found", err)
				}
				if _, err := e.m.Resolve(e.ctx, e.conv, "q1", tt.res, e.owner); err != nil {
					t.Fatalf("resolve: %v", err)
				}
				e.waitStatus(store.StatusIdle)
				msg := toolMessages(prov.requests()[1])[0]
				env := envelope(t, msg.Content)
				if env["ok"] != tt.wantOK || (tt.wantKind != "" && errKind(t, env) != string(tt.wantKind)) || !strings.Contains(msg.Content, tt.wantInText) {
					t.Fatalf("the model got %s", msg.Content)
				}
				if c := e.call("q1"); c.Status != tt.wantStatus || c.Decision != tt.res.Action {
					t.Fatalf("call %+v", c)
				}
			})
		}
	})
}

func TestDoubleResolveFromTwoGoroutinesOneWins(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.owner)
			}()
		}
		wg.Wait()
		ok, stale := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case kindOf(err) == fault.KindStale:
				stale++
			default:
				t.Fatalf("resolve: %v", err)
			}
		}
		if ok != 1 || stale != 1 {
			t.Fatalf("%d ok and %d stale, want one each", ok, stale)
		}
		e.waitStatus(store.StatusIdle)
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 1 {
			t.Fatalf("outbox %+v", out)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "deny"}, e.owner); kindOf(err) != fault.KindStale {
			t.Fatalf("a late deny: %v, want stale", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "nope", Resolution{Decision: "approve"}, e.owner); kindOf(err) != fault.KindNotFound {
			t.Fatalf("an unknown call: %v, want not_found (docs/api.md: 404 for a call that does not exist)", err)
		}
		if audit, _ := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv}); len(audit) != 1 {
			t.Fatalf("audit %+v: the stale resolve was recorded", audit)
		}
	})
}

func reviewedTool(t testing.TB, runs *counter) *tools.Tool {
	return mustTool(t, tools.Spec{
		Name: "wire_money", Description: "move money", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer,
		Parameters: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"}},"required":["amount"]}`),
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			runs.add(call.ToolCallID)
			return map[string]any{"wired": args["amount"]}, nil
		},
	})
}

func TestAuthorization(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"w1", "wire_money", `{"amount":5}`}), say("Wired."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{reviewedTool(t, runs)} }, nil)
		if err := e.m.Send(e.ctx, e.conv, e.other, "hi"); kindOf(err) != fault.KindNotFound {
			t.Fatalf("another member sent to the conversation: %v, want not_found", err)
		}
		if err := e.m.Send(e.ctx, "no-such-conversation", e.owner, "hi"); kindOf(err) != fault.KindNotFound {
			t.Fatalf("missing conversation: %v, want not_found", err)
		}
		e.send("wire 5")
		e.waitCall("w1", store.CallAwaiting)
		if p := e.view().Pending()["w1"]; p.PendingKind != tools.PendingApproval {
			t.Fatalf("pending %+v", p)
		}
		cases := []struct {
			who  Principal
			want fault.Kind
		}{
			{e.other, fault.KindNotFound},
			{e.owner, fault.KindPermissionDenied},
			{Principal{UserID: e.owner.UserID, Role: store.RoleReviewer, Via: "session"}, fault.KindPermissionDenied},
			// No self-approval, admins included: an admin's own reviewer-gated call needs someone else.
			{Principal{UserID: e.owner.UserID, Role: store.RoleAdmin, Via: "session"}, fault.KindPermissionDenied},
		}
		for _, c := range cases {
			if _, err := e.m.Resolve(e.ctx, e.conv, "w1", Resolution{Decision: "approve"}, c.who); kindOf(err) != c.want {
				t.Fatalf("%+v approving: %v, want %s", c.who, err, c.want)
			}
		}
		if len(runs.list()) != 0 {
			t.Fatal("the tool ran without a reviewer")
		}
		// A reviewer who may decide the call reads its conversation; a member does not.
		if v, err := e.m.View(e.ctx, e.conv, e.rev); err != nil || v.Pending()["w1"].PendingKind != tools.PendingApproval {
			t.Fatalf("the reviewer's view: %v %+v", err, v.Pending())
		}
		if _, err := e.m.View(e.ctx, e.conv, e.other); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a member's view: %v, want not_found", err)
		}
		if pa, err := e.m.PendingApprovals(e.ctx, e.rev); err != nil || len(pa) != 1 || pa[0].Call.ID != "w1" || pa[0].OwnerID != e.owner.UserID {
			t.Fatalf("the reviewer's inbox: %v %+v", err, pa)
		}
		if pa, err := e.m.PendingApprovals(e.ctx, e.owner); kindOf(err) != fault.KindPermissionDenied || len(pa) != 0 {
			t.Fatalf("the member owner's inbox: %v %+v, want permission_denied (members have none)", err, pa)
		}
		// An answer of the wrong kind is refused before anything changes.
		if _, err := e.m.Resolve(e.ctx, e.conv, "w1", Resolution{Action: "accept"}, e.rev); kindOf(err) != fault.KindInvalidArgs {
			t.Fatalf("an answer to an approval: %v, want invalid_args", err)
		}
		got, err := e.m.Resolve(e.ctx, e.conv, "w1", Resolution{Decision: "approve"}, e.rev)
		if err != nil {
			t.Fatalf("reviewer approving: %v", err)
		}
		if got.OwnerID != e.owner.UserID || got.Call.ID != "w1" || got.Call.Decision != "approve" || got.Call.DecidedBy != e.rev.UserID {
			t.Fatalf("Resolve answered %+v: want the decided call", got)
		}
		e.waitStatus(store.StatusIdle)
		if got := runs.list(); len(got) != 1 || got[0] != "w1" {
			t.Fatalf("runs %v", got)
		}
		if c := e.call("w1"); c.DecidedBy != e.rev.UserID {
			t.Fatalf("decided by %q", c.DecidedBy)
		}
	})
}

// TestAdminOverride: an admin may decide an owner-approved call in someone else's conversation;
// the decision is audited as an override. A reviewer may not (owner-approved calls are the
// owner's), and learns nothing of the conversation.
func TestAdminOverride(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("email bob")
		e.waitCall("c1", store.CallAwaiting)
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "approve"}, e.rev); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a reviewer deciding an owner's call: %v, want not_found", err)
		}
		if pa, err := e.m.PendingApprovals(e.ctx, e.admin); err != nil || len(pa) != 0 {
			t.Fatalf("an override is possible, not asked for: the admin's inbox %v %+v", err, pa)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "c1", Resolution{Decision: "deny", Reason: "not now"}, e.admin); err != nil {
			t.Fatalf("an admin's override: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		audit, err := e.st.ListAudit(e.ctx, store.AuditFilter{ConversationID: e.conv})
		if err != nil || len(audit) != 1 || audit[0].Action != "override_deny" || audit[0].ActorID != e.admin.UserID {
			t.Fatalf("audit %v %+v: want one override_deny by the admin", err, audit)
		}
	})
}

// TestEveryRequestIsBounded: every model call carries max_tokens and a system prompt that says
// tool results are data, by default and as configured.
func TestEveryRequestIsBounded(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(say("Hello."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("hi")
		e.waitStatus(store.StatusIdle)
		prov.mu.Lock()
		req := prov.reqs[0]
		prov.mu.Unlock()
		if req.MaxTokens != 4096 || req.System != DefaultSystem || !strings.Contains(req.System, "data, not instructions") {
			t.Fatalf("max_tokens %d, system %q", req.MaxTokens, req.System)
		}
		prov2 := newScripted(say("Hi."))
		e2 := newEnv(t, open, prov2, emailTools, func(c *Config) { c.MaxTokens, c.System = 256, "Be brief." })
		e2.send("hi")
		e2.waitStatus(store.StatusIdle)
		prov2.mu.Lock()
		defer prov2.mu.Unlock()
		if r := prov2.reqs[0]; r.MaxTokens != 256 || r.System != "Be brief." {
			t.Fatalf("configured: max_tokens %d, system %q", r.MaxTokens, r.System)
		}
	})
}

// TestKeyedRequestsAreAnsweredOnce: a message or a resolve sent again with the key of its first
// try (the process it went to died before answering, and the sender tried again on the new
// owner) is answered as done, not posted or decided twice; the same resolve without a key —
// someone deciding twice — is stale.
func TestKeyedRequestsAreAnsweredOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"c1", "send_email", emailArgs}), say("Sent."))
		e := newEnv(t, open, prov, emailTools, nil)
		send := &request{kind: reqSend, by: e.owner, text: "email bob", key: "k-send"}
		if _, err := e.m.call(e.ctx, e.conv, send); err != nil {
			t.Fatal(err)
		}
		e.waitCall("c1", store.CallAwaiting)
		if _, err := e.m.call(e.ctx, e.conv, &request{kind: reqSend, by: e.owner, text: "email bob", key: "k-send"}); err != nil {
			t.Fatalf("the message sent again with its key: %v", err)
		}
		approve := func(key string) error {
			_, err := e.m.call(e.ctx, e.conv, &request{kind: reqResolve, by: e.owner, callID: "c1", res: Resolution{Decision: "approve"}, key: key})
			return err
		}
		if err := approve("k-approve"); err != nil {
			t.Fatalf("approve: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if err := approve("k-approve"); err != nil {
			t.Fatalf("the approve sent again with its key: %v, want ok", err)
		}
		if err := approve(""); fault.KindOf(err) != fault.KindStale {
			t.Fatalf("a second approve without the key: %v, want stale", err)
		}
		log, err := e.st.Log(e.ctx, e.conv, 0)
		if err != nil {
			t.Fatal(err)
		}
		messages, decisions := 0, 0
		for _, en := range log {
			switch en.Type {
			case store.EntryUserMessage, store.EntryQueuedMessage:
				messages++
			case store.EntryDecision:
				decisions++
			}
		}
		if messages != 1 || decisions != 1 {
			t.Fatalf("%d messages and %d decisions in the log, want 1 and 1", messages, decisions)
		}
		if out, _ := e.st.ListOutbox(e.ctx, e.conv); len(out) != 1 {
			t.Fatalf("the email went %d times", len(out))
		}
	})
}

// TestKeyedAnswerIsTakenOnce: a question's answer sent again with its key (its first process
// died before answering) is answered as done, not recorded twice; without the key it is stale.
func TestKeyedAnswerIsTakenOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		prov := newScripted(callTools(tc{"q1", "ask_user", askArgs}), say("Lyon it is."))
		e := newEnv(t, open, prov, emailTools, nil)
		e.send("ask me")
		e.waitCall("q1", store.CallAwaiting)
		answer := func(key string) error {
			_, err := e.m.call(e.ctx, e.conv, &request{kind: reqResolve, by: e.owner, callID: "q1",
				res: Resolution{Action: "accept", Content: json.RawMessage(`{"city":"Lyon"}`)}, key: key})
			return err
		}
		if err := answer("k-answer"); err != nil {
			t.Fatalf("answer: %v", err)
		}
		e.waitStatus(store.StatusIdle)
		if err := answer("k-answer"); err != nil {
			t.Fatalf("the answer sent again with its key: %v, want ok", err)
		}
		if err := answer(""); fault.KindOf(err) != fault.KindStale {
			t.Fatalf("a second answer without the key: %v, want stale", err)
		}
		log, err := e.st.Log(e.ctx, e.conv, 0)
		if err != nil {
			t.Fatal(err)
		}
		results := 0
		for _, en := range log {
			if en.ToolCallID == "q1" && (en.Type == store.EntryToolResult || en.Type == store.EntryToolError) {
				results++
			}
		}
		if results != 1 {
			t.Fatalf("%d results of q1 in the log, want 1", results)
		}
	})
}

// TestDeciderReadsOnlyWhileACallAwaitsThem: a reviewer reads a conversation (its view, its
// events) while a call of it awaits their decision, and not after: once they decided it they get
// not_found as anyone else would — the owner's later, private messages included — apart from
// their own decision's answer (the call as they left it, Hidden) and stale for a late resolve of
// that call. A later call awaiting them opens it again.
func TestDeciderReadsOnlyWhileACallAwaitsThem(t *testing.T) {
	eachStore(t, func(t *testing.T, open func(testing.TB, clock.Clock) store.Store) {
		runs := &counter{}
		prov := newScripted(callTools(tc{"w1", "wire_money", `{"amount":5}`}), say("Wired."), say("Noted, private."),
			callTools(tc{"w2", "wire_money", `{"amount":6}`}), say("Wired again."))
		e := newEnv(t, open, prov, func(st store.Store) []*tools.Tool { return []*tools.Tool{reviewedTool(t, runs)} }, nil)
		e.send("wire 5")
		e.waitCall("w1", store.CallAwaiting)
		if _, err := e.m.View(e.ctx, e.conv, e.rev); err != nil {
			t.Fatalf("the reviewer's view while the call awaits them: %v", err)
		}
		sub, err := e.m.Subscribe(e.ctx, e.conv, e.rev)
		if err != nil {
			t.Fatalf("the reviewer follows while the call awaits them: %v", err)
		}
		sub.Close()

		got, err := e.m.Resolve(e.ctx, e.conv, "w1", Resolution{Decision: "approve"}, e.rev)
		if err != nil {
			t.Fatalf("reviewer approving: %v", err)
		}
		if !got.Hidden || got.Call.ID != "w1" || got.Call.DecidedBy != e.rev.UserID || len(got.Call.Result) != 0 {
			t.Fatalf("the reviewer's answer %+v: want the call they decided, as they left it, hidden", got)
		}
		e.waitStatus(store.StatusIdle)
		e.send("my private note")
		e.waitStatus(store.StatusIdle)
		readsNothing := func(when string) {
			t.Helper()
			if v, err := e.m.View(e.ctx, e.conv, e.rev); kindOf(err) != fault.KindNotFound {
				t.Fatalf("%s: the reviewer's view: %v, %d messages; want not_found", when, err, len(v.Messages))
			}
			if sub, err := e.m.Subscribe(e.ctx, e.conv, e.rev); kindOf(err) != fault.KindNotFound {
				if sub != nil {
					sub.Close()
				}
				t.Fatalf("%s: the reviewer follows: %v, want not_found", when, err)
			}
		}
		readsNothing("after the decision")
		if _, err := e.m.Resolve(e.ctx, e.conv, "w1", Resolution{Decision: "deny"}, e.rev); kindOf(err) != fault.KindStale {
			t.Fatalf("the reviewer's late resolve: %v, want stale", err)
		}
		if _, err := e.m.Resolve(e.ctx, e.conv, "w1", Resolution{Decision: "deny"}, e.other); kindOf(err) != fault.KindNotFound {
			t.Fatalf("a member's resolve: %v, want not_found", err)
		}
		// Read from the store (no live actor after a restart): the same answer.
		e.crash()
		e.startManager()
		readsNothing("after a restart")

		e.send("wire 6")
		e.waitCall("w2", store.CallAwaiting)
		if _, err := e.m.View(e.ctx, e.conv, e.rev); err != nil {
			t.Fatalf("the reviewer's view while a later call awaits them: %v", err)
		}
	})
}
