package cluster

import "time"

const (
	// maxAge is how much older than the latest heard from its sender a notification may say it
	// is (both by the sender's clock, so the processes' clocks need not agree): a sender's
	// notifications are delivered within moments of one another, so a much older one is a
	// replay.
	maxAge = time.Minute
	// listenSkew is how much earlier than the listener began to listen (by its own clock) a
	// notification may say it was sent (by its sender's): PostgreSQL delivers only what was
	// committed after LISTEN, so an older one is a replay; the margin is for the processes'
	// clocks, which may differ by up to this much before a listener that just (re)started
	// refuses a sender's notifications.
	listenSkew = time.Minute
	// replayWindow is how many of a sender's latest sequence numbers are remembered. A sender's
	// notifications go over several connections and may arrive out of order by up to the
	// requests it has in flight (at most a few hundred); an older one is refused.
	replayWindow = 4096
	// maxSenders bounds the senders remembered; past it those not heard from for maxAge (by
	// the listener's clock) are forgotten: their old notifications are then refused by
	// maxStale.
	maxSenders = 1024
	// maxStale is the oldest, by the listener's clock, a notification may be stamped: the
	// bound on replays of a sender forgotten, and a margin for the processes' clocks.
	maxStale = 10 * time.Minute
)

// replayGuard remembers, per sender, which of its latest notifications were heard. It is the
// listener's alone.
type replayGuard struct {
	senders map[string]*window
}

// window is a sender's latest sequence number, which of the replayWindow before it were heard,
// and the latest time it stamped.
type window struct {
	max   uint64
	seen  [replayWindow / 64]uint64
	maxAt int64     // Unix ms, the sender's clock
	last  time.Time // when it was last heard, the listener's clock
}

// fresh reports whether msg, heard on channel at now by a listener that began listening at
// listened (Unix ms), is heard for the first time, and records it.
func (g *replayGuard) fresh(channel string, msg message, now time.Time, listened int64) bool {
	if msg.Ch != channel || msg.At < listened-listenSkew.Milliseconds() || msg.At < now.Add(-maxStale).UnixMilli() {
		return false
	}
	if g.senders == nil {
		g.senders = map[string]*window{}
	}
	w := g.senders[msg.From]
	if w == nil {
		if len(g.senders) >= maxSenders {
			for from, old := range g.senders {
				if now.Sub(old.last) > maxAge {
					delete(g.senders, from)
				}
			}
			if len(g.senders) >= maxSenders {
				return false // every one of them spoke lately: this many processes is not a cluster
			}
		}
		w = &window{}
		g.senders[msg.From] = w
	}
	// An earlier number than the sender's latest must not be much older than it either; a later
	// one (never heard, so no replay of what was) sets the sender's time, even backwards: a
	// clock that stepped back does not cut its process off.
	if msg.N <= w.max && msg.At < w.maxAt-maxAge.Milliseconds() {
		return false
	}
	later := msg.N > w.max
	if !w.first(msg.N) {
		return false
	}
	if later {
		w.maxAt = msg.At
	}
	w.last = now
	return true
}

// first reports whether n was not heard yet, and records it.
func (w *window) first(n uint64) bool {
	switch {
	case n > w.max:
		if n-w.max >= replayWindow {
			clear(w.seen[:])
		} else {
			for i := w.max + 1; i < n; i++ {
				w.seen[(i%replayWindow)/64] &^= 1 << (i % 64)
			}
		}
		w.max = n
	case w.max-n >= replayWindow:
		return false
	case w.seen[(n%replayWindow)/64]&(1<<(n%64)) != 0:
		return false
	}
	w.seen[(n%replayWindow)/64] |= 1 << (n % 64)
	return true
}
