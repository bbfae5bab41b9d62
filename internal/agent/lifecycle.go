package agent

import (
	"errors"

	"parley/internal/store"
)

// This file is how an actor stops: a failed load, a graceful or hard stop, and hibernation.

// failLoad answers the callers of an actor whose conversation could not be loaded.
func (a *actor) failLoad(err error) {
	if errors.Is(err, store.ErrNotFound) {
		a.loadErr = errNotFound()
	} else {
		a.loadErr = a.internalError("load conversation", err)
	}
	a.closeDone()
}

// closeDone takes the actor out of the registry and closes done, so callers go elsewhere.
func (a *actor) closeDone() {
	if a.doneClosed {
		return
	}
	a.m.forget(a)
	close(a.done)
	a.doneClosed = true
}

// beginStop stops taking requests. A graceful stop cancels the LLM stream (its partial answer is
// discarded and the step retried on revival) and lets running tools finish and record their
// results (and dry runs finish, so a complete answer is recorded); a hard stop cancels them too
// and drops whatever they report: tools are re-dispatched with the same tool_call_id on revival,
// and an answer that waited for its dry runs is asked for again.
func (a *actor) beginStop(hard bool) {
	a.closeDone()
	a.halt(hard)
}

// halt starts nothing more and cancels what runs (hard: tools and dry runs too, their reports
// dropped), without closing done: commit calls it when a write was refused, and the request in
// hand is answered before the loop stops the actor (its caller reads "done and no reply" as
// "not taken", and would try again).
func (a *actor) halt(hard bool) {
	a.stopping = true
	if a.llmCancel != nil {
		a.llmCancel()
	}
	// A run waiting for its question's answer would hold the stop until the answer or the
	// question's expiry: it is given up like a hard stop's (askAbandon).
	a.askAbandon()
	if hard {
		a.discard = true
		for _, cancel := range a.running {
			cancel()
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
	a.closeDone()
	return true
}
