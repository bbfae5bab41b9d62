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
//
// The channel holds at most directSlots events; a subscriber that falls further behind keeps the
// rest in backlog (at most size events in all: past that it is dropped with EventResync, as
// before), and a drainer goroutine, started only while there is a backlog, feeds them into the
// channel in order. Most subscribers (every open page has one) never lag, so each costs a small
// channel rather than a buffer of size events allocated up front (an Event is ~140 bytes).
type sub struct {
	h      *Hub
	c      chan Event
	size   int
	convID string
	// Guarded by Hub.mu:
	closed   bool    // takes no more events; c is closed once the backlog is delivered
	backlog  []Event // events waiting for room in c, oldest first
	draining bool    // a drainer owns the backlog's delivery and closing c
	inHand   int     // 1 while the drainer holds an event from the backlog, waiting for room in c
	stop     chan struct{}
	stopped  bool // the subscriber left (Subscription.Close): the drainer drops the backlog
}

// directSlots is the room of a subscriber's channel; the backlog takes the rest.
const directSlots = 8

// Subscribe implements Events with the hub's buffer size.
func (h *Hub) Subscribe(convID string) *Subscription { return h.subscribeSize(convID, h.buffer) }

// Dropped implements Events.
func (h *Hub) Dropped() int64 { return h.dropped.Load() }

// subscribeSize subscribes with a buffer of n events.
func (h *Hub) subscribeSize(convID string, n int) *Subscription {
	s := &sub{h: h, c: make(chan Event, min(n, directSlots)+1), size: n, convID: convID}
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
		s.stopped = true
		h.removeLocked(s)
		if s.draining && s.stop != nil {
			close(s.stop)
			s.stop = nil
		}
	}}
}

// removeLocked takes s out of the hub: it gets no more events, and its channel is closed after
// what it was already given (at once when nothing waits in a backlog).
func (h *Hub) removeLocked(s *sub) {
	if s.closed {
		return
	}
	s.closed = true
	if !s.draining {
		close(s.c)
	}
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

// Follows reports whether an event of any of convIDs would reach a subscriber now: one of
// those conversations' or one of every conversation's.
func (h *Hub) Follows(convIDs []string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.global) > 0 {
		return true
	}
	for _, c := range convIDs {
		if len(h.byConv[c]) > 0 {
			return true
		}
	}
	return false
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
	if len(s.c)+len(s.backlog)+s.inHand < s.size {
		h.putLocked(s, e)
		return
	}
	h.putLocked(s, Event{ConversationID: e.ConversationID, Seq: e.Seq, Type: EventResync})
	h.dropped.Add(1)
	h.removeLocked(s)
}

// putLocked queues e for s in order: into the channel when it has room and nothing waits before
// it, else into the backlog, starting its drainer.
func (h *Hub) putLocked(s *sub, e Event) {
	if !s.draining && len(s.c) < cap(s.c) {
		s.c <- e // cannot block: only publishers (serialized by mu) fill the channel
		return
	}
	s.backlog = append(s.backlog, e)
	if !s.draining {
		s.draining = true
		s.stop = make(chan struct{})
		go h.drain(s, s.stop)
	}
}

// drain feeds s's backlog into its channel until it is empty (then it ends: a later lag starts
// another), or until the subscriber leaves. It closes the channel when s was removed meanwhile.
// Its owner is the subscription: Subscription.Close stops it.
func (h *Hub) drain(s *sub, stop chan struct{}) {
	for {
		h.mu.Lock()
		s.inHand = 0
		if s.stopped || len(s.backlog) == 0 {
			s.draining = false
			s.backlog = nil
			if s.closed {
				close(s.c)
			}
			h.mu.Unlock()
			return
		}
		e := s.backlog[0]
		s.backlog[0] = Event{}
		s.backlog = s.backlog[1:]
		s.inHand = 1 // still counted against the bound until it is in c
		h.mu.Unlock()
		select {
		case s.c <- e:
		case <-stop:
		}
	}
}

// Resync sends EventResync to the subscribers of convID and to the global ones (to every
// subscriber when convID is "") and closes them: events they should have had were lost
// (another process could not deliver them), so they must reload and subscribe again. A global
// subscriber follows every conversation, so it lost them too.
func (h *Hub) Resync(convID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	resync := func(s *sub, conv string) {
		h.putLocked(s, Event{ConversationID: conv, Type: EventResync}) // the channel's extra slot or the backlog
		h.removeLocked(s)
	}
	if convID != "" {
		for s := range h.byConv[convID] {
			resync(s, convID)
		}
		for s := range h.global {
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

// Close closes every subscription (the manager is shutting down). A subscriber that lagged past
// its channel's room loses the backlog beyond it: no drainer outlives the hub.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := func(s *sub) {
		h.removeLocked(s)
		if s.draining && s.stop != nil {
			s.stopped = true
			close(s.stop)
			s.stop = nil
		}
	}
	for _, set := range h.byConv {
		for s := range set {
			end(s)
		}
	}
	for s := range h.global {
		end(s)
	}
}
