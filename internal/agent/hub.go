package agent

import (
	"sync"
	"sync/atomic"
)

// hub fans events out to subscribers of one conversation and to subscribers of every
// conversation. Publishing never blocks: each subscriber has a bounded buffer, and one that
// falls behind gets EventResync as its last event and is closed (it must reload and subscribe
// again). The hub's mutex guards only the subscriber sets and the sends, which never wait.
type hub struct {
	buffer int

	mu     sync.Mutex
	byConv map[string]map[*sub]struct{} // guarded by mu
	global map[*sub]struct{}            // guarded by mu

	// dropped counts subscribers closed for lagging, for metrics and tests.
	dropped atomic.Int64
}

func newHub(buffer int) *hub {
	return &hub{buffer: buffer, byConv: map[string]map[*sub]struct{}{}, global: map[*sub]struct{}{}}
}

// sub is one subscriber: its channel, delivered in publish order until it is closed.
type sub struct {
	c      chan Event
	size   int
	convID string
	closed bool // guarded by hub.mu
}

func (h *hub) subscribe(convID string) *Subscription { return h.subscribeSize(convID, h.buffer) }

// subscribeSize subscribes with a buffer of n events.
func (h *hub) subscribeSize(convID string, n int) *Subscription {
	// One extra slot so the resync notice always fits after the buffer filled up.
	s := &sub{c: make(chan Event, n+1), size: n, convID: convID}
	h.mu.Lock()
	defer h.mu.Unlock()
	if convID == "" {
		h.global[s] = struct{}{}
	} else {
		set := h.byConv[convID]
		if set == nil {
			set = map[*sub]struct{}{}
			h.byConv[convID] = set
		}
		set[s] = struct{}{}
	}
	return NewSubscription(s.c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.removeLocked(s)
	})
}

func (h *hub) removeLocked(s *sub) {
	if s.closed {
		return
	}
	s.closed = true
	close(s.c)
	if s.convID == "" {
		delete(h.global, s)
		return
	}
	if set := h.byConv[s.convID]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(h.byConv, s.convID)
		}
	}
}

// publish delivers e to the conversation's subscribers and to the global ones.
func (h *hub) publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.byConv[e.ConversationID] {
		h.sendLocked(s, e)
	}
	for s := range h.global {
		h.sendLocked(s, e)
	}
}

func (h *hub) sendLocked(s *sub, e Event) {
	if len(s.c) < s.size {
		s.c <- e // cannot block: only publishers (serialized by mu) fill the buffer
		return
	}
	s.c <- Event{ConversationID: e.ConversationID, Seq: e.Seq, Type: EventResync}
	h.dropped.Add(1)
	h.removeLocked(s)
}

// closeAll closes every subscription (the manager is shutting down).
func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.byConv {
		for s := range set {
			h.removeLocked(s)
		}
	}
	for s := range h.global {
		h.removeLocked(s)
	}
}
