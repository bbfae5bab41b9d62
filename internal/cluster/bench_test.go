package cluster_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
// approval, claims asked of the database per approval. Every mode runs in the same process and sitting; run with -count to interleave.
func BenchmarkApprove(b *testing.B) {
	alone := newWorld(b)
	single := alone.start(procOptions{})
	w := newWorld(b)
	a, other := w.start(procOptions{}), w.start(procOptions{})
	stats := func() (notify, forwards, claims int64) {
		return a.node.Stats().Notifications + other.node.Stats().Notifications + single.node.Stats().Notifications,
			a.node.Stats().Forwarded + other.node.Stats().Forwarded,
			a.node.Stats().Claims + other.node.Stats().Claims + single.node.Stats().Claims
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
				n0, f0, c0 := stats()
				cpu0, pg0 := selfCPU(b), postgresCPU()
				var mu sync.Mutex
				acks, finals, crossings := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
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
							ack, final, cross := approve(b, mode.w, mode.owner, mode.at, conv)
							mu.Lock()
							acks, finals = append(acks, ack), append(finals, final)
							if mode.at != mode.owner {
								crossings = append(crossings, cross)
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				b.StopTimer()
				n1, f1, c1 := stats()
				cpu1, pg1 := selfCPU(b), postgresCPU()
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "cpu-us/approval")
				b.ReportMetric(float64((pg1-pg0).Microseconds())/float64(b.N), "pg-cpu-us/approval")
				b.ReportMetric(pct(acks, 50), "ack-p50-ms")
				b.ReportMetric(pct(acks, 99), "ack-p99-ms")
				b.ReportMetric(pct(finals, 50), "final-p50-ms")
				b.ReportMetric(pct(finals, 99), "final-p99-ms")
				if len(crossings) > 0 {
					b.ReportMetric(pct(crossings, 50), "cross-p50-ms")
					b.ReportMetric(pct(crossings, 99), "cross-p99-ms")
				}
				b.ReportMetric(float64(n1-n0)/float64(b.N), "notify/approval")
				b.ReportMetric(float64(f1-f0)/float64(b.N), "forwards/approval")
				b.ReportMetric(float64(c1-c0)/float64(b.N), "claims/approval")
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
// the acknowledgement and the final answer took. When p is not the owner it also returns how
// much later the final answer reached p's subscriber than a subscriber on the owner (the
// events' crossing).
func approve(b *testing.B, w *world, owner, p *proc, conv string) (ack, final, cross time.Duration) {
	sub, err := p.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		b.Error(err)
		return
	}
	defer sub.Close()
	isIdle := func(e agent.Event) bool { return e.Type == agent.EventStatus && e.Status == store.StatusIdle }
	var atOwner chan time.Time
	if owner != p {
		// Straight on the owner's node: through the agent, its access check would read the
		// store once more per approval, which the owner mode does not pay.
		osub := owner.node.Subscribe(conv)
		defer osub.Close()
		atOwner = make(chan time.Time, 1)
		go func() {
			next(b, osub, "idle on the owner", isIdle)
			atOwner <- time.Now()
		}()
	}
	began := time.Now()
	if _, err := p.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
		b.Error(err)
		return
	}
	ack = time.Since(began)
	next(b, sub, "idle", isIdle)
	final = time.Since(began)
	if atOwner != nil {
		cross = time.Since(<-atOwner) - time.Since(began.Add(final))
	}
	return ack, final, cross
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

// selfCPU is the CPU time (user and system) this process used so far: every "process" of
// the benchmark runs in it.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postgresCPU is the CPU time (user and system) of every postgres process on this machine so
// far, from /proc (other databases' work included: quote it from a quiet machine).
func postgresCPU() time.Duration {
	dirs, _ := os.ReadDir("/proc")
	var ticks int64
	for _, d := range dirs {
		if _, err := strconv.Atoi(d.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open || s[open+1:end] != "postgres" {
			continue
		}
		f := strings.Fields(s[end+2:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[(len(s)-1)*p/100].Microseconds()) / 1000
}
