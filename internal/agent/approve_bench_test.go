package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
)

// approveBench is n conversations on the embedded store, each awaiting the approval of one
// gated server call (the tool "act"); approve(i) approves conversation i's call and returns
// once its turn is over (tool run, model call, final answer: three more appends).
type approveBench struct {
	e   *benchEnv
	sub *Subscription
	ids []string
}

func newApproveBench(b *testing.B, n int, mod func(*Config)) *approveBench {
	b.Helper()
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), sqlitestore.WithClock(clk))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	e := newBenchEnv(b, st, clk, gatedModel{}, benchTools(b, true), n, mod)
	sub := e.m.events.(*Hub).subscribeSize("", n*16+64)
	b.Cleanup(sub.Close)
	for _, c := range e.convs {
		if err := e.m.Send(ctx, c, e.owner, "act"); err != nil {
			b.Fatal(err)
		}
	}
	waitAll(b, sub, e.convs, store.StatusAwaiting)
	ab := &approveBench{e: e, sub: sub, ids: make([]string, n)}
	for i, c := range e.convs {
		v, err := e.m.View(ctx, c, System)
		if err != nil {
			b.Fatal(err)
		}
		for id := range v.Pending() {
			ab.ids[i] = id
		}
	}
	return ab
}

func (ab *approveBench) approve(b *testing.B, i int) {
	conv := ab.e.convs[i]
	if _, err := ab.e.m.Resolve(context.Background(), conv, ab.ids[i], Resolution{Decision: "approve"}, ab.e.owner); err != nil {
		b.Fatal(err)
	}
	for ev := range ab.sub.C {
		if ev.ConversationID == conv && ev.Type == EventStatus && ev.Status == store.StatusIdle {
			return
		}
	}
	b.Fatal("subscription closed")
}

// BenchmarkApprovePath measures approve → final answer on the embedded store with an
// in-process model: the Resolve (decision durable), the tool run, the model call and the final
// answer, one conversation at a time. CPU is the process's user+system time per approval.
func BenchmarkApprovePath(b *testing.B) {
	ab := newApproveBench(b, b.N, nil)
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for i := 0; i < b.N; i++ {
		ab.approve(b, i)
	}
}
