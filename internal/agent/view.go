package agent

import (
	"encoding/json"

	"parley/internal/store"
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
		Pending: map[string]PendingView{}, Queued: st.queuedView(),
	}
	for _, id := range st.order {
		c := st.calls[id]
		v.Calls = append(v.Calls, callView(c))
		if c.status == store.CallAwaiting && !c.finished() {
			v.Pending[c.id] = pendingView(c)
		}
	}
	return v
}

// callView is one call as the page and the API show it, copied.
func callView(c *call) CallView {
	return CallView{
		Seq: c.seq, ID: c.id, Name: c.name, Executor: c.executor, Approval: c.approval, Approvers: c.approvers,
		Status: c.status, PendingKind: c.kind, Args: c.effectiveArgs(), Result: c.result, Plan: c.plan, Prompt: c.prompt,
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

// pendingView is the API's pending entry: {"executor","kind","prompt","schema","expires_at"}.
func pendingView(c *call) PendingView {
	p := PendingView{Executor: c.executor, Kind: c.kind, Prompt: pendingPrompt(c), ExpiresAt: c.expiresAt}
	if c.kind == tools.PendingApproval {
		p.ApprovalsNeeded, p.Approvals, p.Escalated = c.approvalsNeeded(), c.approvalViews(), c.escalated
	}
	if c.kind == tools.PendingElicitation && c.prompt != nil {
		p.Schema, p.URL = c.prompt.Schema, c.prompt.URL
	}
	return p
}

// asksFirst reports whether the owner's page asks before running this client call: unless its
// tool opted out (an unregistered tool asks).
func (c *call) asksFirst() bool {
	return c.executor == tools.Client && (c.tool == nil || c.tool.AsksBeforeRunning())
}

// pendingPrompt is what the page shows for a suspension: the plan and arguments of an approval,
// the question of an elicitation, the tool and arguments of a client run.
func pendingPrompt(c *call) any {
	switch c.kind {
	case tools.PendingApproval:
		p := map[string]any{"tool": c.name, "args": json.RawMessage(c.args), "plan": c.plan}
		// The quorum and the escalation ride in the tool_calls row's prompt, where the inbox
		// reads them (door.go: pendingCallView); only when they say something.
		if c.approvalsNeeded() > 1 {
			p["approvals_needed"], p["approvals"] = c.approvalsNeeded(), c.approvalViews()
		}
		if c.escalated {
			p["escalated"] = true
		}
		return p
	case tools.PendingElicitation:
		if c.prompt != nil && c.prompt.URL != "" {
			return c.prompt.Message + "\n\nOpen " + c.prompt.URL + " in your browser, then answer accept when you are done there (or decline, or cancel)."
		}
		if c.prompt != nil {
			return c.prompt.Message
		}
	case tools.PendingClientExec:
		return map[string]any{"tool": c.name, "args": json.RawMessage(c.effectiveArgs()), "ask": c.asksFirst()}
	}
	return nil
}
