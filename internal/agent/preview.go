package agent

import (
	"context"
	"encoding/json"
	"time"

	"parley/internal/tools"
)

// This file is the approval card's plan refreshed as the person edits the arguments: the dry
// run of an awaiting call with other arguments, asked by someone who may decide the call. It
// reads and runs a dry run; it writes nothing and changes no state.

// PreviewTimeout bounds a preview's dry run: a person is typing and waits for it. A dry run
// that fails or runs out of it gives the default plan (tools.DefaultPlan), like a suspension's.
const PreviewTimeout = 3 * time.Second

// maxPlanSummaryBytes bounds a previewed plan's summary; its details are bounded by the output
// bound of the tool's results (Config.MaxOutputBytes, or the tool's own).
const maxPlanSummaryBytes = 2048

// Preview is the plan of the awaiting approval toolCallID of convID were it approved with args
// (the edited arguments, validated against the tool's schema), for by, who must be allowed to
// decide the call. Errors are Resolve's for the same call and person: not_found (no such
// conversation or call, or by may not see it), stale (the call does not await a decision any
// more), invalid_args (the call awaits something else than an approval; args its schema
// refuses, with details.problems; a call needing several approvers, whose arguments cannot be
// edited, with other arguments), permission_denied (by may see the call but not decide it).
//
// The call is read through View (from the owning process in a cluster); the dry run runs here,
// bounded by PreviewTimeout on the manager's clock and by ctx, and its plan, hostile output, is
// bounded before it is returned.
func (m *Manager) Preview(ctx context.Context, convID, toolCallID string, args json.RawMessage, by Principal) (tools.Plan, error) {
	v, err := m.View(ctx, convID, by)
	if err != nil {
		return tools.Plan{}, err
	}
	var c *CallView
	for i := range v.Calls {
		if v.Calls[i].ID == toolCallID {
			c = &v.Calls[i]
		}
	}
	switch {
	case c == nil:
		return tools.Plan{}, errNoSuchCall(toolCallID)
	case c.Status != CallAwaiting:
		return tools.Plan{}, errStale(toolCallID)
	case c.PendingKind != tools.PendingApproval:
		return tools.Plan{}, errWrongKind(c.PendingKind, tools.PendingApproval)
	}
	if _, err := decideRight(by, v.OwnerID, c.Approvers); err != nil {
		return tools.Plan{}, err
	}
	if !present(args) {
		args = c.Args
	}
	if c.ApprovalsNeeded > 1 && canonicalHash(args) != canonicalHash(c.Args) {
		return tools.Plan{}, errQuorumEdit()
	}
	t, ok := m.toolNamed(c.Name)
	if !ok {
		return tools.Plan{}, errToolGone(c.Name)
	}
	parsed, verr := t.ValidateArgs(args)
	if verr != nil {
		return tools.Plan{}, verr
	}
	call := tools.Call{ConversationID: convID, ToolCallID: toolCallID, UserID: v.OwnerID,
		Logger: m.cfg.Logger.With("conversation_id", convID, "tool_call_id", toolCallID)}
	plan := m.previewDryRun(ctx, t, call, parsed)
	return boundPlan(plan, m.planBytes(t)), nil
}

// previewDryRun runs the tool's dry run in a goroutine of the manager's (Close waits for it),
// bounded by PreviewTimeout on the manager's clock, by ctx and by a hard stop; on an error or
// any bound it cancels the dry run and answers the default plan at once. A dry run that ignores
// its context finishes on its own: its goroutine then sends to a buffered channel nobody reads,
// and ends (until then it holds Close up, as a tool run that ignores its context does).
func (m *Manager) previewDryRun(ctx context.Context, t *tools.Tool, call tools.Call, args map[string]any) tools.Plan {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.base, cancel)()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return tools.DefaultPlan(t, args)
	}
	m.wg.Add(1)
	m.mu.Unlock()
	timer := m.cfg.Clock.NewTimer(PreviewTimeout)
	defer timer.Stop()
	type res struct {
		p   tools.Plan
		err error
	}
	ch := make(chan res, 1)
	go func() {
		defer m.wg.Done()
		p, err := t.DryRun(ctx, call, args)
		ch <- res{p, err}
	}()
	select {
	case r := <-ch:
		if r.err == nil {
			return r.p
		}
		call.Logger.Warn("preview dry run failed", "tool", t.Name(), "err", r.err)
	case <-timer.C():
		call.Logger.Warn("preview dry run timed out", "tool", t.Name(), "timeout", PreviewTimeout)
	case <-ctx.Done():
	}
	return tools.DefaultPlan(t, args)
}

// planBytes is the bound of a plan's details: the tool's own output bound when it set one,
// else the app's (as a result envelope's, toolrun.go: maxBytes).
func (m *Manager) planBytes(t *tools.Tool) int {
	if t.MaxOutputBytes() != tools.DefaultMaxOutputBytes {
		return t.MaxOutputBytes()
	}
	return m.cfg.MaxOutputBytes
}

// boundPlan makes a dry run's plan safe to show and send: its summary storable text of at most
// maxPlanSummaryBytes, its details plain JSON data (what encoding/json cannot encode is left
// out) of at most max bytes encoded. Details over the bound become one "details" entry, their
// JSON text cut (tools.Truncate), and "truncated": true.
func boundPlan(p tools.Plan, max int) tools.Plan {
	out := tools.Plan{Summary: tools.BoundedText(p.Summary, maxPlanSummaryBytes)}
	if len(p.Details) == 0 {
		return out
	}
	if max < tools.MinOutputBytes {
		max = tools.MinOutputBytes
	}
	raw, err := json.Marshal(p.Details)
	if err != nil {
		out.Details = map[string]any{"details": "(the plan's details could not be shown)"}
		return out
	}
	raw = storableJSON(raw)
	if len(raw) > max {
		out.Details = map[string]any{"details": tools.Truncate(string(raw), max), "truncated": true}
		return out
	}
	var d map[string]any
	if json.Unmarshal(raw, &d) != nil {
		out.Details = map[string]any{"details": tools.Truncate(string(raw), max)}
		return out
	}
	out.Details = d
	return out
}
