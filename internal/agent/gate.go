package agent

import (
	"encoding/json"
	"time"

	"parley/internal/fault"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file decides how one call is gated when it is dispatched: the tool's rules (first match
// wins: allow, deny, ask; in shadow mode only recorded), then a grant that remembers an
// approval. The decision is made once, before the dry runs (an ask needs a plan, an allow
// none), and recorded with the call's tool_call entry: the log, not a re-evaluation, says how
// the call was gated.

// ruleData is the rule that decided a call (or would have, in shadow mode), as the tool_call
// entry and the audit trail record it.
type ruleData struct {
	Index  int    `json:"index"`
	When   string `json:"when"`
	Action string `json:"action"`
	Reason string `json:"reason,omitempty"`
	Shadow bool   `json:"shadow,omitempty"`
	Error  string `json:"error,omitempty"` // the evaluation failed: the call is asked about
}

// callGate is how one call is gated: the tool's approval as its rules and grants leave it.
type callGate struct {
	approval  tools.Approval
	approvers tools.Approvers
	needed    int    // distinct approvals needed (M-of-N); 0 or 1 is one
	denied    bool   // a deny rule matched
	reason    string // the deny rule's reason
	rule      *ruleData
	grant     string // the grant that lets the call run without a suspension
}

// gated reports whether the call suspends for an approval.
func (g callGate) gated() bool { return g.approval == tools.RequiresApproval }

// ruled reports whether a rule (in enforce mode) decided the gate: a grant never stands in for
// it.
func (g callGate) ruled() bool { return g.rule != nil && !g.rule.Shadow }

// gateFor decides how a call of t with (schema-valid) args is gated. A failed read of the
// owner's account or of the grants is logged and gates the call as the tool says: a rule or a
// grant never opens a gate it could not check. A grant is looked up only for the tool's own
// plain approval: a rule that decided the call (ask, deny, or an error) is never overridden by
// one (applyGrant).
func (a *actor) gateFor(t *tools.Tool, args json.RawMessage) callGate {
	g := callGate{approval: t.Approval(), approvers: t.Approvers(), needed: t.ApproverCount()}
	if len(t.Rules()) > 0 {
		g = a.applyRules(t, args, g)
	}
	if g.gated() && !g.denied && !g.ruled() {
		g = a.applyGrant(t, args, g)
	}
	return g
}

// applyRules evaluates t's rules on a call. A rule that fails to evaluate asks (the tool's
// approvers, at least one approval): an error never lets a call through that a rule might
// have stopped.
func (a *actor) applyRules(t *tools.Tool, args json.RawMessage, g callGate) callGate {
	u, err := a.ownerForRules()
	if err != nil {
		a.log.Warn("read the owner for the tool's rules; the call is asked about", "tool", t.Name(), "err", err)
		g.approval = tools.RequiresApproval
		g.rule = &ruleData{Index: -1, Action: string(tools.RuleAsk), Error: "the owner's account could not be read"}
		return g
	}
	m, ok := t.MatchRule(args, u)
	if !ok {
		return g
	}
	rd := &ruleData{Index: m.Index, When: m.Rule.When, Action: string(m.Rule.Action), Reason: m.Rule.Reason, Shadow: t.RulesShadow()}
	if m.Err != nil {
		rd.Action, rd.Error = string(tools.RuleAsk), m.Err.Error()
	}
	g.rule = rd
	if rd.Shadow {
		a.log.Info("rule matched (shadow mode: not applied)", "tool", t.Name(), "rule", m.Index, "action", string(m.Rule.Action))
		return g
	}
	a.log.Info("rule matched", "tool", t.Name(), "rule", m.Index, "action", rd.Action, "error", rd.Error)
	switch tools.RuleAction(rd.Action) {
	case tools.RuleAllow:
		g.approval, g.needed = tools.Auto, 0
	case tools.RuleDeny:
		g.denied, g.reason = true, m.Rule.Reason
	case tools.RuleAsk:
		g.approval = tools.RequiresApproval
		if m.Err == nil && m.Rule.Approvers != "" {
			g.approvers, g.needed = m.Rule.Approvers, max(1, m.Rule.Count)
		}
	}
	return g
}

// ownerForRules is the conversation's owner as rules see them, read from the store each time
// (a role may change between two answers; PostgreSQL rows are the truth).
func (a *actor) ownerForRules() (tools.RuleUser, error) {
	u, err := a.cfg().Store.UserByID(a.m.base, a.st.conv.OwnerID)
	if err != nil {
		return tools.RuleUser{}, err
	}
	return tools.RuleUser{ID: u.ID, Name: u.Name, Role: string(u.Role)}, nil
}

// deniedByRule is the error the model reads for a call a rule denied.
func deniedByRule(g callGate) *fault.Error {
	msg := "the call was denied by a rule"
	if g.reason != "" {
		msg += ": " + g.reason
	}
	return fault.New(fault.KindDenied, msg, map[string]any{"reason": g.reason, "rule": g.rule.Index})
}

// gateAudit is the audit trail's record of how a call was gated at dispatch: the rule that
// matched ("rule_allow", "rule_deny", "rule_ask", "rule_shadow") and the grant that let it run
// ("grant_used"). Nothing when neither applied.
func (a *actor) gateAudit(id, tool string, args json.RawMessage, g callGate, now time.Time) []store.AuditRecord {
	var out []store.AuditRecord
	if g.rule != nil {
		action := "rule_" + g.rule.Action
		if g.rule.Shadow {
			action = "rule_shadow"
		}
		out = append(out, store.AuditRecord{ConversationID: a.id, ToolCallID: id, Tool: tool, ActorID: "system",
			Action: action, Reason: g.rule.Reason, ArgsHash: canonicalHash(args), Detail: mustJSON(g.rule), At: now})
	}
	if g.grant != "" {
		out = append(out, store.AuditRecord{ConversationID: a.id, ToolCallID: id, Tool: tool, ActorID: "system",
			Action: "grant_used", ArgsHash: canonicalHash(args), Detail: mustJSON(map[string]string{"grant_id": g.grant}), At: now})
	}
	return out
}

// pendingKindFor is the kind of a call's first suspension when gated says whether it waits for
// an approval: an approval, else the tool's own (a question, a browser run), else none.
func pendingKindFor(t *tools.Tool, gated bool) tools.PendingKind {
	if gated {
		return tools.PendingApproval
	}
	return t.PendingKind(true)
}

// approvalTimeout is how long an approval of t may wait: its approval_timeout_secs, else its
// suspension timeout.
func (c *Config) approvalTimeout(t *tools.Tool) time.Duration {
	if t != nil && t.ApprovalTimeout() > 0 {
		return t.ApprovalTimeout()
	}
	return c.suspensionTimeout(t)
}

// view copies the rule for a CallView; nil when no rule decided the call.
func (r *ruleData) view() *RuleView {
	if r == nil {
		return nil
	}
	return &RuleView{Index: r.Index, When: r.When, Action: r.Action, Shadow: r.Shadow, Error: r.Error}
}
