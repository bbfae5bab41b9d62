package web

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"parley/internal/agent"
)

// The inbox feed: one goroutine computes the pending approvals once per change and fans the
// result out to every inbox socket of this process, which filters it for its viewer
// (agent.InboxOf) and renders. Without it every socket queried the store on every event: N
// reviewers watching the inbox cost N queries per call started or decided.

const (
	// inboxFeedGap is how long the feed gathers changes before it computes: the first change
	// after a quiet spell arms it, every change until it ends is in the one computation. At
	// most ~7 inbox queries a second, however busy the conversations; an inbox is at most this
	// much later than the change.
	inboxFeedGap = 150 * time.Millisecond
	// inboxFeedRetry is how long the feed waits before trying again after a failed computation
	// (the store did not answer) or subscription.
	inboxFeedRetry = time.Second
)

// InboxRecomputes counts the inbox feed's computations of the pending approvals.
var InboxRecomputes atomic.Int64

// inboxSnapshot is every pending approval (newest first) with the names of their owners, as
// computed once for every socket. It is shared: readers never change it.
type inboxSnapshot struct {
	list   []agent.PendingApproval
	claims []agent.Claim     // live when computed, soonest to expire first
	names  map[string]string // owner and claimer id → name
}

// inboxSub is one socket's place in the feed. Its channel holds one snapshot: overflow policy
// "keep only the latest" — a socket that has not taken the previous snapshot when a newer one
// comes gets the newer one instead (an inbox is a whole list: an older one is worthless once a
// newer exists), so the feed never blocks and a slow socket never falls behind by more than one.
type inboxSub struct {
	c chan *inboxSnapshot
}

// inboxFeed is owned by its run goroutine, started by the first socket that joins and stopped
// by Server.Shutdown (close), which waits for it.
type inboxFeed struct {
	s   *Server
	gap time.Duration

	ctx    context.Context // ends when the feed is closed
	cancel context.CancelFunc
	wake   chan struct{} // a socket joined: compute if there is nothing fresh to give it
	done   chan struct{} // closed when run returns

	// recomputed, when set (tests), is called with each computation.
	recomputed func()
	// following is whether the feed follows the conversations' events now (tests).
	following atomic.Bool

	mu      sync.Mutex
	subs    map[*inboxSub]struct{} // guarded by mu
	latest  *inboxSnapshot         // guarded by mu; nil until the first computation
	stale   bool                   // guarded by mu: a change came after latest was computed
	running bool                   // guarded by mu
	closed  bool                   // guarded by mu
}

func newInboxFeed(s *Server, gap time.Duration) *inboxFeed {
	ctx, cancel := context.WithCancel(context.Background())
	return &inboxFeed{s: s, gap: gap, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		done: make(chan struct{}), subs: map[*inboxSub]struct{}{}}
}

// join adds a socket to the feed (starting it if need be) and returns its place and how to
// leave. The socket gets the latest snapshot at once when it is fresh, else the next one.
func (f *inboxFeed) join() (*inboxSub, func()) {
	sub := &inboxSub{c: make(chan *inboxSnapshot, 1)}
	f.mu.Lock()
	if !f.running && !f.closed {
		f.running = true
		go f.run()
	}
	f.subs[sub] = struct{}{}
	if f.latest != nil && !f.stale {
		sub.c <- f.latest
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return sub, func() {
		f.mu.Lock()
		delete(f.subs, sub)
		f.mu.Unlock()
		select { // the last to leave stops the feed following the conversations
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// close stops the feed and waits for its goroutine. Calling it twice is harmless.
func (f *inboxFeed) close() {
	f.mu.Lock()
	f.closed = true
	running := f.running
	f.mu.Unlock()
	f.cancel()
	if running {
		<-f.done
	}
}

// listeners reports whether any socket follows the feed: without one, a change is only noted.
func (f *inboxFeed) listeners() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs) > 0
}

// run follows every conversation's events as the system while any socket listens, and
// recomputes the inbox once per gap when an event may have changed it: the first relevant event
// arms a timer of gap, events until it fires are gathered, and it fires one computation. While
// no socket listens it follows nothing (its process then need not decode the other processes'
// events for it); the next socket to join gets a fresh computation.
func (f *inboxFeed) run() {
	defer close(f.done)
	ctx := f.ctx
	var sub *agent.Subscription
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	var events <-chan agent.Event
	dirty := true                    // the inbox may differ from the latest snapshot
	var wait <-chan time.Time        // armed while a computation (or its retry) waits
	var resubscribe <-chan time.Time // armed after a subscription failed
	// lapse fires when the soonest claim of the latest snapshot expires: a claim ends by time
	// alone, with no event, so the feed computes again then.
	var lapse <-chan time.Time
	// unfollow ends the subscription; the latest snapshot may be out of date from then on.
	unfollow := func() {
		sub.Close()
		sub, events = nil, nil
		f.markStale()
	}
	for {
		listening := f.listeners()
		if sub != nil && !listening {
			unfollow()
		}
		if sub == nil && resubscribe == nil && listening {
			s, err := f.s.agent.Subscribe(ctx, "", agent.System)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				f.s.log.Warn("inbox feed: follow the conversations", "err", err)
				resubscribe = f.s.clock.After(inboxFeedRetry)
			} else {
				sub, events, dirty = s, s.C, true
				f.markStale()
			}
		}
		f.following.Store(sub != nil)
		if dirty && wait == nil && sub != nil && listening {
			wait = f.s.clock.After(f.gap)
		}
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		case <-resubscribe:
			resubscribe = nil
		case <-lapse:
			lapse = nil
			dirty = true
			f.markStale()
		case <-wait:
			wait = nil
			if sub == nil {
				continue
			}
			// What came while the timer ran is in this computation.
			for drained := false; !drained; {
				select {
				case ev, ok := <-events:
					if !ok {
						unfollow()
						drained = true
					} else if inboxRelevant(ev.Type) {
						dirty = true
					}
				default:
					drained = true
				}
			}
			if sub == nil || !dirty || !f.listeners() {
				continue
			}
			snap, err := f.compute(ctx)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				f.s.log.Warn("inbox feed: compute the pending approvals", "err", err)
				wait = f.s.clock.After(inboxFeedRetry)
			default:
				dirty = false
				// Armed before the snapshot goes out, so its lapse is measured from no later
				// than when anyone could see the claim.
				lapse = nil
				if len(snap.claims) > 0 {
					lapse = f.s.clock.After(max(snap.claims[0].Left, 0) + time.Millisecond)
				}
				f.publish(snap)
			}
		case ev, ok := <-events:
			switch {
			case !ok:
				// Lagged (or the agent's events restarted): follow again and recompute.
				unfollow()
			case inboxRelevant(ev.Type):
				dirty = true
				f.markStale()
			}
		}
	}
}

// markStale says the latest snapshot may be out of date: a socket joining now waits for the
// next one.
func (f *inboxFeed) markStale() {
	f.mu.Lock()
	f.stale = true
	f.mu.Unlock()
}

// compute reads every pending approval and every live claim of one once (as the system), and
// the names of their owners and claimers (kept from the previous snapshot: names do not change).
func (f *inboxFeed) compute(ctx context.Context) (*inboxSnapshot, error) {
	InboxRecomputes.Add(1)
	if f.recomputed != nil {
		f.recomputed()
	}
	list, err := f.s.agent.PendingApprovals(ctx, agent.System)
	if err != nil {
		return nil, err
	}
	claims, err := f.s.agent.Claims(ctx, agent.System)
	if err != nil {
		return nil, err
	}
	claims = agent.ClaimsIn(list, claims)
	f.mu.Lock()
	var known map[string]string
	if f.latest != nil {
		known = f.latest.names
	}
	f.mu.Unlock()
	names, err := f.s.inboxNames(ctx, list, claims, known)
	if err != nil {
		return nil, err
	}
	return &inboxSnapshot{list: list, claims: claims, names: names}, nil
}

// publish makes snap the latest and offers it to every socket, replacing one it has not taken
// yet (the overflow policy of inboxSub). Sends happen under mu only, so the slot a drain frees
// is still free for the send.
func (f *inboxFeed) publish(snap *inboxSnapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latest, f.stale = snap, false
	for sub := range f.subs {
		select {
		case <-sub.c:
		default:
		}
		sub.c <- snap
	}
}

// inboxRelevant reports whether an event may change someone's pending approvals.
func inboxRelevant(t agent.EventType) bool {
	switch t {
	case agent.EventToolCall, agent.EventStatus, agent.EventResync, agent.EventInbox:
		return true
	}
	return false
}
