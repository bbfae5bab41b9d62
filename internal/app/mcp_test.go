package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/crypto/bcrypt"

	"parley/internal/llm/llmtest"
	"parley/internal/tools/mcpadapter/mcptest"
)

// TestMCPServerEndToEnd runs the app with a real MCP server (streamable HTTP) in its tools file:
// /readyz shows it, the model calls its tool that asks a question, the question is answered
// through the JSON API, and the answer reaches the server, whose result reaches the model.
func TestMCPServerEndToEnd(t *testing.T) {
	srv := mcptest.NewServer(false)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
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
	a, err := New(ctx, cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PasswordCost: bcrypt.MinCost, Provider: prov})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	r := &running{url: a.URL(), token: strings.TrimSpace(out.String()), app: a}

	code, body := r.call(t, "GET", "/readyz", "")
	servers, _ := body["details"].(map[string]any)["mcp_servers"].([]any)
	if code != 200 || len(servers) != 1 || servers[0].(map[string]any)["state"] != "up" {
		t.Fatalf("readyz %d %v", code, body)
	}
	_, body = r.call(t, "POST", "/api/v1/conversations", `{}`)
	conv := body["id"].(string)
	r.call(t, "POST", "/api/v1/conversations/"+conv+"/messages", `{"text":"greet me"}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, v := r.call(t, "GET", "/api/v1/conversations/"+conv, "")
		if p, ok := v["pending"].(map[string]any)["q1"].(map[string]any); ok && p["kind"] == "elicitation" {
			if p["prompt"] != "What is your name?" {
				t.Fatalf("pending %v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no question: %v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body := r.call(t, "POST", "/api/v1/conversations/"+conv+"/calls/q1/resolve", `{"action":"accept","content":{"name":"Ada"}}`); code != 200 {
		t.Fatalf("resolve %d %v", code, body)
	}
	for {
		_, v := r.call(t, "GET", "/api/v1/conversations/"+conv, "")
		if v["status"] == "idle" {
			calls := v["tool_calls"].([]any)
			if res := fmt.Sprint(calls[0].(map[string]any)["result"]); !strings.Contains(res, "hello Ada") {
				t.Fatalf("result %s", res)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("did not finish: %v", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
