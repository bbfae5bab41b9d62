package agent

import (
	"sync"
	"sync/atomic"
)

// Events carries conversation events from the actors that publish them to the subscribers
// that follow them. The actor and the door (door.go) use only this interface: the in-process
// Hub below is the in-process implementation; package cluster wraps it to fan events out
// across processes through PostgreSQL.
type Events interface {
	// Publish delivers e to the subscribers of its conversation and to those of every
	// conversation. It never blocks: a subscriber that cannot keep up gets EventResync as its
	// last event and is closed.
	Publish(e Event)
	// Subscribe follows one conversation's events, or every conversation's when convID is "".
	Subscribe(convID string) *Subscription
	// Dropped counts subscribers closed for lagging.
	Dropped() int64
	// Close ends every subscription.
	Close()
}

var _ Events = (*Hub)(nil)

// Hub fans events out to subscribers of one conversation and to subscribers of every
// conversation. Publishing never blocks: each subscriber has a bounded buffer, and one that
// falls behind gets EventResync as its last event and is closed (it must reload and subscribe
// again). The hub's mutex guards only the subscriber sets and the sends, which never wait.
type Hub struct {
	buffer int

	mu     sync.Mutex
	byConv map[string]map[*sub]struct{} // guarded by mu
	global map[*sub]struct{}            // guarded by mu

	// dropped counts subscribers closed for lagging, for metrics and tests.
	dropped atomic.Int64
}

func NewHub(buffer int) *Hub {
	return &Hub{buffer: buffer, byConv: map[string]map[*sub]struct{}{}, global: map[*sub]struct{}{}}
}

// sub is one subscriber: its channel, delivered in publish order until it is closed.
type sub struct {
	c      chan Event
	size   int
	convID string
	closed bool // guarded by Hub.mu
}

// Subscribe implements Events with the hub's buffer size.
func (h *Hub) Subscribe(convID string) *Subscription { return h.subscribeSize(convID, h.buffer) }

// Dropped implements Events.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// subscribeSize subscribes with a buffer of n events.
func (h *Hub) subscribeSize(convID string, n int) *Subscription {
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
	return &Subscription{C: s.c, close: func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.removeLocked(s)
	}}
}

func (h *Hub) removeLocked(s *sub) {
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

// Publish delivers e to the conversation's subscribers and to the global ones.
func (h *Hub) Publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.byConv[e.ConversationID] {
		h.sendLocked(s, e)
	}
	for s := range h.global {
		h.sendLocked(s, e)
	}
}

func (h *Hub) sendLocked(s *sub, e Event) {
	if len(s.c) < s.size {
		s.c <- e // cannot block: only publishers (serialized by mu) fill the buffer
		return
	}
	s.c <- Event{ConversationID: e.ConversationID, Seq: e.Seq, Type: EventResync}
	h.dropped.Add(1)
	h.removeLocked(s)
}

// Resync sends EventResync to the subscribers of convID (of every conversation, and the
// global ones, when convID is "") and closes them: events they should have had were lost
// (another process could not deliver them), so they must reload and subscribe again.
func (h *Hub) Resync(convID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	resync := func(s *sub, conv string) {
		s.c <- Event{ConversationID: conv, Type: EventResync} // the extra slot always has room
		h.removeLocked(s)
	}
	if convID != "" {
		for s := range h.byConv[convID] {
			resync(s, convID)
		}
		return
	}
	for conv, set := range h.byConv {
		for s := range set {
			resync(s, conv)
		}
	}
	for s := range h.global {
		resync(s, "")
	}
}

// Close closes every subscription (the manager is shutting down).
func (h *Hub) Close() {
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
