package agent

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// rowOf is the tool_calls row the actor writes for c (commit.go: row), without an actor.
func rowOf(c *call) store.ToolCall {
	r := store.ToolCall{ConversationID: "conv", ToolCallID: c.id, Name: c.name, Executor: string(c.executor),
		Approval: string(c.approval), Approvers: string(c.approvers), Status: c.status, PendingKind: string(c.kind),
		Args: c.effectiveArgs(), Result: c.result, ExpiresAt: c.expiresAt, Seq: c.seq, CreatedAt: c.at}
	if c.status == store.CallAwaiting {
		r.Prompt = recordOf(c)
	}
	return r
}

// TestCallFromRowIsTheReadModel: the inbox's call, rebuilt from its tool_calls row alone, is the
// call the conversation's page shows (its tool's schema aside, which the caller adds).
func TestCallFromRowIsTheReadModel(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	exp := at.Add(10 * time.Minute)
	next := at.Add(time.Minute)
	cases := map[string]*call{
		"an escalated M-of-N approval with an edit proposed": {id: "c1", name: "wire", executor: tools.Server, approval: tools.RequiresApproval,
			approvers: tools.ByReviewer, args: json.RawMessage(`{"amount":5}`), runArgs: json.RawMessage(`{"amount":7}`), seq: 3, at: at,
			status: store.CallAwaiting, kind: tools.PendingApproval, plan: &tools.Plan{Summary: "Would wire 7", Details: map[string]any{"to": "x"}},
			expiresAt: &exp, rule: &ruleData{Index: 1, When: "args.amount > 1", Action: "ask", Reason: "big"}, needed: 2,
			approvals: []approval{{By: "r1", At: at.Add(time.Second), ArgsHash: "h"}}, escalated: true},
		"a question": {id: "q1", name: "ask_user", executor: tools.Human, approval: tools.Auto, approvers: tools.ByOwner,
			args: json.RawMessage(`{"message":"Who?"}`), seq: 4, at: at, status: store.CallAwaiting, kind: tools.PendingElicitation,
			prompt:    &tools.Prompt{Message: "Who?", Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"string"}}}`)},
			expiresAt: &exp},
		"a browser call after its approval": {id: "g1", name: "geolocation", executor: tools.Client, approval: tools.RequiresApproval,
			approvers: tools.ByOwner, args: json.RawMessage(`{}`), seq: 5, at: at, status: store.CallAwaiting, kind: tools.PendingClientExec,
			expiresAt: &exp, decision: "approve", decidedBy: "u1", attempts: 2, nextAttempt: &next, progress: []string{"1 of 2"}, grant: "grant_x"},
	}
	for name, c := range cases {
		want := callView(c)
		if got := callFromRow(rowOf(c)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", name, got, want)
		}
	}
}

// TestCallFromRowReadsOldRows: a row written before the record, whose prompt column holds the
// page's old prompt, still gives the inbox its plan, quorum, escalation and the model's
// arguments.
func TestCallFromRowReadsOldRows(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	row := store.ToolCall{ToolCallID: "c1", Name: "wire", Executor: "server", Approval: "requires_approval", Approvers: "reviewer",
		Status: store.CallAwaiting, PendingKind: "approval", Args: json.RawMessage(`{"amount":7}`), Seq: 3, CreatedAt: at,
		Prompt: json.RawMessage(`{"approvals":[{"by":"r1","at":"2026-03-01T09:00:01Z"}],"approvals_needed":2,"args":{"amount":5},` +
			`"escalated":true,"plan":{"summary":"Would wire 7","details":{"n":12345678901234567890}},"tool":"wire"}`)}
	got := callFromRow(row)
	if string(got.Args) != `{"amount":7}` || string(got.ModelArgs) != `{"amount":5}` || got.Plan == nil || got.Plan.Summary != "Would wire 7" ||
		got.ApprovalsNeeded != 2 || len(got.Approvals) != 1 || got.Approvals[0].By != "r1" || !got.Escalated || !got.CreatedAt.Equal(at) {
		t.Fatalf("old approval row read as %+v", got)
	}
	if n, _ := json.Marshal(got.Plan.Details["n"]); string(n) != "12345678901234567890" {
		t.Errorf("a plan's number read as %s", n)
	}
	one := callFromRow(store.ToolCall{ToolCallID: "c2", Status: store.CallAwaiting, PendingKind: "approval",
		Prompt: json.RawMessage(`{"args":{},"plan":null,"tool":"t"}`)})
	if one.ApprovalsNeeded != 1 || one.Approvals != nil || one.Escalated || one.Plan != nil {
		t.Errorf("old one-approver row read as %+v", one)
	}
	q := callFromRow(store.ToolCall{ToolCallID: "q1", Status: store.CallAwaiting, PendingKind: "elicitation", Prompt: json.RawMessage(`"Who?"`)})
	if q.Prompt == nil || q.Prompt.Message != "Who?" {
		t.Errorf("old question row read as %+v", q)
	}
	b := callFromRow(store.ToolCall{ToolCallID: "g1", Executor: "client", Status: store.CallAwaiting, PendingKind: "client_exec",
		Args: json.RawMessage(`{"x":1}`), Prompt: json.RawMessage(`{"args":{"x":1},"ask":true,"tool":"g"}`)})
	if !b.AskFirst || string(b.ModelArgs) != `{"x":1}` {
		t.Errorf("old browser row read as %+v", b)
	}
}
