package agent

import (
	"time"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file is when the actor wakes up: retries that came due, the no-client grace of client
// calls (which the socket count starts and stops), and hibernation when nothing is under way.

// --- clients --------------------------------------------------------------------------------

// checkClient starts the no-client grace of an awaiting client call when no socket is attached.
func (a *actor) checkClient(c *call) {
	if a.m.clientCount(a.id) > 0 {
		delete(a.graceAt, c.id)
		return
	}
	if _, ok := a.graceAt[c.id]; !ok {
		a.graceAt[c.id] = a.now().Add(a.cfg().ClientGrace)
	}
}

func (a *actor) onClientsChanged() {
	if !a.lc.mayStart() || !a.st.turnOpen {
		return
	}
	for _, c := range a.st.currentCalls() {
		if c.status == store.CallAwaiting && c.kind == tools.PendingClientExec {
			a.checkClient(c)
		}
	}
}

// --- timers ---------------------------------------------------------------------------------

// quiescent reports whether nothing is under way that only this actor would pick up again:
// then it may hibernate, and the next request or a durable expiry revives it.
func (a *actor) quiescent() bool {
	if a.inflight > 0 || a.llmBusy || len(a.graceAt) > 0 || a.st.llmNext != nil {
		return false
	}
	if a.st.status != store.StatusIdle && a.st.status != store.StatusAwaiting {
		return false
	}
	for _, c := range a.st.currentCalls() {
		if c.nextAttempt != nil {
			return false
		}
	}
	return true
}

// nextWake is the earliest time something is due: a retry, a client grace, hibernation.
func (a *actor) nextWake() time.Time {
	var at time.Time
	consider := func(t time.Time) {
		if at.IsZero() || t.Before(at) {
			at = t
		}
	}
	if !a.lc.mayStart() {
		return at
	}
	if a.st.turnOpen && !a.llmBusy && a.st.llmNext != nil {
		consider(*a.st.llmNext)
	}
	if a.st.turnOpen {
		for _, c := range a.st.currentCalls() {
			if c.nextAttempt != nil && c.status == store.CallRunning {
				consider(*c.nextAttempt)
			}
		}
	}
	for _, t := range a.graceAt {
		consider(t)
	}
	if a.quiescent() {
		consider(a.lastActive.Add(a.cfg().IdleTimeout))
	}
	return at
}

func (a *actor) rearm() {
	if a.wake == nil {
		return
	}
	at := a.nextWake()
	if at.Equal(a.wakeAt) {
		return
	}
	a.wakeAt = at
	if at.IsZero() {
		a.wake.Stop()
		return
	}
	d := at.Sub(a.now())
	if d < 0 {
		d = 0
	}
	a.wake.Reset(d)
}

// onWake runs what came due: model calls and tool runs to try again, client graces that ran out.
func (a *actor) onWake() {
	if !a.lc.mayStart() {
		return
	}
	now := a.now()
	st := a.st
	if st.turnOpen && !a.llmBusy && st.llmNext != nil && !st.llmNext.After(now) {
		d := attemptData{Step: st.llmStep(), Attempt: st.llmFailed + 1}
		a.stage(store.Batch{
			Entries: []store.Entry{{Type: store.EntryAttemptStarted, Actor: "system", Data: mustJSON(d)}},
			Steps:   []store.Step{{ConversationID: a.id, Key: d.Step, Attempts: st.llmFailed, UpdatedAt: now}},
		}, nil)
		a.advance()
	}
	if st.turnOpen {
		for _, c := range st.currentCalls() {
			if c.status != store.CallRunning || c.nextAttempt == nil || c.nextAttempt.After(now) {
				continue
			}
			if c.tool != nil && c.tool.Executor() == tools.Server {
				if _, perr := a.precheck(c); perr != nil {
					// Refused before the retry is recorded: no attempt, the call ends with the error.
					a.finishCall(c, tools.Outcome{Status: tools.ToolError, Err: perr}, "system", "")
					a.advance()
					continue
				}
			}
			d := attemptData{Step: "tool:" + c.id, Attempt: c.attempts + 1}
			a.stage(store.Batch{
				Entries: []store.Entry{{Type: store.EntryAttemptStarted, ToolCallID: c.id, Actor: "system", Data: mustJSON(d)}},
				Steps:   []store.Step{{ConversationID: a.id, Key: d.Step, Attempts: c.attempts, UpdatedAt: now}},
			}, []string{c.id})
			a.publishCall(c)
			a.runTool(c)
		}
	}
	for id, at := range a.graceAt {
		if at.After(now) {
			continue
		}
		delete(a.graceAt, id)
		c := st.calls[id]
		if c == nil || c.status != store.CallAwaiting || c.kind != tools.PendingClientExec {
			continue
		}
		if a.m.clientCount(a.id) > 0 {
			continue
		}
		a.resolveNoClient(c)
	}
}

// sleepy reports whether the actor has been idle long enough to hibernate.
func (a *actor) sleepy() bool {
	return a.lc.mayStart() && a.quiescent() && !a.lastActive.Add(a.cfg().IdleTimeout).After(a.now())
}
