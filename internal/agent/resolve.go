package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// handleResolve is Resolve inside the actor: check the call against the pending set, authorize,
// validate the payload, record durably, then (after the reply) continue the turn.
func (a *actor) handleResolve(req *request) (error, func()) {
	by := req.by
	if !a.visible(by) {
		return errNotFound(), nil
	}
	c := a.st.calls[req.callID]
	if c == nil || c.finished() || c.status != store.CallAwaiting {
		return errStale(req.callID), nil
	}
	switch c.kind {
	case tools.PendingApproval:
		return a.resolveApproval(c, req.res, by)
	case tools.PendingElicitation:
		return a.resolveElicitation(c, req.res, by)
	case tools.PendingClientExec:
		return a.resolveClient(c, req.res, by)
	}
	return errStale(req.callID), nil
}

func permissionDenied(msg string) *tools.Error {
	return tools.NewError(tools.KindPermissionDenied, msg, nil)
}

// mayApprove applies the tool's approvers policy. Admins may always decide. A reviewer-only
// tool needs a reviewer who is not the conversation's owner (the point of such a gate is a
// second pair of eyes); an owner-approved tool is the owner's alone (API.md: reviewers decide
// the approvals of reviewer tools).
func (a *actor) mayApprove(c *call, by Principal) bool {
	if by.Via == "system" || by.Role == store.RoleAdmin {
		return true
	}
	if c.approvers == tools.ByReviewer {
		return by.Role == store.RoleReviewer && by.UserID != a.st.conv.OwnerID
	}
	return by.UserID == a.st.conv.OwnerID
}

func (a *actor) resolveApproval(c *call, r Resolution, by Principal) (error, func()) {
	if !a.mayApprove(c, by) {
		if c.approvers == tools.ByReviewer {
			return permissionDenied("this call needs a reviewer's approval"), nil
		}
		return permissionDenied("only the conversation's owner may decide this call"), nil
	}
	now := a.now()
	d := decisionData{By: by.UserID, Role: string(by.Role), Via: by.Via, Reason: r.Reason}
	audit := store.AuditRecord{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID, Reason: r.Reason, At: now}
	b := store.Batch{Cancel: []string{c.id}}
	switch r.Decision {
	case "approve":
		d.Decision = "approve"
		if len(bytes.TrimSpace(r.Args)) > 0 && !bytes.Equal(bytes.TrimSpace(r.Args), []byte("null")) {
			if c.tool == nil {
				return tools.Errorf(tools.KindInvalidArgs, "the tool %s is no longer registered; its arguments cannot be edited", c.name), nil
			}
			parsed, verr := c.tool.ValidateArgs(r.Args)
			if verr != nil {
				return verr, nil
			}
			edited := mustJSON(parsed)
			if canonicalHash(edited) != canonicalHash(c.args) {
				d.Decision, d.Args = "approve_edited", edited
			}
		}
		run := c.args
		if d.Args != nil {
			run = d.Args
		}
		d.ArgsHash = canonicalHash(run)
		audit.Action, audit.ArgsHash = "approve", d.ArgsHash
		if c.executor == tools.Client {
			// The second suspension gets its own timer; scheduling replaces the first one.
			exp := now.Add(a.suspensionTimeout(c.tool))
			d.ExpiresAt = &exp
			b.Schedule = []store.Expiry{{ConversationID: a.id, ToolCallID: c.id, At: exp}}
			b.Cancel = nil
		}
		b.Entries = []store.Entry{{Type: store.EntryDecision, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(d)}}
	case "deny":
		d.Decision = "deny"
		d.ArgsHash = canonicalHash(c.args)
		audit.Action, audit.ArgsHash = "deny", d.ArgsHash
		msg := "the call was denied by the approver"
		if r.Reason != "" {
			msg += ": " + r.Reason
		}
		env := tools.ErrorEnvelope(tools.NewError(tools.KindDenied, msg, map[string]any{"reason": r.Reason}))
		rd := resultData{Envelope: env, Status: store.CallDenied, Decision: "deny", By: by.UserID, Reason: r.Reason}
		b.Entries = []store.Entry{
			{Type: store.EntryDecision, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(d)},
			{Type: store.EntryToolError, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(rd)},
		}
	default:
		return invalidArgs("an approval needs a decision", "/decision", `must be "approve" or "deny"`), nil
	}
	b.Audit = []store.AuditRecord{audit}
	b.Urgent = true // the person's request waits for it
	if err := a.commit(b, []string{c.id}); err != nil {
		return err, nil
	}
	a.publishCall(c)
	return nil, func() {
		switch {
		case c.finished():
			a.advance()
		case c.executor == tools.Client:
			a.publishClientExec(c)
			a.checkClient(c)
		default:
			a.runTool(c)
		}
	}
}

func (a *actor) resolveElicitation(c *call, r Resolution, by Principal) (error, func()) {
	if by.Via != "system" && by.UserID != a.st.conv.OwnerID {
		return permissionDenied("only the conversation's owner answers its questions"), nil
	}
	var (
		env    json.RawMessage
		status = store.CallResolved
		typ    = store.EntryToolResult
	)
	switch r.Action {
	case "accept":
		content, err := tools.DecodeJSON(nonEmpty(r.Content))
		if err != nil {
			return invalidArgs("the answer is not valid JSON", "/content", err.Error()), nil
		}
		if verr := a.validateAnswer(c, content); verr != nil {
			return verr, nil
		}
		env = tools.BoundEnvelope(tools.OKEnvelope(map[string]any{"action": "accept", "content": content}), a.maxBytes(c.tool))
	case "decline", "cancel":
		msg := "the user declined to answer"
		if r.Action == "cancel" {
			msg = "the user cancelled the question"
		}
		env = tools.ErrorEnvelope(tools.NewError(tools.KindDeclined, msg, map[string]any{"action": r.Action}))
		status, typ = store.CallErrored, store.EntryToolError
	default:
		return invalidArgs("an answer needs an action", "/action", `must be "accept", "decline" or "cancel"`), nil
	}
	rd := resultData{Envelope: env, Status: status, Decision: r.Action, By: by.UserID}
	b := store.Batch{
		Entries: []store.Entry{{Type: typ, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(rd)}},
		Cancel:  []string{c.id},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID,
			Action: r.Action, ArgsHash: canonicalHash(c.args), At: a.now()}},
		Urgent: true, // the person's request waits for it
	}
	if err := a.commit(b, []string{c.id}); err != nil {
		return err, nil
	}
	a.publishCall(c)
	return nil, a.advance
}

func (a *actor) validateAnswer(c *call, content any) *tools.Error {
	if c.prompt == nil {
		return tools.NewError(tools.KindInvalidArgs, "the question has no form", nil)
	}
	if c.tool != nil {
		return c.tool.ValidateAnswer(*c.prompt, content)
	}
	s, err := tools.CompileSchema(c.name, c.prompt.Schema)
	if err != nil {
		return tools.Errorf(tools.KindInvalidArgs, "the form's schema does not compile: %v", err)
	}
	return tools.ValidateValue(s, content, "answers")
}

// resolveClient takes a browser's report. Only the owner's own session runs client tools; the
// result is user-controllable, so it is validated and never trusted for a privileged decision.
func (a *actor) resolveClient(c *call, r Resolution, by Principal) (error, func()) {
	if by.UserID != a.st.conv.OwnerID {
		return permissionDenied("only the conversation owner's browser reports client results"), nil
	}
	hasResult := len(bytes.TrimSpace(r.Result)) > 0 && !bytes.Equal(bytes.TrimSpace(r.Result), []byte("null"))
	var (
		env    json.RawMessage
		status = store.CallResolved
		typ    = store.EntryToolResult
		action = "client_result"
	)
	switch {
	case hasResult && r.Error != nil:
		return invalidArgs("a client report has a result or an error, not both", "", "both result and error are set"), nil
	case hasResult:
		v, err := tools.DecodeJSON(r.Result)
		if err != nil {
			return invalidArgs("the result is not valid JSON", "/result", err.Error()), nil
		}
		if c.tool != nil {
			if verr := c.tool.ValidateResult(v); verr != nil {
				return verr, nil
			}
		}
		env = tools.BoundEnvelope(tools.OKEnvelope(v), a.maxBytes(c.tool))
	case r.Error != nil:
		msg := r.Error.Message
		if msg == "" {
			msg = "the browser reported a failure"
		}
		env = tools.ErrorEnvelope(tools.NewError(tools.KindClientError, tools.Truncate(msg, 2000), nil))
		status, typ, action = store.CallErrored, store.EntryToolError, "client_error"
	default:
		return invalidArgs("a client report needs a result or an error", "/result", "missing"), nil
	}
	rd := resultData{Envelope: env, Status: status, Decision: action, By: by.UserID}
	b := store.Batch{
		Entries: []store.Entry{{Type: typ, ToolCallID: c.id, Actor: by.UserID, Data: mustJSON(rd)}},
		Cancel:  []string{c.id},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: by.UserID,
			Action: action, ArgsHash: canonicalHash(c.effectiveArgs()), At: a.now()}},
		Urgent: true, // the browser's request waits for it
	}
	delete(a.graceAt, c.id)
	if err := a.commit(b, []string{c.id}); err != nil {
		return err, nil
	}
	a.publishCall(c)
	return nil, a.advance
}

// handleExpire fires a durable expiry: the suspended call becomes a timeout error the model can
// recover from.
func (a *actor) handleExpire(req *request) (error, func()) {
	c := a.st.calls[req.callID]
	if c == nil || c.finished() || c.status != store.CallAwaiting {
		return errStale(req.callID), nil
	}
	now := a.now()
	what := map[tools.PendingKind]string{
		tools.PendingApproval:    "nobody decided the approval in time",
		tools.PendingElicitation: "the user did not respond in time",
		tools.PendingClientExec:  "the browser did not report a result in time",
	}[c.kind]
	env := tools.ErrorEnvelope(tools.NewError(tools.KindTimeout, what, map[string]any{"pending": string(c.kind)}))
	rd := resultData{Envelope: env, Status: store.CallExpired, Decision: "expire", By: System.UserID}
	b := store.Batch{
		Entries: []store.Entry{
			{Type: store.EntryExpiry, ToolCallID: c.id, Actor: System.UserID, Data: mustJSON(map[string]any{"kind": string(c.kind)})},
			{Type: store.EntryToolError, ToolCallID: c.id, Actor: System.UserID, Data: mustJSON(rd)},
		},
		Cancel: []string{c.id},
		Audit: []store.AuditRecord{{ConversationID: a.id, ToolCallID: c.id, Tool: c.name, ActorID: System.UserID,
			Action: "expire", ArgsHash: canonicalHash(c.effectiveArgs()), At: now}},
	}
	delete(a.graceAt, c.id)
	if err := a.commit(b, []string{c.id}); err != nil {
		return err, nil
	}
	metrics.ExpiriesFired.Inc()
	a.log.Info("suspended call expired", "tool_call_id", c.id, "tool", c.name, "pending", string(c.kind))
	a.publishCall(c)
	return nil, a.advance
}

// resolveNoClient fails a client call nobody can run: no socket was attached within the grace.
func (a *actor) resolveNoClient(c *call) {
	env := tools.ErrorEnvelope(tools.Errorf(tools.KindNoClient, "no browser was connected to run %s", c.name))
	rd := resultData{Envelope: env, Status: store.CallErrored, Decision: "no_client", By: System.UserID}
	b := store.Batch{
		Entries: []store.Entry{{Type: store.EntryToolError, ToolCallID: c.id, Actor: System.UserID, Data: mustJSON(rd)}},
		Cancel:  []string{c.id},
	}
	if a.commit(b, []string{c.id}) == nil {
		a.publishCall(c)
		a.advance()
	}
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
