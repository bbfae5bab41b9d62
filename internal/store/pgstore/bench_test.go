package pgstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/store/storetest"

	"github.com/jackc/pgx/v5"
)

// BenchmarkStore measures the store against its floor: BareInsertCommit is one single-row
// INSERT committed (autocommit) on the same database, through the same pool.
//
//	go test -run '^$' -bench . -count 5 ./internal/store/pgstore
func BenchmarkStore(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pgtest.NewURL(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Pool().Exec(ctx, `CREATE TABLE bare (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation_id text NOT NULL, data json)`); err != nil {
		b.Fatal(err)
	}
	storetest.Bench(b, s, func(ctx context.Context) error {
		_, err := s.Pool().Exec(ctx, `INSERT INTO bare (conversation_id, data) VALUES ($1, $2)`, "bench", []byte(storetest.BareRow))
		return err
	})
}

// BenchmarkApprovalWrites is the PostgreSQL side of one approval on the approve → final path
// (issue 18; docs/benchmarks.md): the three appends the agent makes — the decision (its entry,
// the call running, the expiry cancelled, the audit record), the tool's result (its entry, the
// call resolved) and the model's answer (its entry, the conversation idle) — from 16 writers at
// once, as the approvals workload has them. pg-cpu-µs/op is the CPU time of this database's
// backends (/proc, so PostgreSQL must run on this machine) per approval; client-cpu-µs/op is
// this process's. Each op's conversation is prepared before the timer starts.
//
//	go test -run '^$' -bench ApprovalWrites -benchtime 2000x ./internal/store/pgstore
func BenchmarkApprovalWrites(b *testing.B) {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, pgtest.NewURL(b)+"&pool_max_conns=8", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	args := json.RawMessage(`{"to":"bob@example.com","subject":"Report","body":"hello"}`)
	call := store.ToolCall{ToolCallID: "call_1", Name: "deliver_email", Executor: "server", Approval: "requires_approval",
		Approvers: "owner", Status: store.CallAwaiting, PendingKind: "approval", Args: args}
	convs := make([]string, b.N)
	for i := range convs {
		c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: "ana", Title: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Append(ctx, c.ID, 0, store.Batch{Status: store.StatusAwaiting,
			Entries: []store.Entry{
				{Type: store.EntryUserMessage, Actor: "ana", Data: json.RawMessage(`{"text":"send bob the report"}`)},
				{Type: store.EntryAssistantMessage, Actor: "model", Data: json.RawMessage(`{"text":"","calls":["call_1"]}`)},
				{Type: store.EntryToolCall, ToolCallID: "call_1", Actor: "model", Data: args},
			},
			Calls:    []store.ToolCall{call},
			Schedule: []store.Expiry{{ToolCallID: "call_1", At: time.Now().Add(time.Hour)}},
		}); err != nil {
			b.Fatal(err)
		}
		convs[i] = c.ID
	}
	approve := func(id string) error {
		running, resolved := call, call
		running.Status, running.PendingKind, running.Seq = "running", "", 3
		if _, err := s.Append(ctx, id, 3, store.Batch{Status: "dispatching", Urgent: true,
			Entries: []store.Entry{{Type: "decision", ToolCallID: "call_1", Actor: "ana", Data: json.RawMessage(`{"decision":"approve","by":"ana"}`)}},
			Calls:   []store.ToolCall{running},
			Cancel:  []string{"call_1"},
			Audit:   []store.AuditRecord{{ToolCallID: "call_1", Tool: "deliver_email", ActorID: "ana", Action: "approve", ArgsHash: "h"}},
		}); err != nil {
			return err
		}
		resolved.Status, resolved.PendingKind, resolved.Seq = "resolved", "", 3
		resolved.Result = json.RawMessage(`{"ok":true,"result":{"id":"msg-1","status":"queued"}}`)
		if _, err := s.Append(ctx, id, 4, store.Batch{Status: "generating",
			Entries: []store.Entry{{Type: "tool_result", ToolCallID: "call_1", Actor: "system", Data: json.RawMessage(`{"envelope":{"ok":true},"status":"resolved"}`)}},
			Calls:   []store.ToolCall{resolved},
		}); err != nil {
			return err
		}
		_, err := s.Append(ctx, id, 5, store.Batch{Status: store.StatusIdle,
			Entries: []store.Entry{{Type: store.EntryAssistantMessage, Actor: "model", Data: json.RawMessage(`{"text":"sent"}`)}},
		})
		return err
	}

	pg0, self0 := backendsCPU(ctx, b, s), selfCPU()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(convs)); i = next.Add(1) - 1 {
				if err := approve(convs[i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	pg, self := cpuSince(pg0, backendsCPU(ctx, b, s)), selfCPU()-self0
	b.ReportMetric(float64(pg.Microseconds())/float64(b.N), "pg-cpu-µs/op")
	b.ReportMetric(float64(self.Microseconds())/float64(b.N), "client-cpu-µs/op")
}

// backendsCPU is the CPU time so far of each client backend connected to s's database, by pid.
// An autovacuum worker is left out: one that happened to be on the database at the end was
// counted with its whole life.
func backendsCPU(ctx context.Context, b *testing.B, s *pgstore.Store) map[int]time.Duration {
	rows, err := s.Pool().Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		out[int(pid)] = backendCPU(b, int(pid))
	}
	return out
}

// cpuSince sums what each backend in now used since before (one that ended is not counted).
func cpuSince(before, now map[int]time.Duration) time.Duration {
	var sum time.Duration
	for pid, t := range now {
		sum += t - before[pid]
	}
	return sum
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is a backend's CPU time so far: the scheduler's count in nanoseconds
// (/proc/PID/schedstat, the process's one thread: a backend has no other) where the kernel keeps
// one, else utime+stime from /proc/PID/stat in clock ticks of 10 ms, which loses up to a tick per
// backend and read — 10 µs per approval per backend at 1,000 approvals.
func backendCPU(b *testing.B, pid int) time.Duration {
	if raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid)); err == nil {
		if f := strings.Fields(string(raw)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	path := fmt.Sprintf("/proc/%d/stat", pid)
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatalf("read %s (is PostgreSQL on this machine?): %v", path, err)
	}
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}
