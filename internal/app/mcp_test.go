package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"

	"parley/internal/llm/llmtest"
	"parley/internal/tools/mcpadapter/mcptest"
)

// TestMCPServerEndToEnd runs the app with a real MCP server (streamable HTTP, the 2026-07-28
// protocol) in its tools file: /readyz shows it, the model calls its tool that asks a question,
// the app restarts while the question waits, the question is still there and is answered
// through the JSON API, and the answer reaches the server (with its request state), whose
// result reaches the model: the call was not run again.
func TestMCPServerEndToEnd(t *testing.T) {
	srv := mcptest.NewServer(false)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	// Counts the calls that start afresh (without answers): one, if the restart did not run the
	// call again.
	var fresh atomic.Int32
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte(`"tools/call"`)) && !bytes.Contains(b, []byte(`"inputResponses"`)) {
				fresh.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close) // after the app's stop (cleanups run last first)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	file := fmt.Sprintf(`{"tools": [], "mcp_servers": [{"name": "m", "transport": "http", "url": %q,
		"allow_private_network": true, "headers_env": {"X-Test": "MCP_TEST_HEADER"},
		"tools": {"approval": {"ask": "auto"}}}]}`, hs.URL)
	if err := os.WriteFile(toolsPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": dir, "PARLEY_MODEL": "demo", "PARLEY_SHUTDOWN_TIMEOUT": "10s",
		"PARLEY_TOOLS": toolsPath, "MCP_TEST_HEADER": "1",
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	std := IO{Stdin: strings.NewReader("a long password\n"), Stdout: io.Discard, Stderr: io.Discard}
	if code := Main(ctx, []string{"user", "add", "--name", "ada", "--role", "member", "--password-stdin"}, getenv, std); code != 0 {
		t.Fatalf("user add: %d", code)
	}
	var out strings.Builder
	if code := Main(ctx, []string{"token", "create", "--user", "ada"}, getenv, IO{Stdout: &out, Stderr: io.Discard}); code != 0 {
		t.Fatalf("token create: %d", code)
	}
	cfg, err := FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	prov := llmtest.New(llmtest.Calls(llmtest.Call("q1", "m__ask", map[string]any{})), llmtest.Reply("Nice to meet you."))
	start := func() *running {
		a, err := New(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost, Provider: prov})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(runCtx) }()
		var once sync.Once
		var runErr error
		stop := func() error {
			once.Do(func() {
				cancel()
				runErr = <-done
			})
			return runErr
		}
		t.Cleanup(func() { _ = stop() })
		return &running{url: a.URL(), token: strings.TrimSpace(out.String()), app: a, stop: stop}
	}
	r := start()

	code, body := r.call(t, "GET", "/readyz", "")
	servers, _ := body["details"].(map[string]any)["mcp_servers"].([]any)
	if code != 200 || len(servers) != 1 || servers[0].(map[string]any)["state"] != "up" {
		t.Fatalf("readyz %d %v", code, body)
	}
	_, body = r.call(t, "POST", "/api/v1/conversations", `{}`)
	conv := body["id"].(string)
	r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"greet me"}`)
	deadline := time.Now().Add(20 * time.Second)
	waitQuestion := func() {
		t.Helper()
		for {
			_, v := r.call(t, "GET", "/api/v1/conversations/"+conv, "")
			if p, ok := v["pending"].(map[string]any)["q1"].(map[string]any); ok && p["kind"] == "elicitation" {
				if p["prompt"] != "What is your name?" {
					t.Fatalf("pending %v", p)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no question: %v", v)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitQuestion()
	// Parley restarts on the same database while the question waits.
	if err := r.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	r = start()
	waitQuestion()
	if code, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/calls/q1/resolve", `{"action":"accept","content":{"name":"Ada"}}`); code != 200 {
		t.Fatalf("resolve %d %v", code, body)
	}
	for {
		_, v := r.call(t, "GET", "/api/v1/conversations/"+conv, "")
		if v["status"] == "idle" {
			call := v["tool_calls"].([]any)[0].(map[string]any)
			if res := fmt.Sprint(call["result"]); !strings.Contains(res, "hello Ada") || fresh.Load() != 1 {
				t.Fatalf("call %v after %d fresh calls of the tool", call, fresh.Load())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("did not finish: %v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestToolsBudgetWithAHugeMCPServer: an MCP server listing 300 large tools (about 9 MB of
// definitions, in pages within the bounds) does not put them all into the model's calls: the
// definitions sent stay within PARLEY_TOOLS_BUDGET, built-ins first, and /readyz names what is
// left out.
func TestToolsBudgetWithAHugeMCPServer(t *testing.T) {
	srv := mcptest.NewServerWith(false, &mcp.ServerOptions{PageSize: 50})
	mcptest.AddBigTools(srv, 300*24<<10, 24<<10)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	dir := t.TempDir()
	toolsPath := filepath.Join(dir, "tools.json")
	file := fmt.Sprintf(`{"tools": [], "mcp_servers": [{"name": "m", "transport": "http", "url": %q,
		"allow_private_network": true, "max_list_bytes": 16777216}]}`, hs.URL)
	if err := os.WriteFile(toolsPath, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	const budget = 20_000
	env := map[string]string{
		"PARLEY_ADDR": "127.0.0.1:0", "PARLEY_DATA_DIR": dir, "PARLEY_MODEL": "demo", "PARLEY_SHUTDOWN_TIMEOUT": "10s",
		"PARLEY_TOOLS": toolsPath, "PARLEY_TOOLS_BUDGET": fmt.Sprint(budget),
	}
	getenv := func(k string) string { return env[k] }
	ctx := context.Background()
	std := IO{Stdin: strings.NewReader("a long password\n"), Stdout: io.Discard, Stderr: io.Discard}
	if code := Main(ctx, []string{"user", "add", "--name", "ada", "--role", "member", "--password-stdin"}, getenv, std); code != 0 {
		t.Fatalf("user add: %d", code)
	}
	var out strings.Builder
	if code := Main(ctx, []string{"token", "create", "--user", "ada"}, getenv, IO{Stdout: &out, Stderr: io.Discard}); code != 0 {
		t.Fatalf("token create: %d", code)
	}
	cfg, err := FromEnv(getenv)
	if err != nil {
		t.Fatal(err)
	}
	prov := llmtest.New(llmtest.Reply("hello"))
	a, err := New(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost, Provider: prov})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	r := &running{url: a.URL(), token: strings.TrimSpace(out.String()), app: a}

	code, body := r.call(t, "GET", "/readyz", "")
	details, _ := body["details"].(map[string]any)
	defs, _ := details["tool_definitions"].(map[string]any)
	leftOut, _ := defs["left_out"].([]any)
	if code != 200 || len(leftOut) == 0 || len(leftOut) >= 256 {
		t.Fatalf("readyz %d: tool_definitions %v", code, defs)
	}
	_, body = r.call(t, "POST", "/api/v1/conversations", `{}`)
	conv := body["id"].(string)
	r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"hi"}`)
	deadline := time.Now().Add(20 * time.Second)
	for prov.Calls() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the model was never called")
		}
		time.Sleep(20 * time.Millisecond)
	}
	req, _ := prov.LastRequest()
	size := 0
	for _, d := range req.Tools {
		size += len(d)/4 + 1
	}
	// 256 of the 300 join (a server's bound), besides the built-ins.
	if size > budget || len(req.Tools)+len(leftOut) < 256 {
		t.Fatalf("the model got %d definitions of about %d tokens (budget %d); %d left out", len(req.Tools), size, budget, len(leftOut))
	}
	if !strings.Contains(string(req.Tools[0]), "get_current_time") {
		t.Errorf("the built-ins are not first: %.80s", req.Tools[0])
	}
}
