package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"parley/internal/store"
)

// Bench runs the store benchmarks on s as sub-benchmarks of b: BareInsertCommit (bare, the
// floor: one single-row INSERT committed on the same database, supplied by the store's own
// benchmark file), AppendOne, AppendTurn, Log100 and ClaimDueExpiries.
func Bench(b *testing.B, s store.Store, bare func(b *testing.B)) {
	b.Run("BareInsertCommit", bare)
	b.Run("AppendOne", func(b *testing.B) { benchAppendOne(b, s) })
	b.Run("AppendTurn", func(b *testing.B) { benchAppendTurn(b, s) })
	b.Run("Log100", func(b *testing.B) { benchLog100(b, s) })
	b.Run("ClaimDueExpiries", func(b *testing.B) { benchClaim(b, s) })
}

// BareRow is the payload the bare insert writes: the size of a typical user message entry.
var BareRow = json.RawMessage(`{"text":"` + strings.Repeat("lorem ipsum ", 16) + `"}`)

func benchConv(b *testing.B, s store.Store) store.Conversation {
	b.Helper()
	c, err := s.CreateConversation(context.Background(), store.Conversation{OwnerID: "bench", Title: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func benchAppendOne(b *testing.B, s store.Store) {
	ctx := context.Background()
	c := benchConv(b, s)
	seq := int64(0)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		seq, err = s.Append(ctx, c.ID, seq, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "bench", Data: BareRow}}})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// turnBatch is what one model response with three approval-gated calls writes.
func turnBatch(n int) store.Batch {
	bt := store.Batch{Status: store.StatusAwaiting}
	bt.Entries = append(bt.Entries, store.Entry{Type: store.EntryAssistantMessage, Actor: "model",
		Data: json.RawMessage(`{"text":"I will send three emails.","calls":["a","b","c"]}`)})
	for k := range 3 {
		id := fmt.Sprintf("call-%d-%d", n, k)
		args := json.RawMessage(fmt.Sprintf(`{"to":"user%d@example.com","subject":"Report","body":"%s"}`, k, strings.Repeat("x", 200)))
		bt.Entries = append(bt.Entries, store.Entry{Type: store.EntryToolCall, ToolCallID: id, Actor: "model", Data: args})
		bt.Calls = append(bt.Calls, store.ToolCall{ToolCallID: id, Name: "send_email", Executor: "server", Approval: "always",
			Approvers: "owner", Status: store.CallAwaiting, PendingKind: "approval", Args: args})
	}
	bt.Steps = []store.Step{{Key: fmt.Sprintf("llm:%d", n), Attempts: 1}}
	return bt
}

func benchAppendTurn(b *testing.B, s store.Store) {
	ctx := context.Background()
	c := benchConv(b, s)
	seq := int64(0)
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		var err error
		seq, err = s.Append(ctx, c.ID, seq, turnBatch(n))
		if err != nil {
			b.Fatal(err)
		}
		n++
	}
}

func benchLog100(b *testing.B, s store.Store) {
	ctx := context.Background()
	c := benchConv(b, s)
	var seq int64
	for n := 0; seq < 100; n++ {
		bt := turnBatch(n)
		bt.Entries = append(bt.Entries, store.Entry{Type: store.EntryUserMessage, Actor: "bench", Data: BareRow})
		var err error
		if seq, err = s.Append(ctx, c.ID, seq, bt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		es, err := s.Log(ctx, c.ID, 0)
		if err != nil || len(es) < 100 {
			b.Fatalf("Log = %d entries, %v", len(es), err)
		}
	}
}

// benchClaim claims 10 of 1,000 due timers per iteration; each iteration's now is a lease later,
// so every timer stays claimable.
func benchClaim(b *testing.B, s store.Store) {
	ctx := context.Background()
	c := benchConv(b, s)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var sched []store.Expiry
	for i := range 1000 {
		sched = append(sched, store.Expiry{ToolCallID: fmt.Sprintf("t%d", i), At: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	if _, err := s.Append(ctx, c.ID, 0, store.Batch{Schedule: sched}); err != nil {
		b.Fatal(err)
	}
	now := t0.Add(time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.ClaimDueExpiries(ctx, now, time.Second, 10)
		if err != nil || len(got) != 10 {
			b.Fatalf("claimed %d, %v", len(got), err)
		}
		now = now.Add(time.Second)
	}
}
