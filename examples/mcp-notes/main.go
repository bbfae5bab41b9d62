// Command mcp-notes is an example MCP server for Parley, written with the official Go SDK: a
// read-only tool (list_notes), a side-effecting one (add_note, gated by default) and one that
// asks the user a question mid-call (delete_notes asks for confirmation). It serves over stdio,
// or over streamable HTTP with -http ADDR. Notes live in memory. See docs/tools-file.md, "MCP servers".
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type notes struct {
	mu   sync.Mutex
	list []string
	seen map[string]bool // idempotency keys of adds already applied
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func newServer(n *notes) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-notes", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "list_notes", Description: "List the notes.",
		InputSchema: json.RawMessage(`{"type":"object"}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			if len(n.list) == 0 {
				return text("no notes"), nil
			}
			return text(strings.Join(n.list, "\n")), nil
		})
	s.AddTool(&mcp.Tool{Name: "add_note", Description: "Add a note.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","minLength":1}},"required":["text"]}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Text string }
			_ = json.Unmarshal(req.Params.Arguments, &in)
			key, _ := req.Params.GetMeta()["parley/idempotency_key"].(string)
			n.mu.Lock()
			defer n.mu.Unlock()
			if key != "" && n.seen[key] { // a retry of a call already applied
				return text("already added"), nil
			}
			n.seen[key] = true
			n.list = append(n.list, in.Text)
			return text(fmt.Sprintf("added note %d", len(n.list))), nil
		})
	s.AddTool(&mcp.Tool{Name: "delete_notes", Description: "Delete every note, after asking the user to confirm.",
		InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r, ok := req.Params.InputResponses["confirm"].(*mcp.ElicitResult)
			if !ok { // first round: ask (an input-required result, the 2026-07-28 way)
				return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
					Message:         "Delete every note?",
					RequestedSchema: json.RawMessage(`{"type":"object","properties":{"sure":{"type":"boolean","title":"Yes, delete them"}},"required":["sure"]}`),
				}}}, nil
			}
			if r.Action != "accept" || r.Content["sure"] != true {
				return text("kept the notes (" + r.Action + ")"), nil
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			k := len(n.list)
			n.list = nil
			return text(fmt.Sprintf("deleted %d notes", k)), nil
		})
	return s
}

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	flag.Parse()
	s := newServer(&notes{seen: map[string]bool{}})
	if *addr == "" {
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			log.Fatal(err)
		}
		return
	}
	fmt.Fprintln(os.Stderr, "mcp-notes listening on", *addr)
	// Stateless: the SDK serves the 2026-07-28 protocol over HTTP only so, and under it a question
	// travels with its call (an input-required result), so Parley can keep it across a restart.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	log.Fatal(http.ListenAndServe(*addr, h))
}
