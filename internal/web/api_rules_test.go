package web

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// conversationReads counts the reads of conversation data through the web server's store: the
// handlers must reach conversations only through the agent, which applies the policy.
type conversationReads struct {
	store.Store
	reads atomic.Int64
}

func (s *conversationReads) GetConversation(ctx context.Context, id string) (store.Conversation, error) {
	s.reads.Add(1)
	return s.Store.GetConversation(ctx, id)
}

func (s *conversationReads) ListConversations(ctx context.Context, owner string) ([]store.Conversation, error) {
	s.reads.Add(1)
	return s.Store.ListConversations(ctx, owner)
}

func (s *conversationReads) GetToolCall(ctx context.Context, conv, call string) (store.ToolCall, error) {
	s.reads.Add(1)
	return s.Store.GetToolCall(ctx, conv, call)
}

func (s *conversationReads) ToolCalls(ctx context.Context, conv string) ([]store.ToolCall, error) {
	s.reads.Add(1)
	return s.Store.ToolCalls(ctx, conv)
}

func (s *conversationReads) ListPending(ctx context.Context, f store.PendingFilter) ([]store.PendingCall, error) {
	s.reads.Add(1)
	return s.Store.ListPending(ctx, f)
}

func (s *conversationReads) Log(ctx context.Context, conv string, after int64) ([]store.Entry, error) {
	s.reads.Add(1)
	return s.Store.Log(ctx, conv, after)
}

func (s *conversationReads) LogPage(ctx context.Context, conv string, after int64, limit, maxBytes int) ([]store.Entry, error) {
	s.reads.Add(1)
	return s.Store.LogPage(ctx, conv, after, limit, maxBytes)
}

// TestResolveRulesRunInTheAgent: the resolve and send handlers read no conversation data from
// the store (the agent has it and applies the policy), and every rule holds through the real
// agent: 404 "no such conversation" for whoever may not see the conversation (a stranger; a
// reviewer where no call is theirs to decide), 404 "no such tool call" for an unknown call of a
// conversation one may see, 422 with details.pending_kind for a resolution of another kind than
// the call awaits, 409 for a call already decided, 403 for someone who may see the
// conversation but not do this (the owner approving their own reviewer-gated call, an admin
// approving one in their own conversation, an admin answering someone's question, a reviewer
// or an admin sending a message); an admin's decision on someone's owner-approved call is an
// audited override; only the owner sends.
func TestResolveRulesRunInTheAgent(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := newTestEnv(t, open, Config{APIBurst: 1000, MessageBurst: 1000})
		owner := e.user("owner", store.RoleMember)
		other := e.user("other", store.RoleMember)
		reviewer := e.user("reviewer", store.RoleReviewer)
		admin := e.user("admin", store.RoleAdmin)
		// own: owner-approved calls and questions; rev: reviewer-gated calls; adm: the admin's own
		// reviewer-gated call; idle: nothing pending (until the owner sends to it); quiet: nothing
		// ever runs (a stop there is stale, however fast the turn sent to idle runs).
		own, rev, adm, idle := e.conversation(owner), e.conversation(owner), e.conversation(admin), e.conversation(owner)
		quiet := e.conversation(owner)
		email := emailArgs("bob@example.test")
		// own-4 stays pending: the admin may read own (and override it) throughout.
		e.pending(own, owner, llmtest.Call("own-1", "send_email", email), llmtest.Call("own-2", "send_email", email),
			llmtest.Call("own-3", "send_email", email), llmtest.Call("own-4", "send_email", email), llmtest.Call("done", "send_email", email),
			llmtest.Call("ask-1", "ask_user", questionArgs("Who?", questionSchema)),
			llmtest.Call("ask-2", "ask_user", questionArgs("Who?", questionSchema)))
		if _, err := e.m.Resolve(context.Background(), own.ID, "done", resolution(`{"decision":"deny"}`), as(owner)); err != nil {
			t.Fatal(err)
		}
		text := map[string]any{"text": "hello"}
		e.pending(rev, owner, llmtest.Call("rev-1", "publish", text), llmtest.Call("rev-2", "publish", text),
			llmtest.Call("rev-3", "publish", text))
		e.pending(adm, admin, llmtest.Call("adm-rev", "publish", text))

		cs := &conversationReads{Store: e.st}
		e.srv.store = cs
		callers := map[string]*client{"owner": e.script(owner), "other": e.script(other), "reviewer": e.script(reviewer), "admin": e.script(admin)}
		approve, deny, decline, result := `{"decision":"approve"}`, `{"decision":"deny","reason":"no"}`, `{"action":"decline"}`, `{"result":{"lat":1}}`
		resolvePath := func(conv, call string) string { return "/api/v1/conversations/" + conv + "/calls/" + call + "/resolve" }
		rows := []struct {
			name, who, path, body string
			want                  int
			msg                   string // in the error, when there is one
			pendingKind           string // details.pending_kind of a 422
		}{
			{"stranger approves an owner's call", "other", resolvePath(own.ID, "own-1"), approve, 404, "no such conversation", ""},
			{"reviewer approves an owner's call", "reviewer", resolvePath(own.ID, "own-1"), approve, 404, "no such conversation", ""},
			{"owner approves their call", "owner", resolvePath(own.ID, "own-1"), approve, 200, "", ""},
			{"admin overrides an approval", "admin", resolvePath(own.ID, "own-2"), approve, 200, "", ""},
			{"admin overrides with a denial", "admin", resolvePath(own.ID, "own-3"), deny, 200, "", ""},
			{"owner approves a decided call", "owner", resolvePath(own.ID, "done"), approve, 409, "not awaiting", ""},
			{"stranger approves a decided call", "other", resolvePath(own.ID, "done"), approve, 404, "no such conversation", ""},
			{"owner answers a question", "owner", resolvePath(own.ID, "ask-1"), decline, 200, "", ""},
			{"stranger answers a question", "other", resolvePath(own.ID, "ask-2"), decline, 404, "no such conversation", ""},
			{"reviewer answers a question", "reviewer", resolvePath(own.ID, "ask-2"), decline, 404, "no such conversation", ""},
			{"admin answers someone's question", "admin", resolvePath(own.ID, "ask-2"), decline, 403, "owner answers", ""},
			{"question answered like an approval", "owner", resolvePath(own.ID, "ask-2"), approve, 422, "awaits an answer to a question", "elicitation"},
			{"owner's unknown call", "owner", resolvePath(own.ID, "nope"), approve, 404, "no such tool call", ""},
			{"stranger's unknown call", "other", resolvePath(own.ID, "nope"), approve, 404, "no such conversation", ""},
			{"reviewer's unknown call where they may not see", "reviewer", resolvePath(own.ID, "nope"), approve, 404, "no such conversation", ""},
			{"reviewer's unknown call where they may see", "reviewer", resolvePath(rev.ID, "nope"), approve, 404, "no such tool call", ""},
			{"reviewer denies a reviewer-gated call", "reviewer", resolvePath(rev.ID, "rev-1"), deny, 200, "", ""},
			{"admin decides a reviewer-gated call", "admin", resolvePath(rev.ID, "rev-2"), deny, 200, "", ""},
			{"owner approves their own reviewer-gated call", "owner", resolvePath(rev.ID, "rev-3"), approve, 403, "reviewer's approval", ""},
			{"stranger approves a reviewer-gated call", "other", resolvePath(rev.ID, "rev-3"), approve, 404, "no such conversation", ""},
			{"browser result to a reviewer gate (owner)", "owner", resolvePath(rev.ID, "rev-3"), result, 422, "awaits an approval decision", "approval"},
			{"browser result to a reviewer gate (reviewer)", "reviewer", resolvePath(rev.ID, "rev-3"), result, 422, "awaits an approval decision", "approval"},
			{"browser result to a reviewer gate (stranger)", "other", resolvePath(rev.ID, "rev-3"), result, 404, "no such conversation", ""},
			{"admin approves their own reviewer-gated call", "admin", resolvePath(adm.ID, "adm-rev"), approve, 403, "reviewer's approval", ""},
			{"reviewer approves the admin's call", "reviewer", resolvePath(adm.ID, "adm-rev"), approve, 200, "", ""},
			{"missing conversation", "owner", resolvePath("missing", "own-1"), approve, 404, "no such conversation", ""},
			{"owner sends", "owner", "/api/v1/conversations/" + idle.ID + "/messages", `{"text":"hi"}`, 202, "", ""},
			{"stranger sends", "other", "/api/v1/conversations/" + idle.ID + "/messages", `{"text":"hi"}`, 404, "no such conversation", ""},
			{"reviewer sends where they may not see", "reviewer", "/api/v1/conversations/" + idle.ID + "/messages", `{"text":"hi"}`, 404, "no such conversation", ""},
			{"admin sends where they may not see", "admin", "/api/v1/conversations/" + idle.ID + "/messages", `{"text":"hi"}`, 404, "no such conversation", ""},
			{"reviewer sends where they may see", "reviewer", "/api/v1/conversations/" + rev.ID + "/messages", `{"text":"hi"}`, 403, "owner may send", ""},
			{"admin sends where they may see", "admin", "/api/v1/conversations/" + own.ID + "/messages", `{"text":"hi"}`, 403, "owner may send", ""},
			{"owner stops where nothing runs", "owner", "/api/v1/conversations/" + quiet.ID + "/cancel", ``, 409, "nothing is running", ""},
			{"stranger stops", "other", "/api/v1/conversations/" + own.ID + "/cancel", ``, 404, "no such conversation", ""},
			{"reviewer stops where they may see", "reviewer", "/api/v1/conversations/" + rev.ID + "/cancel", ``, 403, "owner may stop", ""},
			{"admin stops someone's turn", "admin", "/api/v1/conversations/" + own.ID + "/cancel", ``, 403, "owner may stop", ""},
			{"owner sends while a turn waits (moves on)", "owner", "/api/v1/conversations/" + own.ID + "/messages", `{"text":"hi"}`, 202, "", ""},
		}
		// The model answers once the admin's call is decided, and the owner's message.
		e.model.Push(llmtest.Reply("Published."), llmtest.Reply("Hi."))
		for _, rw := range rows {
			res := callers[rw.who].api("POST", rw.path, rw.body)
			if res.StatusCode != rw.want {
				t.Fatalf("%s: status %d, want %d: %s", rw.name, res.StatusCode, rw.want, readBody(res))
			}
			if rw.want < 300 {
				readBody(res)
				continue
			}
			eb := decodeEnvelope(t, res)
			wantKind := map[int]fault.Kind{403: fault.KindPermissionDenied, 404: fault.KindNotFound, 409: fault.KindStale, 422: fault.KindInvalidArgs}[rw.want]
			if eb.Error.Kind != wantKind {
				t.Fatalf("%s: kind %s, want %s", rw.name, eb.Error.Kind, wantKind)
			}
			if !strings.Contains(eb.Error.Message, rw.msg) {
				t.Fatalf("%s: error %+v, want %q", rw.name, eb.Error, rw.msg)
			}
			if got := fmt.Sprint(eb.Error.Details["pending_kind"]); rw.pendingKind != "" && got != rw.pendingKind {
				t.Fatalf("%s: details %+v, want pending_kind %s", rw.name, eb.Error.Details, rw.pendingKind)
			}
		}
		if n := cs.reads.Load(); n != 0 {
			t.Fatalf("the handlers read conversation data from the store %d times; only the agent may", n)
		}
		// Only the permitted resolves reached the agent, each once, as the audit trail says.
		var got []string
		for _, conv := range []string{own.ID, rev.ID, adm.ID} {
			for _, a := range e.audit(conv) {
				got = append(got, a.ToolCallID+": "+a.Action+" by "+e.nameOf(a.ActorID))
			}
		}
		sort.Strings(got)
		want := []string{
			"adm-rev: approve by reviewer", "ask-1: decline by owner", "done: deny by owner", "own-1: approve by owner",
			"own-2: override_approve by admin", "own-3: override_deny by admin", "own-4: cancel by owner", // moved on from
			"rev-1: deny by reviewer", "rev-2: deny by admin",
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("audit trail:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if d := e.decision(own.ID, "own-2"); d["override"] != true || d["by"] != admin.ID || d["role"] != "admin" {
			t.Fatalf("the override's decision: %v", d)
		}
		e.awaitStatus(idle.ID, store.StatusIdle)
		for _, conv := range []string{own.ID, rev.ID, adm.ID, idle.ID} {
			want := "please"
			switch conv {
			case idle.ID:
				want = "hi"
			case own.ID:
				want = "please|hi" // the owner moved on from its questions
			}
			if got := strings.Join(e.userMessages(conv), "|"); got != want {
				t.Fatalf("messages of %s: %q, want %q", conv, got, want)
			}
		}
		if res := callers["owner"].api("GET", "/api/v1/conversations/"+own.ID, ""); res.StatusCode != http.StatusOK {
			t.Fatalf("the owner's view after all this: %d", res.StatusCode)
		} else {
			readBody(res)
		}
	})
}
