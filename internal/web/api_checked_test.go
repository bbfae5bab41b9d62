package web

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"parley/internal/agent"
	"parley/internal/store"
	"parley/internal/tools"
)

var _ checkedConversations = (*agent.Manager)(nil)

// checkingConversations is the handler tests' fake with the Manager's checked entry points: the
// check runs against facts the test states (as a conversation's actor would know them), never
// against the store, and a request that passes is recorded.
type checkingConversations struct {
	*fakeConversations
	facts  map[string]agent.Facts // by conversation id + "/" + call id ("" for a send)
	checks atomic.Int64
}

func (f *checkingConversations) factsOf(conv, call string) (agent.Facts, bool) {
	fc, ok := f.facts[conv+"/"+call]
	if !ok {
		fc, ok = f.facts[conv+"/"]
		fc.Found = false
	}
	return fc, ok
}

func (f *checkingConversations) ResolveChecked(ctx context.Context, conv, call string, r agent.Resolution, by agent.Principal, check agent.Check) error {
	fc, ok := f.factsOf(conv, call)
	if !ok {
		return tools.NewError(tools.KindNotFound, "no such conversation", nil) // what the Manager says
	}
	f.checks.Add(1)
	if err := check(fc); err != nil {
		return err
	}
	return f.Resolve(ctx, conv, call, r, by)
}

func (f *checkingConversations) SendChecked(ctx context.Context, conv string, by agent.Principal, text string, check agent.Check) error {
	fc, ok := f.factsOf(conv, "")
	if !ok {
		return tools.NewError(tools.KindNotFound, "no such conversation", nil)
	}
	f.checks.Add(1)
	if err := check(fc); err != nil {
		return err
	}
	return f.Send(ctx, conv, by, text)
}

// countingStore counts the reads the resolve and send handlers used to make.
type countingStore struct {
	store.Store
	reads atomic.Int64
}

func (s *countingStore) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	s.reads.Add(1)
	return s.Store.GetConversation(ctx, id)
}

func (s *countingStore) GetToolCall(ctx context.Context, conv, call string) (store.ToolCall, error) {
	s.reads.Add(1)
	return s.Store.GetToolCall(ctx, conv, call)
}

// TestResolveRulesRunInTheAgent: with an agent that runs checks in the actor (the Manager),
// the resolve and send handlers read nothing from the store and every rule still holds: 404 for
// strangers, for a member touching a reviewer call and for a reviewer touching anything but the
// gate of a reviewer-gated call; 404 "no such tool call" for the owner's unknown call; 422 for a
// resolution of another kind than the call awaits.
func TestResolveRulesRunInTheAgent(t *testing.T) {
	e := newTestEnv(t, Config{APIBurst: 1000, MessageBurst: 1000})
	cs := &countingStore{Store: e.st}
	e.srv.store = cs
	fake := &checkingConversations{fakeConversations: e.conv, facts: map[string]agent.Facts{}}
	e.srv.conv = fake
	owner := e.user("owner", store.RoleMember)
	other := e.user("other", store.RoleMember)
	reviewer := e.user("reviewer", store.RoleReviewer)
	admin := e.user("admin", store.RoleAdmin)
	awaiting := func(kind tools.PendingKind, approvers tools.Approvers) agent.Facts {
		f := agent.Facts{OwnerID: owner.ID, Found: true, Approvers: approvers, Status: store.CallAwaiting, PendingKind: kind, Approval: tools.Auto}
		if kind == tools.PendingApproval {
			f.Approval = tools.RequiresApproval
		}
		return f
	}
	fake.facts["c1/"] = agent.Facts{OwnerID: owner.ID}
	fake.facts["c1/own"] = awaiting(tools.PendingApproval, tools.ByOwner)
	fake.facts["c1/rev"] = awaiting(tools.PendingApproval, tools.ByReviewer)
	fake.facts["c1/ask"] = awaiting(tools.PendingElicitation, tools.ByOwner)
	done := awaiting(tools.PendingApproval, tools.ByReviewer)
	done.Status, done.PendingKind = store.CallResolved, ""
	fake.facts["c1/done"] = done

	callers := map[string]*client{"owner": e.script(owner), "other": e.script(other), "reviewer": e.script(reviewer), "admin": e.script(admin)}
	approve, deny, decline, result := `{"decision":"approve"}`, `{"decision":"deny","reason":"no"}`, `{"action":"decline"}`, `{"result":{"lat":1}}`
	rows := []struct {
		name, call, body string
		want             map[string]int
		msg              string // in the owner's error, when it has one
	}{
		{"owner-approved gate", "own", approve, map[string]int{"owner": 200, "other": 404, "reviewer": 404, "admin": 404}, ""},
		{"reviewer-gated gate", "rev", deny, map[string]int{"owner": 200, "other": 404, "reviewer": 200, "admin": 200}, ""},
		{"browser result to a reviewer gate", "rev", result, map[string]int{"owner": 422, "other": 404, "reviewer": 404, "admin": 404}, "awaits an approval decision"},
		{"someone's question", "ask", decline, map[string]int{"owner": 200, "other": 404, "reviewer": 404, "admin": 404}, ""},
		{"question answered like an approval", "ask", approve, map[string]int{"owner": 422, "reviewer": 404}, "awaits an answer to a question"},
		{"unknown call", "nope", approve, map[string]int{"owner": 404, "other": 404, "reviewer": 404}, "no such tool call"},
		{"finished call (passed on: the agent answers stale)", "done", approve, map[string]int{"owner": 200, "other": 404}, ""},
	}
	for _, rw := range rows {
		for who, want := range rw.want {
			t.Run(rw.name+"/"+who, func(t *testing.T) {
				res := callers[who].api("POST", "/api/v1/conversations/c1/calls/"+rw.call+"/resolve", rw.body)
				if res.StatusCode != want {
					t.Fatalf("status %d, want %d: %s", res.StatusCode, want, readBody(res))
				}
				if want == 200 {
					readBody(res)
					return
				}
				eb := decodeEnvelope(t, res)
				if who != "owner" && want == 404 && eb.Error.Message != "no such conversation" {
					t.Fatalf("a stranger learnt %q", eb.Error.Message)
				}
				if who == "owner" && !strings.Contains(eb.Error.Message, rw.msg) {
					t.Fatalf("error %+v, want %q", eb.Error, rw.msg)
				}
			})
		}
	}
	for who, want := range map[string]int{"owner": 202, "other": 404, "reviewer": 404, "admin": 404} {
		res := callers[who].api("POST", "/api/v1/conversations/c1/messages", `{"text":"hi"}`)
		if res.StatusCode != want {
			t.Fatalf("send as %s: %d, want %d", who, res.StatusCode, want)
		}
		readBody(res)
	}
	if res := callers["owner"].api("POST", "/api/v1/conversations/missing/calls/own/resolve", approve); res.StatusCode != http.StatusNotFound {
		t.Fatalf("missing conversation: %d", res.StatusCode)
	} else {
		readBody(res)
	}
	if n := cs.reads.Load(); n != 0 {
		t.Fatalf("the handlers read the conversation or the call %d times; the agent has them", n)
	}
	if fake.checks.Load() == 0 {
		t.Fatal("no check ran in the agent")
	}
	// Only the permitted resolves reached the agent, each once.
	got := map[string]int{}
	for _, r := range e.conv.resolved {
		got[r.call]++
	}
	if got["own"] != 1 || got["rev"] != 3 || got["ask"] != 1 || got["done"] != 1 || got["nope"] != 0 || len(e.conv.sent) != 1 {
		t.Fatalf("reached the agent: resolves %v, sends %d", got, len(e.conv.sent))
	}
}
