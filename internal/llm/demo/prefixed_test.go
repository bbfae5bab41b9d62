package demo

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"parley/internal/llm"
	"parley/internal/tools"
)

// sourced is the demo's registry with tools from two sources under prefixes, as an MCP server's
// tools join it: examples/mcp-notes's three, and a made-up ticket server with an enum.
func sourced(t *testing.T) *tools.Registry {
	t.Helper()
	r := registry(t)
	mk := func(name, desc, schema string) *tools.Tool {
		tl, err := tools.New(tools.Spec{Name: name, Description: desc, Parameters: json.RawMessage(schema), Executor: tools.Server,
			Func: func(context.Context, tools.Call, map[string]any) (any, error) { return "ok", nil }})
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	if err := r.SetSource("mcp:notes", []*tools.Tool{
		mk("notes__list_notes", "[MCP server notes] List the notes.", `{"type":"object"}`),
		mk("notes__add_note", "[MCP server notes] Add a note.", `{"type":"object","properties":{"text":{"type":"string","minLength":1}},"required":["text"]}`),
		mk("notes__delete_notes", "[MCP server notes] Delete every note, after asking the user to confirm.", `{"type":"object"}`),
	}); err != nil {
		t.Fatal(err)
	}
	if err := r.SetSource("mcp:tickets", []*tools.Tool{
		mk("tickets__create_ticket", "[MCP server tickets] Open a ticket.", `{"type":"object","properties":{"title":{"type":"string"},"priority":{"enum":["low","high"]},"estimate":{"type":"integer"}},"required":["title","priority","estimate"]}`),
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestPrefixedToolsFromOrdinaryWords(t *testing.T) {
	r := sourced(t)
	for _, tc := range []struct {
		say  string
		tool string
		args map[string]any
	}{
		{"save a note: buy milk", "notes__add_note", map[string]any{"text": "buy milk"}},
		{"Add a note saying call the plumber", "notes__add_note", map[string]any{"text": "call the plumber"}},
		{`remember "water the plants"`, "", nil}, // no thing named: "remember" alone is not a note
		{"please write a new note: pick up the kids at 5", "notes__add_note", map[string]any{"text": "pick up the kids at 5"}},
		{"list my notes", "notes__list_notes", map[string]any{}},
		{"What notes do I have?", "notes__list_notes", map[string]any{}},
		{"show me the notes", "notes__list_notes", map[string]any{}},
		{"delete my notes", "notes__delete_notes", map[string]any{}},
		{"clear all notes please", "notes__delete_notes", map[string]any{}},
		{"create a high priority ticket about 3 days of work: the printer is on fire", "tickets__create_ticket",
			map[string]any{"title": "the printer is on fire", "priority": "high", "estimate": float64(3)}},
		{"list my tickets", "", nil}, // no such tool: the plain answer
		// The demo's own phrases are unchanged by tool sources.
		{"what time is it in Tokyo?", "get_current_time", map[string]any{"format": "human", "timezone": "Asia/Tokyo"}},
		{"count to 4", "count_down", map[string]any{"from": float64(4)}},
		{"email bob@example.com about lunch", "send_email", nil},
	} {
		for _, format := range []string{tools.FormatOpenAI, tools.FormatAnthropic} {
			t.Run(tc.say+"/"+format, func(t *testing.T) {
				ans := Answer(llm.Request{Messages: []llm.Message{user(tc.say)}, Tools: r.Export(format)})
				if tc.tool == "" {
					if len(ans.ToolCalls) != 0 {
						t.Fatalf("calls %+v, want none (text %q)", ans.ToolCalls, ans.Text)
					}
					return
				}
				if len(ans.ToolCalls) != 1 || ans.ToolCalls[0].Name != tc.tool {
					t.Fatalf("calls %+v, want one to %s (text %q)", ans.ToolCalls, tc.tool, ans.Text)
				}
				args := checkCall(t, r, ans.ToolCalls[0])
				got, _ := json.Marshal(args) // numbers decode as json.Number
				want, _ := json.Marshal(tc.args)
				if tc.args != nil && string(got) != string(want) {
					t.Fatalf("args %v, want %v", args, tc.args)
				}
			})
		}
	}
}

func TestPrefixedToolWithoutItsText(t *testing.T) {
	r := sourced(t)
	ans := Answer(request(r, user("add a note")))
	if len(ans.ToolCalls) != 0 || !strings.Contains(ans.Text, "add_note") || !strings.Contains(ans.Text, "*text*") {
		t.Fatalf("answer %+v", ans)
	}
	// The plain answer offers the sources' tools too.
	plain := Answer(request(r, user("hello")))
	if !strings.Contains(plain.Text, "*list notes*") || !strings.Contains(plain.Text, "*add note: …*") {
		t.Fatalf("plain answer %q", plain.Text)
	}
	// A tool's text result reads as what it said.
	sum := Answer(request(r, user("list my notes"),
		llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "notes__list_notes", Args: json.RawMessage(`{}`)}}},
		llm.Message{Role: llm.RoleTool, ToolCallID: "c1", Content: `{"ok":true,"result":"buy milk"}`}))
	if !strings.Contains(sum.Text, "**notes__list_notes**: said: buy milk") {
		t.Fatalf("summary %q", sum.Text)
	}
}
