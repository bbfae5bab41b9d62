package agent

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"parley/internal/clock"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
)

// The scale benchmarks of issue 18 ("Scale in one process"), each at full size, on the embedded
// store: 100,000 hibernated conversations, 10,000 live awaiting ones, start-up with 10,000
// awaiting. Conversations are made by cloning one made through the real path (cloneConversation),
// since writing 100,000 logs one fsync at a time would take longer than the measurement.
// Figures go in docs/benchmarks.md ("Scale in one process"). PARLEY_SCALE_N overrides the sizes
// (a smoke run: PARLEY_SCALE_N=1000).

func scaleN(full int) int {
	if n, err := strconv.Atoi(os.Getenv("PARLEY_SCALE_N")); err == nil && n > 0 {
		return n
	}
	return full
}

// cloneConversation copies conversation id n times in the SQLite file at path (its row, log,
// calls, timers and steps), under new ids in one transaction, and returns the new ids.
func cloneConversation(b *testing.B, path, id string, n int) []string {
	b.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	// New ids: the template's first 24 hex digits, then the clone's number in 8 digits.
	const series = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) `
	newID := `substr(?, 1, 24) || printf('%08d', n.i)`
	for _, q := range []string{
		`INSERT INTO conversations (id, owner_id, title, status, last_seq, created_at, updated_at)
		 ` + series + `SELECT ` + newID + `, owner_id, title, status, last_seq, created_at, updated_at FROM conversations, n WHERE id = ?`,
		`INSERT INTO entries (conversation_id, seq, type, tool_call_id, actor, data, created_at)
		 ` + series + `SELECT ` + newID + `, seq, type, tool_call_id, actor, data, created_at FROM entries, n WHERE conversation_id = ?`,
		`INSERT INTO tool_calls (conversation_id, tool_call_id, name, executor, approval, approvers, status, pending_kind, args, result, prompt, expires_at, seq, created_at, updated_at)
		 ` + series + `SELECT ` + newID + `, tool_call_id, name, executor, approval, approvers, status, pending_kind, args, result, prompt, expires_at, seq, created_at, updated_at FROM tool_calls, n WHERE conversation_id = ?`,
		`INSERT INTO expiries (conversation_id, tool_call_id, at, claimed_until)
		 ` + series + `SELECT ` + newID + `, tool_call_id, at, claimed_until FROM expiries, n WHERE conversation_id = ?`,
		`INSERT INTO steps (conversation_id, key, attempts, next_attempt_at, last_error, updated_at)
		 ` + series + `SELECT ` + newID + `, key, attempts, next_attempt_at, last_error, updated_at FROM steps, n WHERE conversation_id = ?`,
	} {
		if _, err := tx.ExecContext(ctx, q, n, id, id); err != nil {
			b.Fatalf("clone: %v", err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s%08d", id[:24], i+1)
	}
	return ids
}

// memStats is the heap after two collections, and the goroutine stacks.
func memStats() (heapAlloc, stacks float64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapAlloc), float64(ms.StackInuse)
}

// scaleStore opens a fresh embedded store in dir.
func scaleStore(b *testing.B, path string, clk clock.Clock) store.Store {
	b.Helper()
	st, err := sqlitestore.Open(context.Background(), path, sqlitestore.WithClock(clk))
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// awaitingTemplate makes one conversation awaiting the approval of a gated server call through
// the real path (message, model, dry run, suspension with its durable expiry) and returns the
// store's path, the owner and the conversation; the store and manager are closed again.
func awaitingTemplate(b *testing.B) (path string, owner Principal, conv string) {
	b.Helper()
	ctx := context.Background()
	path = filepath.Join(b.TempDir(), "scale.db")
	clk := clock.NewFake(time.Now())
	st := scaleStore(b, path, clk)
	e := newBenchEnv(b, st, clk, gatedModel{}, benchTools(b, true), 1, nil)
	s := e.m.events.(*Hub).subscribeSize("", 64)
	if err := e.m.Send(ctx, e.convs[0], e.owner, "act"); err != nil {
		b.Fatal(err)
	}
	waitAll(b, s, e.convs, store.StatusAwaiting)
	s.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.m.Close(cctx); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	return path, e.owner, e.convs[0]
}

func scaleManager(b *testing.B, st store.Store, clk clock.Clock, idle time.Duration) *Manager {
	b.Helper()
	m := New(Config{Store: st, Provider: gatedModel{}, Tools: benchTools(b, true), Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), IdleTimeout: idle})
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

// BenchmarkScaleHibernated: the heap held for 100,000 conversations that were each revived
// (state rebuilt from a log with a finished turn) and then hibernated, in waves of 1,000 live at
// a time, over the heap of the started manager before any revival.
func BenchmarkScaleHibernated(b *testing.B) {
	n := scaleN(100_000)
	const wave = 1000
	for b.Loop() {
		ctx := context.Background()
		path := filepath.Join(b.TempDir(), "scale.db")
		clk := clock.NewFake(time.Now())
		st := scaleStore(b, path, clk)
		e := newBenchEnv(b, st, clk, gatedModel{}, benchTools(b, true), 1, nil)
		if _, err := st.Append(ctx, e.convs[0], 0, store.Batch{Entries: []store.Entry{
			{Type: store.EntryUserMessage, Actor: e.owner.UserID, Data: mustJSON(userMessageData{Text: "hello there"})},
			{Type: store.EntryAssistantMessage, Actor: "model", Data: mustJSON(assistantMessageData{Text: "Hello! How can I help?", Step: "llm:1:1"})},
		}}); err != nil {
			b.Fatal(err)
		}
		ids := cloneConversation(b, path, e.convs[0], n)
		m := scaleManager(b, st, clk, time.Minute)
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		base, baseStacks := memStats()
		for i := 0; i < len(ids); i += wave {
			var actors []*actor
			for _, id := range ids[i:min(i+wave, len(ids))] {
				if _, err := m.call(ctx, id, &request{kind: reqView, by: System}); err != nil {
					b.Fatal(err)
				}
				if a := m.live(id); a != nil {
					actors = append(actors, a)
				}
			}
			clk.Advance(time.Minute)
			for _, a := range actors {
				<-a.done
			}
		}
		heap, stacks := memStats()
		if s := m.Stats(); s.LiveActors != 0 || s.Hibernations < int64(n) {
			b.Fatalf("stats %+v, want every conversation hibernated", s)
		}
		b.ReportMetric((heap-base)/1e6, "MB-heap")
		b.ReportMetric((stacks-baseStacks)/1e6, "MB-stacks")
		b.ReportMetric((heap-base)/float64(n), "B/conversation")
		_ = st.Close()
	}
}

// BenchmarkScaleLiveAwaiting: the heap and goroutine stacks of 10,000 live actors, each holding
// a conversation awaiting an approval (with its dry-run plan), over the started manager's.
func BenchmarkScaleLiveAwaiting(b *testing.B) {
	n := scaleN(10_000)
	for b.Loop() {
		ctx := context.Background()
		path, _, conv := awaitingTemplate(b)
		clk := clock.NewFake(time.Now())
		ids := cloneConversation(b, path, conv, n)
		st := scaleStore(b, path, clk)
		m := scaleManager(b, st, clk, 24*time.Hour)
		// The base is taken before Start: whatever Start revives counts in the live figure.
		base, baseStacks := memStats()
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		startedLive := m.Stats().LiveActors
		for _, id := range ids {
			if _, err := m.call(ctx, id, &request{kind: reqView, by: System}); err != nil {
				b.Fatal(err)
			}
		}
		heap, stacks := memStats()
		s := m.Stats()
		if s.LiveActors < n || s.Pending["approval"] < n {
			b.Fatalf("stats %+v, want %d live awaiting", s, n)
		}
		b.ReportMetric((heap-base)/1e6, "MB-heap")
		b.ReportMetric((stacks-baseStacks)/1e6, "MB-stacks")
		b.ReportMetric((heap+stacks-base-baseStacks)/float64(n), "B/conversation")
		b.ReportMetric(float64(startedLive), "live-after-start")
		_ = st.Close()
	}
}

// BenchmarkScaleStartup: from opening the store to a started manager (ready: requests are
// served) with 10,000 conversations awaiting an approval, then the first request to one of them
// (its revival on demand). Reported in ms; the store's file is warm in the page cache.
func BenchmarkScaleStartup(b *testing.B) {
	n := scaleN(10_000)
	path, owner, conv := awaitingTemplate(b)
	ids := cloneConversation(b, path, conv, n-1)
	ids = append(ids, conv)
	for b.Loop() {
		ctx := context.Background()
		clk := clock.NewFake(time.Now())
		began := time.Now()
		st := scaleStore(b, path, clk)
		m := scaleManager(b, st, clk, 24*time.Hour)
		if err := m.Start(ctx); err != nil {
			b.Fatal(err)
		}
		ready := time.Since(began)
		v, err := m.View(ctx, ids[len(ids)/2], owner)
		if err != nil || v.Status != store.StatusAwaiting {
			b.Fatalf("view after start: %v %v", err, v.Status)
		}
		if _, err := m.call(ctx, ids[len(ids)/2], &request{kind: reqView, by: owner}); err != nil {
			b.Fatal(err)
		}
		first := time.Since(began) - ready
		b.ReportMetric(float64(ready.Microseconds())/1e3, "ms-to-ready")
		b.ReportMetric(float64(first.Microseconds())/1e3, "ms-first-revival")
		b.ReportMetric(float64(m.Stats().LiveActors), "live-actors")
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		if err := m.Close(cctx); err != nil {
			b.Fatal(err)
		}
		cancel()
		_ = st.Close()
	}
}
