package mcpadapter_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"parley/internal/clock"
	"parley/internal/tools/mcpadapter"
	"parley/internal/tools/mcpadapter/mcptest"
)

// TestReadBounds: a server whose message (a stdio line, a JSON body, an SSE event) or whole
// tool list (every page within the message bound) exceeds its bound never gets its tools
// registered: its session fails as a broken transport does, with a log line that says so.
func TestReadBounds(t *testing.T) {
	const maxMessage, maxList = 256 << 10, 1 << 20
	const each = 200 << 10 // the size of one big tool
	httpServer := func(t *testing.T, opts *mcp.StreamableHTTPOptions, pageSize, listBytes int) string {
		srv := mcptest.NewServerWith(false, &mcp.ServerOptions{PageSize: pageSize})
		mcptest.AddBigTools(srv, listBytes, each)
		hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, opts))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	stdio := func(pageSize, listBytes int) mcpadapter.Config {
		c := stdioConfig()
		c.Env[mcptest.EnvListBytes] = strconv.Itoa(listBytes)
		c.Env[mcptest.EnvPageSize] = strconv.Itoa(pageSize)
		c.Env[mcptest.EnvToolBytes] = strconv.Itoa(each)
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  func(t *testing.T) mcpadapter.Config
		want string // in the server's last error
	}{
		{"stdio line", func(*testing.T) mcpadapter.Config { return stdio(0, 1<<20) }, "frame exceeded"},
		{"http json body", func(t *testing.T) mcpadapter.Config {
			return httpConfig(httpServer(t, &mcp.StreamableHTTPOptions{JSONResponse: true}, 0, 1<<20))
		}, "larger than its bound"},
		{"http sse event", func(t *testing.T) mcpadapter.Config { return httpConfig(httpServer(t, nil, 0, 1<<20)) }, "SSE event exceeded"},
		// Each page (one tool of 200 KiB) is within the message bound; the 8 pages together are not.
		{"stdio list", func(*testing.T) mcpadapter.Config { return stdio(1, 8*200<<10) }, "tool list is larger than its bound"},
		{"http list", func(t *testing.T) mcpadapter.Config { return httpConfig(httpServer(t, nil, 1, 8*200<<10)) }, "tool list is larger than its bound"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs lockedBuffer
			cfg := tc.cfg(t)
			cfg.MaxMessageBytes, cfg.MaxListBytes = maxMessage, maxList
			f := start(t, cfg, mcpadapter.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
				Clock: clock.NewFake(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))})
			st := f.m.Status()[0]
			if st.State != mcpadapter.StateDown || !strings.Contains(st.LastError, tc.want) {
				t.Fatalf("status %+v, want down with %q", st, tc.want)
			}
			if n := len(f.reg.All()); n != 0 {
				t.Errorf("%d tools registered from a server past its bounds", n)
			}
			if !strings.Contains(logs.String(), "sent more than its bounds allow") {
				t.Errorf("no log line says the server exceeded its bounds: %s", logs.String())
			}
		})
	}
	// The same bounds let an ordinary server through.
	cfg := stdioConfig()
	cfg.MaxMessageBytes, cfg.MaxListBytes = maxMessage, maxList
	if st := start(t, cfg, mcpadapter.Options{}).m.Status()[0]; st.State != mcpadapter.StateUp {
		t.Fatalf("an ordinary server under the bounds: %+v", st)
	}
}

func httpConfig(url string) mcpadapter.Config {
	return mcpadapter.Config{Name: "h", Transport: mcpadapter.HTTP, URL: url, AllowPrivateNetwork: true}
}

// TestListChangedRateLimited: a server that floods list_changed is listed at most once per
// RelistEvery, and the last change of a flood is listed when the interval ends.
func TestListChangedRateLimited(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC))
	srv := mcptest.NewLegacyServer()
	lists := mcptest.CountLists(srv)
	sent := mcptest.FloodListChanged(srv, 50)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	cfg := httpConfig(hs.URL)
	f := start(t, cfg, mcpadapter.Options{Clock: clk, RelistEvery: 5 * time.Second})
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d listings at start", n)
	}
	// flood changes the list and waits until the client has read the whole flood: the server's
	// ping after it travels on the same stream, so its answer comes after the notifications.
	flood := func(tool string) {
		t.Helper()
		before := sent.Load()
		srv.AddTool(&mcp.Tool{Name: tool, InputSchema: map[string]any{"type": "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
		eventually(t, "the flood to be sent", func() bool { return sent.Load() == before+50 })
		for ss := range srv.Sessions() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := ss.Ping(ctx, nil)
			cancel()
			if err != nil {
				t.Fatalf("ping after the flood: %v", err)
			}
		}
	}
	flood("late1")
	if n := lists.Load(); n != 1 {
		t.Fatalf("a flood of 50 list changes within the interval listed %d more times", n-1)
	}
	if _, ok := f.reg.Get("h__late1"); ok {
		t.Fatal("listed before the interval ended")
	}
	clk.Advance(5 * time.Second)
	eventually(t, "the trailing listing", func() bool { _, ok := f.reg.Get("h__late1"); return ok })
	// A second flood right after a listing waits for the next interval; its last change is not lost.
	flood("late2")
	if n := lists.Load(); n != 2 {
		t.Fatalf("%d listings after two floods and one interval, want 2", n)
	}
	clk.Advance(5 * time.Second)
	eventually(t, "the second trailing listing", func() bool { _, ok := f.reg.Get("h__late2"); return ok })
	if n := lists.Load(); n != 3 {
		t.Fatalf("%d listings, want 3", n)
	}
}

// TestTrustAnnotationsLoggedOnChange: the tools a trusted read-only hint opens are logged when
// the list first opens them, and again only when that set changes, not at every listing.
func TestTrustAnnotationsLoggedOnChange(t *testing.T) {
	var logs lockedBuffer
	srv := mcptest.NewServer(false)
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	cfg := httpConfig(hs.URL)
	cfg.TrustAnnotations = true
	f := start(t, cfg, mcpadapter.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), RelistEvery: time.Millisecond})
	opened := func() int { return strings.Count(logs.String(), "(trust_annotations)") }
	if n := opened(); n != 1 || !strings.Contains(logs.String(), "h__lookup") {
		t.Fatalf("logged %d times at start: %s", n, logs.String())
	}
	// A change that opens nothing new is not logged again.
	srv.AddTool(&mcp.Tool{Name: "plain", InputSchema: map[string]any{"type": "object"}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
	eventually(t, "the plain tool", func() bool { _, ok := f.reg.Get("h__plain"); return ok })
	if n := opened(); n != 1 {
		t.Fatalf("the same opened tools were logged %d times", n)
	}
	// One that opens another tool is.
	mcptest.AddLateTool(srv)
	eventually(t, "the late tool", func() bool { _, ok := f.reg.Get("h__late"); return ok })
	eventually(t, "the new opened set to be logged", func() bool { return opened() == 2 })
	if !strings.Contains(logs.String()[strings.LastIndex(logs.String(), "(trust_annotations)"):], "h__late") {
		t.Errorf("the second line does not list the newly opened tool: %s", logs.String())
	}
}
