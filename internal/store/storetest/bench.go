package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"parley/internal/store"
)

// Bench runs the store benchmarks on s as sub-benchmarks of b: BareInsertCommit (bare, the
// floor: one single-row INSERT of BareRow committed on the same database, supplied by the
// store's own benchmark file), AppendOne, AppendTurn, Log100, ClaimDueExpiries, and
// Interleaved, which compares the first three under the same load.
func Bench(b *testing.B, s store.Store, bare func(ctx context.Context) error) {
	b.Run("BareInsertCommit", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := bare(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendOne", func(b *testing.B) { benchAppendOne(b, s) })
	b.Run("AppendTurn", func(b *testing.B) { benchAppendTurn(b, s) })
	b.Run("Log100", func(b *testing.B) { benchLog100(b, s) })
	b.Run("ClaimDueExpiries", func(b *testing.B) { benchClaim(b, s) })
	b.Run("Interleaved", func(b *testing.B) { benchInterleaved(b, s, bare) })
}

// benchInterleaved runs a bare commit, an AppendOne and an AppendTurn in turn, each iteration,
// so that all three meet the same load: on a machine whose disk and cores are shared, separate
// sub-benchmarks run minutes apart and their ratio says more about the neighbours than about
// the store. It reports each one's median latency (µs) and the appends' medians over the bare
// one's; ns/op is the sum of the three.
func benchInterleaved(b *testing.B, s store.Store, bare func(ctx context.Context) error) {
	ctx := context.Background()
	one, turn := benchConv(b, s), benchConv(b, s)
	var oneSeq, turnSeq int64
	var lat [3][]time.Duration
	n := 0
	for b.Loop() {
		ops := [3]func() error{
			func() error { return bare(ctx) },
			func() (err error) {
				oneSeq, err = s.Append(ctx, one.ID, oneSeq, store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "bench", Data: BareRow}}})
				return err
			},
			func() (err error) {
				turnSeq, err = s.Append(ctx, turn.ID, turnSeq, turnBatch(n))
				return err
			},
		}
		for i, op := range ops {
			start := time.Now()
			if err := op(); err != nil {
				b.Fatal(err)
			}
			lat[i] = append(lat[i], time.Since(start))
		}
		n++
	}
	med := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Nanoseconds()) / 1e3
	}
	bareMed, oneMed, turnMed := med(lat[0]), med(lat[1]), med(lat[2])
	b.ReportMetric(bareMed, "bare-µs")
	b.ReportMetric(oneMed, "one-µs")
	b.ReportMetric(turnMed, "turn-µs")
	b.ReportMetric(oneMed/bareMed, "one/bare")
	b.ReportMetric(turnMed/bareMed, "turn/bare")
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
