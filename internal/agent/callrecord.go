package agent

import (
	"bytes"
	"encoding/json"
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the tool_calls row of an awaiting call as the inbox reads it: the row's typed
// columns (name, executor, gate, status, pending kind, arguments, expiry, sequence, creation)
// and, in its prompt column, the rest of the call's read model (CallView), serialized and
// versioned: callRecord. callFromRow rebuilds the CallView from the row alone, so the inbox
// shows the same call the conversation's page does, without loading the conversation.
//
// Rows written before the record (the prompt column without "v") hold the page's old prompt:
// an approval's {"tool", "args", "plan"} with its quorum ("approvals_needed", "approvals") and
// "escalated" when they said something, a question's text, a browser call's {"tool", "args",
// "ask"}. callFromRow reads those too (legacyPrompt).

// callRecordVersion is the version of callRecord this binary writes. A record of a later
// version is read for the fields this one knows (fields are only ever added).
const callRecordVersion = 1

// callRecord is the part of an awaiting call's read model that the tool_calls row has no column
// for. The tags are the stored format: fields may be added, never renamed.
type callRecord struct {
	V int `json:"v"`
	// ModelArgs are the model's arguments when an approver's edit replaced them (the args column
	// holds the edit); absent when they are the args column's.
	ModelArgs   json.RawMessage `json:"model_args,omitempty"`
	Plan        *planData       `json:"plan,omitempty"`
	Prompt      *promptData     `json:"prompt,omitempty"`
	Progress    []string        `json:"progress,omitempty"`
	Attempts    int             `json:"attempts,omitempty"`
	NextAttempt *time.Time      `json:"next_attempt_at,omitempty"`
	Decision    string          `json:"decision,omitempty"`
	DecidedBy   string          `json:"decided_by,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	AskFirst    bool            `json:"ask_first,omitempty"`
	Rule        *ruleData       `json:"rule,omitempty"`
	Grant       string          `json:"grant,omitempty"`
	Needed      int             `json:"approvals_needed,omitempty"` // 0 is one
	Approvals   []approval      `json:"approvals,omitempty"`
	Escalated   bool            `json:"escalated,omitempty"`
}

// recordOf is c's record, encoded, for its row's prompt column.
func recordOf(c *call) json.RawMessage {
	r := callRecord{V: callRecordVersion, Plan: planDataOf(c.plan), Prompt: promptDataOf(c.prompt), Progress: c.progress, Attempts: c.attempts,
		NextAttempt: c.nextAttempt, Decision: c.decision, DecidedBy: c.decidedBy, Reason: c.reason, AskFirst: c.asksFirst(),
		Rule: c.rule, Grant: c.grant, Needed: c.needed, Approvals: c.approvalsMade(), Escalated: c.escalated}
	if !bytes.Equal(c.args, c.effectiveArgs()) {
		r.ModelArgs = c.args
		if r.ModelArgs == nil {
			r.ModelArgs = json.RawMessage("null")
		}
	}
	return mustJSON(r)
}

// callFromRow is the read model of the call a tool_calls row holds: its columns, with its
// record (or an older row's prompt). The tool's schema is the caller's to add.
func callFromRow(row store.ToolCall) CallView {
	cv := CallView{
		Seq: row.Seq, ID: row.ToolCallID, Name: row.Name, Executor: tools.Executor(row.Executor), Approval: tools.Approval(row.Approval),
		Approvers: tools.Approvers(row.Approvers), Status: row.Status, PendingKind: tools.PendingKind(row.PendingKind),
		Args: row.Args, ModelArgs: row.Args, Result: row.Result, ExpiresAt: row.ExpiresAt, CreatedAt: row.CreatedAt,
		ApprovalsNeeded: 1,
	}
	if len(bytes.TrimSpace(row.Prompt)) == 0 {
		return cv
	}
	var r callRecord
	dec := json.NewDecoder(bytes.NewReader(row.Prompt))
	dec.UseNumber() // a plan's numbers as they were written
	if dec.Decode(&r) != nil || r.V == 0 {
		legacyPrompt(&cv, row.Prompt)
		return cv
	}
	if r.ModelArgs != nil {
		cv.ModelArgs = r.ModelArgs
		if string(r.ModelArgs) == "null" {
			cv.ModelArgs = nil
		}
	}
	cv.Plan, cv.Prompt, cv.Progress, cv.Attempts, cv.NextAttempt = r.Plan.plan(), r.Prompt.prompt(), r.Progress, r.Attempts, r.NextAttempt
	cv.Decision, cv.DecidedBy, cv.Reason, cv.AskFirst = r.Decision, r.DecidedBy, r.Reason, r.AskFirst
	cv.Rule, cv.Grant, cv.ApprovalsNeeded, cv.Escalated = r.Rule.view(), r.Grant, max(1, r.Needed), r.Escalated
	cv.Approvals = viewsOf(r.Approvals)
	return cv
}

// legacyPrompt reads what a row written before callRecord holds in its prompt column into cv.
func legacyPrompt(cv *CallView, raw json.RawMessage) {
	var text string
	if json.Unmarshal(raw, &text) == nil {
		cv.Prompt = &tools.Prompt{Message: text} // a question's text, its link written into it
		return
	}
	var p struct {
		Args            json.RawMessage `json:"args"`
		Plan            *planData       `json:"plan"`
		Ask             bool            `json:"ask"`
		ApprovalsNeeded int             `json:"approvals_needed"`
		Approvals       []approval      `json:"approvals"`
		Escalated       bool            `json:"escalated"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&p) != nil {
		return
	}
	if cv.PendingKind == tools.PendingApproval && p.Args != nil {
		cv.ModelArgs = p.Args // an approval's prompt held the model's arguments
	}
	cv.Plan, cv.AskFirst = p.Plan.plan(), p.Ask
	cv.ApprovalsNeeded, cv.Approvals, cv.Escalated = max(1, p.ApprovalsNeeded), viewsOf(p.Approvals), p.Escalated
}

// viewsOf copies approvals as the read model shows them.
func viewsOf(aps []approval) []ApprovalView {
	if len(aps) == 0 {
		return nil
	}
	out := make([]ApprovalView, len(aps))
	for i, a := range aps {
		out[i] = ApprovalView{By: a.By, At: a.At}
	}
	return out
}
