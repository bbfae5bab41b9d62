package mcpadapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"parley/internal/clock"
	"parley/internal/fault"
	"parley/internal/tools"
	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/mcpadapter/mcptest"
)

func TestMain(m *testing.M) {
	mcptest.ServeIfChild() // the stdio server is this binary, re-executed
	goleak.VerifyTestMain(m)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

type fixture struct {
	reg *tools.Registry
	m   *mcpadapter.Manager
}

func start(t *testing.T, cfg mcpadapter.Config, opts mcpadapter.Options) *fixture {
	t.Helper()
	reg, err := tools.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	opts.Registry = reg
	if opts.Logger == nil {
		opts.Logger = quiet()
	}
	m, err := mcpadapter.New([]mcpadapter.Config{cfg}, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m.Start(ctx)
	t.Cleanup(m.Stop)
	return &fixture{reg: reg, m: m}
}

func stdioConfig() mcpadapter.Config {
	return mcpadapter.Config{Name: "t", Transport: mcpadapter.Stdio, Command: []string{os.Args[0]},
		Env: map[string]string{mcptest.EnvServe: "1"}}
}

func startStdio(t *testing.T, opts mcpadapter.Options) *fixture {
	return start(t, stdioConfig(), opts)
}

func startHTTP(t *testing.T) (*fixture, *mcp.Server) {
	t.Helper()
	srv := mcptest.NewServer(false)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	f := start(t, mcpadapter.Config{Name: "h", Transport: mcpadapter.HTTP, URL: hs.URL, AllowPrivateNetwork: true,
		Headers: map[string]string{"X-Test": "1"}}, mcpadapter.Options{})
	return f, srv
}

func (f *fixture) tool(t *testing.T, name string) *tools.Tool {
	t.Helper()
	tl, ok := f.reg.Get(name)
	if !ok {
		var names []string
		for _, x := range f.reg.All() {
			names = append(names, x.Name())
		}
		t.Fatalf("tool %s not registered; have %v (status %+v)", name, names, f.m.Status())
	}
	return tl
}

func run(t *testing.T, tl *tools.Tool, call tools.Call, args map[string]any) tools.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if call.ConversationID == "" {
		call.ConversationID, call.ToolCallID, call.Attempt = "conv1", "call_1", 1
	}
	return tl.Execute(ctx, call, args)
}

// eventually polls cond (a condition on state the supervisor moves) until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestListAndGate(t *testing.T) {
	for name, f := range map[string]func(t *testing.T) *fixture{
		"stdio": func(t *testing.T) *fixture { return startStdio(t, mcpadapter.Options{}) },
		"http":  func(t *testing.T) *fixture { f, _ := startHTTP(t); return f },
	} {
		t.Run(name, func(t *testing.T) {
			f := f(t)
			st := f.m.Status()[0]
			if st.State != mcpadapter.StateUp {
				t.Fatalf("status %+v, want up", st)
			}
			prefix := st.Name + "__"
			// Annotations are untrusted by default: a read-only hint does not open the gate.
			if !f.tool(t, prefix+"lookup").Gated() {
				t.Error("a tool the server calls read-only runs without approval, and its annotations are not trusted")
			}
			if !f.tool(t, prefix+"write").Gated() {
				t.Error("a side-effecting tool runs without approval")
			}
			// A schema that does not compile and a name models refuse are skipped, not fatal.
			for _, bad := range []string{"bad_schema", "bad.name"} {
				if _, ok := f.reg.Get(prefix + bad); ok {
					t.Errorf("%s was registered", bad)
				}
			}
			if !strings.Contains(f.tool(t, prefix+"lookup").Description(), "Look a word up") {
				t.Errorf("description %q", f.tool(t, prefix+"lookup").Description())
			}
		})
	}
}

func TestFileWinsOverHints(t *testing.T) {
	cfg := stdioConfig()
	cfg.Allow = []string{"lookup", "write"}
	cfg.Approval = map[string]tools.Approval{"lookup": tools.RequiresApproval, "write": tools.Auto}
	f := start(t, cfg, mcpadapter.Options{})
	if !f.tool(t, "t__lookup").Gated() {
		t.Error("the file's requires_approval lost to the server's read-only hint")
	}
	if f.tool(t, "t__write").Gated() {
		t.Error("the file's auto was ignored")
	}
	if _, ok := f.reg.Get("t__fail"); ok {
		t.Error("a tool outside the allow-list was registered")
	}
	cfg.Approval, cfg.Allow, cfg.DefaultApproval = nil, nil, tools.RequiresApproval
	g := start(t, cfg, mcpadapter.Options{})
	if !g.tool(t, "t__lookup").Gated() {
		t.Error("default_approval requires_approval lost to the read-only hint")
	}
}

// lockedBuffer collects a logger's output across the supervisor's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTrustAnnotations: a server's readOnlyHint opens the gate only when the tools file trusts
// the server's annotations, and the tools it opened are logged; the file's words still win.
func TestTrustAnnotations(t *testing.T) {
	var logs lockedBuffer
	f := start(t, stdioConfig(), mcpadapter.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if !f.tool(t, "t__lookup").Gated() {
		t.Error("without trust_annotations, the read-only hint opened the gate")
	}
	if strings.Contains(logs.String(), "trust_annotations") {
		t.Errorf("logged as trusted without trust: %s", logs.String())
	}

	var trusted lockedBuffer
	cfg := stdioConfig()
	cfg.TrustAnnotations = true
	cfg.Approval = map[string]tools.Approval{"progress": tools.RequiresApproval}
	g := start(t, cfg, mcpadapter.Options{Logger: slog.New(slog.NewTextHandler(&trusted, nil))})
	if g.tool(t, "t__lookup").Gated() {
		t.Error("with trust_annotations, a read-only tool is gated")
	}
	if !g.tool(t, "t__write").Gated() {
		t.Error("with trust_annotations, a tool without the hint runs without approval")
	}
	if !g.tool(t, "t__progress").Gated() {
		t.Error("the file's requires_approval lost to a trusted hint")
	}
	got := trusted.String()
	if !strings.Contains(got, "trust_annotations") || !strings.Contains(got, "t__lookup") ||
		strings.Contains(got, "t__write") || strings.Contains(got, "t__progress") {
		t.Errorf("the tools opened by the hint are not logged as such: %s", got)
	}
	if out := run(t, g.tool(t, "t__lookup"), tools.Call{}, map[string]any{"q": "x"}); out.Status != tools.OK {
		t.Fatalf("lookup: %+v", out)
	}
}

func TestCallResultAndError(t *testing.T) {
	f, _ := startHTTP(t)
	out := run(t, f.tool(t, "h__lookup"), tools.Call{}, map[string]any{"q": "parley"})
	if out.Status != tools.OK || out.Result != "found: parley" {
		t.Fatalf("lookup: %+v", out)
	}
	call := tools.Call{ConversationID: "conv9", ToolCallID: "call_7", Attempt: 2}
	out = run(t, f.tool(t, "h__write"), call, map[string]any{"key": "k"})
	if out.Status != tools.OK {
		t.Fatalf("write: %+v", out)
	}
	sc := out.Result.(map[string]any)["structured_content"].(map[string]any)
	if sc["idempotency_key"] != call.Key() || sc["written"] != "k" {
		t.Errorf("structured content %v; the idempotency key must travel in _meta as %s", sc, call.Key())
	}
	out = run(t, f.tool(t, "h__fail"), tools.Call{}, nil)
	if out.Status != tools.ToolError || out.Err.Kind != fault.KindCommandFailed || !strings.Contains(out.Err.Message, "disk is full") || out.Retryable() {
		t.Fatalf("fail: %+v", out.Err)
	}
	// Arguments are validated against the server's schema before anything runs.
	if _, e := f.tool(t, "h__lookup").ValidateArgs(json.RawMessage(`{"q": 3}`)); e == nil || e.Kind != fault.KindInvalidArgs {
		t.Fatalf("invalid args: %v", e)
	}
}

func TestHostileResult(t *testing.T) {
	f := startStdio(t, mcpadapter.Options{})
	out := run(t, f.tool(t, "t__huge"), tools.Call{}, nil)
	if out.Status != tools.OK {
		t.Fatalf("huge: %+v", out)
	}
	env := out.Envelope(tools.DefaultMaxOutputBytes)
	if len(env) > tools.DefaultMaxOutputBytes {
		t.Errorf("envelope of %d bytes", len(env))
	}
	b, _ := json.Marshal(out.Result)
	if len(b) > 200<<10 {
		t.Errorf("a %d-byte result was kept in memory", len(b))
	}
	s := string(env)
	if strings.Contains(s, `\u0000`) || strings.ContainsRune(s, 0) || !json.Valid(env) {
		t.Errorf("envelope keeps a NUL or is invalid: %.200s", s)
	}
	if !strings.Contains(string(b), `"type":"image"`) || strings.Contains(string(b), "PNG") {
		t.Errorf("the image is not described (or its bytes were passed on): %.300s", b)
	}
}

func TestProgress(t *testing.T) {
	f := startStdio(t, mcpadapter.Options{})
	var mu sync.Mutex
	var got []string
	out := run(t, f.tool(t, "t__progress"), tools.Call{Progress: func(m string) {
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}}, nil)
	mu.Lock()
	defer mu.Unlock()
	if out.Status != tools.OK || strings.Join(got, ",") != "step 1,step 2,step 3" {
		t.Fatalf("outcome %+v, progress %q", out, got)
	}
}

func TestElicitation(t *testing.T) {
	for _, tc := range []struct {
		name string
		ans  tools.Answer
		want string
	}{
		{"accept", tools.Answer{Action: "accept", Content: map[string]any{"name": "Ada"}}, "hello Ada"},
		{"decline", tools.Answer{Action: "decline"}, "no name: decline"},
		{"cancel", tools.Answer{Action: "cancel"}, "no name: cancel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := startHTTP(t)
			var asked tools.Question
			out := run(t, f.tool(t, "h__ask"), tools.Call{Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
				asked = q
				return tc.ans, nil
			}}, nil)
			if out.Status != tools.OK || out.Result != tc.want {
				t.Fatalf("outcome %+v", out)
			}
			if asked.Message != "What is your name?" || !strings.Contains(string(asked.Schema), `"name"`) {
				t.Errorf("question %+v", asked)
			}
		})
	}
	t.Run("url", func(t *testing.T) {
		f := startStdio(t, mcpadapter.Options{})
		var asked tools.Question
		out := run(t, f.tool(t, "t__ask_url"), tools.Call{Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
			asked = q
			return tools.Answer{Action: "accept"}, nil
		}}, nil)
		if out.Status != tools.OK || out.Result != "url: accept" || asked.URL != "https://auth.example.test/authorize?x=1" {
			t.Fatalf("outcome %+v, question %+v", out, asked)
		}
	})
	t.Run("cannot ask", func(t *testing.T) {
		f := startStdio(t, mcpadapter.Options{})
		out := run(t, f.tool(t, "t__ask"), tools.Call{Ask: func(context.Context, tools.Question) (tools.Answer, error) {
			return tools.Answer{}, fault.New(fault.KindTimeout, "the user did not respond in time", nil)
		}}, nil)
		if out.Status != tools.ToolError || out.Err.Kind != fault.KindTimeout {
			t.Fatalf("outcome %+v", out)
		}
	})
}

func TestNeverAnswers(t *testing.T) {
	f := startStdio(t, mcpadapter.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	out := f.tool(t, "t__hang").Execute(ctx, tools.Call{ConversationID: "c", ToolCallID: "x", Attempt: 1}, nil)
	if out.Status != tools.ToolError || out.Err.Kind != fault.KindTimeout || !out.Retryable() {
		t.Fatalf("outcome %+v", out)
	}
	// The session survives a call abandoned by its deadline.
	if out := run(t, f.tool(t, "t__lookup"), tools.Call{}, map[string]any{"q": "still"}); out.Status != tools.OK {
		t.Fatalf("after a hung call: %+v", out)
	}
}

func TestCrashMidCallAndRestart(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	f := startStdio(t, mcpadapter.Options{Clock: clk, MinBackoff: time.Second})
	out := run(t, f.tool(t, "t__crash"), tools.Call{}, nil)
	if out.Status != tools.ToolError || !out.Retryable() || out.Err.Kind != fault.KindNetwork {
		t.Fatalf("crash: %+v", out)
	}
	eventually(t, "the server to be seen down", func() bool { return f.m.Status()[0].State == mcpadapter.StateDown })
	// While it is down its tools fail with a clear, retryable error.
	out = run(t, f.tool(t, "t__lookup"), tools.Call{}, map[string]any{"q": "x"})
	if out.Status != tools.ToolError || !out.Retryable() || out.Err.Kind != fault.KindServiceUnavailable || !strings.Contains(out.Err.Message, "not connected") {
		t.Fatalf("while down: %+v", out.Err)
	}
	// The supervisor restarts it after the backoff.
	eventually(t, "the backoff timer", func() bool { return clk.Waiters() > 0 })
	clk.Advance(time.Second)
	eventually(t, "the restart", func() bool { st := f.m.Status()[0]; return st.State == mcpadapter.StateUp && st.Restarts == 1 })
	if out := run(t, f.tool(t, "t__lookup"), tools.Call{}, map[string]any{"q": "back"}); out.Status != tools.OK {
		t.Fatalf("after the restart: %+v", out)
	}
}

func TestDownAtStart(t *testing.T) {
	cfg := mcpadapter.Config{Name: "gone", Transport: mcpadapter.Stdio, Command: []string{"/nonexistent/mcp-server"}}
	f := start(t, cfg, mcpadapter.Options{})
	st := f.m.Status()[0]
	if st.State != mcpadapter.StateDown || st.LastError == "" || st.Tools != 0 {
		t.Fatalf("status %+v", st)
	}
}

func TestListChanged(t *testing.T) {
	f, srv := startHTTP(t)
	mcptest.AddLateTool(srv)
	eventually(t, "the late tool", func() bool { _, ok := f.reg.Get("h__late"); return ok })
}

func TestConfigRefusals(t *testing.T) {
	reg, _ := tools.NewRegistry()
	for _, c := range []mcpadapter.Config{
		{Name: "a__b", Transport: mcpadapter.Stdio, Command: []string{"x"}},
		{Name: "ok", Transport: "sse", URL: "http://x"},
		{Name: "ok", Transport: mcpadapter.HTTP, URL: "http://127.0.0.1:9/mcp"},       // private without allow_private_network
		{Name: "ok", Transport: mcpadapter.HTTP, URL: "http://user:pw@example.test/"}, // userinfo
		{Name: "ok", Transport: mcpadapter.Stdio},
	} {
		if _, err := mcpadapter.New([]mcpadapter.Config{c}, mcpadapter.Options{Registry: reg}); err == nil {
			t.Errorf("%+v was accepted", c)
		} else if errors.Is(err, context.Canceled) {
			t.Error(err)
		}
	}
}

// askAll runs calls at once, each with its own Ask that answers from what its question says,
// and returns each call's outcome and its questions.
func askAll(t *testing.T, tl *tools.Tool, n int, args func(i int) map[string]any, answer func(i int, q tools.Question) tools.Answer) ([]tools.Outcome, [][]tools.Question) {
	t.Helper()
	outs := make([]tools.Outcome, n)
	asked := make([][]tools.Question, n)
	// Every call asks before any is answered: the questions are in flight together.
	var waiting sync.WaitGroup
	waiting.Add(n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			once := sync.OnceFunc(waiting.Done)
			defer once() // a call that never asks does not hold the others
			outs[i] = run(t, tl, tools.Call{ConversationID: "conv1", ToolCallID: fmt.Sprintf("call_%d", i), Attempt: 1,
				Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
					asked[i] = append(asked[i], q)
					once()
					waiting.Wait()
					return answer(i, q), nil
				}}, args(i))
		})
	}
	wg.Wait()
	return outs, asked
}

func TestConcurrentQuestionsOnOneServer(t *testing.T) {
	t.Run("input required", func(t *testing.T) {
		f := startStdio(t, mcpadapter.Options{})
		names := []string{"Ada", "Grace"}
		outs, asked := askAll(t, f.tool(t, "t__ask"), 2, func(int) map[string]any { return nil },
			func(i int, _ tools.Question) tools.Answer {
				return tools.Answer{Action: "accept", Content: map[string]any{"name": names[i]}}
			})
		for i, out := range outs {
			if out.Status != tools.OK || out.Result != "hello "+names[i] || len(asked[i]) != 1 {
				t.Errorf("call %d: outcome %+v, questions %+v", i, out, asked[i])
			}
		}
	})
	// Before 2026-07-28 a server asks on the session; one that names its call in _meta gets
	// each question to its call, and an unnamed one is declined while several calls run.
	legacy := func(t *testing.T) *fixture {
		srv := mcptest.NewLegacyServer()
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(hs.Close)
		return start(t, mcpadapter.Config{Name: "l", Transport: mcpadapter.HTTP, URL: hs.URL, AllowPrivateNetwork: true}, mcpadapter.Options{})
	}
	items := []string{"car", "bike", "boat"}
	colour := func(q tools.Question) string {
		return strings.TrimSuffix(strings.TrimPrefix(q.Message, "Which colour for "), "?") + "-red"
	}
	t.Run("session, named", func(t *testing.T) {
		f := legacy(t)
		outs, _ := askAll(t, f.tool(t, "l__ask_named"), 3, func(i int) map[string]any { return map[string]any{"item": items[i]} },
			func(_ int, q tools.Question) tools.Answer {
				return tools.Answer{Action: "accept", Content: map[string]any{"colour": colour(q)}}
			})
		for i, out := range outs {
			if want := items[i] + " is " + items[i] + "-red"; out.Status != tools.OK || out.Result != want {
				t.Errorf("call %d: outcome %+v, want %q", i, out, want)
			}
		}
	})
	// Over streamable HTTP an unnamed question comes on its call's response stream, which names it.
	t.Run("session, unnamed, on the call's stream", func(t *testing.T) {
		f := legacy(t)
		outs, _ := askAll(t, f.tool(t, "l__ask_anon"), 3, func(i int) map[string]any { return map[string]any{"item": items[i]} },
			func(_ int, q tools.Question) tools.Answer {
				return tools.Answer{Action: "accept", Content: map[string]any{"colour": colour(q)}}
			})
		for i, out := range outs {
			if want := items[i] + " is " + items[i] + "-red"; out.Status != tools.OK || out.Result != want {
				t.Errorf("call %d: outcome %+v, want %q", i, out, want)
			}
		}
	})
	t.Run("session, one call, unnamed", func(t *testing.T) {
		f := legacy(t)
		out := run(t, f.tool(t, "l__ask_anon"), tools.Call{Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
			return tools.Answer{Action: "accept", Content: map[string]any{"colour": colour(q)}}, nil
		}}, map[string]any{"item": "car"})
		if out.Status != tools.OK || out.Result != "car is car-red" {
			t.Fatalf("outcome %+v", out)
		}
	})
}

func TestQuestionResumesFromItsRequestState(t *testing.T) {
	f := startStdio(t, mcpadapter.Options{})
	tl := f.tool(t, "t__ask")
	// The first run asks and is lost before the answer (Parley restarted).
	var asked tools.Question
	out := run(t, tl, tools.Call{Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
		asked = q
		return tools.Answer{}, fault.New(fault.KindServiceUnavailable, "lost", nil)
	}}, nil)
	if out.Status != tools.ToolError || len(asked.Resume) == 0 {
		t.Fatalf("outcome %+v, question %+v", out, asked)
	}
	if strings.Contains(string(asked.Resume), "\\u0000") || !json.Valid(asked.Resume) {
		t.Fatalf("resume state is not storable: %s", asked.Resume)
	}
	// A later run carries on from the answer without asking again; the server gets its request
	// state back byte for byte (it checks).
	out = run(t, tl, tools.Call{
		Resumed: &tools.Resumed{State: asked.Resume, Answer: tools.Answer{Action: "accept", Content: map[string]any{"name": "Ada"}}},
		Ask: func(context.Context, tools.Question) (tools.Answer, error) {
			t.Error("asked again")
			return tools.Answer{Action: "decline"}, nil
		}}, nil)
	if out.Status != tools.OK || out.Result != "hello Ada" {
		t.Fatalf("resumed outcome %+v", out)
	}
	// A state that cannot be read starts the call afresh: the server asks again.
	again := false
	out = run(t, tl, tools.Call{
		Resumed: &tools.Resumed{State: json.RawMessage(`{"request_state":"%%%"}`), Answer: tools.Answer{Action: "accept"}},
		Ask: func(context.Context, tools.Question) (tools.Answer, error) {
			again = true
			return tools.Answer{Action: "decline"}, nil
		}}, nil)
	if out.Status != tools.OK || out.Result != "no name: decline" || !again {
		t.Fatalf("outcome %+v, asked again %v", out, again)
	}
}

// TestHostileQuestionForm: a server's question whose form is too large, has too many fields, too
// long an enum, too long a title or too long a value in an enum is refused before it is asked (so nothing is stored or
// shown): the call fails with the reason (2026-07-28 protocol, the question comes with the
// call's result), or the server hears the reason (older protocol, asked on the session).
func TestHostileQuestionForm(t *testing.T) {
	want := map[string]string{"bytes": "bytes (at most 65536)", "fields": "200 fields (at most 64)",
		"enum": "has 1000 values (at most 100)", "title": "title at /properties/name is 4096 bytes (at most 1024)",
		"enum value": "value at /properties/pick/enum/1 is 4096 bytes (at most 1024)"}
	neverAsk := func(t *testing.T) tools.Call {
		return tools.Call{Ask: func(_ context.Context, q tools.Question) (tools.Answer, error) {
			t.Errorf("a hostile form was asked (%d bytes of schema)", len(q.Schema))
			return tools.Answer{Action: "decline"}, nil
		}}
	}
	t.Run("input required", func(t *testing.T) {
		f := startStdio(t, mcpadapter.Options{})
		for _, shape := range mcptest.HostileForms {
			out := run(t, f.tool(t, "t__ask_huge"), neverAsk(t), map[string]any{"shape": shape})
			if out.Status != tools.ToolError || !strings.Contains(out.Err.Message, "question was refused") ||
				!strings.Contains(out.Err.Message, want[shape]) {
				t.Errorf("%s: outcome %+v", shape, out)
			}
		}
		// A form within the bounds is still asked.
		asked := false
		out := run(t, f.tool(t, "t__ask_huge"), tools.Call{Ask: func(context.Context, tools.Question) (tools.Answer, error) {
			asked = true
			return tools.Answer{Action: "decline"}, nil
		}}, map[string]any{"shape": "ok"})
		if out.Status != tools.OK || !asked {
			t.Errorf("a fair form: outcome %+v, asked %v", out, asked)
		}
	})
	t.Run("session", func(t *testing.T) {
		srv := mcptest.NewLegacyServer()
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
		t.Cleanup(hs.Close)
		f := start(t, mcpadapter.Config{Name: "l", Transport: mcpadapter.HTTP, URL: hs.URL, AllowPrivateNetwork: true}, mcpadapter.Options{})
		for _, shape := range mcptest.HostileForms {
			out := run(t, f.tool(t, "l__ask_huge"), neverAsk(t), map[string]any{"shape": shape})
			res, _ := out.Result.(string)
			if out.Status != tools.OK || !strings.HasPrefix(res, "refused: ") || !strings.Contains(res, want[shape]) {
				t.Errorf("%s: outcome %+v", shape, out)
			}
		}
	})
}
