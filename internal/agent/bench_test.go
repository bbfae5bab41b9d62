package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/sqlitestore"
	"parley/internal/tools"
)

// benchEnv is a manager over a store with one owner and n conversations.
type benchEnv struct {
	st    store.Store
	clk   *clock.Fake
	m     *Manager
	owner Principal
	convs []string
}

func newBenchEnv(b *testing.B, st store.Store, clk *clock.Fake, prov llm.Provider, reg *tools.Registry, n int, mod func(*Config)) *benchEnv {
	b.Helper()
	ctx := context.Background()
	u, err := st.CreateUser(ctx, store.User{Name: fmt.Sprint("owner-", time.Now().UnixNano()), Role: store.RoleMember, PasswordHash: []byte("x")})
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{st: st, clk: clk, owner: Principal{UserID: u.ID, Role: u.Role, Via: "session"}}
	for i := range n {
		c, err := st.CreateConversation(ctx, store.Conversation{OwnerID: u.ID, Title: fmt.Sprint("bench ", i)})
		if err != nil {
			b.Fatal(err)
		}
		e.convs = append(e.convs, c.ID)
	}
	cfg := Config{Store: st, Provider: prov, Tools: reg, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&cfg)
	}
	e.m = New(cfg)
	if err := e.m.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.m.Close(ctx)
	})
	return e
}

// gatedModel calls the gated tool "act" on a conversation's first LLM call and answers "done"
// once it has a result.
type gatedModel struct{}

func (gatedModel) Name() string       { return "bench" }
func (gatedModel) ToolFormat() string { return "openai" }
func (gatedModel) Stream(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == llm.RoleUser {
		return llm.Response{ToolCalls: []llm.ToolCall{{ID: "act_" + fmt.Sprint(len(req.Messages)), Name: "act", Args: json.RawMessage(`{"n":1}`)}}}, nil
	}
	return llm.Response{Text: "done"}, nil
}

func benchTools(b *testing.B, gated bool) *tools.Registry {
	approval := tools.Auto
	if gated {
		approval = tools.RequiresApproval
	}
	t, err := tools.New(tools.Spec{Name: "act", Description: "act", Executor: tools.Server, Approval: approval,
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			return map[string]any{"n": args["n"]}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	reg, err := tools.NewRegistry(t)
	if err != nil {
		b.Fatal(err)
	}
	return reg
}

// waitAll waits until every conversation in convs reached status, watching the global stream.
func waitAll(b *testing.B, sub *Subscription, convs []string, status string) {
	b.Helper()
	left := map[string]bool{}
	for _, c := range convs {
		left[c] = true
	}
	timer := time.NewTimer(5 * time.Minute)
	defer timer.Stop()
	for len(left) > 0 {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				b.Fatal("subscription closed (lagged)")
			}
			if ev.Type == EventStatus && ev.Status == status {
				delete(left, ev.ConversationID)
			}
		case <-timer.C:
			b.Fatalf("%d conversations never reached %s", len(left), status)
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*p)]
}

// BenchmarkResolveAckPostgres measures how long Resolve takes to acknowledge an approval (the
// decision durable in PostgreSQL) with 16 concurrent resolvers over 200 pending conversations,
// beside a bare single-row INSERT commit through the same pool in the same run: each resolver
// alternates a resolve and a bare INSERT, so both see the same load. Each resolve also sets its
// conversation's turn going (tool run, LLM call, more appends), which competes with later
// acknowledgements as it would in production. The pool has 32 connections (pool_max_conns in
// the URL); pgx's default (4 on this machine) makes every figure a queue for connections.
func BenchmarkResolveAckPostgres(b *testing.B) {
	const convs, workers = 200, 16
	ctx := context.Background()
	pg, err := pgstore.Open(ctx, pgtest.NewURL(b)+"&pool_max_conns=32", nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pg.Close() })
	if _, err := pg.Pool().Exec(ctx, `CREATE TABLE bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation_id text NOT NULL, data json)`); err != nil {
		b.Fatal(err)
	}
	var ack, bare []time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		clk := clock.NewFake(time.Now())
		e := newBenchEnv(b, pg, clk, gatedModel{}, benchTools(b, true), convs, nil)
		sub := e.m.events.(*Hub).subscribeSize("", convs*16)
		for _, c := range e.convs {
			if err := e.m.Send(ctx, c, e.owner, "act"); err != nil {
				b.Fatal(err)
			}
		}
		waitAll(b, sub, e.convs, store.StatusAwaiting)
		ids := map[string]string{}
		for _, c := range e.convs {
			v, err := e.m.View(ctx, c, System)
			if err != nil {
				b.Fatal(err)
			}
			for id := range v.Pending() {
				ids[c] = id
			}
		}
		b.StartTimer()

		work := make(chan string, convs)
		for _, c := range e.convs {
			work <- c
		}
		close(work)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c := range work {
					start := time.Now()
					if _, err := e.m.Resolve(ctx, c, ids[c], Resolution{Decision: "approve"}, e.owner); err != nil {
						b.Error(err)
						return
					}
					a := time.Since(start)
					start = time.Now()
					if _, err := pg.Pool().Exec(ctx, `INSERT INTO bare (conversation_id, data) VALUES ($1, $2)`, c, []byte(`{"decision":"approve"}`)); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(start)
					mu.Lock()
					ack = append(ack, a)
					bare = append(bare, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		b.StopTimer()
		waitAll(b, sub, e.convs, store.StatusIdle)
		sub.Close()
		b.StartTimer()
	}
	ap50, ap99 := percentile(ack, 0.50), percentile(ack, 0.99)
	bp50, bp99 := percentile(bare, 0.50), percentile(bare, 0.99)
	b.ReportMetric(float64(ap50.Microseconds()), "ack-p50-µs")
	b.ReportMetric(float64(ap99.Microseconds()), "ack-p99-µs")
	b.ReportMetric(float64(bp50.Microseconds()), "insert-p50-µs")
	b.ReportMetric(float64(bp99.Microseconds()), "insert-p99-µs")
	b.ReportMetric(float64(ap50)/float64(bp50), "p50-ratio")
	b.ReportMetric(float64(ap99)/float64(bp99), "p99-ratio")
}

// BenchmarkLoopPerToolCall measures one turn with one server tool call (user message, LLM call,
// tool run, LLM call, answer) on the embedded store with an in-process model. The turn makes
// four appends; "store-floor" makes four appends of the same entries with nothing else, so the
// difference is the loop's own overhead.
func BenchmarkLoopPerToolCall(b *testing.B) {
	ctx := context.Background()
	open := func(b *testing.B) (store.Store, *clock.Fake) {
		clk := clock.NewFake(time.Now())
		st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), sqlitestore.WithClock(clk))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		return st, clk
	}
	b.Run("turn", func(b *testing.B) {
		st, clk := open(b)
		// A fresh conversation per turn: the cost of one tool call, not of an ever longer context.
		e := newBenchEnv(b, st, clk, gatedModel{}, benchTools(b, false), b.N, nil)
		sub := e.m.events.Subscribe("")
		defer sub.Close()
		b.ResetTimer()
		defer reportCPU(b)()
		for i := 0; i < b.N; i++ {
			if err := e.m.Send(ctx, e.convs[i], e.owner, "act"); err != nil {
				b.Fatal(err)
			}
			for ev := range sub.C {
				if ev.Type == EventStatus && ev.Status == store.StatusIdle {
					break
				}
			}
		}
	})
	b.Run("store-floor", func(b *testing.B) {
		st, _ := open(b)
		u, err := st.CreateUser(ctx, store.User{Name: "floor", Role: store.RoleMember, PasswordHash: []byte("x")})
		if err != nil {
			b.Fatal(err)
		}
		var convs []store.Conversation
		for range b.N {
			c, err := st.CreateConversation(ctx, store.Conversation{OwnerID: u.ID})
			if err != nil {
				b.Fatal(err)
			}
			convs = append(convs, c)
		}
		var (
			c   store.Conversation
			seq int64
		)
		appendOne := func(bt store.Batch) {
			n, err := st.Append(ctx, c.ID, seq, bt)
			if err != nil {
				b.Fatal(err)
			}
			seq = n
		}
		b.ResetTimer()
		defer reportCPU(b)()
		for i := 0; i < b.N; i++ {
			c, seq = convs[i], 0
			id := fmt.Sprint("act_", i)
			appendOne(store.Batch{Status: store.StatusGenerating, Entries: []store.Entry{{Type: store.EntryUserMessage, Data: mustJSON(userMessageData{Text: "act"})}}})
			appendOne(store.Batch{Status: store.StatusDispatching,
				Entries: []store.Entry{
					{Type: store.EntryAssistantMessage, Data: mustJSON(assistantMessageData{ToolCalls: []assistantCallData{{ID: id, Name: "act", Args: json.RawMessage(`{"n":1}`)}}})},
					{Type: store.EntryToolCall, ToolCallID: id, Data: mustJSON(toolCallData{Name: "act", Args: json.RawMessage(`{"n":1}`)})},
				},
				Calls: []store.ToolCall{{ConversationID: c.ID, ToolCallID: id, Name: "act", Executor: "server", Approval: "auto", Approvers: "owner", Status: store.CallRunning, Args: json.RawMessage(`{"n":1}`)}}})
			appendOne(store.Batch{Status: store.StatusGenerating,
				Entries: []store.Entry{{Type: store.EntryToolResult, ToolCallID: id, Data: mustJSON(resultData{Envelope: json.RawMessage(`{"ok":true,"result":{"n":1}}`), Status: store.CallResolved})}},
				Calls:   []store.ToolCall{{ConversationID: c.ID, ToolCallID: id, Name: "act", Executor: "server", Approval: "auto", Approvers: "owner", Status: store.CallResolved, Args: json.RawMessage(`{"n":1}`), Result: json.RawMessage(`{"ok":true,"result":{"n":1}}`)}}})
			appendOne(store.Batch{Status: store.StatusIdle, Entries: []store.Entry{{Type: store.EntryAssistantMessage, Data: mustJSON(assistantMessageData{Text: "done"})}}})
		}
	})
}

// reportCPU reports the process CPU time (user + system) per operation: on a shared machine it
// varies far less than wall time, which waits for whatever else runs.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// BenchmarkMemory reports the heap held for 10,000 hibernated conversations (each with a
// finished turn in its log) and for 1,000 live conversations awaiting an approval.
func BenchmarkMemory(b *testing.B) {
	for i := 0; i < b.N; i++ {
		hib, live := memoryFigures(b)
		b.ReportMetric(hib/1e6, "MB-10k-hibernated")
		b.ReportMetric(live/1e6, "MB-1k-live-awaiting")
	}
}

func heap() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc)
}

func memoryFigures(b *testing.B) (hibernated, live float64) {
	b.StopTimer()
	defer b.StartTimer()
	const nHib, nLive = 10000, 1000
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "mem.db"), sqlitestore.WithClock(clk))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	e := newBenchEnv(b, st, clk, gatedModel{}, benchTools(b, true), nHib+nLive, func(c *Config) { c.IdleTimeout = time.Minute })
	// A finished turn in each hibernated conversation's log, written directly: a user message
	// and the answer.
	for _, c := range e.convs[:nHib] {
		if _, err := st.Append(ctx, c, 0, store.Batch{Entries: []store.Entry{
			{Type: store.EntryUserMessage, Actor: e.owner.UserID, Data: mustJSON(userMessageData{Text: "hello there"})},
			{Type: store.EntryAssistantMessage, Actor: "model", Data: mustJSON(assistantMessageData{Text: "Hello! How can I help?", Step: "llm:1:1"})},
		}}); err != nil {
			b.Fatal(err)
		}
	}
	sub := e.m.events.(*Hub).subscribeSize("", 8*nLive)
	defer sub.Close()
	base := heap()
	// Revive every one (rebuilding its state from the log), then let them hibernate.
	for _, c := range e.convs[:nHib] {
		if _, err := e.m.View(ctx, c, System); err != nil {
			b.Fatal(err)
		}
		if _, err := e.m.ensureStarted(c); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range e.convs[:nHib] {
		if _, err := e.m.call(ctx, c, &request{kind: reqView}); err != nil {
			b.Fatal(err)
		}
	}
	e.m.mu.Lock()
	var actors []*actor
	for _, a := range e.m.actors {
		actors = append(actors, a)
	}
	e.m.mu.Unlock()
	clk.Advance(time.Minute)
	for _, a := range actors {
		<-a.done
	}
	actors = nil // the benchmark's own references must not count
	hibernated = heap() - base
	// 1,000 live conversations, each awaiting an approval reached through the loop.
	base = heap()
	for _, c := range e.convs[nHib:] {
		if err := e.m.Send(ctx, c, e.owner, "act"); err != nil {
			b.Fatal(err)
		}
	}
	waitAll(b, sub, e.convs[nHib:], store.StatusAwaiting)
	live = heap() - base
	return hibernated, live
}
