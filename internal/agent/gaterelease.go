package agent

import (
	"fmt"

	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file is the effect gate: the last check before a call's effect starts (release, in
// ready.go, asks it for every tool run; the follow-up of an approved browser call asks it
// before the browser hears of the call). It is the last line, not the only one: the gate at
// dispatch (gate.go) and Resolve decided already; this checks that what is about to run is
// exactly what their record covers, with the rules and the rights as they stand now.
//
// A call runs only when:
//   - the tool is the call's (the same registered tool, by name);
//   - the arguments about to run are the call's arguments as recorded (canonical form), and,
//     when it was approved, the very arguments the final approval covered;
//   - the tool's rules, evaluated now on those arguments, do not deny them;
//   - when the rules (or the tool) gate those arguments, the call was approved, and the
//     approvals of those arguments by people who hold the right now (their role read from the
//     store) number at least what the gate requires.
//
// Anything else is refused: the call ends with a denied error the model reads, an audit
// record (effect_refused) and parley_effect_refusals_total{reason}.

// Why the effect gate refused a run (the metric's reason label).
const (
	refusedTool      = "tool"
	refusedArgs      = "arguments"
	refusedRule      = "rule_denies"
	refusedUnapprove = "not_approved"
	refusedApprovals = "approvals"
)

// refusal says why c may not run as rc, and the reason's label ("" when it may).
func (a *actor) refusal(c *call, rc recordedCall) (why, reason string) {
	if c == nil {
		return "the call is not in the conversation's log", refusedTool
	}
	if rc.tool == nil || c.tool != rc.tool || rc.tool.Name() != c.name {
		return "the tool about to run is not the call's", refusedTool
	}
	args := c.effectiveArgs()
	if rc.args != nil && canonicalHash(mustJSON(rc.args)) != canonicalHash(args) {
		return "the arguments about to run are not the call's recorded arguments", refusedArgs
	}
	if c.approved && c.approvedHash != "" && c.approvedHash != canonicalHash(args) {
		return "the arguments about to run are not the ones approved", refusedArgs
	}
	t := c.tool
	if t.Approval() != tools.RequiresApproval && len(t.Rules()) == 0 && !c.approved {
		return "", "" // an ungated tool with no rules: nothing to hold against the call
	}
	g := a.gateFor(t, args)
	switch {
	case g.denied:
		msg := "a rule denies these arguments"
		if g.reason != "" {
			msg += ": " + g.reason
		}
		return msg, refusedRule
	case !g.gated():
		return "", ""
	case !c.approved:
		return "the rules require an approval the call does not have", refusedUnapprove
	}
	need := max(1, g.needed)
	have := a.countingApprovals(c, g.approvers, canonicalHash(args))
	if c.decidedBy != "" && !approvalOf(c, c.decidedBy, canonicalHash(args)) && a.holdsRight(c.decidedBy, g.approvers) {
		have++
	}
	if have < need {
		return fmt.Sprintf("the call needs %d approval(s) by %s who hold the right now, and %d count", need, approverWords(g.approvers), have),
			refusedApprovals
	}
	return "", ""
}

// approvalOf reports whether id's approval of argsHash is among c's partial approvals (the
// final approver is counted apart).
func approvalOf(c *call, id, argsHash string) bool {
	for _, ap := range c.approvals {
		if ap.By == id && ap.ArgsHash == argsHash {
			return true
		}
	}
	return false
}

func approverWords(a tools.Approvers) string {
	if a == tools.ByReviewer {
		return "reviewers"
	}
	return "the owner (or an admin)"
}

// refuseRun ends c without running it: the gate refused it for why. The model reads a denied
// error; the trail records effect_refused.
func (a *actor) refuseRun(c *call, why, reason string) {
	if c == nil {
		return
	}
	metrics.EffectRefusals.WithLabelValues(reason).Inc()
	a.log.Warn("the effect gate refused a run", "tool_call_id", c.id, "tool", c.name, "reason", reason, "why", why)
	e := fault.New(fault.KindDenied, "Parley did not run this call: "+why, map[string]any{"refused": reason})
	a.stage(store.Batch{Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: System.UserID,
		Action: "effect_refused", Reason: why, ArgsHash: canonicalHash(c.effectiveArgs()),
		Detail: mustJSON(map[string]string{"reason": reason}), At: a.now()}}}, nil)
	if c.status == store.CallAwaiting {
		a.closeCall(c, closing{envelope: tools.ErrorEnvelope(e), status: store.CallDenied, decision: "refused", by: System.UserID})
	} else {
		a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: e}, System.UserID, "refused")
	}
	a.ready.after(followUp{kind: followAdvance})
}
