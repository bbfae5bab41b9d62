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

// BenchmarkApprove measures approvals: on one process alone (its own database), and in a
// two-process cluster on one PostgreSQL with the request (and the subscriber that waits for the
// final answer) on the owner or on the other process (the resolve forwarded, the events
// crossing back); by 1 or 16 concurrent clients. Each iteration approves one conversation that
// awaits a gated call and waits for its final answer. Reported: ack-p50/p99 (resolve
// acknowledged), final-p50/p99 (approve → final answer seen), notifications and forwards per
// approval. Every mode runs in the same process and sitting; run with -count to interleave.
func BenchmarkApprove(b *testing.B) {
	alone := newWorld(b)
	single := alone.start(procOptions{})
	w := newWorld(b)
	a, other := w.start(procOptions{}), w.start(procOptions{})
	stats := func() (notify, forwards int64) {
		return a.node.Stats().Notifications + other.node.Stats().Notifications + single.node.Stats().Notifications,
			a.node.Stats().Forwarded + other.node.Stats().Forwarded
	}
	for _, clients := range []int{1, 16} {
		for _, mode := range []struct {
			name  string
			w     *world
			owner *proc
			at    *proc
		}{{"single_process", alone, single, single}, {"owner", w, a, a}, {"non_owner", w, a, other}} {
			b.Run(fmt.Sprintf("%s/clients=%d", mode.name, clients), func(b *testing.B) {
				convs := prepare(b, mode.w, mode.owner, b.N)
				n0, f0 := stats()
				var mu sync.Mutex
				acks, finals := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
				work := make(chan string, len(convs))
				for _, c := range convs {
					work <- c
				}
				close(work)
				b.ResetTimer()
				var wg sync.WaitGroup
				for range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for conv := range work {
							ack, final := approve(b, mode.w, mode.at, conv)
							mu.Lock()
							acks, finals = append(acks, ack), append(finals, final)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				n1, f1 := stats()
				b.ReportMetric(pct(acks, 50), "ack-p50-ms")
				b.ReportMetric(pct(acks, 99), "ack-p99-ms")
				b.ReportMetric(pct(finals, 50), "final-p50-ms")
				b.ReportMetric(pct(finals, 99), "final-p99-ms")
				b.ReportMetric(float64(n1-n0)/float64(b.N), "notify/approval")
				b.ReportMetric(float64(f1-f0)/float64(b.N), "forwards/approval")
			})
		}
	}
	// Idle: what a quiet two-process cluster sends in a few heartbeats.
	hb, nt := a.node.Stats().Heartbeats+other.node.Stats().Heartbeats, a.node.Stats().Notifications+other.node.Stats().Notifications
	time.Sleep(3 * testTTL)
	hb2, nt2 := a.node.Stats().Heartbeats+other.node.Stats().Heartbeats, a.node.Stats().Notifications+other.node.Stats().Notifications
	b.Logf("idle for %v with two processes (TTL %v): %d heartbeat writes, %d notifications", 3*testTTL, testTTL, hb2-hb, nt2-nt)
}

// approve resolves conv's pending n1 through p with a subscriber there and returns how long
// the acknowledgement and the final answer took.
func approve(b *testing.B, w *world, p *proc, conv string) (ack, final time.Duration) {
	sub, err := p.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		b.Error(err)
		return
	}
	defer sub.Close()
	began := time.Now()
	if _, err := p.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
		b.Error(err)
		return
	}
	ack = time.Since(began)
	next(b, sub, "idle", func(e agent.Event) bool { return e.Type == agent.EventStatus && e.Status == store.StatusIdle })
	return ack, time.Since(began)
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
