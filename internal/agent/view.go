package agent

import (
	"encoding/json"

	"parley/internal/tools"
)

// view renders the live state.
func (a *actor) view() View {
	seq, text := a.stream.snapshot()
	v := viewOf(a.st, text)
	v.StreamSeq = seq
	return v
}

// viewOf renders a conversation state as the page and the API show it. It copies everything,
// so the caller may keep it while the actor moves on.
func viewOf(st *convState, streaming string) View {
	v := View{
		ID: st.conv.ID, OwnerID: st.conv.OwnerID, Title: st.conv.Title, Status: st.status, LastSeq: st.lastSeq,
		Messages: append([]Message(nil), st.messages...), Streaming: streaming, LastError: st.lastError,
		Queued: st.queuedView(),
	}
	for _, id := range st.order {
		v.Calls = append(v.Calls, callView(st.calls[id]))
	}
	return v
}

// callView is one call as the page, the inbox, the events and the API show it, copied.
func callView(c *call) CallView {
	return CallView{
		Seq: c.seq, ID: c.id, Name: c.name, Executor: c.executor, Approval: c.approval, Approvers: c.approvers,
		Status: c.status, PendingKind: c.kind, Args: c.effectiveArgs(), ModelArgs: c.args, CreatedAt: c.at,
		Result: c.result, Plan: c.plan, Prompt: c.prompt,
		Progress: append([]string(nil), c.progress...), Attempts: c.attempts, NextAttempt: c.nextAttempt,
		Decision: c.decision, DecidedBy: c.decidedBy, Reason: c.reason, ExpiresAt: c.expiresAt,
		AskFirst: c.asksFirst(), Schema: c.schema(),
		Rule: c.rule.view(), Grant: c.grant, ApprovalsNeeded: c.approvalsNeeded(), Approvals: c.approvalViews(), Escalated: c.escalated,
	}
}

// schema is the call's tool's parameter schema, or nothing when the tool is gone.
func (c *call) schema() json.RawMessage {
	if c.tool == nil {
		return nil
	}
	return c.tool.Parameters()
}

// asksFirst reports whether the owner's page asks before running this client call: unless its
// tool opted out (an unregistered tool asks).
func (c *call) asksFirst() bool {
	return c.executor == tools.Client && (c.tool == nil || c.tool.AsksBeforeRunning())
}
