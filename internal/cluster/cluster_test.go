package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"parley/internal/agent"
	"parley/internal/clock"
	"parley/internal/cluster"
	"parley/internal/fault"
	"parley/internal/llm/llmtest"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/store/pgstore"
	"parley/internal/store/pgtest"
	"parley/internal/telemetry"
	"parley/internal/tools"
)

// These tests run several processes' worth of Parley in one test binary: each "process" has
// its own pgstore (its own pool), cluster node and agent Manager, all on one real PostgreSQL
// database, and they talk only through it. The binary-level tests (kill -9 of an owner) are in
// internal/app.

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

const testTTL = 1500 * time.Millisecond

// proc is one process of the cluster.
type proc struct {
	t    testing.TB
	st   *pgstore.Store
	node *cluster.Node
	m    *agent.Manager
	log  *syncBuffer

	stopOnce sync.Once
}

// world is the shared database, model and the people.
type world struct {
	t     testing.TB
	url   string
	model *llmtest.Provider
	ann   agent.Principal
	rita  agent.Principal
	key   []byte // the cluster's, every process's
}

func newWorld(t testing.TB) *world {
	t.Helper()
	w := &world{t: t, url: pgtest.NewURL(t), model: llmtest.New(), key: cluster.NewKey()}
	st, err := pgstore.Open(context.Background(), w.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, u := range []struct {
		name string
		role store.Role
		p    *agent.Principal
	}{{"ann", store.RoleMember, &w.ann}, {"rita", store.RoleReviewer, &w.rita}} {
		made, err := st.CreateUser(context.Background(), store.User{Name: u.name, Role: u.role, PasswordHash: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		*u.p = agent.Principal{UserID: made.ID, Role: u.role, Via: "token"}
	}
	return w
}

// gated is an owner-approved server tool whose approval expires after expiry (0: the default).
func gated(t testing.TB, expiry time.Duration, ran *countingRuns) *tools.Tool {
	t.Helper()
	tool, err := tools.New(tools.Spec{
		Name: "note", Description: "Write a note (the owner approves).", Executor: tools.Server,
		Parameters: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`),
		Approval:   tools.RequiresApproval, Timeout: expiry,
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			ran.add(call.ConversationID + "/" + call.ToolCallID)
			return map[string]any{"noted": args["text"]}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// countingRuns records every run of a server tool, in all processes.
type countingRuns struct {
	mu   sync.Mutex
	runs []string
}

func (c *countingRuns) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs = append(c.runs, s)
}

func (c *countingRuns) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.runs...)
}

type procOptions struct {
	expiry time.Duration
	runs   *countingRuns
	tracer *telemetry.Tracer
}

func (w *world) start(o procOptions) *proc {
	t := w.t
	t.Helper()
	if o.runs == nil {
		o.runs = &countingRuns{}
	}
	st, err := pgstore.Open(context.Background(), w.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, st: st, log: &syncBuffer{}}
	logger := slog.New(slog.NewTextHandler(p.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	p.node = cluster.New(cluster.Config{Pool: st.Pool(), Logger: logger, TTL: testTTL, Key: w.key})
	if err := p.node.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.SetWriter(p.node.Self())
	reg, err := tools.NewRegistry(append(tools.Builtins(tools.BuiltinDeps{Clock: clock.Real{}}), gated(t, o.expiry, o.runs))...)
	if err != nil {
		t.Fatal(err)
	}
	p.m = agent.New(agent.Config{Store: st, Provider: w.model, Tools: reg, Logger: logger,
		Cluster: p.node, Events: p.node, OrphanScan: 200 * time.Millisecond, ClientGrace: 300 * time.Millisecond,
		ExpiryPoll: 50 * time.Millisecond, Tracer: o.tracer})
	if err := p.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("log of node %s:\n%s", p.node.Self(), p.log.String())
		}
	})
	return p
}

// stop shuts the process down gracefully: its agent, then the node (leaving hands its
// conversations over), then the store.
func (p *proc) stop() {
	p.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.m.Close(ctx); err != nil {
			p.t.Errorf("close agent: %v", err)
		}
		if err := p.node.Leave(ctx); err != nil {
			p.t.Errorf("leave: %v", err)
		}
		_ = p.st.Close()
	})
}

func (p *proc) conversation(by agent.Principal) string {
	p.t.Helper()
	s, err := p.m.Create(context.Background(), by, "cluster")
	if err != nil {
		p.t.Fatal(err)
	}
	return s.ID
}

func (p *proc) view(conv string, by agent.Principal) agent.View {
	p.t.Helper()
	v, err := p.m.View(context.Background(), conv, by)
	if err != nil {
		p.t.Fatalf("view on %s: %v", p.node.Self(), err)
	}
	return v
}

// await polls p's view of conv until ok holds (5 s at most).
func (p *proc) await(conv string, by agent.Principal, what string, ok func(agent.View) bool) agent.View {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		v := p.view(conv, by)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("not %s within 5 s on %s: status %s, %d messages, calls %+v", what, p.node.Self(), v.Status, len(v.Messages), v.Calls)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func awaiting(id string) func(agent.View) bool {
	return func(v agent.View) bool { _, ok := v.Pending()[id]; return ok && v.Status == store.StatusAwaiting }
}

func saying(text string) func(agent.View) bool {
	return func(v agent.View) bool {
		n := len(v.Messages)
		return v.Status == store.StatusIdle && n > 0 && v.Messages[n-1].Content == text
	}
}

// next waits for an event on sub that ok accepts, skipping others (5 s at most).
func next(t testing.TB, sub *agent.Subscription, what string, ok func(agent.Event) bool) agent.Event {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e, open := <-sub.C:
			if !open {
				t.Fatalf("subscription closed before %s", what)
			}
			if ok(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event within 5 s", what)
		}
	}
}

func ownerOf(t testing.TB, p *proc, conv string) string {
	t.Helper()
	var owner string
	if err := p.st.Pool().QueryRow(context.Background(), `SELECT node_id FROM conversation_owners WHERE conversation_id = $1`, conv).Scan(&owner); err != nil {
		t.Fatalf("owner of %s: %v", conv, err)
	}
	return owner
}

// TestRequestsOnAnyProcess: a turn runs on the process the message landed on; a view, a
// resolve and the next message sent to the others are answered by that owner as if local
// (ok, then stale; no 409 after the turn ended); events reach subscribers on every process;
// only one actor lives in the cluster and every model call is made once.
func TestRequestsOnAnyProcess(t *testing.T) {
	w := newWorld(t)
	runs := &countingRuns{}
	a, b, c := w.start(procOptions{runs: runs}), w.start(procOptions{runs: runs}), w.start(procOptions{runs: runs})
	conv := a.conversation(w.ann)
	subB, err := b.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer subB.Close()
	subC, err := c.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer subC.Close()

	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "milk"})), llmtest.Reply("Noted milk."))
	if err := a.m.Send(context.Background(), conv, w.ann, "note milk"); err != nil {
		t.Fatal(err)
	}
	remote := b.await(conv, w.ann, "awaiting n1 (seen through b)", awaiting("n1"))
	// The view answered by the owner for b is the owner's own, nothing lost on the way (as
	// the API shows it: JSON, whose object keys have no order).
	if got, want := asJSON(t, remote), asJSON(t, a.view(conv, w.ann)); !reflect.DeepEqual(got, want) {
		t.Fatalf("view through b:\n%v\nview on a:\n%v", got, want)
	}
	if got := ownerOf(t, a, conv); got != a.node.Self() {
		t.Fatalf("owner = %s, want a (%s)", got, a.node.Self())
	}
	next(t, subC, "the pending call on c", func(e agent.Event) bool {
		return e.Type == agent.EventStatus && e.Status == store.StatusAwaiting
	})

	// The approval lands on b: answered once it is durable, by the owner.
	res, err := b.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann)
	if err != nil {
		t.Fatalf("approve on b: %v", err)
	}
	if res.ConversationID != conv || res.Call.ID != "n1" || res.OwnerID != w.ann.UserID {
		t.Fatalf("resolved = %+v", res)
	}
	_, err = c.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann)
	if fault.KindOf(err) != fault.KindStale {
		t.Fatalf("second approve on c: %v, want stale", err)
	}
	_, err = c.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.rita)
	if k := fault.KindOf(err); k != fault.KindNotFound {
		t.Fatalf("a reviewer approving an owner-gated call on c: %v, want not_found", err)
	}
	next(t, subB, "the final answer on b", func(e agent.Event) bool {
		return e.Type == agent.EventMessage && strings.Contains(string(e.Data), "assistant") || e.Type == agent.EventStatus && e.Status == store.StatusIdle
	})
	c.await(conv, w.ann, "finished (seen through c)", saying("Noted milk."))

	// The next message lands on c right after: no stale "a turn is in progress".
	w.model.Push(llmtest.Reply("Anything else?"))
	if err := c.m.Send(context.Background(), conv, w.ann, "thanks"); err != nil {
		t.Fatalf("next message on c: %v", err)
	}
	b.await(conv, w.ann, "the second turn finished", saying("Anything else?"))

	if got := runs.list(); len(got) != 1 || got[0] != conv+"/n1" {
		t.Fatalf("runs of the approved tool = %v, want one", got)
	}
	if n := w.model.Calls(); n != 3 {
		t.Fatalf("model calls = %d, want 3 (two for the first turn, one for the second)", n)
	}
	live := a.m.Stats().LiveActors + b.m.Stats().LiveActors + c.m.Stats().LiveActors
	if live != 1 || a.m.Stats().LiveActors != 1 {
		t.Fatalf("live actors a/b/c = %d/%d/%d, want only a's", a.m.Stats().LiveActors, b.m.Stats().LiveActors, c.m.Stats().LiveActors)
	}
	audit, err := a.st.ListAudit(context.Background(), store.AuditFilter{ConversationID: conv})
	if err != nil || len(audit) != 1 || audit[0].Action != "approve" {
		t.Fatalf("audit = %+v %v, want one approve", audit, err)
	}
}

// TestClientToolFromAnotherProcess: the page's socket is on b, the turn on a; the client call
// reaches b's subscriber and b's answer reaches a's actor, however long past the grace it comes.
// With no page open anywhere the call fails fast with no_client.
func TestClientToolFromAnotherProcess(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	sub, err := b.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	detach := b.m.AttachClient(conv)
	defer detach()

	w.model.Push(llmtest.Calls(llmtest.Call("g1", "geolocation", nil)))
	if err := a.m.Send(context.Background(), conv, w.ann, "where am I?"); err != nil {
		t.Fatal(err)
	}
	e := next(t, sub, "client_exec on b", func(e agent.Event) bool { return e.Type == agent.EventClientExec })
	if e.ToolCallID != "g1" {
		t.Fatalf("client_exec = %+v", e)
	}

	// No page anywhere: no_client after the grace. This call began after g1 awaited its page on
	// a, with the same grace, so once it failed g1's grace (had one started) ran out too.
	conv2 := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("g2", "geolocation", nil)), llmtest.Reply("I could not tell."))
	if err := a.m.Send(context.Background(), conv2, w.ann, "where am I?"); err != nil {
		t.Fatal(err)
	}
	v := b.await(conv2, w.ann, "g2 failed without a page", func(v agent.View) bool {
		return len(v.Calls) == 1 && v.Calls[0].Status != store.CallAwaiting && v.Calls[0].Status != store.CallRunning
	})
	if v.Calls[0].Status != store.CallErrored || !strings.Contains(string(v.Calls[0].Result), "no_client") {
		t.Fatalf("g2 = %+v %s", v.Calls[0], v.Calls[0].Result)
	}

	// Past the grace, the call with b's page still waits for it: it did not fail.
	if v := a.view(conv, w.ann); v.Status != store.StatusAwaiting || len(v.Calls) != 1 || v.Calls[0].Status != store.CallAwaiting {
		t.Fatalf("g1 past the grace with b's page open: status %s, calls %+v; want it awaiting", v.Status, v.Calls)
	}
	b.await(conv2, w.ann, "finished without a page", saying("I could not tell."))
	w.model.Push(llmtest.Reply("You are in Paris."))
	if _, err := b.m.Resolve(context.Background(), conv, "g1", agent.Resolution{Result: json.RawMessage(`{"latitude":48.85,"longitude":2.29,"accuracy":10}`)}, w.ann); err != nil {
		t.Fatalf("client result on b: %v", err)
	}
	v = a.await(conv, w.ann, "finished", saying("You are in Paris."))
	if v.Calls[0].Status != store.CallResolved {
		t.Fatalf("g1 = %+v", v.Calls[0])
	}
}

// TestGracefulHandover: a process that shuts down hands its conversations over at once: the
// approval sent to another process right after is answered there without waiting for the
// heartbeat to go stale, and the turn finishes there.
func TestGracefulHandover(t *testing.T) {
	w := newWorld(t)
	runs := &countingRuns{}
	a, b := w.start(procOptions{runs: runs}), w.start(procOptions{runs: runs})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "eggs"})), llmtest.Reply("Noted eggs."))
	if err := a.m.Send(context.Background(), conv, w.ann, "note eggs"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "awaiting", awaiting("n1"))
	// Counted from before a leaves: b claims the conversation either at once on a's departure
	// (its scan for conversations without an owner) or with the approval, whichever is first.
	before := b.node.Stats()
	a.stop()
	// Had a kept the conversation until its heartbeat went stale, b's claim would have named a
	// and b would have forwarded the approval to it (and waited for a to be found gone).
	if _, err := b.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
		t.Fatalf("approve on b after a left: %v", err)
	}
	if after := b.node.Stats(); after.Forwarded != before.Forwarded || after.Claims == before.Claims {
		t.Fatalf("the approval on b forwarded %d requests and claimed %d times: the handover was not immediate (want 0 forwards, a claim)",
			after.Forwarded-before.Forwarded, after.Claims-before.Claims)
	}
	b.await(conv, w.ann, "finished on b", saying("Noted eggs."))
	if got := ownerOf(t, b, conv); got != b.node.Self() {
		t.Fatalf("owner after the handover = %s, want b", got)
	}
	if got := runs.list(); len(got) != 1 {
		t.Fatalf("runs = %v, want one", got)
	}
}

// TestOrphansAreAdopted: a process that stops beating (its agent stopped hard, as if killed,
// without leaving) leaves an active conversation; a survivor takes it over within the TTL plus
// a scan and finishes the turn.
func TestOrphansAreAdopted(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	release := make(chan struct{})
	started := make(chan struct{})
	w.model.Push(llmtest.Step{Deltas: []string{"Thinking"}, Text: "", Started: started, Release: release}, llmtest.Reply("Done thinking."))
	if err := a.m.Send(context.Background(), conv, w.ann, "think"); err != nil {
		t.Fatal(err)
	}
	<-started
	// "Kill" a: its node stops beating and its agent stops hard, releasing nothing.
	a.node.Halt()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.m.Close(ctx)
	close(release)
	began := time.Now()
	v := b.await(conv, w.ann, "finished on b", saying("Done thinking."))
	took := time.Since(began)
	t.Logf("taken over and finished %v after the owner stopped (TTL %v, scan 200ms)", took, testTTL)
	if took > testTTL+2*time.Second {
		t.Fatalf("takeover took %v", took)
	}
	if len(v.Messages) != 2 {
		t.Fatalf("messages = %+v", v.Messages)
	}
	if got := ownerOf(t, b, conv); got != b.node.Self() {
		t.Fatalf("owner = %s, want b", got)
	}
}

// TestTimersFireOnce: an approval that expires while three processes poll the durable timers
// is expired exactly once.
func TestTimersFireOnce(t *testing.T) {
	w := newWorld(t)
	o := procOptions{expiry: 300 * time.Millisecond}
	a, b, c := w.start(o), w.start(o), w.start(o)
	var convs []string
	for i := range 5 {
		conv := a.conversation(w.ann)
		convs = append(convs, conv)
		id := fmt.Sprintf("n%d", i)
		w.model.Push(llmtest.Calls(llmtest.Call(id, "note", map[string]any{"text": id})), llmtest.Reply("Expired "+id))
		if err := []*proc{a, b, c}[i%3].m.Send(context.Background(), conv, w.ann, "note"); err != nil {
			t.Fatal(err)
		}
		c.await(conv, w.ann, "finished after the expiry", saying("Expired "+id))
	}
	for _, conv := range convs {
		log, err := a.st.Log(context.Background(), conv, 0)
		if err != nil {
			t.Fatal(err)
		}
		expiries := 0
		for _, e := range log {
			if e.Type == store.EntryExpiry {
				expiries++
			}
		}
		audit, _ := a.st.ListAudit(context.Background(), store.AuditFilter{ConversationID: conv})
		if expiries != 1 || len(audit) != 1 || audit[0].Action != "expire" {
			t.Fatalf("%s: %d expiry entries, audit %+v; want one of each", conv, expiries, audit)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestStreamedTextReachesOtherProcesses: a subscriber on another process gets the whole
// streamed text, in order, in far fewer notifications than the model sent deltas.
func TestStreamedTextReachesOtherProcesses(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	sub, err := b.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var deltas []string
	for i := range 200 {
		deltas = append(deltas, fmt.Sprintf("w%d ", i))
	}
	full := strings.Join(deltas, "")
	w.model.Push(llmtest.Step{Deltas: deltas, Text: full})
	if err := a.m.Send(context.Background(), conv, w.ann, "talk"); err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	n := 0
	next(t, sub, "idle", func(e agent.Event) bool {
		if e.Type == agent.EventTextDelta {
			got.WriteString(e.Text)
			n++
		}
		return e.Type == agent.EventStatus && e.Status == store.StatusIdle
	})
	if got.String() != full {
		t.Fatalf("text seen on b = %q, want %q", got.String(), full)
	}
	if n >= len(deltas)/4 {
		t.Fatalf("%d delta events on b for %d deltas: not coalesced", n, len(deltas))
	}
	t.Logf("%d model deltas arrived on the other process as %d events", len(deltas), n)
}

func asJSON(t testing.TB, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestStopAndQueueAcrossProcesses: while a turn generates on a, a message sent to b is queued
// (and says so), a stop sent to c stops the turn there, and the queued message then starts the
// next turn.
func TestStopAndQueueAcrossProcesses(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.start(procOptions{}), w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	w.model.Push(llmtest.Step{Deltas: []string{"Let me think"}, Started: started, Release: release}, llmtest.Reply("Second answer."))
	if err := a.m.Send(context.Background(), conv, w.ann, "think hard"); err != nil {
		t.Fatal(err)
	}
	<-started
	posted, err := b.m.Post(context.Background(), conv, w.ann, "and then?")
	if err != nil || !posted.Queued {
		t.Fatalf("message on b while a generates: %+v %v, want queued", posted, err)
	}
	if err := c.m.Cancel(context.Background(), conv, w.rita); fault.KindOf(err) != fault.KindNotFound {
		t.Fatalf("a stop by someone else on c: %v, want not_found", err)
	}
	if err := c.m.Cancel(context.Background(), conv, w.ann); err != nil {
		t.Fatalf("stop on c: %v", err)
	}
	v := b.await(conv, w.ann, "the queued message answered", saying("Second answer."))
	var users []string
	for _, m := range v.Messages {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if strings.Join(users, "|") != "think hard|and then?" {
		t.Fatalf("user messages = %v", users)
	}
	if err := c.m.Cancel(context.Background(), conv, w.ann); fault.KindOf(err) != fault.KindStale {
		t.Fatalf("a stop with nothing running: %v, want stale", err)
	}
}

// TestFencedProcessRejoins: a process that fences mid-turn stops its actor, claims nothing
// until it re-joined, then gives its ownerships up; the turn is continued (once) from the log by
// whoever claims it, and no process keeps a second actor.
func TestFencedProcessRejoins(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	started, release := make(chan struct{}), make(chan struct{})
	w.model.Push(llmtest.Step{Deltas: []string{"Hm"}, Started: started, Release: release}, llmtest.Reply("After the fence."))
	if err := a.m.Send(context.Background(), conv, w.ann, "think"); err != nil {
		t.Fatal(err)
	}
	<-started
	a.node.Fence()
	close(release)
	if _, err := a.node.Claim(context.Background(), conv); fault.KindOf(err) != fault.KindServiceUnavailable {
		t.Fatalf("a claim while fenced: %v, want service_unavailable", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.node.Fenced() {
		if time.Now().After(deadline) {
			t.Fatal("a did not re-join within 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.await(conv, w.ann, "finished after the fence", saying("After the fence."))
	if live := a.m.Stats().LiveActors + b.m.Stats().LiveActors; live != 1 {
		t.Fatalf("live actors a/b = %d/%d, want one in all", a.m.Stats().LiveActors, b.m.Stats().LiveActors)
	}
	if n := w.model.Calls(); n != 2 {
		t.Fatalf("model calls = %d, want 2 (the cut one, its retry)", n)
	}
}

// TestForeignNotificationsAreRefused: a role that may connect to the database can NOTIFY on
// Parley's channels, but without the cluster's key its messages are dropped: a forged
// approval does nothing.
func TestForeignNotificationsAreRefused(t *testing.T) {
	w := newWorld(t)
	a := w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "x"})))
	if err := a.m.Send(context.Background(), conv, w.ann, "note"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "awaiting", awaiting("n1"))
	forged := fmt.Sprintf(`{"t":"req","from":"intruder","id":1,"body":{"conv":%q,"kind":1,"by":{"UserID":%q,"Role":"admin","Via":"token"},"call_id":"n1","res":{"decision":"approve"}}}`, conv, w.ann.UserID)
	if _, err := a.st.Pool().Exec(context.Background(), `SELECT pg_notify($1, $2)`, "parley_n_"+a.node.Self(), forged); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(a.log.String(), "refused a notification not sealed by this cluster") {
		if time.Now().After(deadline) {
			t.Fatal("the forged notification was not refused")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := a.view(conv, w.ann); v.Status != store.StatusAwaiting {
		t.Fatalf("after a forged approval: %s", v.Status)
	}
	// A flood is counted, each one, and logged once (per 10 s).
	before := testutil.ToFloat64(metrics.ClusterRefused.WithLabelValues("unsealed"))
	for range 200 {
		if _, err := a.st.Pool().Exec(context.Background(), `SELECT pg_notify($1, $2)`, "parley_n_"+a.node.Self(), forged); err != nil {
			t.Fatal(err)
		}
	}
	for testutil.ToFloat64(metrics.ClusterRefused.WithLabelValues("unsealed"))-before < 200 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("refused notifications counted: %v of 200", testutil.ToFloat64(metrics.ClusterRefused.WithLabelValues("unsealed"))-before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(a.log.String(), "refused a notification not sealed by this cluster"); n != 1 {
		t.Fatalf("the flood logged %d lines, want 1", n)
	}
}

// TestRenameAndDeleteAnywhere: a rename and a delete sent to processes that do not own the
// conversation are done by its owner, whose actor then leaves.
func TestRenameAndDeleteAnywhere(t *testing.T) {
	w := newWorld(t)
	a, b, c := w.start(procOptions{}), w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Reply("Hello."))
	if err := a.m.Send(context.Background(), conv, w.ann, "hi"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "answered", saying("Hello."))
	if _, err := b.m.Rename(context.Background(), conv, w.ann, "Greetings"); err != nil {
		t.Fatalf("rename on b: %v", err)
	}
	if v := a.view(conv, w.ann); v.Title != "Greetings" {
		t.Fatalf("title on a = %q", v.Title)
	}
	if err := c.m.Delete(context.Background(), conv, w.rita); fault.KindOf(err) != fault.KindNotFound {
		t.Fatalf("a delete by someone else on c: %v, want not_found", err)
	}
	if err := c.m.Delete(context.Background(), conv, w.ann); err != nil {
		t.Fatalf("delete on c: %v", err)
	}
	for _, p := range []*proc{a, b, c} {
		if _, err := p.m.View(context.Background(), conv, w.ann); fault.KindOf(err) != fault.KindNotFound {
			t.Fatalf("view after the delete: %v, want not_found", err)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for a.m.Stats().LiveActors != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a kept the deleted conversation's actor")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestNonOwnerAsksNoClaim: a process that saw a conversation's events knows its owner and
// forwards a request without asking the database; one that did not claims, and a claim that
// finds a live owner only reads (it takes no row lock: no transaction to commit and flush).
func TestNonOwnerAsksNoClaim(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	sub, err := b.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "milk"})), llmtest.Reply("Noted."))
	if err := a.m.Send(context.Background(), conv, w.ann, "note milk"); err != nil {
		t.Fatal(err)
	}
	// b hears a's events of the conversation (they go to every process).
	next(t, sub, "awaiting on b", func(e agent.Event) bool { return e.Type == agent.EventStatus && e.Status == store.StatusAwaiting })
	claims := b.node.Stats().Claims
	if _, err := b.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
		t.Fatalf("approve on b: %v", err)
	}
	if got := a.node.Stats().DirectReplies; got != 0 {
		t.Errorf("a sent %d replies alone, want 0 (the resolve's goes through its event sender)", got)
	}
	if got := b.node.Stats().Claims - claims; got != 0 {
		t.Fatalf("b asked the database for %d claims, want 0 (it knew the owner from the events)", got)
	}
	a.await(conv, w.ann, "finished", saying("Noted."))

	owner, err := b.node.Claim(context.Background(), conv)
	if err != nil || owner != a.node.Self() {
		t.Fatalf("claim on b = %q, %v; want a", owner, err)
	}
	var xmax string
	if err := b.st.Pool().QueryRow(context.Background(), `SELECT xmax::text FROM conversation_owners WHERE conversation_id = $1`, conv).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if xmax != "0" {
		t.Fatalf("the owner row's xmax = %s after a claim that found a live owner: it locked the row", xmax)
	}
}

// TestEventsNobodyFollowsAreNotDecoded: a process where nobody follows a conversation leaves
// its events undecoded, yet still learns its owner from them; once someone there follows it,
// its events arrive decoded.
func TestEventsNobodyFollowsAreNotDecoded(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "milk"})), llmtest.Reply("Noted."))
	if err := a.m.Send(context.Background(), conv, w.ann, "note milk"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "awaiting n1", awaiting("n1"))
	deadline := time.Now().Add(5 * time.Second)
	for b.node.Stats().Undecoded == 0 {
		if time.Now().After(deadline) {
			t.Fatal("b decoded every event of a conversation nobody there follows")
		}
		time.Sleep(5 * time.Millisecond)
	}

	sub, err := b.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	claims := b.node.Stats().Claims
	if _, err := b.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
		t.Fatalf("approve on b: %v", err)
	}
	if got := b.node.Stats().Claims - claims; got != 0 {
		t.Fatalf("b asked the database for %d claims, want 0 (it knew the owner from the undecoded events)", got)
	}
	next(t, sub, "the final answer on b", func(e agent.Event) bool {
		return e.Type == agent.EventMessage && strings.Contains(e.Text, "Noted.")
	})
}

// TestForwardedRequestKeepsItsTrace: a resolve that lands on a non-owner is forwarded with its
// caller's span, and the owner's resolve span continues that trace as its child.
func TestForwardedRequestKeepsItsTrace(t *testing.T) {
	w := newWorld(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a, b := w.start(procOptions{tracer: telemetry.FromProvider(tp, time.Now)}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "milk"})), llmtest.Reply("Noted."))
	if err := a.m.Send(context.Background(), conv, w.ann, "note milk"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "awaiting n1", awaiting("n1"))

	ctx, caller := tp.Tracer("test").Start(context.Background(), "POST resolve")
	if _, err := b.m.Resolve(ctx, conv, "n1", agent.Resolution{Decision: "approve"}, w.ann); err != nil {
		t.Fatalf("approve on b: %v", err)
	}
	caller.End()
	a.await(conv, w.ann, "finished", saying("Noted."))
	for _, s := range rec.Ended() {
		if strings.HasPrefix(s.Name(), "resolve") {
			if s.Parent().SpanID() != caller.SpanContext().SpanID() || s.SpanContext().TraceID() != caller.SpanContext().TraceID() {
				t.Fatalf("the owner's %q span: trace %s parent %s, want the caller's trace %s and span %s", s.Name(),
					s.SpanContext().TraceID(), s.Parent().SpanID(), caller.SpanContext().TraceID(), caller.SpanContext().SpanID())
			}
			if !s.Parent().IsRemote() {
				t.Fatalf("the resolve span's parent is not marked remote")
			}
			return
		}
	}
	t.Fatalf("no resolve span on the owner among %d spans", len(rec.Ended()))
}

// TestDeafListenerIsRestarted: a listener that stops hearing the node's own pings (its
// connection hangs while the database still sees the session) is restarted within a few beats,
// the node re-joins, and a request forwarded to it afterwards is answered. A healthy node never
// restarts its listener for this.
func TestDeafListenerIsRestarted(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	time.Sleep(testTTL + testTTL/6) // three beats: a ping is first checked at the third
	if n := a.node.Stats().DeafRestarts + b.node.Stats().DeafRestarts; n != 0 {
		t.Fatalf("healthy nodes restarted their listeners %d times", n)
	}
	a.node.Deafen(true)
	deadline := time.Now().Add(5 * testTTL)
	for a.node.Stats().DeafRestarts == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a deaf listener was not restarted within %v", 5*testTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	a.node.Deafen(false)
	deadline = time.Now().Add(5 * testTTL)
	for a.node.Fenced() {
		if time.Now().After(deadline) {
			t.Fatal("a did not re-join")
		}
		time.Sleep(20 * time.Millisecond)
	}
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Reply("Heard."))
	if err := b.m.Send(context.Background(), conv, w.ann, "hello"); err != nil {
		t.Fatalf("a message on b after a's restart: %v", err)
	}
	a.await(conv, w.ann, "answered", saying("Heard."))
}

// TestLargeRequestsAndRepliesCrossThroughMail: a message and a view too large for a
// notification travel through cluster_mail, and no mail is left behind.
func TestLargeRequestsAndRepliesCrossThroughMail(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Reply("Read it."))
	if err := a.m.Send(context.Background(), conv, w.ann, "first"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "first answer", saying("Read it."))
	long := strings.Repeat("a long message ", 2000) // 30 KB
	w.model.Push(llmtest.Reply("Read that too."))
	if err := b.m.Send(context.Background(), conv, w.ann, long); err != nil {
		t.Fatalf("a 30 KB message on b: %v", err)
	}
	v := b.await(conv, w.ann, "the long message's answer, seen through b", saying("Read that too."))
	if got, want := asJSON(t, v), asJSON(t, a.view(conv, w.ann)); !reflect.DeepEqual(got, want) {
		t.Fatal("the view through b differs from a's")
	}
	if !strings.Contains(fmt.Sprint(asJSON(t, v)), long) {
		t.Fatal("the long message is not in the view")
	}
	var left, used int
	if err := a.st.Pool().QueryRow(context.Background(), `SELECT (SELECT count(*) FROM cluster_mail), (SELECT last_value FROM cluster_mail_id_seq)`).Scan(&left, &used); err != nil {
		t.Fatal(err)
	}
	// The message's request and at least one view's reply went through the mail, and their one
	// reader deleted them; events' mail (read by every process) is swept later.
	if used < 2 || left > used-2 {
		t.Fatalf("cluster_mail: %d rows written, %d left", used, left)
	}
}

// End to end: a message sent on b is forwarded to the owner a; its sealed request, heard on
// a's channel and notified again within the request's deadline, is refused (found by an
// attack: the message was posted again).
func TestReplayedForwardIsPostedOnce(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	ch := "parley_n_" + a.node.Self()
	spy, err := pgx.Connect(context.Background(), w.url)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close(context.Background())
	if _, err := spy.Exec(context.Background(), "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	w.model.Push(llmtest.Reply("hello"), llmtest.Reply("ok"), llmtest.Reply("ok"))
	if err := a.m.Send(context.Background(), conv, w.ann, "hi"); err != nil { // a owns the conversation
		t.Fatal(err)
	}
	a.await(conv, w.ann, "answered", saying("hello"))
	if err := b.m.Send(context.Background(), conv, w.ann, "pay bob 100"); err != nil {
		t.Fatal(err)
	}
	var captured string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for captured == "" {
		n, err := spy.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("heard no request on a's channel: %v", err)
		}
		if len(n.Payload) > 200 { // a's own pings are short; the request is not
			captured = n.Payload
		}
	}
	a.await(conv, w.ann, "answered", saying("ok"))
	if _, err := spy.Exec(context.Background(), `SELECT pg_notify($1, $2)`, ch, captured); err != nil {
		t.Fatal(err)
	}
	posted := func() int {
		n := 0
		for _, m := range a.view(conv, w.ann).Messages {
			if m.Content == "pay bob 100" {
				n++
			}
		}
		return n
	}
	// a's listener refused the replay (counted), or it posted the message again.
	waitUntil(t, "refusal or second posting of the replayed request", func() bool { return a.node.Stats().Replays > 0 || posted() > 1 })
	if n := posted(); n != 1 {
		t.Errorf("one message sent once, its forwarded request replayed once: posted %d times", n)
	}
}

// TestHandoverIsImmediateForAnIdleConversation: a process that learned an idle conversation's
// owner from its events forgets it when that owner leaves, so the next message there claims
// the conversation at once rather than waiting TTL/3 for the departed owner to answer (found
// by an attack: 521 ms with the tests' TTL, 2 s with the default).
func TestHandoverIsImmediateForAnIdleConversation(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	sub, err := b.m.Subscribe(context.Background(), conv, w.ann)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w.model.Push(llmtest.Reply("Hello."), llmtest.Reply("Again."))
	if err := a.m.Send(context.Background(), conv, w.ann, "hi"); err != nil {
		t.Fatal(err)
	}
	next(t, sub, "idle on b", func(e agent.Event) bool { return e.Type == agent.EventStatus && e.Status == store.StatusIdle })
	// b learned a as the owner from its events: a request there goes to a without a claim.
	before := b.node.Stats()
	if _, err := b.m.Resolve(context.Background(), conv, "none", agent.Resolution{Decision: "approve"}, w.ann); fault.KindOf(err) == fault.KindServiceUnavailable {
		t.Fatalf("a resolve through b: %v", err)
	}
	if after := b.node.Stats(); after.Forwarded != before.Forwarded+1 || after.Claims != before.Claims {
		t.Fatalf("b forwarded %d and claimed %d times; want one forward by a hint, no claim: b holds no hint naming a",
			after.Forwarded-before.Forwarded, after.Claims-before.Claims)
	}
	departures := b.node.Stats().Departures
	a.stop()
	waitUntil(t, "departure of a heard on b", func() bool { return b.node.Stats().Departures > departures })
	// With the hint kept, b would forward to the departed a and wait TTL/3 to find it gone.
	before = b.node.Stats()
	if err := b.m.Send(context.Background(), conv, w.ann, "again"); err != nil {
		t.Fatalf("send on b: %v", err)
	}
	if after := b.node.Stats(); after.Forwarded != before.Forwarded || after.Claims == before.Claims {
		t.Errorf("the message on b forwarded %d requests (to the departed owner named by b's hint) and claimed %d times; want a claim, no forward",
			after.Forwarded-before.Forwarded, after.Claims-before.Claims)
	}
	b.await(conv, w.ann, "answered on b", saying("Again."))
}

// TestStaleOwnerCannotWrite: a process that still runs a conversation's actor after another
// claimed the conversation (it was deemed dead meanwhile) cannot write to its log: the append
// is refused, the request is answered service_unavailable with nothing written, its actor
// stops, and the request sent again goes to the new owner, which continues from the log.
func TestStaleOwnerCannotWrite(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Reply("First."), llmtest.Reply("Second."))
	if err := a.m.Send(context.Background(), conv, w.ann, "hi"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "the first answer", saying("First."))
	var fence string
	if err := a.st.Pool().QueryRow(context.Background(), `SELECT coalesce(owner_node, '') FROM conversations WHERE id = $1`, conv).Scan(&fence); err != nil || fence != a.node.Self() {
		t.Fatalf("the claim recorded %q (%v) as the conversation's writer, want a", fence, err)
	}
	// b takes the conversation over as parley_claim does when a is deemed dead; a's actor runs on.
	if _, err := a.st.Pool().Exec(context.Background(), `UPDATE conversation_owners SET node_id = $2 WHERE conversation_id = $1;`, conv, b.node.Self()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.st.Pool().Exec(context.Background(), `UPDATE conversations SET owner_node = $2 WHERE id = $1`, conv, b.node.Self()); err != nil {
		t.Fatal(err)
	}
	if a.m.Stats().LiveActors != 1 {
		t.Fatalf("a runs %d actors, want the conversation's: the stale owner's actor must still run", a.m.Stats().LiveActors)
	}
	err := a.m.Send(context.Background(), conv, w.ann, "to the stale owner")
	if fault.KindOf(err) != fault.KindServiceUnavailable {
		t.Fatalf("a message through the stale owner: err = %v, want service_unavailable", err)
	}
	// Its actor tried to append and the database refused it (not some check before the write).
	if !strings.Contains(a.log.String(), "another process owns the conversation now; stopping its actor here") {
		t.Fatalf("the request was refused (%v) without the append being refused", err)
	}
	log, lerr := a.st.Log(context.Background(), conv, 0)
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, e := range log {
		if strings.Contains(string(e.Data), "to the stale owner") {
			t.Fatalf("the stale owner wrote seq %d %s", e.Seq, e.Type)
		}
	}
	// Whatever a appends to the conversation is refused, not only what its actor tried.
	last := log[len(log)-1].Seq
	_, err = a.st.Append(context.Background(), conv, last, store.Batch{Entries: []store.Entry{{
		Type: store.EntryUserMessage, Actor: w.ann.UserID, Data: json.RawMessage(`{"content":"written by a directly"}`)}}})
	if !errors.Is(err, store.ErrNotOwner) {
		t.Fatalf("an append by the stale owner's store: %v, want ErrNotOwner", err)
	}
	// Its actor stops.
	waitUntil(t, "stop of the stale owner's actor", func() bool { return a.m.Stats().LiveActors == 0 })

	// Sent again (through a, as a caller would): a's actor is gone, so a asks who owns the
	// conversation and forwards to b, which continues from the log.
	forwarded, served := a.node.Stats().Forwarded, b.node.Stats().Served
	deadline := time.Now().Add(5 * time.Second)
	for {
		err = a.m.Send(context.Background(), conv, w.ann, "again")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the message sent again: %v", err)
	}
	v := b.await(conv, w.ann, "the answer on b", saying("Second."))
	if a.node.Stats().Forwarded == forwarded || b.node.Stats().Served == served {
		t.Fatalf("the message sent again through a was not forwarded to b (a forwarded %d, b served %d)",
			a.node.Stats().Forwarded-forwarded, b.node.Stats().Served-served)
	}
	if a.m.Stats().LiveActors != 0 || b.m.Stats().LiveActors != 1 || ownerOf(t, b, conv) != b.node.Self() {
		t.Fatalf("actors a/b = %d/%d, owner %s: want the conversation on b only", a.m.Stats().LiveActors, b.m.Stats().LiveActors, ownerOf(t, b, conv))
	}
	// b continued from the log: the first exchange, then the message sent again, once.
	var said []string
	for _, m := range v.Messages {
		said = append(said, m.Content)
	}
	if want := []string{"hi", "First.", "again", "Second."}; !reflect.DeepEqual(said, want) {
		t.Fatalf("messages on b = %q, want %q", said, want)
	}
}

// ownerDiesAfterTakingRequest reproduces "the owner took a forwarded request, its write reached
// the database, and it died before its answer reached the sender" (kill -9 between the commit
// and the reply), with two database locks instead of a kill:
//
//  1. a transaction locks the conversation's row, so the owner's (a's) append of the forwarded
//     request waits (the owner has taken the request);
//  2. a second transaction locks a's cluster_nodes row (so a's listener cannot record a new
//     session) and a's listening backend is terminated: to the database, a is dead, as after
//     kill -9;
//  3. the sender (b) sees a dead within TTL/3 (ErrOwnerGone → "moved"), claims the
//     conversation and sends the same request to its own fresh actor;
//  4. the first lock goes: a's write, which the database already had, commits.
//
// It returns the error the caller on b got.
func ownerDiesAfterTakingRequest(t *testing.T, w *world, a, b *proc, conv string, request func() error) error {
	t.Helper()
	ctx := context.Background()
	connect := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, w.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	rowLock, nodeLock, admin := connect(), connect(), connect()

	tx1, err := rowLock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	if _, err := tx1.Exec(ctx, `SELECT 1 FROM conversations WHERE id = $1 FOR NO KEY UPDATE`, conv); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- request() }()

	// a's append waits on the row: a took the request.
	waitUntil(t, "a's append waiting on the conversation's row", func() bool {
		var n int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return n >= 1
	})

	tx2, err := nodeLock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback(ctx)
	var pid int32
	if err := tx2.QueryRow(ctx, `SELECT backend_pid FROM cluster_nodes WHERE id = $1 FOR UPDATE`, a.node.Self()).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	// b gives up on a and claims the conversation for itself: the claim waits for the
	// conversation's row, behind a's append (migration 016).
	waitUntil(t, "b claiming the conversation", func() bool {
		var owner string
		_ = admin.QueryRow(ctx, `SELECT node_id FROM conversation_owners WHERE conversation_id = $1`, conv).Scan(&owner)
		var claiming int
		_ = admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
			AND query LIKE '%parley_claim%'`).Scan(&claiming)
		return owner == b.node.Self() || claiming > 0
	})
	time.Sleep(300 * time.Millisecond)
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var got error
	select {
	case got = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the request on b did not return")
	}
	if err := tx2.Commit(ctx); err != nil { // a may re-join now
		t.Fatal(err)
	}
	return got
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMessagePostedOnceWhenOwnerDiesBeforeReplying (found by an attack): a message forwarded to an owner
// that recorded it and died before answering must be in the log once. (DESIGN: "answered …
// exactly once"; architecture.md: "A request the owner may have taken … is not sent again (a
// message would be posted twice)".)
func TestMessagePostedOnceWhenOwnerDiesBeforeReplying(t *testing.T) {
	w := newWorld(t)
	a, b := w.start(procOptions{}), w.start(procOptions{})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Reply("First."))
	if err := a.m.Send(context.Background(), conv, w.ann, "hi"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "first answer", saying("First."))
	for range 4 {
		w.model.Push(llmtest.Reply("Answer."))
	}
	err := ownerDiesAfterTakingRequest(t, w, a, b, conv, func() error {
		return b.m.Send(context.Background(), conv, w.ann, "hello once")
	})
	t.Logf("send on b: %v", err)
	// The turn must go on (the owner answers) within a few seconds of the takeover.
	stuck := !idleWithin(b, conv, w.ann, 8*time.Second)
	log, lerr := b.st.Log(context.Background(), conv, 0)
	if lerr != nil {
		t.Fatal(lerr)
	}
	var copies []string
	for _, e := range log {
		if strings.Contains(string(e.Data), "hello once") {
			copies = append(copies, fmt.Sprintf("seq %d %s", e.Seq, e.Type))
		}
	}
	if len(copies) != 1 {
		t.Errorf("the message sent once is in the log %d times: %v", len(copies), copies)
	}
	_, verr := a.m.View(context.Background(), conv, w.ann)
	t.Logf("a (re-joined) live actors %d; view on a: %v", a.m.Stats().LiveActors, verr)
	if stuck {
		t.Errorf("the conversation is still %s 8 s after the takeover, its owner b alive: the turn a opened is never continued", b.view(conv, w.ann).Status)
	}
}

// idleWithin polls p's view until the conversation is idle.
func idleWithin(p *proc, conv string, by agent.Principal, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if p.view(conv, by).Status == store.StatusIdle {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// TestApproveAnsweredOkOnceWhenOwnerDiesBeforeReplying (found by an attack): an approve forwarded to an owner
// that recorded it and died before answering: the caller's approve took effect, so it must not
// be told 409 stale, and the tool must run once.
func TestApproveAnsweredOkOnceWhenOwnerDiesBeforeReplying(t *testing.T) {
	w := newWorld(t)
	runs := &countingRuns{}
	a, b := w.start(procOptions{runs: runs}), w.start(procOptions{runs: runs})
	conv := a.conversation(w.ann)
	w.model.Push(llmtest.Calls(llmtest.Call("n1", "note", map[string]any{"text": "milk"})))
	for range 4 {
		w.model.Push(llmtest.Reply("Noted."))
	}
	if err := a.m.Send(context.Background(), conv, w.ann, "note milk"); err != nil {
		t.Fatal(err)
	}
	a.await(conv, w.ann, "awaiting n1", awaiting("n1"))
	err := ownerDiesAfterTakingRequest(t, w, a, b, conv, func() error {
		_, err := b.m.Resolve(context.Background(), conv, "n1", agent.Resolution{Decision: "approve"}, w.ann)
		return err
	})
	t.Logf("approve on b: %v", err)
	idle := idleWithin(b, conv, w.ann, 8*time.Second)
	v := b.view(conv, w.ann)
	t.Logf("after: status %s, runs %v", v.Status, runs.list())
	if fault.KindOf(err) == fault.KindStale {
		t.Errorf("the one approve of n1 was answered stale although it was applied (status %s)", v.Status)
	}
	// b hands over gracefully; a finishes the turn from the log.
	b.stop()
	idleA := idleWithin(a, conv, w.ann, 8*time.Second)
	if got := runs.list(); len(got) != 1 {
		t.Errorf("the approved tool ran %d times: %v (finished on a after b left: %v)", len(got), got, idleA)
	}
	if !idle {
		t.Errorf("conversation stuck in %s 8 s after the takeover, its owner b alive", v.Status)
	}
}

// TestSweptNodeRejoins: after a long partition the others sweep a node's row (and its
// ownerships with it). The node must come back by itself once it reaches the database: its
// listener's session brings the row back, the next beat sees it alive, and it re-joins
// (Ready), rather than being deemed dead beat after beat.
func TestSweptNodeRejoins(t *testing.T) {
	w := newWorld(t)
	a := w.start(procOptions{})
	if err := a.node.Ready(); err != nil {
		t.Fatalf("a fresh node is not ready: %v", err)
	}
	if _, err := a.st.Pool().Exec(context.Background(), `DELETE FROM cluster_nodes WHERE id = $1`, a.node.Self()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * testTTL)
	for !strings.Contains(a.log.String(), "re-joining") {
		if time.Now().After(deadline) {
			t.Fatal("the node did not notice its row was gone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for a.node.Ready() != nil || !strings.Contains(a.log.String(), "cluster: re-joined") {
		if time.Now().After(deadline) {
			t.Fatalf("the swept node did not re-join within %v: %v", 10*testTTL, a.node.Ready())
		}
		time.Sleep(20 * time.Millisecond)
	}
	var n int
	if err := a.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM cluster_nodes WHERE id = $1`, a.node.Self()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the node's row after the re-join: %d %v", n, err)
	}
}
