package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/llm"
	"parley/internal/store"
	"parley/internal/store/sqlitestore"
	"parley/internal/tools"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// database/sql and pgx keep these until their pools close; stores are closed in Cleanup,
		// which may run after the leak check of a parallel test's goroutines.
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"),
		goleak.Cleanup(func(int) {
			if err := pgMigrated.Drop(); err != nil {
				fmt.Fprintln(os.Stderr, "drop the migrated template database:", err)
			}
		}),
	)
}

// storeKinds are the stores every scenario runs on. The PostgreSQL one is added by
// pg_test.go.
var storeKinds = []struct {
	name string
	open func(t testing.TB, clk clock.Clock) store.Store
}{
	{"sqlite", func(t testing.TB, clk clock.Clock) store.Store {
		st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "parley.db"), sqlitestore.WithClock(clk))
		if err != nil {
			t.Fatalf("open sqlite store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}},
}

// eachStore marks t parallel (its caller must not) and runs f as a parallel subtest on every
// store kind. Each subtest has its own store, clock, model and manager; the package's tests
// mostly wait (on PostgreSQL creating and dropping their databases, on goroutines handing
// work over), so running them side by side roughly halves the package's time.
func eachStore(t *testing.T, f func(t *testing.T, open func(testing.TB, clock.Clock) store.Store)) {
	t.Helper()
	t.Parallel()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			f(t, k.open)
		})
	}
}

// eachStoreSerial runs f on every store kind, one after the other and never beside another
// test: for tests that read the process's metrics (package metrics' counters and gauges),
// which a parallel test would move. Go runs every serial top-level test before it resumes
// the parallel ones.
func eachStoreSerial(t *testing.T, f func(t *testing.T, open func(testing.TB, clock.Clock) store.Store)) {
	t.Helper()
	for _, k := range storeKinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.open) })
	}
}

// --- a scripted model -------------------------------------------------------------------------

// step answers one LLM call.
type step func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error)

// scripted is an in-process provider that answers LLM calls from a script, in order, and
// records every request. When the script runs out it answers "done".
type scripted struct {
	mu    sync.Mutex
	steps []step
	reqs  []llm.Request
	// called receives the index of each LLM call as it starts (buffered; tests drain it when
	// they care).
	called chan int
}

func newScripted(steps ...step) *scripted {
	return &scripted{steps: steps, called: make(chan int, 1000)}
}

func (s *scripted) Name() string       { return "scripted" }
func (s *scripted) ToolFormat() string { return "openai" }

func (s *scripted) Stream(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
	s.mu.Lock()
	i := len(s.reqs)
	s.reqs = append(s.reqs, req)
	var st step
	if i < len(s.steps) {
		st = s.steps[i]
	} else {
		st = say("done")
	}
	s.mu.Unlock()
	s.called <- i
	return st(ctx, req, emit)
}

func (s *scripted) add(steps ...step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
}

func (s *scripted) requests() []llm.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]llm.Request(nil), s.reqs...)
}

func say(text string) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		half := len(text) / 2
		for _, part := range []string{text[:half], text[half:]} {
			if part == "" {
				continue
			}
			if err := emit(llm.Event{Type: llm.EventTextDelta, Text: part}); err != nil {
				return llm.Response{}, err
			}
		}
		return llm.Response{Text: text, StopReason: "stop"}, nil
	}
}

type tc struct {
	id, name, args string
}

func callTools(calls ...tc) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		var r llm.Response
		for _, c := range calls {
			r.ToolCalls = append(r.ToolCalls, llm.ToolCall{ID: c.id, Name: c.name, Args: json.RawMessage(c.args)})
		}
		r.StopReason = "tool_calls"
		return r, nil
	}
}

func failWith(err error) step {
	return func(ctx context.Context, req llm.Request, emit func(llm.Event) error) (llm.Response, error) {
		return llm.Response{}, err
	}
}

// --- the environment ------------------------------------------------------------------------

type env struct {
	t     *testing.T
	ctx   context.Context
	st    store.Store
	clk   *clock.Fake
	prov  *scripted
	reg   *tools.Registry
	cfg   Config
	m     *Manager
	conv  string
	sub   *Subscription
	owner Principal
	other Principal
	rev   Principal
	admin Principal
}

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// newEnv builds a store with four users and one conversation owned by "owner", and a started
// manager over it.
func newEnv(t *testing.T, open func(testing.TB, clock.Clock) store.Store, prov *scripted, toolsFor func(store.Store) []*tools.Tool, mod func(*Config)) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	st := open(t, clk)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, st: st, clk: clk, prov: prov}
	users := map[string]*Principal{"owner": &e.owner, "other": &e.other, "rev": &e.rev, "admin": &e.admin}
	roles := map[string]store.Role{"owner": store.RoleMember, "other": store.RoleMember, "rev": store.RoleReviewer, "admin": store.RoleAdmin}
	for _, name := range []string{"owner", "other", "rev", "admin"} {
		u, err := st.CreateUser(ctx, store.User{Name: name, Role: roles[name], PasswordHash: []byte("x")})
		if err != nil {
			t.Fatalf("create user: %v", err)
		}
		*users[name] = Principal{UserID: u.ID, Role: u.Role, Via: "session"}
	}
	conv, err := st.CreateConversation(ctx, store.Conversation{OwnerID: e.owner.UserID, Title: "test"})
	if err != nil {
		t.Fatalf("create conversation: %v", err)
	}
	e.conv = conv.ID
	reg, err := tools.NewRegistry(toolsFor(st)...)
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	e.reg = reg
	e.cfg = Config{Store: st, Provider: prov, Tools: reg, Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if mod != nil {
		mod(&e.cfg)
	}
	e.startManager()
	return e
}

func (e *env) startManager() {
	e.t.Helper()
	e.m = New(e.cfg)
	m := e.m
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			e.t.Errorf("close manager: %v", err)
		}
	})
	e.sub = m.events.Subscribe(e.conv)
	if err := m.Start(e.ctx); err != nil {
		e.t.Fatalf("start: %v", err)
	}
}

// crash stops the manager as a kill would: in-flight work is cancelled and its results dropped.
func (e *env) crash() {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = e.m.Close(ctx)
}

// next waits for the first event matching ok and returns it.
func (e *env) next(what string, ok func(Event) bool) Event {
	e.t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	for {
		select {
		case ev, open := <-e.sub.C:
			if !open {
				e.t.Fatalf("waiting for %s: subscription closed", what)
			}
			if ok(ev) {
				return ev
			}
		case <-timer.C:
			e.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// waitStatus returns once the conversation has the status: at once when the view already shows
// it (its event may have been passed over while waiting for another), else after the status
// event that brought it.
func (e *env) waitStatus(status string) {
	e.t.Helper()
	for e.view().Status != status {
		// Every status change is published after it shows in the view, so the next status event
		// (or a stale one still buffered) is the moment to look again.
		e.next("status "+status, func(ev Event) bool { return ev.Type == EventStatus })
	}
}

func (e *env) waitCall(id, status string) Event {
	e.t.Helper()
	return e.next("call "+id+" "+status, func(ev Event) bool {
		return ev.Type == EventToolCall && (id == "" || ev.ToolCallID == id) && ev.Status == status
	})
}

// tick advances the fake clock by step every few milliseconds until the returned stop is
// called: for a deadline whose timer is armed by another goroutine (the expiry poller re-arms
// only after the actor answered it) at a moment the test cannot see.
func (e *env) tick(step time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
				e.clk.Advance(step)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

func (e *env) send(text string) {
	e.t.Helper()
	if err := e.m.Send(e.ctx, e.conv, e.owner, text); err != nil {
		e.t.Fatalf("send: %v", err)
	}
}

func (e *env) view() View {
	e.t.Helper()
	v, err := e.m.View(e.ctx, e.conv, System)
	if err != nil {
		e.t.Fatalf("view: %v", err)
	}
	return v
}

func (e *env) call(id string) CallView {
	e.t.Helper()
	for _, c := range e.view().Calls {
		if c.ID == id {
			return c
		}
	}
	e.t.Fatalf("no call %s in view", id)
	return CallView{}
}

// toolMessages returns the tool messages of an LLM request, in order.
func toolMessages(req llm.Request) []llm.Message {
	var out []llm.Message
	for _, m := range req.Messages {
		if m.Role == llm.RoleTool {
			out = append(out, m)
		}
	}
	return out
}

// envelope decodes a result envelope.
func envelope(t *testing.T, raw string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("envelope %q: %v", raw, err)
	}
	return m
}

func errKind(t *testing.T, env map[string]any) string {
	t.Helper()
	e, _ := env["error"].(map[string]any)
	k, _ := e["kind"].(string)
	return k
}

func kindOf(err error) fault.Kind {
	var te *fault.Error
	if errors.As(err, &te) {
		return te.Kind
	}
	return fault.Kind(fmt.Sprintf("not a tool error: %v", err))
}

// --- tools ----------------------------------------------------------------------------------

func mustTool(t testing.TB, s tools.Spec) *tools.Tool {
	t.Helper()
	tool, err := tools.New(s)
	if err != nil {
		t.Fatalf("tool %s: %v", s.Name, err)
	}
	return tool
}

// lookupTool is an ungated server tool that echoes its argument n.
func lookupTool(t testing.TB, runs *counter) *tools.Tool {
	return mustTool(t, tools.Spec{
		Name: "lookup", Description: "look a number up", Executor: tools.Server,
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],"additionalProperties":false}`),
		Func: func(ctx context.Context, call tools.Call, args map[string]any) (any, error) {
			if runs != nil {
				runs.add(call.ToolCallID)
			}
			return map[string]any{"n": args["n"]}, nil
		},
	})
}

// counter records which calls ran, safely from tool goroutines.
type counter struct {
	mu  sync.Mutex
	ids []string
}

func (c *counter) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, id)
}

func (c *counter) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

// storeOutbox adapts the store's outbox to send_email's Outbox.
type storeOutbox struct{ st store.Store }

func (o storeOutbox) Send(ctx context.Context, call tools.Call, msg tools.Email) (string, error) {
	m, err := o.st.AddOutbox(ctx, store.OutboxMessage{ConversationID: call.ConversationID, ToolCallID: call.ToolCallID,
		To: msg.To, Subject: msg.Subject, Body: msg.Body})
	if err != nil {
		return "", err
	}
	return fmt.Sprint(m.ID), nil
}
