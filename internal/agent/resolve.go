package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// handleResolve is Resolve inside the actor: check the call against the pending set, type a
// card's fields (answers.go), authorize, validate the payload, record durably, then (after the
// reply) continue the turn.
func (a *actor) handleResolve(req *request) error {
	by := req.by
	c := a.st.calls[req.callID]
	if !a.st.maySee(by) {
		if c != nil && !c.awaitsApproval() && c.approval == tools.RequiresApproval && MayDecide(by, a.st.conv.OwnerID, c.approvers) {
			// A decider who lost the race (or sent their decision twice): the call was theirs
			// to decide while it waited, so they learn it waits no more, and nothing else.
			if a.st.hasKey(req.key) {
				return nil
			}
			return errStale(req.callID)
		}
		return errNotFound()
	}
	if c == nil {
		return errNoSuchCall(req.callID)
	}
	kind, err := req.res.Kind()
	if err != nil {
		return err
	}
	if a.st.hasKey(req.key) {
		// Decided already by this very resolve: by the process it went to first, which died
		// before its answer reached the sender (the sender sent it again here).
		return nil
	}
	if c.finished() || c.status != store.CallAwaiting {
		return errStale(req.callID)
	}
	if kind != c.kind {
		return errWrongKind(c.kind, kind)
	}
	res, err := c.typeFields(req.res)
	if err != nil {
		return err
	}
	switch c.kind {
	case tools.PendingApproval:
		return a.resolveApproval(c, res, by, req.key)
	case tools.PendingElicitation:
		if c.askedMidCall() {
			return a.resolveAsk(c, res, by, req.key)
		}
		return a.resolveElicitation(c, res, by, req.key)
	case tools.PendingClientExec:
		return a.resolveClient(c, res, by, req.key)
	}
	return errStale(req.callID)
}

func permissionDenied(msg string) *fault.Error {
	return fault.New(fault.KindPermissionDenied, msg, nil)
}

// errWrongKind refuses an answer of the kind sent to a call that awaits another kind.
func errWrongKind(pending, sent tools.PendingKind) *fault.Error {
	return fault.New(fault.KindInvalidArgs,
		fmt.Sprintf("this call awaits %s, not %s: %s", kindWords(pending), kindWords(sent), resolutionHint),
		map[string]any{"pending_kind": string(pending), "sent_kind": string(sent)})
}

// errNoSuchCall is not_found for a call the conversation does not have.
func errNoSuchCall(id string) *fault.Error {
	return fault.New(fault.KindNotFound, "no such tool call", map[string]any{"tool_call_id": id})
}

// errToolGone refuses edited arguments of a call whose tool is not registered any more.
func errToolGone(name string) *fault.Error {
	return fault.Errorf(fault.KindInvalidArgs, "the tool %s is no longer registered; its arguments cannot be edited", name)
}

// decideRight is DecideRight with its refusal: permission_denied, worded for who may decide,
// when by has no right to decide an approval gated by approvers in a conversation owned by
// ownerID. Resolve and Preview (preview.go) both ask it.
func decideRight(by Principal, ownerID string, approvers tools.Approvers) (Right, error) {
	right := DecideRight(by, ownerID, approvers)
	switch {
	case right == NoRight && approvers == tools.ByReviewer:
		return right, permissionDenied("this call needs a reviewer's approval, and not the owner's")
	case right == NoRight:
		return right, permissionDenied("only the conversation's owner may decide this call")
	}
	return right, nil
}

func (a *actor) resolveApproval(c *call, r Resolution, by Principal, key string) error {
	right, err := decideRight(by, a.st.conv.OwnerID, c.approvers)
	if err != nil {
		return err
	}
	now := a.now()
	d := decisionData{By: by.UserID, Role: string(by.Role), Via: by.Via, Reason: r.Reason, Key: key}
	if right == AsOverride {
		d.Override = true
	}
	switch r.Decision {
	case "approve":
	case "deny":
		return a.deny(c, r, by, right, d)
	default:
		return fault.InvalidAt("an approval needs a decision", "/decision", `must be "approve" or "deny"`)
	}
	if c.proposedBy != "" && c.proposedBy != by.UserID && !present(r.Args) {
		return errUnseenProposal(c)
	}
	audit := store.AuditRecord{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID, Reason: r.Reason, At: now}
	b := store.Batch{Cancel: []string{c.id}}
	if c.approvalsNeeded() > 1 {
		final, err := c.checkQuorum(r, by, a.countingApprovals(c, c.approvers, canonicalHash(c.effectiveArgs())))
		if err != nil {
			return err
		}
		if !final {
			return a.approvePartly(c, by, right, key)
		}
		audit.Detail = mustJSON(map[string]any{"approvals": append(c.approvalsMade(), approval{By: by.UserID, At: now})})
	}
	edited, err := a.editOf(c, r)
	if err != nil {
		return err
	}
	run, ruled := c.effectiveArgs(), c.rule != nil && !c.rule.Shadow
	if edited != nil {
		// Edits are proposals: the rules judge the edited arguments as they would the model's. A
		// deny refuses the edit; a gate the approver alone does not satisfy (a reviewer, more
		// approvers) keeps the call pending with the edit as the proposal.
		g := a.gateFor(c.tool, edited)
		// What is remembered is what runs, and a rule that judges the edit keeps its say.
		run, ruled = edited, g.ruled()
		if g.denied {
			return errEditDenied(g)
		}
		if g.gated() && !(MayDecide(by, a.st.conv.OwnerID, g.approvers) && max(1, g.needed) <= 1) {
			if r.Remember != nil {
				return fault.InvalidAt("edited arguments that need another approver cannot be remembered", "/remember",
					"approve the proposal without remembering it")
			}
			return a.propose(c, edited, g, by, right, key)
		}
	}
	grant, gerr := a.grantFrom(c, r, by, right, run, ruled, now)
	if gerr != nil {
		return gerr
	}
	d.Decision = "approve"
	if c.runArgs != nil || edited != nil {
		d.Decision, d.Args = "approve_edited", run
	}
	d.ArgsHash = canonicalHash(run)
	audit.Action, audit.ArgsHash = auditAction(d.Decision, right), d.ArgsHash
	if d.Decision == "approve_edited" {
		audit.Detail = editDetail(audit.Detail, c.args, run)
	}
	if c.executor == tools.Client {
		// The second suspension gets its own timer; scheduling replaces the first one.
		exp := now.Add(a.cfg().suspensionTimeout(c.tool))
		d.ExpiresAt = &exp
		b.Schedule = []store.Expiry{{ConversationID: a.id, ToolCallID: c.id, At: exp}}
		b.Cancel = nil
	}
	b.Entries = []store.Entry{{Type: store.EntryDecision, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(d)}}
	b.Audit = []store.AuditRecord{audit}
	if grant != nil {
		d.Remember = &grantData{ID: grant.ID, Scope: grant.Scope, ExpiresAt: grant.ExpiresAt, Args: grant.ArgsScope}
		b.Entries[0].Data = mustJSON(d)
		b.Grants = []store.Grant{*grant}
		b.Audit = append(b.Audit, grantAudit(*grant, c, now))
	}
	b.Urgent = true // the person's request waits for it
	a.announce(c.id, NotifyDecided, d.Decision, by.UserID, "")
	a.stage(b, []string{c.id})
	a.publishCall(c)
	a.ready.after(followUp{kind: followApproved, id: c.id})
	return nil
}

// editOf is the approve's edited arguments, validated against the tool's schema and in
// canonical form; nil when the approve sends none or the call's own (a card's fields sent back
// unchanged are a plain approval).
func (a *actor) editOf(c *call, r Resolution) (json.RawMessage, error) {
	if !present(r.Args) || canonicalHash(r.Args) == canonicalHash(c.effectiveArgs()) {
		return nil, nil
	}
	if c.tool == nil {
		return nil, errToolGone(c.name)
	}
	if c.tool.EditsForbidden() {
		return nil, fault.InvalidAt("this tool's calls cannot be edited: approve them as they are, or deny them", "/args",
			"the tools file forbids edits of "+c.name)
	}
	parsed, verr := c.tool.ValidateArgs(r.Args)
	if verr != nil {
		return nil, verr
	}
	edited := mustJSON(parsed)
	if canonicalHash(edited) == canonicalHash(c.effectiveArgs()) {
		return nil, nil
	}
	return edited, nil
}

// errUnseenProposal refuses an approve without arguments of a call whose arguments another
// approver proposed: what the approver saw may have been the model's (an inbox listed before
// the proposal, a bulk decision), and an approval covers what its approver saw. Restating the
// proposed arguments (args, or the card's fields) approves them.
func errUnseenProposal(c *call) *fault.Error {
	return fault.New(fault.KindStale, "another approver proposed other arguments for this call: approve them by sending them (args), or deny it",
		map[string]any{"field": "/args", "args": c.runArgs})
}

// errEditDenied refuses edited arguments that a rule denies: nothing is written, and the card
// shows why.
func errEditDenied(g callGate) *fault.Error {
	msg := "a rule denies these arguments"
	if g.reason != "" {
		msg += ": " + g.reason
	}
	return fault.New(fault.KindDenied, msg+"; approve the call as it was, change the edit, or deny it",
		map[string]any{"reason": g.reason, "rule": g.rule.Index, "field": "/args"})
}

// editDetail adds to an audit record's detail that the arguments were edited, from which to
// which (their canonical hashes), and what changed, old → new (argChangesOf), so the trail
// itself says what was approved.
func editDetail(detail json.RawMessage, from, to json.RawMessage) json.RawMessage {
	m := map[string]any{}
	if len(detail) > 0 {
		_ = json.Unmarshal(detail, &m)
	}
	m["edited"] = true
	m["model_args_hash"] = canonicalHash(from)
	m["args_hash"] = canonicalHash(to)
	m["changes"] = ArgChanges(from, to)
	return mustJSON(m)
}

// propose records edited arguments that need more than their proposer's approval: the call
// stays pending with them, under the gate the rules put on them; the proposer's approval counts
// when they hold the right under that gate, and approvals of the earlier arguments do not.
func (a *actor) propose(c *call, edited json.RawMessage, g callGate, by Principal, right Right, key string) error {
	now := a.now()
	counts := MayDecide(by, a.st.conv.OwnerID, g.approvers)
	d := decisionData{Decision: decisionPropose, By: by.UserID, Role: string(by.Role), Via: by.Via, Args: edited,
		ArgsHash: canonicalHash(edited), At: now, Key: key, Approvers: string(g.approvers), Needed: max(1, g.needed), Rule: g.rule, Counts: counts}
	detail := editDetail(mustJSON(map[string]any{"approvers": string(g.approvers), "approvals_needed": max(1, g.needed), "counts": counts}), c.effectiveArgs(), edited)
	a.stage(store.Batch{
		Entries: []store.Entry{{Type: store.EntryDecision, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(d)}},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID,
			Action: auditAction(decisionPropose, right), ArgsHash: d.ArgsHash, Detail: detail, At: now}},
		Urgent: true,
	}, []string{c.id})
	a.announce(c.id, NotifyRequested, "", by.UserID, "")
	a.publishCall(c)
	a.log.Info("edited arguments need more approvers; the call waits with them", "tool_call_id", c.id,
		"approvers", string(g.approvers), "needed", max(1, g.needed), "counts", counts)
	return nil
}

// countingApprovals counts the approvals of c's arguments argsHash so far whose approvers hold
// the right to decide a call gated by approvers now (their role read from the store: a demoted
// or removed approver's approval stops counting).
func (a *actor) countingApprovals(c *call, approvers tools.Approvers, argsHash string) int {
	n := 0
	seen := map[string]bool{}
	for _, ap := range c.approvals {
		if ap.ArgsHash != argsHash || seen[ap.By] {
			continue
		}
		seen[ap.By] = true
		if a.holdsRight(ap.By, approvers) {
			n++
		}
	}
	return n
}

// holdsRight reports whether the user id may decide, now, a call of this conversation gated by
// approvers. A failed read counts as no right: a right is never assumed.
func (a *actor) holdsRight(id string, approvers tools.Approvers) bool {
	u, err := a.cfg().Store.UserByID(a.m.base, id)
	if err != nil {
		if !errors.Is(err, store.ErrNotFound) {
			a.log.Warn("read an approver's account; their approval does not count", "user_id", id, "err", err)
		}
		return false
	}
	r := DecideRight(Principal{UserID: u.ID, Role: u.Role}, a.st.conv.OwnerID, approvers)
	return r != NoRight && r != AsSystem
}

// deny records a denial: the decision, then the error the model reads; the call never runs.
func (a *actor) deny(c *call, r Resolution, by Principal, right Right, d decisionData) error {
	d.Decision = "deny"
	d.ArgsHash = canonicalHash(c.args)
	msg := "the call was denied by the approver"
	if r.Reason != "" {
		msg += ": " + r.Reason
	}
	a.announce(c.id, NotifyDecided, "deny", by.UserID, r.Reason)
	a.closeCall(c, closing{
		before:   []store.Entry{{Type: store.EntryDecision, Data: mustJSON(d)}},
		envelope: tools.ErrorEnvelope(fault.New(fault.KindDenied, msg, map[string]any{"reason": r.Reason})),
		status:   store.CallDenied,
		decision: "deny",
		by:       by.UserID,
		reason:   r.Reason,
		audit:    auditAction("deny", right),
		urgent:   true, // the person's request waits for it
	})
	a.ready.after(followUp{kind: followAdvance})
	return nil
}

// auditAction is the audit trail's word for a decision: an admin's override of an owner's
// decision is recorded as one ("override_approve", "override_deny").
func auditAction(decision string, right Right) string {
	if right == AsOverride {
		return "override_" + decision
	}
	return decision
}

// answerContent checks an answer to a question, whoever asked it (the model's form or a running
// call's): its action, and for accept its content against the question's schema (nil for
// decline and cancel).
func (c *call) answerContent(r Resolution) (any, error) {
	switch r.Action {
	case "accept":
		content, err := tools.DecodeJSON(nonEmpty(r.Content))
		if err != nil {
			return nil, fault.InvalidAt("the answer is not valid JSON", "/content", err.Error())
		}
		if verr := c.validateAnswer(content); verr != nil {
			return nil, verr
		}
		return content, nil
	case "decline", "cancel":
		return nil, nil
	}
	return nil, fault.InvalidAt("an answer needs an action", "/action", `must be "accept", "decline" or "cancel"`)
}

func (a *actor) resolveElicitation(c *call, r Resolution, by Principal, key string) error {
	if !MayAnswer(by, a.st.conv.OwnerID) {
		return permissionDenied("only the conversation's owner answers its questions")
	}
	var (
		env    json.RawMessage
		status = store.CallResolved
	)
	content, err := c.answerContent(r)
	if err != nil {
		return err
	}
	switch r.Action {
	case "accept":
		env = tools.BoundEnvelope(tools.OKEnvelope(map[string]any{"action": "accept", "content": content}), a.cfg().maxBytes(c.tool))
	case "decline", "cancel":
		msg := "the user declined to answer"
		if r.Action == "cancel" {
			msg = "the user cancelled the question"
		}
		env = tools.ErrorEnvelope(fault.New(fault.KindDeclined, msg, map[string]any{"action": r.Action}))
		status = store.CallErrored
	}
	a.closeCall(c, closing{envelope: env, status: status, decision: r.Action, by: by.UserID, audit: r.Action,
		urgent: true, // the person's request waits for it
		key:    key,
	})
	a.ready.after(followUp{kind: followAdvance})
	return nil
}

func (c *call) validateAnswer(content any) *fault.Error {
	if c.prompt == nil {
		return fault.New(fault.KindInvalidArgs, "the question has no form", nil)
	}
	if c.tool != nil {
		return c.tool.ValidateAnswer(*c.prompt, content)
	}
	s, err := tools.CompileSchema(c.name, c.prompt.Schema)
	if err != nil {
		return fault.Errorf(fault.KindInvalidArgs, "the form's schema does not compile: %v", err)
	}
	return tools.ValidateValue(s, content, "answers")
}

// resolveClient takes a browser's report. Only the owner's own session runs client tools; the
// result is user-controllable, so it is validated and never trusted for a privileged decision.
func (a *actor) resolveClient(c *call, r Resolution, by Principal, key string) error {
	if by.Via == "system" || !MayAnswer(by, a.st.conv.OwnerID) {
		return permissionDenied("only the conversation owner's browser reports client results")
	}
	hasResult := len(bytes.TrimSpace(r.Result)) > 0 && !bytes.Equal(bytes.TrimSpace(r.Result), []byte("null"))
	var (
		env    json.RawMessage
		status = store.CallResolved
		action = "client_result"
	)
	switch {
	case hasResult && r.Error != nil:
		return fault.InvalidAt("a client report has a result or an error, not both", "", "both result and error are set")
	case hasResult:
		v, err := tools.DecodeJSON(r.Result)
		if err != nil {
			return fault.InvalidAt("the result is not valid JSON", "/result", err.Error())
		}
		if c.tool != nil {
			if verr := c.tool.ValidateResult(v); verr != nil {
				return verr
			}
		}
		env = tools.BoundEnvelope(tools.OKEnvelope(v), a.cfg().maxBytes(c.tool))
	case r.Error != nil:
		msg := r.Error.Message
		if msg == "" {
			msg = "the browser reported a failure"
		}
		env = tools.ErrorEnvelope(fault.New(fault.KindClientError, tools.Truncate(msg, 2000), nil))
		status, action = store.CallErrored, "client_error"
	default:
		return fault.InvalidAt("a client report needs a result or an error", "/result", "missing")
	}
	a.closeCall(c, closing{envelope: env, status: status, decision: action, by: by.UserID, audit: action,
		urgent: true, // the browser's request waits for it
		key:    key,
	})
	a.ready.after(followUp{kind: followAdvance})
	return nil
}

// handleExpire fires a durable expiry: the suspended call becomes a timeout error the model can
// recover from.
func (a *actor) handleExpire(req *request) error {
	c := a.st.calls[req.callID]
	if c == nil || c.finished() || c.status != store.CallAwaiting {
		return errStale(req.callID)
	}
	if c.kind == tools.PendingApproval && !c.escalated && c.tool != nil && c.tool.OnApprovalTimeout() == tools.TimeoutEscalate {
		return a.escalate(c)
	}
	what := map[tools.PendingKind]string{
		tools.PendingApproval:    "nobody decided the approval in time",
		tools.PendingElicitation: "the user did not respond in time",
		tools.PendingClientExec:  "the browser did not report a result in time",
	}[c.kind]
	kind := c.kind // the result clears it
	if kind == tools.PendingApproval {
		a.announce(c.id, NotifyDecided, "expire", System.UserID, "")
	}
	a.closeCall(c, closing{
		before:   []store.Entry{{Type: store.EntryExpiry, Data: mustJSON(map[string]any{"kind": string(c.kind)})}},
		envelope: tools.ErrorEnvelope(fault.New(fault.KindTimeout, what, map[string]any{"pending": string(c.kind)})),
		status:   store.CallExpired,
		decision: "expire",
		by:       System.UserID,
		audit:    "expire",
	})
	metrics.ExpiriesFired.Inc()
	a.log.Info("suspended call expired", "tool_call_id", c.id, "tool", c.name, "pending", string(kind))
	a.ready.after(followUp{kind: followAdvance})
	return nil
}

// resolveNoClient fails a client call nobody can run: no socket was attached within the grace.
func (a *actor) resolveNoClient(c *call) {
	a.closeCall(c, closing{
		envelope: tools.ErrorEnvelope(fault.Errorf(fault.KindNoClient, "no browser was connected to run %s", c.name)),
		status:   store.CallErrored,
		decision: "no_client",
		by:       System.UserID,
	})
	a.advance()
}

// closing is how a suspended call ends (closeCall): its result and who gave it, what is
// recorded ahead of the result, and the audit record.
type closing struct {
	before   []store.Entry   // entries ahead of the result (a decision, an expiry); closeCall sets their call and actor
	envelope json.RawMessage // the result the model reads
	status   string          // the call's final status (store.Call*)
	decision string          // what ended it (accept, client_result, deny, expire, no_client, …), in the result
	by       string          // who ended it: the actor of every entry, the result's By, the audit record's actor
	reason   string          // the approver's reason, in the result and the audit record
	audit    string          // the audit record's action; "" records none
	urgent   bool            // a request waits for the write
	key      string          // the resolve's key (request.key), in the result
}

// closeCall ends a suspended call in one batch: fin.before, then the result (a tool_result when
// the call resolved, else a tool_error), the call's expiry cancelled and the audit record; then
// the call's event. The audit record hashes the arguments as they stand: an approver's edit
// comes only with an approval, so for an approval or a question these are the model's.
func (a *actor) closeCall(c *call, fin closing) {
	typ := store.EntryToolError
	if fin.status == store.CallResolved {
		typ = store.EntryToolResult
	}
	rd := resultData{Envelope: fin.envelope, Status: fin.status, Decision: fin.decision, By: fin.by, Reason: fin.reason, Key: fin.key}
	b := store.Batch{Cancel: []string{c.id}, Urgent: fin.urgent}
	for _, e := range fin.before {
		e.ToolCallID, e.Actor = c.id, fin.by
		b.Entries = append(b.Entries, e)
	}
	b.Entries = append(b.Entries, store.Entry{Type: typ, ToolCallID: c.id, Actor: fin.by, Data: mustJSON(rd)})
	if fin.audit != "" {
		b.Audit = []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: fin.by,
			Action: fin.audit, Reason: fin.reason, ArgsHash: canonicalHash(c.effectiveArgs()), At: a.now()}}
	}
	delete(a.graceAt, c.id) // a client call's no-client grace, if it had one
	a.stage(b, []string{c.id})
	a.dropAsk(c)
	a.publishCall(c)
}

// canonicalHash is the hex SHA-256 of the canonical form of a JSON value (object keys sorted,
// no insignificant space), so equal arguments hash equally however they were written.
func canonicalHash(raw json.RawMessage) string {
	v, err := tools.DecodeJSON(nonEmpty(raw))
	var b []byte
	if err != nil {
		b = raw
	} else {
		b, _ = json.Marshal(v)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func nonEmpty(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("null")
	}
	return raw
}
