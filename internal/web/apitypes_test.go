package web

import (
	"encoding/json"
	"testing"
	"time"

	"parley/internal/agent"
	"parley/internal/tools"
)

// TestCallJSONShapes: what the API says of a call, from the agent's read model, byte for byte:
// an M-of-N escalated approval's prompt (as the tool_calls rows' prompt column held it before
// the read model replaced it there), its pending entry and its tool_call event, a browser
// call's client_exec event.
func TestCallJSONShapes(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	exp := at.Add(10 * time.Minute)
	c := agent.CallView{ID: "c1", Name: "wire", Executor: tools.Server, Approval: tools.RequiresApproval, Approvers: tools.ByReviewer,
		Status: agent.CallAwaiting, PendingKind: tools.PendingApproval, Args: json.RawMessage(`{"amount":7}`),
		ModelArgs: json.RawMessage(`{"amount":5}`), CreatedAt: at, ExpiresAt: &exp,
		Plan:            &tools.Plan{Summary: "Would wire <7>", Details: map[string]any{"to": "x", "n": 2}},
		ApprovalsNeeded: 2, Approvals: []agent.ApprovalView{{By: "r1", At: at.Add(time.Second)}}, Escalated: true}
	check := func(what string, v any, want string) {
		t.Helper()
		if b, err := json.Marshal(v); err != nil || string(b) != want {
			t.Errorf("%s:\n got %s %v\nwant %s", what, b, err, want)
		}
	}
	const prompt = `{"approvals":[{"by":"r1","at":"2026-03-01T09:00:01Z"}],"approvals_needed":2,"args":{"amount":5},"escalated":true,` +
		`"plan":{"summary":"Would wire \u003c7\u003e","details":{"n":2,"to":"x"}},"tool":"wire"}`
	check("prompt", promptOf(c), prompt)
	check("pending", pendingOf(c), `{"executor":"server","kind":"approval","prompt":`+prompt+`,"expires_at":"2026-03-01T09:10:00Z",`+
		`"approvals_needed":2,"approvals":[{"by":"r1","at":"2026-03-01T09:00:01Z"}],"escalated":true}`)
	ev, err := eventOf(agent.Event{ConversationID: "k", Seq: 3, Type: agent.EventToolCall, ToolCallID: "c1", Status: "awaiting", Call: &c})
	check("tool_call event", ev, `{"conversation_id":"k","seq":3,"type":"tool_call","tool_call_id":"c1","status":"awaiting","data":`+
		`{"id":"c1","name":"wire","executor":"server","approval":"requires_approval","approvers":"reviewer","status":"awaiting",`+
		`"kind":"approval","args":{"amount":7},"expires_at":"2026-03-01T09:10:00Z","pending":{"executor":"server","kind":"approval",`+
		`"prompt":`+prompt+`,"expires_at":"2026-03-01T09:10:00Z","approvals_needed":2,"approvals":[{"by":"r1","at":"2026-03-01T09:00:01Z"}],`+
		`"escalated":true}}}`)
	if err != nil {
		t.Fatal(err)
	}
	// The same call, as it reaches another process (agent.Event.Call crosses in its JSON), says
	// the same: what it did not have comes back as null, and is left out as before.
	local := agent.CallView{ID: "r1", Name: "note", Executor: tools.Server, Approval: tools.Auto, Status: agent.CallRunning, Attempts: 1}
	b, _ := json.Marshal(local)
	var remote agent.CallView
	if err := json.Unmarshal(b, &remote); err != nil {
		t.Fatal(err)
	}
	l, _ := eventOf(agent.Event{Type: agent.EventToolCall, Call: &local})
	r, _ := eventOf(agent.Event{Type: agent.EventToolCall, Call: &remote})
	if string(l.Data) != string(r.Data) || string(l.Data) != `{"id":"r1","name":"note","executor":"server","approval":"auto","approvers":"","status":"running","attempts":1}` {
		t.Errorf("a call from another process says %s, here %s", r.Data, l.Data)
	}
	one := agent.CallView{Name: "send", PendingKind: tools.PendingApproval, ApprovalsNeeded: 1}
	check("one approver's prompt", promptOf(one), `{"args":null,"plan":null,"tool":"send"}`)
	g := agent.CallView{ID: "g1", Name: "geolocation", Executor: tools.Client, Status: agent.CallAwaiting, PendingKind: tools.PendingClientExec,
		Args: json.RawMessage(`{"high_accuracy":true}`), AskFirst: true}
	ev, _ = eventOf(agent.Event{ConversationID: "k", Seq: 4, Type: agent.EventClientExec, ToolCallID: "g1", Call: &g})
	check("client_exec event", ev, `{"conversation_id":"k","seq":4,"type":"client_exec","tool_call_id":"g1","data":{"args":{"high_accuracy":true},"ask":true,"tool":"geolocation"}}`)
	q := agent.CallView{Executor: tools.Human, Status: agent.CallAwaiting, PendingKind: tools.PendingElicitation,
		Prompt: &tools.Prompt{Message: "Sign in", Schema: json.RawMessage(`{"type":"object"}`), URL: "https://a.example/x"}}
	check("URL question", pendingOf(q), `{"executor":"human","kind":"elicitation","prompt":"Sign in\n\nOpen https://a.example/x in your browser, `+
		`then answer accept when you are done there (or decline, or cancel).","schema":{"type":"object"},"url":"https://a.example/x"}`)
}
