package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/llm"
	"parley/internal/llm/llmtest"
	"parley/internal/store"
)

// BenchmarkApprove measures one approval in a two-process cluster on one PostgreSQL, with the
// request (and the subscriber that waits for the final answer) on the owner, or on the other
// process (the resolve forwarded, the events crossing back). Each iteration approves one
// conversation that awaits a gated call and waits for its final answer. Reported per mode:
// ack-p50/p99 (resolve acknowledged) and final-p50/p99 (approve → final answer seen), and the
// notifications and forwards per approval. Both modes run in the same process and sitting;
// run with -count to interleave them.
func BenchmarkApprove(b *testing.B) {
	w := newWorld(b)
	a, other := w.start(procOptions{}), w.start(procOptions{})
	for _, mode := range []struct {
		name string
		at   *proc
	}{{"owner", a}, {"non_owner", other}} {
		b.Run(mode.name, func(b *testing.B) {
			convs := prepare(b, w, a, b.N)
			before := [2]int64{a.node.Stats().Notifications + other.node.Stats().Notifications, a.node.Stats().Forwarded + other.node.Stats().Forwarded}
			acks, finals := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for _, conv := range convs {
				sub, err := mode.at.m.Subscribe(context.Background(), conv, w.ann)
				if err != nil {
					b.Fatal(err)
				}
				began := time.Now()
				if _, err := mode.at.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
					b.Fatal(err)
				}
				acks = append(acks, time.Since(began))
				next(b, sub, "idle", func(e agent.Event) bool { return e.Type == agent.EventStatus && e.Status == store.StatusIdle })
				finals = append(finals, time.Since(began))
				sub.Close()
			}
			b.StopTimer()
			after := [2]int64{a.node.Stats().Notifications + other.node.Stats().Notifications, a.node.Stats().Forwarded + other.node.Stats().Forwarded}
			b.ReportMetric(pct(acks, 50), "ack-p50-ms")
			b.ReportMetric(pct(acks, 99), "ack-p99-ms")
			b.ReportMetric(pct(finals, 50), "final-p50-ms")
			b.ReportMetric(pct(finals, 99), "final-p99-ms")
			b.ReportMetric(float64(after[0]-before[0])/float64(b.N), "notify/approval")
			b.ReportMetric(float64(after[1]-before[1])/float64(b.N), "forwards/approval")
		})
	}
	// Idle: what a quiet two-process cluster sends in a few heartbeats.
	hb, nt := a.node.Stats().Heartbeats+other.node.Stats().Heartbeats, a.node.Stats().Notifications+other.node.Stats().Notifications
	time.Sleep(3 * testTTL)
	hb2, nt2 := a.node.Stats().Heartbeats+other.node.Stats().Heartbeats, a.node.Stats().Notifications+other.node.Stats().Notifications
	b.Logf("idle for %v with two processes (TTL %v): %d heartbeat writes, %d notifications", 3*testTTL, testTTL, hb2-hb, nt2-nt)
}

// prepare makes n conversations owned by a, each awaiting the approval of a gated call n1.
func prepare(b *testing.B, w *world, a *proc, n int) []string {
	b.Helper()
	respond := llmtest.Step{Respond: func(req llm.Request) llmtest.Step {
		if last := req.Messages[len(req.Messages)-1]; last.Role == llm.RoleTool {
			return llmtest.Reply("Noted.")
		}
		return llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "milk"}))
	}}
	for range 2 * n {
		w.model.Push(respond)
	}
	convs := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range convs {
		convs[i] = a.conversation(w.ann)
		wg.Add(1)
		go func(conv string) {
			defer wg.Done()
			if err := a.m.Send(context.Background(), conv, w.ann, "note milk"); err != nil {
				errs <- fmt.Errorf("send: %w", err)
			}
		}(convs[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for _, conv := range convs {
		a.await(conv, w.ann, "awaiting", awaiting("n1"))
	}
	return convs
}

func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100].Microseconds()) / 1000
}
