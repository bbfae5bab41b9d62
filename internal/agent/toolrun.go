package agent

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"parley/internal/fault"
	"parley/internal/metrics"
	"parley/internal/store"
	"parley/internal/tools"
)

// This file runs server calls: each attempt in a goroutine of its own, bounded by the tool's
// timeout, its outcome recorded (or retried) when it reports back; and the dry runs that show an
// approver what a call would do.

func (c *Config) suspensionTimeout(t *tools.Tool) time.Duration {
	if t != nil && t.Timeout() > 0 {
		return t.Timeout()
	}
	return c.DefaultTimeout
}

func (c *Config) runTimeout(t *tools.Tool) time.Duration {
	if t != nil && t.Timeout() > 0 {
		return t.Timeout()
	}
	return c.ToolTimeout
}

// startDryRun asks the tool for the plan of call id in a goroutine of the actor's (counted in
// inflight), bounded by the tool's run timeout on the manager's clock and by ctx (cancelled by a
// hard stop); the plan comes back through internal. A failing dry run falls back to the default
// plan: the approver still sees the tool and its arguments. Only release calls it.
func (a *actor) startDryRun(ctx context.Context, rc recordedCall) {
	t, id, args := rc.tool, rc.id, rc.args
	ctx, cancel := context.WithCancel(ctx)
	// The timer is armed here, in the actor, like a tool run's.
	timer := a.cfg().Clock.NewTimer(a.cfg().runTimeout(t))
	a.inflight++
	call := tools.Call{ConversationID: a.id, ToolCallID: id, UserID: a.st.conv.OwnerID, Logger: a.log.With("tool_call_id", id)}
	log := a.log
	go func() {
		defer cancel()
		defer timer.Stop()
		type res struct {
			p   tools.Plan
			err error
		}
		ch := make(chan res, 1)
		go func() {
			p, err := t.DryRun(ctx, call, args)
			ch <- res{p, err}
		}()
		var plan tools.Plan
		ok := false
		select {
		case r := <-ch:
			plan, ok = r.p, r.err == nil
			if !ok {
				log.Warn("dry run failed", "tool_call_id", id, "tool", t.Name(), "err", r.err)
			}
		case <-timer.C():
			cancel()
			<-ch
			log.Warn("dry run timed out", "tool_call_id", id, "tool", t.Name())
		}
		if !ok {
			plan = tools.DefaultPlan(t, args)
		}
		a.internal <- planDone{id: id, plan: plan}
	}()
}

// runTool decides one attempt of a server call: it waits for a run slot, or is refused by the
// precheck (the call ends with that error), or takes a slot and asks the shell to run it once
// the step is committed (effectToolRun: startTool).
func (a *actor) runTool(c *call) {
	if !a.lc.mayStart() {
		return
	}
	if _, busy := a.running[c.id]; busy {
		return
	}
	if len(a.running) >= a.cfg().MaxToolRuns {
		// Every slot is taken: the call waits its turn (runQueued), still "running" to the page.
		if !slices.Contains(a.queued, c.id) {
			a.queued = append(a.queued, c.id)
		}
		return
	}
	if c.tool == nil || c.tool.Executor() != tools.Server {
		a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: fault.Errorf(fault.KindUnknownTool, "there is no server tool named %q", c.name)}, "system", "")
		return
	}
	args, perr := a.precheck(c)
	if perr != nil {
		a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: perr}, "system", "")
		// The call is finished without running: the turn may be able to continue (an approval's
		// continuation calls runTool alone).
		a.advance()
		return
	}
	if c.attempts < 1 {
		c.attempts = 1
	}
	a.running[c.id] = nil // the slot is taken; release fills in the run's cancel
	a.ready.effect(effect{kind: effectToolRun, run: recordedCall{tool: c.tool, id: c.id, attempt: c.attempts, args: args, resumed: c.resumed}})
}

// startTool starts one attempt of a server call, as recorded, in its own goroutine, bounded by
// the tool's timeout on the manager's clock. Its result comes back through internal. Only
// release calls it: every tool run (a webhook, an http request, an MCP call, a Go adapter)
// starts here.
func (a *actor) startTool(rc recordedCall) {
	c := a.st.calls[rc.id]
	attempt, args := rc.attempt, rc.args
	ctx, cancel := context.WithCancel(a.m.base)
	ctx, span := a.observeTool(ctx, c, attempt)
	a.running[rc.id] = cancel
	a.inflight++
	t := rc.tool
	timeout := a.cfg().runTimeout(t)
	clk := a.cfg().Clock
	call := tools.Call{
		ConversationID: a.id, ToolCallID: rc.id, UserID: a.st.conv.OwnerID, Attempt: attempt, Logger: a.log.With("tool_call_id", rc.id),
		Resumed: rc.resumed,
		Progress: func(msg string) {
			select {
			case a.internal <- toolProgress{id: rc.id, text: msg}:
			case <-ctx.Done():
			}
		},
	}
	// A question to the owner (elicit.go) pauses the run timer: its own expiry bounds the wait,
	// and the run gets its whole timeout again once answered.
	pauses := make(chan bool)
	call.Ask = a.asker(rc.id, attempt, func(p bool) {
		select {
		case pauses <- p:
		case <-ctx.Done():
		}
	})
	// The timer is armed here, in the actor, so it is running before anyone hears of the call.
	timer := clk.NewTimer(timeout)
	go func() {
		timedOut := make(chan bool, 1)
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-timer.C():
					timedOut <- true
					cancel()
					return
				case p := <-pauses:
					if p {
						timer.Stop()
					} else {
						timer.Reset(timeout)
					}
				case <-stop:
					timer.Stop()
					timedOut <- false
					return
				}
			}
		}()
		began := clk.Now()
		out := t.Execute(ctx, call, args)
		close(stop)
		if <-timedOut && out.Status != tools.OK {
			e := fault.Errorf(fault.KindTimeout, "tool %s did not finish within %s", t.Name(), timeout)
			e.Retryable = true
			out = tools.Outcome{Status: tools.ToolError, Err: e}
		}
		metrics.ToolSeconds.WithLabelValues(t.Name(), string(out.Status)).Observe(clk.Now().Sub(began).Seconds())
		endTool(span, out)
		cancel()
		a.internal <- toolDone{id: rc.id, attempt: attempt, out: out}
	}()
}

// runQueued starts the calls that wait for a run slot, oldest first, while slots are free.
func (a *actor) runQueued() {
	for len(a.queued) > 0 && len(a.running) < a.cfg().MaxToolRuns && a.lc.mayStart() {
		id := a.queued[0]
		a.queued = a.queued[1:]
		if c := a.st.calls[id]; c != nil && !c.finished() && c.status == store.CallRunning && c.nextAttempt == nil {
			a.runTool(c)
		}
	}
}

// precheck validates a server call before an attempt of it is recorded or made: the arguments
// against the tool's schema, then the tool's own policy (Tool.Precheck; for an http.request tool
// the host policy and the expanded request). Either failure is the call's tool error.
func (a *actor) precheck(c *call) (map[string]any, *fault.Error) {
	args, verr := c.tool.ValidateArgs(c.effectiveArgs())
	if verr != nil {
		return nil, verr
	}
	if perr := c.tool.Precheck(a.m.base, args); perr != nil {
		return nil, perr
	}
	return args, nil
}

func (a *actor) onToolDone(m toolDone) {
	c := a.st.calls[m.id]
	if c == nil || c.finished() || c.status != store.CallRunning {
		return
	}
	if m.out.Retryable() && m.attempt < c.tool.MaxAttempts() {
		next := a.now().Add(a.m.backoff(m.attempt, m.out.Err.RetryAfter))
		metrics.Retries.WithLabelValues("tool").Inc()
		a.log.Warn("tool call failed; retrying", "tool_call_id", c.id, "tool", c.name, "attempt", m.attempt,
			"next_attempt_at", next, "kind", string(m.out.Err.Kind))
		key := "tool:" + c.id
		d := attemptData{Step: key, Attempt: m.attempt, Error: m.out.Err.Map(), NextAttemptAt: &next}
		a.stage(store.Batch{
			Entries: []store.Entry{{Type: store.EntryAttemptFailed, ToolCallID: c.id, Actor: "system", Data: mustJSON(d)}},
			Steps:   []store.Step{{ConversationID: a.id, Key: key, Attempts: m.attempt, NextAttemptAt: &next, LastError: m.out.Err.Message, UpdatedAt: a.now()}},
		}, []string{c.id})
		a.publishCall(c)
		return
	}
	a.finishCall(c, m.out, "system", "")
	a.advance()
}

// finishCall records a server call's final outcome.
func (a *actor) finishCall(c *call, out tools.Outcome, actor, decision string) {
	env := out.Envelope(a.cfg().maxBytes(c.tool))
	if c.runArgs != nil {
		env = withEditedArgs(env, c.runArgs, a.cfg().maxBytes(c.tool))
	}
	typ, status := store.EntryToolResult, store.CallResolved
	if out.Status != tools.OK {
		typ, status = store.EntryToolError, store.CallErrored
	}
	rd := resultData{Envelope: env, Status: status, Decision: decision, Attempt: c.attempts}
	attrs := []any{"tool_call_id", c.id, "tool", c.name, "status", status, "attempts", c.attempts}
	if out.Err != nil {
		attrs = append(attrs, "kind", string(out.Err.Kind))
	}
	a.log.Info("tool call finished", attrs...)
	b := store.Batch{Entries: []store.Entry{{Type: typ, ToolCallID: c.id, Actor: actor, Data: mustJSON(rd)}}}
	if c.attempts > 1 || c.nextAttempt != nil {
		b.DoneSteps = []string{"tool:" + c.id}
	}
	a.stage(b, []string{c.id})
	a.publishCall(c)
}

// maxBytes is the bound of a call's envelope: the tool's own when it set one, else the app's.
func (c *Config) maxBytes(t *tools.Tool) int {
	if t != nil && t.MaxOutputBytes() != tools.DefaultMaxOutputBytes {
		return t.MaxOutputBytes()
	}
	return c.MaxOutputBytes
}

// withEditedArgs adds the arguments that actually ran to a result envelope, so the model knows
// the approver changed what it asked for.
func withEditedArgs(env json.RawMessage, args json.RawMessage, max int) json.RawMessage {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(env, &m); err != nil {
		return env
	}
	m["edited_args"] = args
	m["note"] = mustJSON("an approver edited the arguments before the call ran; edited_args are the arguments that ran")
	b, err := json.Marshal(m)
	if err != nil {
		return env
	}
	return tools.BoundEnvelope(b, max)
}
