package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"

	"parley/internal/store"
	"parley/internal/store/internal/sqlcore"
	"parley/internal/store/pgtest"
)

// groupFixture opens a store with opts and creates n conversations owned by one user.
func groupFixture(t *testing.T, n int, opts ...Option) (*Store, []string) {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, pgtest.NewURL(t), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	u, err := s.CreateUser(ctx, store.User{Name: "ann", Role: store.RoleMember, PasswordHash: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range ids {
		c, err := s.CreateConversation(ctx, store.Conversation{OwnerID: u.ID, Title: fmt.Sprint("c", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.ID
	}
	return s, ids
}

func textBatch(text string) store.Batch {
	return store.Batch{Entries: []store.Entry{{Type: store.EntryUserMessage, Actor: "u", Data: []byte(fmt.Sprintf(`{"text":%q}`, text))}}}
}

func newReq(ctx context.Context, s *Store, conv string, after int64, b store.Batch) *appendReq {
	return &appendReq{ctx: ctx, conv: conv, afterSeq: after, batch: b, now: s.Stamp(), done: make(chan error, 1)}
}

func logTexts(t *testing.T, s *Store, conv string) []string {
	t.Helper()
	es, err := s.Log(t.Context(), conv, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.Data)
	}
	return out
}

// TestGroupCommitIsolatesTheAppendAtFault commits one group in which one append expects a
// sequence its log is not at and another breaks a constraint: those two get their own errors,
// and the others are written, each once.
func TestGroupCommitIsolatesTheAppendAtFault(t *testing.T) {
	ctx := t.Context()
	s, ids := groupFixture(t, 4, WithCommitters(0))
	if _, err := s.Append(ctx, ids[1], 0, textBatch("first")); err != nil {
		t.Fatal(err)
	}
	// The same call logged twice is refused by the entries' unique index.
	call := store.Entry{Type: store.EntryToolCall, ToolCallID: "same", Actor: "model", Data: []byte(`{}`)}
	dup := store.Batch{Entries: []store.Entry{call, call}}
	reqs := []*appendReq{
		newReq(ctx, s, ids[0], 0, textBatch("a")),
		newReq(ctx, s, ids[1], 0, textBatch("stale")), // the log is at 1
		newReq(ctx, s, ids[2], 0, textBatch("c")),
		newReq(ctx, s, ids[3], 0, dup),
	}
	s.commitGroup(ctx, take(slices.Clone(reqs), 0)) // commitGroup orders its slice by conversation

	errs := make([]error, len(reqs))
	for i, r := range reqs {
		errs[i] = <-r.done
	}
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("the sound appends failed: %v, %v", errs[0], errs[2])
	}
	if !errors.Is(errs[1], store.ErrConflict) {
		t.Fatalf("the stale append: err = %v, want ErrConflict", errs[1])
	}
	if errs[3] == nil {
		t.Fatal("the append breaking a unique index succeeded")
	}
	if got := s.groupFallbacks.Load(); got != 1 {
		t.Fatalf("group fallbacks = %d, want 1", got)
	}
	for i, want := range [][]string{{`{"text":"a"}`}, {`{"text":"first"}`}, {`{"text":"c"}`}, {}} {
		if got := logTexts(t, s, ids[i]); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("conversation %d log = %q, want %q", i, got, want)
		}
	}
}

// TestGroupCommitManyWriters appends from many conversations at once through one committer,
// so appends queue and go in groups, and checks every log is whole and in order.
func TestGroupCommitManyWriters(t *testing.T) {
	const convs, each = 60, 5
	s, ids := groupFixture(t, convs, WithCommitters(1))
	var wg sync.WaitGroup
	errs := make(chan error, convs)
	for _, id := range ids {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Append(t.Context(), id, int64(i), textBatch(fmt.Sprint(i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, id := range ids {
		got := logTexts(t, s, id)
		if len(got) != each {
			t.Fatalf("log of %s has %d entries, want %d", id, len(got), each)
		}
		for i, d := range got {
			if want := fmt.Sprintf(`{"text":"%d"}`, i); d != want {
				t.Fatalf("entry %d of %s = %s, want %s", i+1, id, d, want)
			}
		}
		c, err := s.GetConversation(t.Context(), id)
		if err != nil || c.LastSeq != each {
			t.Fatalf("conversation %s last_seq = %d (err %v), want %d", id, c.LastSeq, err, each)
		}
	}
	if s.groupedAppends.Load() == 0 {
		t.Fatal("no append went in a group: the test did not exercise group commit")
	}
	t.Logf("%d of %d appends went in groups", s.groupedAppends.Load(), convs*each)
	if s.groupFallbacks.Load() != 0 {
		t.Fatalf("%d groups fell back with no append at fault", s.groupFallbacks.Load())
	}
}

// TestGroupCommitAbandonedAppendWritesNothing: an append whose caller gave up before a
// committer took it is skipped, so the caller's error is the truth about the log.
func TestGroupCommitAbandonedAppendWritesNothing(t *testing.T) {
	s, ids := groupFixture(t, 2, WithCommitters(0))
	// A grouper whose one slot the test holds: appends stay queued until the test commits them.
	g := newGrouper(1)
	g.slots <- struct{}{}
	s.group = g
	ctx, cancel := context.WithCancel(t.Context())
	result := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, ids[0], 0, textBatch("gave up"))
		result <- err
	}()
	r := <-g.queue
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned append: err = %v, want context.Canceled", err)
	}
	live := newReq(t.Context(), s, ids[1], 0, textBatch("kept"))
	group := take([]*appendReq{r, live}, 0)
	if len(group) != 1 || group[0] != live {
		t.Fatalf("take kept %d appends, want only the live one", len(group))
	}
	s.commitGroup(t.Context(), group)
	if err := <-live.done; err != nil {
		t.Fatal(err)
	}
	if got := logTexts(t, s, ids[0]); len(got) != 0 {
		t.Fatalf("the abandoned append was written: %q", got)
	}
	if got := logTexts(t, s, ids[1]); len(got) != 1 {
		t.Fatalf("the live append's log = %q", got)
	}

	// Close fails what is still queued, waits for the group in flight (the test's slot), and
	// refuses what comes after.
	go func() {
		_, err := s.Append(t.Context(), ids[1], 1, textBatch("late"))
		result <- err
	}()
	for len(g.queue) == 0 {
		runtime.Gosched()
	}
	stopped := make(chan struct{})
	go func() { g.stop(); close(stopped) }()
	if err := <-result; !errors.Is(err, errClosed) {
		t.Fatalf("append queued at Close: err = %v, want errClosed", err)
	}
	// stop closed the grouper (the queued append saw it) and now waits for the test's slot.
	select {
	case <-stopped:
		t.Fatal("stop returned while a group was still in flight")
	default:
	}
	<-g.slots // the group in flight ends
	<-stopped
	if _, err := s.Append(t.Context(), ids[1], 1, textBatch("after")); !errors.Is(err, errClosed) {
		t.Fatalf("append after Close: err = %v, want errClosed", err)
	}
	if got := logTexts(t, s, ids[1]); len(got) != 1 {
		t.Fatalf("appends refused at Close were written: %q", got)
	}
}

// TestMergedGroupWritesWhatSingleAppendsWrite commits a group through the merged statements
// (one per table) and the same batches, with the same stamps, one append at a time to twin
// conversations, and compares every row they left.
func TestMergedGroupWritesWhatSingleAppendsWrite(t *testing.T) {
	ctx := t.Context()
	s, ids := groupFixture(t, 9, WithCommitters(0))
	// reference writes an append as the statements both stores share (sqlcore.PlanBatch and the
	// audit chain's, as sqlcore.Core.Append runs them), which parley_append must match.
	reference := func(conv string, after int64, b store.Batch, now time.Time) {
		t.Helper()
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		tag, err := tx.Exec(ctx, sqlcore.AdvanceSQL, after+int64(len(b.Entries)), now, b.Status, conv, after)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("advance %s: %v, %d rows", conv, err, tag.RowsAffected())
		}
		for _, st := range sqlcore.PlanBatch(conv, after, now, b) {
			if _, err := tx.Exec(ctx, st.SQL, st.Args...); err != nil {
				t.Fatalf("%s: %v", st.SQL, err)
			}
		}
		if audit := sqlcore.PlanWrites(conv, after, now, b).Audit; len(audit) > 0 {
			var seq int64
			var head string
			if _, err := tx.Exec(ctx, sqlcore.ChainLockPG); err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(ctx, sqlcore.AuditHeadSQL).Scan(&seq, &head); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			chained, _, _ := sqlcore.ChainAuditRows(s.ChainKey, seq, head, audit)
			if _, err := tx.Exec(ctx, sqlcore.AuditInsertUnnest, sqlcore.Columns(chained, len(sqlcore.AuditChainedTypes))...); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	due := now.Add(time.Hour)
	retry := now.Add(time.Minute)
	first := store.Batch{
		Status: store.StatusAwaiting,
		Entries: []store.Entry{
			{Type: store.EntryUserMessage, Actor: "u1", Data: []byte(`{"text":"héllo"}`)},
			{Type: store.EntryAssistantMessage, Actor: "model", Data: []byte(`{"text":"","calls":2}`)},
			{Type: store.EntryToolCall, ToolCallID: "c1", Actor: "model", Data: []byte(`{"name":"send_email"}`)},
			{Type: store.EntryToolCall, ToolCallID: "c2", Actor: "model"}, // no payload: NULL
		},
		Calls: []store.ToolCall{
			{ToolCallID: "c1", Name: "send_email", Executor: "server", Approval: "required", Approvers: "owner", Status: store.CallAwaiting,
				PendingKind: "approval", Args: []byte(`{"to":"a@b"}`), Prompt: []byte(`{"plan":"x"}`), ExpiresAt: &due},
			{ToolCallID: "c2", Name: "echo", Executor: "server", Status: store.CallRunning, Args: []byte(`{}`)},
		},
		Schedule: []store.Expiry{{ToolCallID: "c1", At: due}},
		Steps:    []store.Step{{Key: "llm:1", Attempts: 1}},
	}
	second := store.Batch{
		Status: store.StatusDispatching,
		Entries: []store.Entry{
			{Type: store.EntryDecision, ToolCallID: "c1", Actor: "u1", Data: []byte(`{"action":"approve"}`)},
			{Type: store.EntryToolResult, ToolCallID: "c2", Actor: "system", Data: []byte(`{"ok":true}`)},
		},
		Calls: []store.ToolCall{
			{ToolCallID: "c1", Name: "send_email", Executor: "server", Approval: "required", Approvers: "owner", Status: store.CallRunning,
				Args: []byte(`{"to":"a@b"}`)}, // Seq 0 keeps the call's seq
			{ToolCallID: "c2", Name: "echo", Executor: "server", Status: store.CallResolved, Args: []byte(`{}`), Result: []byte(`{"ok":true}`), Seq: 4},
		},
		Cancel:    []string{"c1"},
		Schedule:  []store.Expiry{{ToolCallID: "c3", At: due}},
		DoneSteps: []string{"llm:1"},
		Steps:     []store.Step{{Key: "tool:c2", Attempts: 2, NextAttemptAt: &retry, LastError: "timeout"}},
		Audit:     []store.AuditRecord{{ToolCallID: "c1", Tool: "send_email", ActorID: "u1", Action: "approve", Reason: "ok", ArgsHash: "ab"}},
	}
	// The third pair's second batch removes nothing: the other conversations' deletes of the
	// same keys must leave its expiry and step alone.
	quiet := second
	quiet.Cancel, quiet.DoneSteps = nil, nil
	grouped, single, ref := ids[:3], ids[3:6], ids[6:]
	for step, batches := range [][]store.Batch{{first, first, first}, {second, second, quiet}} {
		var group []*appendReq
		for i := range grouped {
			b := batches[i]
			after := int64(0)
			if step == 1 {
				after = 4
			}
			group = append(group, &appendReq{ctx: ctx, conv: grouped[i], afterSeq: after, batch: b, now: now, done: make(chan error, 1)})
			r := &appendReq{ctx: ctx, conv: single[i], afterSeq: after, batch: b, now: now, done: make(chan error, 1)}
			if err := s.sendAppend(ctx, []*appendReq{r}); err != nil {
				t.Fatal(err)
			}
			reference(ref[i], after, b, now)
		}
		s.commitGroup(ctx, take(group, 0))
		for _, r := range group {
			if err := <-r.done; err != nil {
				t.Fatalf("step %d: %v", step+1, err)
			}
		}
		now = now.Add(time.Second)
	}
	if s.groupFallbacks.Load() != 0 || s.groupedAppends.Load() != 6 {
		t.Fatalf("fallbacks %d, grouped %d: the merged statements failed", s.groupFallbacks.Load(), s.groupedAppends.Load())
	}
	dump := func(conv string) string {
		var out []string
		for _, q := range []string{
			`SELECT to_jsonb(c) - 'id' - 'created_at' - 'title' FROM conversations c WHERE id = $1`,
			`SELECT to_jsonb(e) - 'conversation_id' FROM entries e WHERE conversation_id = $1 ORDER BY seq`,
			`SELECT to_jsonb(tc) - 'conversation_id' FROM tool_calls tc WHERE conversation_id = $1 ORDER BY tool_call_id`,
			`SELECT to_jsonb(x) - 'conversation_id' FROM expiries x WHERE conversation_id = $1 ORDER BY tool_call_id`,
			`SELECT to_jsonb(st) - 'conversation_id' FROM steps st WHERE conversation_id = $1 ORDER BY key`,
			// The chain's columns depend on what other conversations wrote before (AuditChain tests them).
			`SELECT to_jsonb(a) - 'conversation_id' - 'id' - 'chain_seq' - 'prev_hash' - 'hash' - 'key_id' FROM audit a WHERE conversation_id = $1 ORDER BY id`,
		} {
			rows, err := s.pool.Query(ctx, q, conv)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				out = append(out, v)
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
		}
		return strings.Join(out, "\n")
	}
	for i := range grouped {
		got, want := dump(grouped[i]), dump(single[i])
		if got != want {
			t.Fatalf("merged group wrote\n%s\nsingle appends wrote\n%s", got, want)
		}
		if want := dump(ref[i]); got != want {
			t.Fatalf("parley_append wrote\n%s\nthe shared statements wrote\n%s", got, want)
		}
		if !strings.Contains(got, `"tool_call_id": "c3", "claimed_until": null`) || !strings.Contains(got, `"last_seq": 6`) ||
			strings.Count(got, `"seq"`) != 8 {
			t.Fatalf("the rows are not the ones expected:\n%s", got)
		}
		removed := i < 2 // the third pair's second batch removed nothing
		if strings.Contains(got, `"key": "llm:1"`) == removed || strings.Contains(got, `"tool_call_id": "c1", "claimed_until"`) == removed {
			t.Fatalf("pair %d: the step llm:1 and the expiry of c1 should be there: %v; rows:\n%s", i, !removed, got)
		}
	}
}

// TestGroupTakesUrgentAppendsFirst: with more background appends queued than a group holds,
// the urgent ones (a person waits on them) go in the next group, ahead of the rest.
func TestGroupTakesUrgentAppendsFirst(t *testing.T) {
	g := newGrouper(1)
	for i := range maxGroup + 10 {
		g.queue <- &appendReq{conv: fmt.Sprint("background-", i)}
	}
	g.urgent <- &appendReq{conv: "urgent-1", batch: store.Batch{Urgent: true}}
	g.urgent <- &appendReq{conv: "urgent-2", batch: store.Batch{Urgent: true}}
	own := &appendReq{conv: "leader"}
	first := take(g.collect([]*appendReq{own}), 1)
	if len(first) != maxGroup || first[0] != own || first[1].conv != "urgent-1" || first[2].conv != "urgent-2" || first[3].conv != "background-0" {
		t.Fatalf("first group: %d appends starting %s, %s, %s, %s; want %d: the leader's, then the urgent ones", len(first), first[0].conv, first[1].conv, first[2].conv, first[3].conv, maxGroup)
	}
	if second := take(g.collect(nil), 0); len(second) != 13 || second[0].conv != fmt.Sprint("background-", maxGroup-3) {
		t.Fatalf("second group: %d appends starting %s, want the 13 left in order", len(second), second[0].conv)
	}
}

// TestGroupCommitLeadersUnderCancellation has many writers through two slots, a third of their
// appends canceled at random moments, and checks that every writer finishes (a queued append
// always finds a leader) and every log ends gap-free, in step with its conversation's last_seq.
func TestGroupCommitLeadersUnderCancellation(t *testing.T) {
	const convs, each = 40, 12
	s, ids := groupFixture(t, convs, WithCommitters(2))
	var wg sync.WaitGroup
	for n, id := range ids {
		wg.Go(func() {
			after, hadCanceled := int64(0), false
			for i := range each {
				ctx, cancel := context.WithCancel(t.Context())
				if (n+i)%3 == 0 { // canceled, below
					time.AfterFunc(time.Duration(i*50)*time.Microsecond, cancel)
				}
				canceled := (n+i)%3 == 0
				last, err := s.Append(ctx, id, after, textBatch(fmt.Sprint(i)))
				cancel()
				// A canceled append may still land after Append returned (a lone append runs on
				// its caller's context, and pgx cancels asynchronously), so the next one may find
				// the log moved on: a conflict, after a cancellation, is the one other error.
				ok := err == nil || canceled && errors.Is(err, context.Canceled) ||
					hadCanceled && errors.Is(err, store.ErrConflict)
				if !ok {
					t.Errorf("append %d to %s (canceled: %v): %v", i, id, canceled, err)
					return
				}
				hadCanceled = hadCanceled || canceled
				if err != nil {
					// Reread where the log is (a commit under way may have landed).
					c, gerr := s.GetConversation(t.Context(), id)
					if gerr != nil {
						t.Error(gerr)
						return
					}
					last = c.LastSeq
				}
				after = last
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("writers still waiting after a minute: a queued append found no leader")
	}
	// A follower whose append another leader took waits for its answer; it does not keep taking
	// free slots with nothing to commit (that spun a core while the group committed).
	if idle := s.group.idleLeads.Load(); idle > convs*each {
		t.Fatalf("%d slots were taken with nothing to commit, for %d appends", idle, convs*each)
	}
	for _, id := range ids {
		c, err := s.GetConversation(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.Log(t.Context(), id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(es)) != c.LastSeq {
			t.Fatalf("%s: %d entries, last_seq %d", id, len(es), c.LastSeq)
		}
		for i, e := range es {
			if e.Seq != int64(i+1) {
				t.Fatalf("%s: entry %d has seq %d", id, i+1, e.Seq)
			}
		}
	}
}

// TestGroupCommitFullQueueStillFindsASlot: a caller waiting for room in a queue full of appends
// whose callers left takes a slot when one frees up, instead of waiting for someone to drain
// the queue.
func TestGroupCommitFullQueueStillFindsASlot(t *testing.T) {
	s, ids := groupFixture(t, 1, WithCommitters(0))
	synctest.Test(t, func(t *testing.T) {
		g := newGrouper(1)
		s.group = g
		g.slots <- struct{}{} // the test holds the only slot
		for range queueDepth {
			r := &appendReq{conv: "gone"}
			r.state.Store(reqAbandoned)
			g.queue <- r
		}
		result := make(chan error, 1)
		go func() {
			_, err := s.Append(t.Context(), ids[0], 0, textBatch("waited for room"))
			result <- err
		}()
		synctest.Wait() // the append waits: no slot, no room
		<-g.slots
		if err := <-result; err != nil {
			t.Fatal(err)
		}
		g.stop() // its channels belong to the bubble
		s.group = nil
	})
	if got := logTexts(t, s, ids[0]); len(got) != 1 {
		t.Fatalf("log = %q", got)
	}
}

// TestGroupCommitUnknownOutcomeIsNotRerun: when a group gets no answer from the server (here its
// context is already over), the group may have committed, so its appends are not rerun one by
// one — an append without entries would be written twice — and each gets the error.
func TestGroupCommitUnknownOutcomeIsNotRerun(t *testing.T) {
	s, ids := groupFixture(t, 2, WithCommitters(0))
	audit := store.Batch{Audit: []store.AuditRecord{{ToolCallID: "c1", Tool: "t", ActorID: "u", Action: "approve"}}}
	group := []*appendReq{newReq(t.Context(), s, ids[0], 0, audit), newReq(t.Context(), s, ids[1], 0, audit)}
	over, cancel := context.WithCancel(t.Context())
	cancel()
	s.commitGroup(over, take(group, 0))
	for _, r := range group {
		if err := <-r.done; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want the group's context.Canceled", err)
		}
	}
	if n := s.groupFallbacks.Load(); n != 0 {
		t.Fatalf("%d groups were rerun one append at a time", n)
	}
	recs, err := s.ListAudit(t.Context(), store.AuditFilter{})
	if err != nil || len(recs) != 0 {
		t.Fatalf("audit = %v (err %v), want nothing written", recs, err)
	}
}
