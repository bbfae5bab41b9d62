package agent

import (
	"context"
	"errors"

	"parley/internal/store"
	"parley/internal/tools"
)

// This file is what a process (without a cluster) revives when it starts. A conversation whose
// turn was interrupted (generating, dispatching) is revived at once, so it continues. One that
// only waits for a person (an approval, a form) needs no actor until someone asks: its timer is
// a durable expiry the poller fires from the store, and a request, a socket or that expiry
// revives it on demand. So start-up reads two lists (the active conversations and the awaiting
// calls), not every conversation's log, and holds no actor for the waiting ones.

// reviveAtStart revives every active conversation except those only awaiting a person's answer,
// and records the awaiting calls of those it leaves in the store (the pending gauge counts them
// as it would after a hibernation).
func (m *Manager) reviveAtStart(ctx context.Context) error {
	active, err := m.cfg.Store.ListActive(ctx)
	if err != nil {
		return errors.Join(errors.New("agent: list active conversations"), err)
	}
	var waiting map[string]pendingByKind
	var needsActor map[string]bool
	for _, c := range active {
		if c.Status == store.StatusAwaiting {
			if waiting, needsActor, err = m.awaitingCalls(ctx); err != nil {
				return err
			}
			break
		}
	}
	for _, c := range active {
		p, ok := waiting[c.ID]
		if ok {
			m.setPending(c.ID, p) // a revived actor reports its own count when it has loaded
		}
		if ok && c.Status == store.StatusAwaiting && !needsActor[c.ID] {
			continue
		}
		if _, err := m.ensureStarted(c.ID); err != nil {
			return err
		}
	}
	return nil
}

// awaitingCalls counts the awaiting calls of every conversation by kind, and says which
// conversations need their actor even so: a client call (its no-client grace is a timer in
// memory, started when the actor sees no socket) and a running server call's question (the
// call's goroutine is gone with the process that asked; the actor fails that attempt).
func (m *Manager) awaitingCalls(ctx context.Context) (map[string]pendingByKind, map[string]bool, error) {
	calls, err := m.cfg.Store.ListPending(ctx, store.PendingFilter{})
	if err != nil {
		return nil, nil, errors.Join(errors.New("agent: list awaiting calls"), err)
	}
	waiting := map[string]pendingByKind{}
	needsActor := map[string]bool{}
	for _, c := range calls {
		kind := tools.PendingKind(c.PendingKind)
		if kind == tools.PendingClientExec || (kind == tools.PendingElicitation && c.Executor == string(tools.Server)) {
			needsActor[c.ConversationID] = true
		}
		p := waiting[c.ConversationID]
		if !p.add(kind) {
			needsActor[c.ConversationID] = true // a kind this build does not know: let the actor judge
		}
		waiting[c.ConversationID] = p
	}
	return waiting, needsActor, nil
}

// pendingByKind counts a conversation's awaiting calls by kind: three counters rather than a
// map, since the manager keeps one for every conversation that waits, hibernated ones included.
type pendingByKind [3]int32

// pendingKinds are the kinds pendingByKind counts, in its order.
var pendingKinds = [3]tools.PendingKind{tools.PendingApproval, tools.PendingElicitation, tools.PendingClientExec}

// add counts one call of kind; it reports false for a kind it does not count.
func (p *pendingByKind) add(kind tools.PendingKind) bool {
	for i, k := range pendingKinds {
		if k == kind {
			p[i]++
			return true
		}
	}
	return false
}

// addTo adds the counts to byKind, by kind name.
func (p pendingByKind) addTo(byKind map[string]int) {
	for i, n := range p {
		if n > 0 {
			byKind[string(pendingKinds[i])] += int(n)
		}
	}
}
