package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"parley/internal/store"
)

// testRenameDeleteSearch: a title set once from the first message never overwrites a rename; a
// deleted conversation takes its log, calls and timers with it and leaves an audit record
// behind (with the earlier ones); search matches part of a title, ignoring case, and treats
// LIKE's wildcards as text.
func testRenameDeleteSearch(t *testing.T, open Opener) {
	s, ctx := open(t), ctxT(t)
	a := newConv(t, s, "ana", "")

	// A title from the first message, then a rename, then another automatic title that must not win.
	if changed := must(s.SetConversationTitle(ctx, a.ID, "Lunch with Bob", true))(t); !changed {
		t.Fatal("SetConversationTitle(onlyIfUntitled) of an untitled conversation changed nothing")
	}
	if changed := must(s.SetConversationTitle(ctx, a.ID, "Renamed", false))(t); !changed {
		t.Fatal("a rename changed nothing")
	}
	if changed := must(s.SetConversationTitle(ctx, a.ID, "Later message", true))(t); changed {
		t.Fatal("an automatic title overwrote a rename")
	}
	got := must(s.GetConversation(ctx, a.ID))(t)
	if got.Title != "Renamed" || !got.UpdatedAt.Equal(a.UpdatedAt) {
		t.Fatalf("after renaming: %+v (updated_at was %v: a rename is not activity)", got, a.UpdatedAt)
	}
	_, err := s.SetConversationTitle(ctx, "nope", "x", false)
	wantErr(t, err, store.ErrNotFound, "SetConversationTitle of a missing conversation")

	// Search.
	b := newConv(t, s, "ana", "Quarterly REPORT 100%")
	c := newConv(t, s, "ana", "Café menu_draft")
	newConv(t, s, "bob", "bob's report")
	ids := func(cs []store.Conversation) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.ID)
		}
		return out
	}
	for _, tc := range []struct {
		q    string
		want []string
	}{
		{"report", []string{b.ID}},       // case ignored; bob's is not ana's
		{"100%", []string{b.ID}},         // % is text
		{"0%q", []string{}},              // … not a wildcard
		{"é_menu", []string{}},           // _ is text too (as a wildcard it would match "é menu")
		{"menu_d", []string{c.ID}},       //
		{"", []string{c.ID, b.ID, a.ID}}, // everything, newest first
		{"RENAMED", []string{a.ID}},
	} {
		if got := ids(must(s.SearchConversations(ctx, "ana", tc.q, 0))(t)); !slices.Equal(got, tc.want) {
			t.Errorf("SearchConversations(ana, %q) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := must(s.SearchConversations(ctx, "ana", "", 2))(t); len(got) != 2 {
		t.Errorf("SearchConversations with limit 2 = %d rows", len(got))
	}

	// Delete: the log, calls, timers and steps go; the audit trail keeps what it had and the deletion.
	b2 := callBatch("call_1")
	b2.Schedule = []store.Expiry{{ToolCallID: "call_1", At: time.Now().Add(time.Hour)}}
	b2.Steps = []store.Step{{Key: "tool:call_1", Attempts: 1, LastError: "timeout"}}
	b2.Audit = []store.AuditRecord{{ToolCallID: "call_1", Tool: "send_email", ActorID: "ana", Action: "approve"}}
	must(s.Append(ctx, b.ID, 0, b2))(t)
	if err := s.DeleteConversation(ctx, b.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation", Reason: "Quarterly REPORT 100%"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetConversation(ctx, b.ID)
	wantErr(t, err, store.ErrNotFound, "GetConversation after delete")
	if log, err := s.Log(ctx, b.ID, 0); len(log) != 0 || (err != nil && !errors.Is(err, store.ErrNotFound)) {
		t.Errorf("the log of a deleted conversation: %d entries, err %v", len(log), err)
	}
	if calls := must(s.ToolCalls(ctx, b.ID))(t); len(calls) != 0 {
		t.Errorf("a deleted conversation has %d tool calls", len(calls))
	}
	if due := must(s.ClaimDueExpiries(ctx, time.Now().Add(2*time.Hour), time.Minute, 10))(t); len(due) != 0 {
		t.Errorf("a deleted conversation's timer is still due: %+v", due)
	}
	if steps := must(s.Steps(ctx, b.ID))(t); len(steps) != 0 {
		t.Errorf("a deleted conversation has %d steps", len(steps))
	}
	audit := must(s.ListAudit(ctx, store.AuditFilter{ConversationID: b.ID}))(t)
	if len(audit) != 2 || audit[0].Action != "delete_conversation" || audit[0].ActorID != "ana" || audit[1].Action != "approve" {
		t.Fatalf("audit after delete = %+v, want the deletion then the approval", audit)
	}
	err = s.DeleteConversation(ctx, b.ID, store.AuditRecord{ActorID: "ana", Action: "delete_conversation"})
	wantErr(t, err, store.ErrNotFound, "DeleteConversation twice")
	if got := ids(must(s.ListConversations(ctx, "ana"))(t)); !slices.Equal(got, []string{c.ID, a.ID}) {
		t.Errorf("ListConversations after delete = %v", got)
	}
}
