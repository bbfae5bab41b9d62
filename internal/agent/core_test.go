package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
	"parley/internal/tools"
)

// These tests call the actor's core (its handlers) directly, with no goroutine: each step is
// read from what it asks of the shell (a.ready: the batch to commit, the effects to release,
// the follow-ups), and the shell's rules (commitReady, release, the lifecycle) are driven by
// hand.

// core is an actor that no goroutine runs, on a conversation of owner's in a fresh embedded
// store, with the send_email tool (approved by its owner).
type core struct {
	a                 *actor
	st                store.Store
	owner, other, rev Principal
}

// failingAppend is a store whose appends fail with err.
type failingAppend struct {
	store.Store
	err error
}

func (f failingAppend) Append(context.Context, string, int64, store.Batch) (int64, error) {
	return 0, f.err
}

func newCore(t *testing.T, appendErr error) *core {
	t.Helper()
	return newCoreWith(t, appendErr, emailTools)
}

// newCoreWith is newCore with the tools toolsFor makes.
func newCoreWith(t *testing.T, appendErr error, toolsFor func(store.Store) []*tools.Tool) *core {
	t.Helper()
	clk := clock.NewFake(t0)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), sqlitestore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	c := &core{st: st}
	for name, p := range map[string]*Principal{"owner": &c.owner, "other": &c.other, "rev": &c.rev} {
		role := store.RoleMember
		if name == "rev" {
			role = store.RoleReviewer
		}
		u, err := st.CreateUser(ctx, store.User{Name: name, Role: role, PasswordHash: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		*p = Principal{UserID: u.ID, Role: u.Role, Via: "session"}
	}
	conv, err := st.CreateConversation(ctx, store.Conversation{OwnerID: c.owner.UserID, Title: "core"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(toolsFor(st)...)
	if err != nil {
		t.Fatal(err)
	}
	var used store.Store = st
	if appendErr != nil {
		used = failingAppend{Store: st, err: appendErr}
	}
	m := New(Config{Store: used, Provider: newScripted(), Tools: reg, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c.a = newActor(m, conv.ID)
	if c.a.st, err = loadState(ctx, st, reg, conv.ID); err != nil {
		t.Fatal(err)
	}
	c.a.wake = clk.NewTimer(0)
	c.a.wake.Stop()
	return c
}

// awaiting brings the conversation to a send_email call (id c1) awaiting its owner's approval:
// the owner's message, then the model's answer and the dry run's plan, all committed.
func (c *core) awaiting(t *testing.T) *call {
	t.Helper()
	a := c.a
	if err := a.handleSend(&request{kind: reqSend, by: c.owner, text: "email bob"}); err != nil {
		t.Fatal(err)
	}
	if w := a.commitReady(); w.err != nil {
		t.Fatal(w.err)
	}
	a.ready.follow, a.llmBusy = nil, false // the model call the follow-up would start is played by hand
	a.onLLMResponse(llm.Response{ToolCalls: []llm.ToolCall{{ID: "c1", Name: "send_email", Args: json.RawMessage(emailArgs)}}})
	if a.drafting == nil || len(a.ready.effects) != 1 || a.ready.effects[0].kind != effectDryRun {
		t.Fatalf("a gated call's answer waits for its dry run: drafting %v, effects %+v", a.drafting, a.ready.effects)
	}
	if !a.ready.empty() {
		t.Fatalf("nothing is written before the plan: %+v", a.ready.batch)
	}
	a.ready.effects = nil
	a.onPlan(planDone{id: "c1", plan: tools.Plan{Summary: "send to bob"}})
	if w := a.commitReady(); w.err != nil {
		t.Fatal(w.err)
	}
	cl := a.st.calls["c1"]
	if cl == nil || cl.status != store.CallAwaiting || cl.kind != tools.PendingApproval {
		t.Fatalf("call %+v", cl)
	}
	a.settle()
	if len(a.events) != 0 || a.ready.events != 0 {
		t.Fatalf("settle published the events: %d left, mark %d", len(a.events), a.ready.events)
	}
	if len(a.ready.effects) != 0 || len(a.ready.follow) != 0 {
		t.Fatalf("the awaiting call asks for nothing more: %+v %+v", a.ready.effects, a.ready.follow)
	}
	return cl
}

func entryTypes(b store.Batch) []store.EntryType {
	var out []store.EntryType
	for _, e := range b.Entries {
		out = append(out, e.Type)
	}
	return out
}

func TestCoreApproveStagesTheDecisionAndRunsAfterTheReply(t *testing.T) {
	c := newCore(t, nil)
	c.awaiting(t)
	a := c.a
	err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "approve"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := entryTypes(a.ready.batch); len(got) != 1 || got[0] != store.EntryDecision {
		t.Fatalf("staged %v, want one decision", got)
	}
	if len(a.ready.batch.Audit) != 1 || a.ready.batch.Audit[0].Action != "approve" || !a.ready.batch.Urgent {
		t.Fatalf("audit %+v urgent %v", a.ready.batch.Audit, a.ready.batch.Urgent)
	}
	if len(a.ready.effects) != 0 {
		t.Fatalf("an approval starts nothing before its reply: %+v", a.ready.effects)
	}
	if len(a.ready.follow) != 1 || a.ready.follow[0] != (followUp{kind: followApproved, id: "c1"}) {
		t.Fatalf("follow-ups %+v", a.ready.follow)
	}
	if a.st.calls["c1"].status != store.CallRunning {
		t.Fatalf("the staged decision is in the state: status %q", a.st.calls["c1"].status)
	}

	// The follow-up takes a run slot and asks for the run of the call as recorded.
	a.ready.follow = nil
	a.followUp(followUp{kind: followApproved, id: "c1"})
	if len(a.ready.effects) != 1 || a.ready.effects[0].kind != effectToolRun {
		t.Fatalf("effects %+v", a.ready.effects)
	}
	run := a.ready.effects[0].run
	if run.id != "c1" || run.attempt != 1 || run.tool == nil || run.tool.Name() != "send_email" || run.args["to"] != "bob@example.test" {
		t.Fatalf("the run is not the call as recorded: %+v", run)
	}
	if cancel, ok := a.running["c1"]; !ok || cancel != nil {
		t.Fatalf("the slot is reserved, not started: %v %v", ok, cancel != nil)
	}
}

func TestCoreRefusalsStageNothing(t *testing.T) {
	c := newCore(t, nil)
	c.awaiting(t)
	a := c.a
	for _, tt := range []struct {
		name string
		req  request
		kind fault.Kind
	}{
		{"a stranger", request{by: c.other, callID: "c1", res: Resolution{Decision: "approve"}}, fault.KindNotFound},
		{"no such call", request{by: c.owner, callID: "c9", res: Resolution{Decision: "approve"}}, fault.KindNotFound},
		{"the wrong kind", request{by: c.owner, callID: "c1", res: Resolution{Action: "accept"}}, fault.KindInvalidArgs},
		{"no decision", request{by: c.owner, callID: "c1", res: Resolution{Decision: "maybe"}}, fault.KindInvalidArgs},
		{"bad edited arguments", request{by: c.owner, callID: "c1", res: Resolution{Decision: "approve", Args: json.RawMessage(`{"to":3}`)}}, fault.KindInvalidArgs},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.kind = reqResolve
			err := a.handleResolve(&tt.req)
			if fault.KindOf(err) != tt.kind {
				t.Fatalf("err %v, want %s", err, tt.kind)
			}
			if !a.ready.empty() || len(a.ready.effects) != 0 || len(a.ready.follow) != 0 {
				t.Fatalf("a refusal staged %+v / %+v / %+v", a.ready.batch, a.ready.effects, a.ready.follow)
			}
		})
	}
}

func TestCoreDenyEndsTheCallAndAdvances(t *testing.T) {
	c := newCore(t, nil)
	c.awaiting(t)
	a := c.a
	if err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "deny", Reason: "no"}}); err != nil {
		t.Fatal(err)
	}
	got := entryTypes(a.ready.batch)
	if len(got) != 2 || got[0] != store.EntryDecision || got[1] != store.EntryToolError {
		t.Fatalf("staged %v", got)
	}
	if len(a.ready.batch.Cancel) != 1 || a.ready.batch.Cancel[0] != "c1" {
		t.Fatalf("the expiry is not cancelled: %+v", a.ready.batch.Cancel)
	}
	if len(a.ready.follow) != 1 || a.ready.follow[0].kind != followAdvance || len(a.ready.effects) != 0 {
		t.Fatalf("follow %+v effects %+v", a.ready.follow, a.ready.effects)
	}
	if cl := a.st.calls["c1"]; cl.status != store.CallDenied {
		t.Fatalf("status %q", cl.status)
	}
}

func TestCoreADrainingActorStartsNothing(t *testing.T) {
	c := newCore(t, nil)
	c.awaiting(t)
	a := c.a
	if err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "approve"}}); err != nil {
		t.Fatal(err)
	}
	if w := a.commitReady(); w.err != nil {
		t.Fatal(w.err)
	}
	a.ready.follow = nil
	a.transition(phaseDraining, reasonGraceful)
	a.followUp(followUp{kind: followApproved, id: "c1"})
	a.advance()
	if len(a.ready.effects) != 0 || len(a.running) != 0 || a.llmBusy {
		t.Fatalf("a draining actor asked for %+v (running %v, llmBusy %v)", a.ready.effects, a.running, a.llmBusy)
	}
}

func TestCoreAFailedWriteReleasesNothing(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		reason  stopReason
		kind    fault.Kind
		evicted bool
	}{
		{"refused", errors.New("disk full"), reasonWriteRefused, fault.KindInternal, false},
		{"conflict", store.ErrConflict, reasonConflict, fault.KindInternal, false},
		{"another owner", store.ErrNotOwner, reasonEvicted, fault.KindServiceUnavailable, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCore(t, nil)
			c.awaiting(t)
			a := c.a
			// A step that is written, and whose event waits for the end of the loop's pass.
			a.stage(store.Batch{Audit: []store.AuditRecord{{ConversationID: a.id, Action: "note", At: t0}}}, nil)
			a.publish(Event{Type: EventMessage, Text: "written"})
			if w := a.commitReady(); w.err != nil {
				t.Fatal(w.err)
			}
			// The same conversation, seen through a store whose appends now fail.
			a.m.cfg.Store = failingAppend{Store: c.st, err: tt.err}
			if err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "approve"}}); err != nil {
				t.Fatal(err)
			}
			a.ready.follow = nil
			a.followUp(followUp{kind: followApproved, id: "c1"}) // a run asked for in the same step
			a.publish(Event{Type: EventMessage, Text: "never seen"})
			w := a.commitReady()
			if w.err == nil || fault.KindOf(w.err) != tt.kind || w.conflict != (tt.reason == reasonConflict) {
				t.Fatalf("wrote %+v (kind %s), want kind %s", w, fault.KindOf(w.err), tt.kind)
			}
			if a.lc != (lifecycle{phase: phaseDraining, reason: tt.reason}) {
				t.Fatalf("lifecycle %+v", a.lc)
			}
			if len(a.ready.effects) != 0 || len(a.ready.follow) != 0 || len(a.events) != 1 || a.events[0].Text != "written" || len(a.running) != 0 {
				t.Fatalf("a failed step kept effects %+v, follow-ups %+v, events %+v, slots %v", a.ready.effects, a.ready.follow, a.events, a.running)
			}
			if a.evicted() != tt.evicted {
				t.Fatalf("evicted %v", a.evicted())
			}
			if tt.reason == reasonConflict && !a.reloadAfterConflict() {
				t.Fatal("a conflict with nothing in flight reloads")
			}
			if tt.reason == reasonConflict && (a.lc.phase != phaseRunning || a.st.calls["c1"].status != store.CallAwaiting) {
				t.Fatalf("after the reload: lifecycle %+v, call %q", a.lc, a.st.calls["c1"].status)
			}
		})
	}
}

func TestCoreStepsMergeExpiriesAndRetrySteps(t *testing.T) {
	var r ready
	r.merge(store.Batch{Schedule: []store.Expiry{{ToolCallID: "a"}}, Steps: []store.Step{{Key: "tool:a"}}}, []string{"a"})
	r.merge(store.Batch{Cancel: []string{"a"}, DoneSteps: []string{"tool:a"}, Urgent: true}, []string{"a"})
	r.merge(store.Batch{Schedule: []store.Expiry{{ToolCallID: "b"}}}, []string{"b"})
	b := r.batch
	if len(b.Schedule) != 1 || b.Schedule[0].ToolCallID != "b" || len(b.Cancel) != 1 || b.Cancel[0] != "a" {
		t.Fatalf("expiries: schedule %+v cancel %+v", b.Schedule, b.Cancel)
	}
	if len(b.Steps) != 0 || len(b.DoneSteps) != 1 || !b.Urgent || len(r.touched) != 2 {
		t.Fatalf("steps %+v done %+v urgent %v touched %v", b.Steps, b.DoneSteps, b.Urgent, r.touched)
	}
}

func TestLifecycleTransitions(t *testing.T) {
	running := lifecycle{}
	drain := func(r stopReason) lifecycle { return lifecycle{phase: phaseDraining, reason: r} }
	for _, tt := range []struct {
		name     string
		from     lifecycle
		inflight int
		to       phase
		why      stopReason
		want     lifecycle
	}{
		{"quit drains gracefully", running, 0, phaseDraining, reasonGraceful, drain(reasonGraceful)},
		{"a hard stop overrides a graceful drain", drain(reasonGraceful), 1, phaseDraining, reasonHard, drain(reasonHard)},
		{"a graceful stop does not soften a hard one", drain(reasonHard), 1, phaseDraining, reasonGraceful, drain(reasonHard)},
		{"the first harsh reason stays", drain(reasonWriteRefused), 1, phaseDraining, reasonEvicted, drain(reasonWriteRefused)},
		{"a reloaded conflict runs again", drain(reasonConflict), 0, phaseRunning, reasonNone, running},
		{"not with work in flight", drain(reasonConflict), 1, phaseRunning, reasonNone, drain(reasonConflict)},
		{"no other drain runs again", drain(reasonEvicted), 0, phaseRunning, reasonNone, drain(reasonEvicted)},
		{"stopped is final", lifecycle{phase: phaseStopped, reason: reasonHibernated}, 0, phaseDraining, reasonHard, lifecycle{phase: phaseStopped, reason: reasonHibernated}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCore(t, nil)
			a := c.a
			a.lc, a.inflight = tt.from, tt.inflight
			a.transition(tt.to, tt.why)
			if a.lc != tt.want {
				t.Fatalf("lifecycle %+v, want %+v", a.lc, tt.want)
			}
		})
	}
	// What each phase allows, as docs/architecture.md tabulates it.
	for _, tt := range []struct {
		lc                                  lifecycle
		takes, starts, records, revivesFrom bool
	}{
		{running, true, true, true, false},
		{drain(reasonGraceful), false, false, true, false},
		{drain(reasonHard), false, false, false, false},
		{drain(reasonEvicted), false, false, false, false},
		{drain(reasonWriteRefused), false, false, false, true},
		{drain(reasonConflict), false, false, false, true},
		{drain(reasonDeleted), false, false, false, false},
		{lifecycle{phase: phaseStopped, reason: reasonHibernated}, false, false, false, false},
	} {
		if tt.lc.takesRequests() != tt.takes || tt.lc.mayStart() != tt.starts || tt.lc.recordsResults() != tt.records || tt.lc.revives() != tt.revivesFrom {
			t.Errorf("%s(%s): takes %v starts %v records %v revives %v", tt.lc.phase, tt.lc.reason,
				tt.lc.takesRequests(), tt.lc.mayStart(), tt.lc.recordsResults(), tt.lc.revives())
		}
	}
}

func TestCoreFencedDuringTheAppendStartsNothingAfterIt(t *testing.T) {
	c := newCore(t, nil)
	c.awaiting(t)
	a := c.a
	if err := a.handleResolve(&request{kind: reqResolve, by: c.owner, callID: "c1", res: Resolution{Decision: "approve"}}); err != nil {
		t.Fatal(err)
	}
	if w := a.commitReady(); w.err != nil {
		t.Fatal(w.err)
	}
	// The fence closes after the decision was written and before its follow-up runs the tool.
	a.evictNow()
	if w := a.settleSteps(); w.err != nil {
		t.Fatal(w.err)
	}
	if a.inflight != 0 || len(a.running) != 0 || a.lc != (lifecycle{phase: phaseDraining, reason: reasonEvicted}) {
		t.Fatalf("a fenced actor started work: inflight %d, running %v, lifecycle %+v", a.inflight, a.running, a.lc)
	}
	if cl := a.st.calls["c1"]; cl.status != store.CallRunning {
		t.Fatalf("the committed decision stands: %q", cl.status)
	}
}
