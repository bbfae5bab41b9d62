package main

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestNotes drives the example's three tools the way Parley does: the question of delete_notes
// is answered by the client's elicitation handler, and a retried add is applied once.
func TestNotes(t *testing.T) {
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	srv := newServer(&notes{seen: map[string]bool{}})
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"sure": true}}, nil
		},
	})
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any, key string) string {
		t.Helper()
		p := &mcp.CallToolParams{Name: name, Arguments: args}
		if key != "" {
			p.Meta = mcp.Meta{"parley/idempotency_key": key}
		}
		res, err := cs.CallTool(ctx, p)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", name, err, res)
		}
		return res.Content[0].(*mcp.TextContent).Text
	}
	call("add_note", map[string]any{"text": "milk"}, "pc_1")
	if got := call("add_note", map[string]any{"text": "milk"}, "pc_1"); got != "already added" {
		t.Fatalf("a retry was applied again: %s", got)
	}
	if got := call("list_notes", nil, ""); got != "milk" {
		t.Fatalf("list: %s", got)
	}
	if got := call("delete_notes", nil, ""); got != "deleted 1 notes" {
		t.Fatalf("delete: %s", got)
	}
}
