package web

import (
	"sync"
	"sync/atomic"

	"parley/internal/agent"
)

// testHub carries the agent's events (agent.Config.Events) like the agent's own hub — in
// publish order, never blocking, a subscriber that falls behind its buffer gets EventResync and
// is closed — and lets a test control what a real agent cannot make happen on cue: hold a
// conversation's events and release them later (a subscriber that joins in between), drop them
// (a commit whose events never arrive), or make its subscribers lag. The events themselves are
// the agent's, from real turns.
type testHub struct {
	buffer int

	// mu guards every field below but dropped.
	mu         sync.Mutex
	subs       map[string][]*hubSub              // by conversation; "" follows every conversation
	subscribes map[string]int                    // Subscribe calls by conversation
	holding    map[string]bool                   // conversations whose events wait in held
	held       map[string][]agent.Event          // the events held, by conversation
	dropping   map[string]func(agent.Event) bool // conversations whose events are lost, when they match
	closed     bool
	dropped    atomic.Int64
}

var _ agent.Events = (*testHub)(nil)

type hubSub struct {
	c      chan agent.Event
	closed bool
}

func newTestHub(buffer int) *testHub {
	if buffer <= 0 {
		buffer = 256
	}
	return &testHub{buffer: buffer, subs: map[string][]*hubSub{}, subscribes: map[string]int{},
		holding: map[string]bool{}, held: map[string][]agent.Event{}, dropping: map[string]func(agent.Event) bool{}}
}

// Subscribe implements agent.Events.
func (h *testHub) Subscribe(convID string) *agent.Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &hubSub{c: make(chan agent.Event, h.buffer+1)} // a slot for the resync notice
	if h.closed {
		s.closed = true
		close(s.c)
	} else {
		h.subs[convID] = append(h.subs[convID], s)
	}
	h.subscribes[convID]++
	return agent.NewSubscription(s.c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if s.closed {
			return
		}
		s.closed = true
		close(s.c)
		list := h.subs[convID]
		for i, x := range list {
			if x == s {
				h.subs[convID] = append(list[:i:i], list[i+1:]...)
				break
			}
		}
	})
}

// Publish implements agent.Events.
func (h *testHub) Publish(e agent.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch lost := h.dropping[e.ConversationID]; {
	case lost != nil && lost(e):
	case h.holding[e.ConversationID]:
		h.held[e.ConversationID] = append(h.held[e.ConversationID], e)
	default:
		h.deliverLocked(e)
	}
}

func (h *testHub) deliverLocked(e agent.Event) {
	for _, key := range []string{e.ConversationID, ""} {
		for _, s := range h.subs[key] {
			if s.closed {
				continue
			}
			if len(s.c) < h.buffer {
				s.c <- e
				continue
			}
			s.c <- agent.Event{ConversationID: e.ConversationID, Seq: e.Seq, Type: agent.EventResync}
			h.dropped.Add(1)
			s.closed = true
			close(s.c)
		}
	}
}

// Dropped implements agent.Events.
func (h *testHub) Dropped() int64 { return h.dropped.Load() }

// Close implements agent.Events.
func (h *testHub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, list := range h.subs {
		for _, s := range list {
			if !s.closed {
				s.closed = true
				close(s.c)
			}
		}
	}
	h.subs = map[string][]*hubSub{}
}

// hold keeps conv's events from now on until release.
func (h *testHub) hold(conv string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holding[conv] = true
}

// release delivers the events held for conv, in order, and stops holding them.
func (h *testHub) release(conv string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.held[conv] {
		h.deliverLocked(e)
	}
	delete(h.held, conv)
	delete(h.holding, conv)
}

// drop loses conv's events (none reaches a subscriber) until deliver.
func (h *testHub) drop(conv string) { h.dropIf(conv, func(agent.Event) bool { return true }) }

// dropIf loses conv's events that match lost until deliver.
func (h *testHub) dropIf(conv string, lost func(agent.Event) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropping[conv] = lost
}

// deliver ends drop.
func (h *testHub) deliver(conv string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.dropping, conv)
}

// lag drops conv's subscribers as the agent's hub drops laggards: each gets EventResync as its
// last event and its channel closes. It returns how many there were.
func (h *testHub) lag(conv string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.subs[conv] {
		if s.closed {
			continue
		}
		s.c <- agent.Event{ConversationID: conv, Type: agent.EventResync}
		s.closed = true
		close(s.c)
		n++
	}
	h.subs[conv] = nil
	h.dropped.Add(int64(n))
	return n
}

// subscriptions counts the subscriptions taken on conv ("" for every conversation's).
func (h *testHub) subscriptions(conv string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.subscribes[conv]
}
