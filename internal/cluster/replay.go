package cluster

import "time"

const (
	// maxAge is how old (by the sender's clock against the receiver's) a notification may be
	// when it is heard: a notification is delivered within milliseconds of its commit, so older
	// ones are replays; the margin is for the processes' clocks, which may differ.
	maxAge = 30 * time.Second
	// listenSkew is how much earlier than the listener began to listen a notification may say it
	// was sent (the clocks again): PostgreSQL delivers only what was committed after LISTEN.
	listenSkew = 5 * time.Second
	// replayWindow is how many of a sender's latest sequence numbers are remembered. A sender's
	// notifications go over several connections and may arrive out of order by up to the
	// requests it has in flight (at most a few hundred); an older one is refused.
	replayWindow = 4096
	// maxSenders bounds the senders remembered; past it those not heard from for maxAge are
	// forgotten (their old notifications are refused by age).
	maxSenders = 1024
)

// replayGuard remembers, per sender, which of its latest notifications were heard. It is the
// listener's alone.
type replayGuard struct {
	senders map[string]*window
}

// window is a sender's latest sequence number and which of the replayWindow before it were heard.
type window struct {
	max  uint64
	seen [replayWindow / 64]uint64
	last time.Time
}

// fresh reports whether msg, heard on channel at now by a listener that began listening at
// listened (Unix ms), is heard for the first time, and records it.
func (g *replayGuard) fresh(channel string, msg message, now time.Time, listened int64) bool {
	at := time.UnixMilli(msg.At)
	if msg.Ch != channel || now.Sub(at) > maxAge || at.Before(time.UnixMilli(listened).Add(-listenSkew)) {
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
	w.last = now
	return w.first(msg.N)
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
