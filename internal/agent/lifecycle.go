package agent

import (
	"errors"

	"parley/internal/store"
)

// This file is the actor's lifecycle: one value (phase and reason) changed by one transition,
// and what each phase allows. docs/architecture.md draws it.
//
//	running ──quit──────────────▶ draining(graceful) ──inflight = 0──▶ stopped
//	running ──hard / evicted / write refused / conflict / deleted──▶ draining(…) ──inflight = 0──▶ stopped
//	running ──idle────────────────────────────────────────────────────▶ stopped(hibernated)
//	(start) ──load failed─────────────────────────────────────────────▶ stopped(load failed)
//	draining(conflict) ──nothing in flight, the log reloaded──▶ running   (the one way back)
//
// What each phase allows:
//
//	phase     take requests  start work  record results           close done
//	running   yes            yes         yes                      no
//	draining  no             no          graceful only (see below) at the end of the loop step that entered it
//	stopped   no             no          no                       yes
//
// A graceful drain lets the tools that run finish and records their results (and a complete
// answer of the model), so nothing paid for is lost; every other reason discards what in-flight
// work reports: the log is the truth, and the next owner of the conversation re-dispatches it.
// Done closes after the reply of the request in hand: a caller that sees done without a reply
// takes it as "not taken" and tries again.

// phase is where an actor is in its life.
type phase int

const (
	phaseRunning  phase = iota // takes requests and starts work
	phaseDraining              // takes no request, starts nothing; waits for its in-flight work
	phaseStopped               // its goroutine ends (or has ended)
)

func (p phase) String() string {
	return [...]string{"running", "draining", "stopped"}[p]
}

// stopReason is why an actor drains or stopped.
type stopReason int

const (
	reasonNone         stopReason = iota
	reasonGraceful                // the process shuts down (Manager.Close)
	reasonHard                    // the process's context ended: everything is cancelled
	reasonEvicted                 // another process owns the conversation now (fence, or a fenced append)
	reasonWriteRefused            // an append failed: revived from the log later
	reasonConflict                // an append lost the optimistic-concurrency race (another writer)
	reasonDeleted                 // the owner deleted the conversation
	reasonHibernated              // idle: it leaves memory; the next request revives it
	reasonLoadFailed              // the conversation could not be loaded
)

func (r stopReason) String() string {
	return [...]string{"", "graceful", "hard", "evicted", "write refused", "conflict", "deleted", "hibernated", "load failed"}[r]
}

// lifecycle is the actor's phase and why it left running. Only the actor's goroutine changes
// it, through transition.
type lifecycle struct {
	phase  phase
	reason stopReason
}

// takesRequests reports whether a caller's request is handled (else: errClosed, try again).
func (l lifecycle) takesRequests() bool { return l.phase == phaseRunning }

// mayStart reports whether new work may start: a model call, a tool run, a dry run, a queued
// message's turn.
func (l lifecycle) mayStart() bool { return l.phase == phaseRunning }

// recordsResults reports whether what in-flight work reports is recorded: always while running,
// and in a graceful drain (tools finish, a complete answer is kept); every other drain drops it.
func (l lifecycle) recordsResults() bool {
	return l.phase == phaseRunning || (l.phase == phaseDraining && l.reason == reasonGraceful)
}

// revives reports whether the conversation is brought back from its log after this actor stops
// (its last write failed; the failure was noted for the next actor).
func (l lifecycle) revives() bool {
	return l.reason == reasonWriteRefused || l.reason == reasonConflict
}

// transition moves the actor to phase to for why. It is the only place the lifecycle changes:
// entering draining stops what must stop (halt); the loop closes done after the step's reply.
// A later, harsher reason wins over a graceful one (a hard stop during a graceful drain
// discards what the drain would have kept); a drain never becomes running again, except a
// conflict with nothing in flight, whose state was just reloaded from the log.
func (a *actor) transition(to phase, why stopReason) {
	from := a.lc
	switch {
	case from.phase == phaseStopped:
		return
	case to == phaseRunning:
		if from.phase != phaseDraining || from.reason != reasonConflict || a.inflight > 0 {
			return
		}
		a.lc = lifecycle{}
		return
	case to == phaseDraining && from.phase == phaseDraining:
		if from.reason != reasonGraceful || why == reasonGraceful {
			return
		}
	}
	a.lc = lifecycle{phase: to, reason: why}
	if to == phaseDraining {
		a.halt()
	}
	if to == phaseStopped {
		a.closeDone()
	}
}

// failLoad answers the callers of an actor whose conversation could not be loaded.
func (a *actor) failLoad(err error) {
	if errors.Is(err, store.ErrNotFound) {
		a.loadErr = errNotFound()
	} else {
		a.loadErr = a.internalError("load conversation", err)
	}
	a.transition(phaseStopped, reasonLoadFailed)
}

// closeDone takes the actor out of the registry and closes done (once), so callers go elsewhere.
func (a *actor) closeDone() {
	select {
	case <-a.done:
		return
	default:
	}
	a.m.forget(a)
	close(a.done)
}

// halt cancels what runs as the actor starts to drain. The LLM stream is cancelled (its partial
// answer is discarded and the step retried on revival); a run waiting for its question's answer
// is given up (askAbandon), since it would hold the drain until the answer or the question's
// expiry. A graceful drain lets running tools and dry runs finish and record their results; any
// other cancels them too and drops what they report: tools are re-dispatched with the same
// tool_call_id on revival, and an answer that waited for its dry runs is asked for again.
func (a *actor) halt() {
	if a.llmCancel != nil {
		a.llmCancel()
	}
	a.askAbandon()
	if !a.lc.recordsResults() {
		for _, cancel := range a.running {
			if cancel != nil {
				cancel()
			}
		}
		if a.drafting != nil {
			a.drafting.cancel()
		}
	}
}

// hibernate leaves memory when no request is queued. Callers that raced with it see done and
// retry on a fresh actor, which rebuilds the same state from the log.
func (a *actor) hibernate() bool {
	if len(a.mailbox) > 0 || len(a.internal) > 0 || len(a.clientsChanged) > 0 {
		return false
	}
	a.settle()
	// Counted before the actor leaves the registry: whoever sees it gone sees it counted.
	a.m.hibernations.Add(1)
	a.transition(phaseStopped, reasonHibernated)
	return true
}
